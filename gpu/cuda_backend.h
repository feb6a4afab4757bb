// The CUDA backend (bf16 activations and weights, f32 accumulation, one stream it owns).
// Plain C++ header: the CLI and the tests include it without nvcc.
#pragma once

#include <memory>

#include "src/backend/backend.h"

namespace astrai::gpu {

// Registers the cuda factory with make_backend when a GPU is visible, so that --device auto picks
// the GPU exactly when there is one; returns whether it did. Called explicitly by the CLI's main
// (and the gpu tests): a static initialiser in this static library would be dropped by the linker,
// since nothing references it.
bool register_cuda_backend();

// The backend on GPU `gpu_index`; an error when there is no such GPU.
Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options);

// The stream a CUDA backend runs its ops on (a cudaStream_t) and its device index, for work that
// must be ordered with its ops (NCCL collectives); stream is null for any other backend.
struct CudaBackendStream {
  void* stream = nullptr;
  int device = -1;
};
CudaBackendStream cuda_backend_stream(Backend& backend);

}  // namespace astrai::gpu
