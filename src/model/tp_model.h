// Tensor-parallel serving in one process: N ranks, each a Backend on its own device holding one
// shard of the model (src/model/shard.h), behind the ordinary Model interface. forward() hands the
// same ForwardBatch to every rank's thread (rank 0 runs on the caller's), each rank runs the
// unchanged forward at its local sizes with two all-reduces per layer, and the logits returned are
// rank 0's, on rank 0's backend: the step loop samples there as with one device.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "src/backend/backend.h"
#include "src/core/status.h"
#include "src/model/model.h"
#include "src/model/safetensors.h"

namespace astrai {

// rank0 (owned by the caller, e.g. the engine, and outliving the model) and `others` (ranks 1..N-1,
// owned by the model) must all be on one kind of device. With no others this is the plain model.
// Errors: heads, KV heads or intermediate size not divisible by N; a device without collectives.
Result<std::unique_ptr<Model>> make_tensor_parallel(const ModelConfig& config, const WeightStore& weights,
                                                    Backend& rank0,
                                                    std::vector<std::unique_ptr<Backend>> others,
                                                    const LoadOptions& options = {});
Result<std::unique_ptr<Model>> load_tensor_parallel(const std::filesystem::path& dir, Backend& rank0,
                                                    std::vector<std::unique_ptr<Backend>> others,
                                                    const LoadOptions& options = {});

}  // namespace astrai
