// AdamW with decoupled weight decay, global gradient-norm clipping, and the learning-rate
// schedules of train.yaml. f32 state on the model's backend (host memory on the CPU, device memory
// on a GPU); the update itself is the Backend op `adamw`.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/backend/backend.h"
#include "train/train_config.h"
#include "train/train_model.h"

namespace astrai::train {

// The learning rate of optimizer step `step` (0-based) of `config.steps`:
//   warmup     step < W:  lr * (step + 1) / W
//   constant   lr
//   cosine     min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,  p = (step - W) / (steps - W)
//   wsd        lr until D = steps - round(decay_fraction * steps) (and at least W), then linearly
//              lr -> min_lr:  lr + (min_lr - lr) * (step - D) / (steps - D)
// (p reaches 1 one step after the last, as nanoGPT's schedule does.)
double learning_rate(const TrainConfig& config, int64_t step);

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
};

// sqrt(sum of squares of every gradient): the backend's sum_squares (f64, fixed order, so
// bitwise reproducible), on the device where the gradients live.
double global_grad_norm(Backend& backend, std::span<const Param> params);

// max_norm / (norm + 1e-6) capped at 1 (torch.nn.utils.clip_grad_norm_); max_norm 0: no clipping.
double clip_scale(double norm, double max_norm);

// Elements [begin, end) of the flat parameter layout: every tensor of params() in order, each one's
// elements consecutive (TrainModel's buffers: flat_grads(), flat_values()).
struct ElementRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// AdamW over a model's parameters on their backend: f32 moments beside the f32 master weights
// (device memory on a GPU), each tensor updated by the backend's fused adamw op (the update is
// AdamWStep's, src/backend/backend.h). It may own the moments of only some ranges of elements
// (data parallelism's ZeRO: each rank its shard) and then updates only those elements; a range may
// start and end inside tensors, each element still updated with its own tensor's weight decay.
class AdamW {
 public:
  explicit AdamW(Backend& backend, AdamWOptions options = {}) : be_(backend), options_(options) {}

  // Allocates zero moments for these tensors (their sizes must stay the same afterwards): for every
  // element, or for the elements of `owned` only (ascending, disjoint ranges).
  void init(std::span<const Param> params);
  void init(std::span<const Param> params, std::vector<ElementRange> owned);

  // One optimizer step over every tensor: clips by the global norm, then updates. Returns the
  // norm before clipping.
  double step(std::span<const Param> params, double lr, double max_grad_norm);
  // One step of the owned elements with gradients already multiplied by grad_scale (the clip factor
  // of a global norm the caller computed).
  void update(std::span<const Param> params, double lr, double grad_scale);

  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  // First and second moments of tensor i (f32, the parameter's shape, on the backend; the trainer
  // checkpoints and restores them). Only when every element is owned.
  const Tensor& exp_avg(size_t i) const { return m_[i]; }
  const Tensor& exp_avg_sq(size_t i) const { return v_[i]; }
  // The owned ranges and their moments, concatenated in range order (f32 [owned elements]).
  const std::vector<ElementRange>& owned() const { return owned_; }
  Tensor owned_exp_avg() const;
  Tensor owned_exp_avg_sq() const;
  const AdamWOptions& options() const { return options_; }

 private:
  // The owned part of one tensor: `count` elements from element `first` of params[param], their
  // moments at `at` in the moment buffers.
  struct Piece {
    size_t param = 0;
    int64_t first = 0, count = 0, at = 0;
  };
  Backend& be_;
  AdamWOptions options_;
  int64_t t_ = 0;
  Buffer m_buf_, v_buf_;
  int64_t owned_numel_ = 0;
  std::vector<ElementRange> owned_;
  std::vector<Piece> pieces_;
  std::vector<Tensor> m_, v_;  // per tensor, when every element is owned
};

// Tensor t's elements [first, first + count) as a 1-D view (t contiguous).
Tensor flat_slice(const Tensor& t, int64_t first, int64_t count);

}  // namespace astrai::train
