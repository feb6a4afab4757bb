#include "train/optimizer.h"

#include <algorithm>
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

double global_grad_norm(Backend& backend, std::span<const Param> params) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Param& p : params) grads.push_back(p.grad);
  return std::sqrt(backend.sum_squares(grads));
}

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

Tensor flat_slice(const Tensor& t, int64_t first, int64_t count) {
  Tensor f = t;
  f.ndim = 1;
  f.shape[0] = t.numel();
  f.set_contiguous_strides();
  return f.rows(first, first + count);
}

void AdamW::init(std::span<const Param> params) {
  int64_t total = 0;
  for (const Param& p : params) total += p.value.numel();
  init(params, {ElementRange{0, total}});
  int64_t offset = 0;
  for (const Param& p : params) {
    const int64_t n = p.value.numel();
    for (auto [buf, out] : {std::pair{&m_buf_, &m_}, std::pair{&v_buf_, &v_}}) {
      Tensor t = buf->as(DType::f32, {total}).rows(offset, offset + n);
      t.ndim = p.value.ndim;
      for (int d = 0; d < t.ndim; ++d) t.shape[d] = p.value.shape[d];
      t.set_contiguous_strides();
      out->push_back(t);
    }
    offset += n;
  }
}

void AdamW::init(std::span<const Param> params, std::vector<ElementRange> owned) {
  owned_ = std::move(owned);
  owned_numel_ = 0;
  for (const ElementRange& r : owned_) owned_numel_ += r.size();
  // At least one float: a shard may be empty (every element in the others' shards).
  m_buf_ = be_.alloc(size_t(std::max<int64_t>(owned_numel_, 1)) * sizeof(float));  // zeroed
  v_buf_ = be_.alloc(size_t(std::max<int64_t>(owned_numel_, 1)) * sizeof(float));
  m_.clear();
  v_.clear();
  pieces_.clear();
  int64_t at = 0;
  for (const ElementRange& r : owned_) {
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t n = params[i].value.numel();
      const int64_t b = std::max(r.begin, offset), e = std::min(r.end, offset + n);
      if (b < e) pieces_.push_back({i, b - offset, e - b, at + (b - r.begin)});
      offset += n;
    }
    at += r.size();
  }
  t_ = 0;
}

Tensor AdamW::owned_exp_avg() const {
  return m_buf_.as(DType::f32, {owned_numel_});
}
Tensor AdamW::owned_exp_avg_sq() const {
  return v_buf_.as(DType::f32, {owned_numel_});
}

double AdamW::step(std::span<const Param> params, double lr, double max_grad_norm) {
  const double norm = global_grad_norm(be_, params);
  update(params, lr, clip_scale(norm, max_grad_norm));
  return norm;
}

void AdamW::update(std::span<const Param> params, double lr, double grad_scale) {
  ++t_;
  AdamWStep s;
  s.lr = float(lr);
  s.beta1 = float(options_.beta1);
  s.beta2 = float(options_.beta2);
  s.eps = float(options_.eps);
  s.grad_scale = float(grad_scale);
  s.t = t_;
  const Tensor m = owned_exp_avg(), v = owned_exp_avg_sq();
  for (const Piece& pc : pieces_) {
    const Param& p = params[pc.param];
    s.weight_decay = p.decay ? float(options_.weight_decay) : 0.0f;
    be_.adamw(flat_slice(p.value, pc.first, pc.count), flat_slice(p.grad, pc.first, pc.count),
              m.rows(pc.at, pc.at + pc.count), v.rows(pc.at, pc.at + pc.count), s);
  }
}

}  // namespace astrai::train
