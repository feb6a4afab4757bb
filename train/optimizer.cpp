#include "train/optimizer.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

namespace astrai::train {

double learning_rate(const TrainConfig& c, int64_t step) {
  const int64_t w = c.warmup_steps;
  if (step < w) return c.lr * double(step + 1) / double(w);
  switch (c.schedule) {
    case Schedule::constant: return c.lr;
    case Schedule::cosine: {
      const double p = std::min(1.0, double(step - w) / double(std::max<int64_t>(1, c.steps - w)));
      return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    }
    case Schedule::wsd: {
      const int64_t d = std::max(w, c.steps - int64_t(std::llround(c.decay_fraction * double(c.steps))));
      if (step < d) return c.lr;
      const double p = std::min(1.0, double(step - d) / double(std::max<int64_t>(1, c.steps - d)));
      return c.lr + (c.min_lr - c.lr) * p;
    }
  }
  return c.lr;
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
  const float bc1 = 1.0f - std::pow(s.beta1, float(s.t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(s.beta2, float(s.t)));
  const float step_size = s.lr / bc1;
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, scale = s.grad_scale;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * scale;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

double global_grad_norm(std::span<const ParamSpan> params) {
  // Fixed chunks summed in a fixed order (not an OpenMP reduction, whose combining order varies
  // between runs): the norm, hence the clipped update, is bitwise reproducible for exact resume.
  constexpr int64_t kChunk = 1 << 16;
  double sum = 0;
  std::vector<double> partial;
  for (const ParamSpan& p : params) {
    const int64_t chunks = (p.n + kChunk - 1) / kChunk;
    partial.assign(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      double s = 0;
      for (int64_t i = c * kChunk; i < std::min(p.n, (c + 1) * kChunk); ++i)
        s += double(p.grad[i]) * double(p.grad[i]);
      partial[size_t(c)] = s;
    }
    for (double s : partial) sum += s;
  }
  return std::sqrt(sum);
}

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

void AdamW::init(std::span<const ParamSpan> params) {
  m_.clear();
  v_.clear();
  for (const ParamSpan& p : params) {
    m_.emplace_back(size_t(p.n), 0.0f);
    v_.emplace_back(size_t(p.n), 0.0f);
  }
  t_ = 0;
}

double AdamW::step(std::span<const ParamSpan> params, double lr, double max_grad_norm) {
  assert(params.size() == m_.size());
  const double norm = global_grad_norm(params);
  ++t_;
  AdamWStep s;
  s.lr = float(lr);
  s.beta1 = float(options_.beta1);
  s.beta2 = float(options_.beta2);
  s.eps = float(options_.eps);
  s.grad_scale = float(clip_scale(norm, max_grad_norm));
  s.t = t_;
  for (size_t i = 0; i < params.size(); ++i) {
    s.weight_decay = params[i].decay ? float(options_.weight_decay) : 0.0f;
    adamw_update(params[i].value, params[i].grad, m_[i].data(), v_[i].data(), params[i].n, s);
  }
  return norm;
}

}  // namespace astrai::train
