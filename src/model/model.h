// The decoder forward, written once against the Backend interface, over a paged KV cache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "src/backend/backend.h"
#include "src/core/status.h"
#include "src/core/tensor.h"
#include "src/model/config.h"
#include "src/model/forward_batch.h"

namespace astrai {

class WeightStore;

// K/V storage for all layers: per layer k and v [num_pages * page_size, num_kv_heads, head_dim]
// in the backend's compute dtype. Pages are handed out by sched/'s KV pool; the model only reads and
// writes the slots a ForwardBatch names.
struct KvCache {
  int num_pages = 0;
  int page_size = 16;
  int num_kv_heads = 0, head_dim = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  std::vector<Buffer> k, v;  // one per layer
  Tensor k_layer(int layer) const;
  Tensor v_layer(int layer) const;
};

struct LoadOptions {
  // Log what was loaded (architecture, layers, weight bytes, backend, seconds) at info level.
  bool verbose = false;
};

class Model {
 public:
  // Loads config.json and the safetensors weights of an HF model directory (or shards via
  // model.safetensors.index.json). Every error names the file and the tensor.
  static Result<std::unique_ptr<Model>> load(const std::filesystem::path& dir, Backend& backend,
                                             const LoadOptions& options = {});
  // The same from a config and an open WeightStore (tests, `astrai init` round trips). The
  // weights are copied (converted to the backend's compute dtype); the store may close afterwards.
  static Result<std::unique_ptr<Model>> from_config(const ModelConfig& config, const WeightStore& weights,
                                                    Backend& backend, const LoadOptions& options = {});
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  virtual Backend& backend() const = 0;

  // Bytes one page of KV takes across all layers.
  virtual size_t kv_bytes_per_page(int page_size) const = 0;
  virtual KvCache allocate_kv(int num_pages, int page_size) const = 0;

  // Runs the decoder over the batch: stores every token's K/V in its slot, then returns the
  // logits of batch.logit_rows as f32 [R, vocab] on the backend's device. The view stays valid
  // until the next forward() call. A malformed batch (ids outside the vocab, positions that do
  // not follow from kv_len, slots or pages outside the cache) is an invalid_argument error and
  // touches nothing. Per-step buffers live in a workspace that only grows (no allocation when a
  // batch is no larger than an earlier one).
  virtual Result<Tensor> forward(const ForwardBatch& batch, KvCache& kv) = 0;

  // Bytes of weights held on the backend (for bandwidth estimates).
  virtual size_t weight_bytes() const = 0;
  // Calls fn on every weight tensor held on the backend (tied embeddings once).
  virtual void for_each_weight(const std::function<void(const Tensor&)>& fn) const = 0;
};

}  // namespace astrai
