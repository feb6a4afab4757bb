// The optimizer ops on the host: AdamW (the update of backend.h's AdamWStep) and the fixed-order
// sum of squares behind the global grad norm.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {

void adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWStep& s) {
  for (const Tensor* t :
       {static_cast<const Tensor*>(&p), &g, static_cast<const Tensor*>(&m), static_cast<const Tensor*>(&v)}) {
    check_f32(*t, "adamw", "p, g, m and v");
    ASTRAI_OP_CHECK(
        t->is_contiguous() && t->numel() == p.numel(),
        "adamw: p, g, m and v must be contiguous with " + std::to_string(p.numel()) + " elements");
  }
  const int64_t n = p.numel();
  float* pp = p.ptr<float>();
  const float* gp = g.ptr<float>();
  float* mp = m.ptr<float>();
  float* vp = v.ptr<float>();
  const float bc1 = 1.0f - std::pow(s.beta1, float(s.t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(s.beta2, float(s.t)));
  const float step_size = s.lr / bc1;
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, scale = s.grad_scale;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = gp[i] * scale;
    const float mi = b1 * mp[i] + (1.0f - b1) * gi;
    const float vi = b2 * vp[i] + (1.0f - b2) * gi * gi;
    mp[i] = mi;
    vp[i] = vi;
    pp[i] = pp[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

double sum_squares(const std::vector<Tensor>& xs) {
  // Fixed chunks summed in a fixed order (not an OpenMP reduction, whose combining order varies
  // between runs).
  constexpr int64_t kChunk = Backend::kSumSquaresChunk;
  double sum = 0;
  std::vector<double> partial;
  for (const Tensor& x : xs) {
    check_f32(x, "sum_squares", "x");
    ASTRAI_OP_CHECK(x.is_contiguous(), "sum_squares: tensors must be contiguous");
    const int64_t n = x.numel();
    const float* p = x.ptr<float>();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    partial.assign(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      double s = 0;
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) s += double(p[i]) * double(p[i]);
      partial[size_t(c)] = s;
    }
    for (double s : partial) sum += s;
  }
  return sum;
}

}  // namespace astrai::cpu
