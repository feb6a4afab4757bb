// The training-shaped decoder: parameters, gradients and activations laid out once per model
// (llm.c's ParameterTensors / ActivationTensors), a forward that saves what backward needs, and a
// backward over the same Backend ops the serving forward uses (their *_backward partners declared
// beside them in src/backend/backend.h). f32 on the CPU; on the GPU bf16 compute (activations and a
// bf16 copy of the weights) with f32 master weights and f32 gradients.
//
// Numerics match the serving forward (src/model/model.cpp) for the same weights: a test checks
// that this forward's logits equal Model::forward's on the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/backend/backend.h"
#include "src/core/status.h"
#include "src/core/tensor.h"
#include "src/model/config.h"
#include "src/model/safetensors.h"

namespace astrai::train {

// One micro-batch of B sequences of T tokens each (row-major [B, T]).
//   tokens    [B*T]  input ids
//   targets   [B*T]  next-token ids; kIgnore where no loss is taken (padding, non-assistant turns)
//   positions [B*T]  RoPE positions; restart at 0 where a packed document starts
//   doc_start [B*T]  index within its row of the first token of the row's document containing t
//                    (attention of t covers [doc_start[t], t]: packed documents do not see each other)
inline constexpr int32_t kIgnore = -100;  // PyTorch's ignore_index
struct TrainBatch {
  int batch = 0, seq_len = 0;
  std::vector<int32_t> tokens, targets, positions, doc_start;
  int64_t num_targets() const;  // targets != kIgnore
};

// One trainable tensor: its HF name and shape, its value (the f32 master weight) and gradient (f32),
// on the backend.
struct Param {
  std::string name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // HF shape
  Tensor value, grad;
  bool decay = true;  // AdamW weight decay applies (false: norms, embeddings, biases)
};

struct LossOptions {
  float label_smoothing = 0.0f;  // in [0, 1]
  // Logit rows per cross-entropy chunk; 0: as many as fit in about 8 MB of logits on the CPU, 1 GB
  // on a GPU (at least 16).
  // Tests set it small to cross chunk boundaries; the result does not depend on it.
  int64_t chunk_rows = 0;
};

class TrainModel {
 public:
  // Parameters from a WeightStore (an HF model dir's safetensors, any float dtype converted to f32).
  // An unsupported error when the backend has no training ops (backend.supports_training()).
  static Result<std::unique_ptr<TrainModel>> create(const ModelConfig& config, const WeightStore& weights,
                                                    Backend& backend);
  virtual ~TrainModel() = default;

  virtual const ModelConfig& config() const = 0;
  virtual Backend& backend() const = 0;

  // Parameters in weight_shapes() order (tied embeddings: one "model.embed_tokens.weight").
  virtual std::vector<Param>& params() = 0;

  // Forward + backward of the mean cross-entropy over the batch's non-ignored targets, times
  // `scale` (1 / grad_accum steps, or num_targets / total for token-weighted accumulation).
  // ADDS d(scale * loss)/d(param) into every Param::grad (call zero_grad() between optimizer
  // steps). Returns the unscaled mean loss of this batch. The full logits are never held at once
  // (the loss is chunked over rows).
  virtual Result<float> forward_backward(const TrainBatch& batch, float scale,
                                         const LossOptions& loss = {}) = 0;

  // Forward only: mean loss (evaluation).
  virtual Result<float> loss(const TrainBatch& batch, const LossOptions& loss = {}) = 0;

  // Logits [B*T, vocab] f32 on the host (tests: compare with Model::forward and PyTorch).
  virtual Result<std::vector<float>> logits(const TrainBatch& batch) = 0;

  virtual void zero_grad() = 0;

  // Every Param::grad as one contiguous f32 tensor, in params() order (data-parallel training
  // all-reduces it in one call).
  virtual Tensor flat_grads() const = 0;
  // Every Param::value (the f32 master weights) as one contiguous f32 tensor, the same layout.
  virtual Tensor flat_values() const = 0;

  // Called by forward_backward's backward (nothing else calls it), where the gradients from element
  // `offset` of flat_grads() to its end have become final for this call, in decreasing offsets:
  // flat_grads().numel() as the backward starts, then after the head and the final norm, after each
  // layer from the last, and 0 at the end (tied embeddings are final only there). What lets data
  // parallelism reduce the gradients of the last layers while the backward computes the first's
  // (train/data_parallel.h). The hook may throw to abandon the backward. Empty: none.
  void set_grad_ready_hook(std::function<void(int64_t offset)> hook) { grad_ready_ = std::move(hook); }

 protected:
  void grads_ready_from(int64_t offset) const {
    if (grad_ready_) grad_ready_(offset);
  }

 private:
  std::function<void(int64_t)> grad_ready_;
};

}  // namespace astrai::train
