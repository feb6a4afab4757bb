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

// K/V storage for all layers: per layer k and v [(num_pages + 1) * page_size, num_kv_heads, head_dim]
// in the backend's compute dtype. Pages [0, num_pages) are handed out by sched/'s KV pool; the model
// only reads and writes the slots a ForwardBatch names, and the padding rows of a bucketed decode
// step (see Model::reserve_steps) write the one page past them, scratch_page, which no batch may name.
struct KvCache {
  int num_pages = 0;
  int scratch_page = -1;  // num_pages once allocated
  int page_size = 16;
  int num_kv_heads = 0, head_dim = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  std::vector<Buffer> k, v;  // one per layer
  // A tensor-parallel model's cache (src/model/tp_model.h): one per rank, each holding that rank's
  // KV heads on its device; k and v above are then empty.
  std::vector<KvCache> shards;
  Tensor k_layer(int layer) const;
  Tensor v_layer(int layer) const;
};

// What the engine's steps can hold at most, so that the model sizes its step buffers once.
struct StepLimits {
  int max_seqs = 1;       // sequences per step (the engine's max batch size)
  int max_tokens = 0;     // tokens per step; 0: sized by the largest step seen
  int max_model_len = 1;  // the longest sequence: fixes the page table's row stride
  int page_size = 16;
};

struct LoadOptions {
  // Log what was loaded (architecture, layers, weight bytes, backend, seconds) at info level.
  bool verbose = false;
  // An fp8 checkpoint's projections (q, k, v, o, gate, up, down) stay fp8 on a backend whose linear
  // takes them (Backend::weight_dtype(fp8_e4m3) == fp8_e4m3: CUDA), with their scales: half the
  // memory and half the bytes a decode step reads. false (and on other backends): widened to the
  // compute dtype at load, which gives the widened checkpoint's results bit for bit. Embeddings and
  // the LM head are widened either way.
  bool keep_fp8 = false;
};

// Whether `backend` keeps an fp8 checkpoint's projections in fp8 under `options`.
bool keeps_fp8(const Backend& backend, const LoadOptions& options);

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
  // Whether forward() takes a batch with moves (ForwardBatch::moves: tokens the previous step drew,
  // still on the device); a model that does not refuses such a batch (invalid_argument).
  virtual bool takes_drawn_tokens() const { return false; }

  // Sizes the step buffers (workspace, inputs and their pinned mirror) for `limits` up front, so
  // that no step allocates. On a backend with graphs it also turns on decode buckets: a
  // decode-only step (one query token per sequence, every row's logits wanted) of B sequences runs
  // at the shape of the next bucket (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, ...,
  // up to max_seqs) with padding rows writing kv.scratch_page only, whether or not graphs are
  // captured, so that graphs on and off compute the same bits. Call before sizing the KV cache from
  // free memory. A no-op by default (models without step buffers).
  virtual Status reserve_steps(const StepLimits& limits) {
    (void)limits;
    return {};
  }
  // Captures one graph per decode bucket (after reserve_steps) and class of context length
  // (Backend::decode_kv_bounds) over this cache, each after an eager warm-up of its shape; decode
  // steps on `kv` then replay their bucket's graph of their longest kv_len's class. Returns how
  // many were captured (0 where the backend has no graphs). Logs the time taken.
  virtual Result<int> capture_decode_graphs(KvCache& kv) {
    (void)kv;
    return 0;
  }

  // Bytes of weights held on the backend (for bandwidth estimates).
  virtual size_t weight_bytes() const = 0;
  // Calls fn on every weight tensor held on the backend (tied embeddings once).
  virtual void for_each_weight(const std::function<void(const Tensor&)>& fn) const = 0;
};

}  // namespace astrai
