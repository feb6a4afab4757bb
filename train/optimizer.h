// AdamW with decoupled weight decay, global gradient-norm clipping, and the learning-rate
// schedules of train.yaml. f32 state on the host (the CPU backend's tensors are host memory); the
// GPU will get the same update as a Backend op `adamw` (adamw_update below is its reference).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/train_config.h"

namespace astrai::train {

// The learning rate of optimizer step `step` (0-based) of `config.steps`:
//   warmup     step < W:  lr * (step + 1) / W
//   constant   lr
//   cosine     min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,  p = (step - W) / (steps - W)
//   wsd        lr until D = steps - round(decay_fraction * steps) (and at least W), then linearly
//              lr -> min_lr:  lr + (min_lr - lr) * (step - D) / (steps - D)
// (p reaches 1 one step after the last, as nanoGPT's schedule does.)
double learning_rate(const TrainConfig& config, int64_t step);

// One trainable tensor as the optimizer sees it: f32 host values and gradients of n elements.
struct ParamSpan {
  float* value = nullptr;
  const float* grad = nullptr;
  int64_t n = 0;
  bool decay = true;
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
};

// The fused update of one tensor (step t >= 1, gradients scaled by grad_scale, the clip factor).
// With bc1 = 1 - beta1^t, bc2 = 1 - beta2^t, g = grad * grad_scale, as torch.optim.AdamW computes it:
//   p <- p * (1 - lr * wd)                       (decoupled decay; wd = 0 where decay is off)
//   m <- beta1 m + (1 - beta1) g
//   v <- beta2 v + (1 - beta2) g^2
//   p <- p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
struct AdamWStep {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  float grad_scale = 1;
  int64_t t = 1;
};
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);

// sqrt(sum of squares of every gradient), accumulated in double.
double global_grad_norm(std::span<const ParamSpan> params);

// max_norm / (norm + 1e-6) capped at 1 (torch.nn.utils.clip_grad_norm_); max_norm 0: no clipping.
double clip_scale(double norm, double max_norm);

class AdamW {
 public:
  explicit AdamW(AdamWOptions options = {}) : options_(options) {}

  // Allocates zero moments for these tensors (their sizes must stay the same afterwards).
  void init(std::span<const ParamSpan> params);

  // One optimizer step over every tensor: clips by the global norm, then updates. Returns the
  // norm before clipping.
  double step(std::span<const ParamSpan> params, double lr, double max_grad_norm);

  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  // First and second moments per tensor (checkpointed and restored by the trainer).
  std::vector<std::vector<float>>& exp_avg() { return m_; }
  std::vector<std::vector<float>>& exp_avg_sq() { return v_; }
  const AdamWOptions& options() const { return options_; }

 private:
  AdamWOptions options_;
  int64_t t_ = 0;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace astrai::train
