// CUDA graphs of whole steps: the launches a body makes on a stream, recorded once and replayed
// as one graph launch (what removes a decode step's per-kernel launch overhead).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>

#include "gpu/ops.h"
#include "src/backend/backend.h"

namespace astrai::gpu {

// Records the work body enqueues on `stream` (nothing runs) and returns it instantiated. body must
// only enqueue kernels, async copies and library calls on `stream`; a throw from body ends the
// capture, leaves the stream usable and is rethrown. The graph owns `scratch` (memory its kernels use).
std::unique_ptr<Backend::StepGraph> capture_graph(cudaStream_t stream, const std::function<void()>& body,
                                                  std::unique_ptr<Scratch> scratch);

}  // namespace astrai::gpu
