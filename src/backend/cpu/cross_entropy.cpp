// Cross-entropy forward and backward over a chunk of logit rows, fused: each row's loss, and its
// gradient (softmax minus the smoothed one-hot, times grad_scale) into dlogits (f32, which may be the
// logits themselves). Sums
// (the normaliser and the mean logit) are taken in double; the vocabulary can be 150k wide.
#include <cmath>
#include <string>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {

void cross_entropy(const Tensor& logits, const Tensor& targets, float label_smoothing, float grad_scale,
                   Tensor losses, Tensor dlogits) {
  check_f32(logits, "cross_entropy", "logits");
  check_f32(dlogits, "cross_entropy", "dlogits");
  check_i32(targets, "cross_entropy", "targets");
  check_f32(losses, "cross_entropy", "losses");
  ASTRAI_OP_CHECK(logits.ndim == 2, "cross_entropy: logits must be [R, V], got " + logits.shape_str());
  ASTRAI_OP_CHECK(dlogits.ndim == 2, "cross_entropy: dlogits must be [R, V], got " + dlogits.shape_str());
  const RowView zv = rows_of(logits, "cross_entropy"), dv = rows_of(dlogits, "cross_entropy");
  const int64_t R = zv.n_rows, V = zv.width;
  ASTRAI_OP_CHECK(dv.n_rows == R && dv.width == V, "cross_entropy: dlogits " + dlogits.shape_str() +
                                                       " differs from logits " + logits.shape_str());
  ASTRAI_OP_CHECK(targets.numel() == R && losses.numel() == R && losses.is_contiguous(),
                  "cross_entropy: targets " + targets.shape_str() + " and losses " + losses.shape_str() +
                      " need one entry per row of " + logits.shape_str());
  ASTRAI_OP_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f,
                  "cross_entropy: label_smoothing " + std::to_string(label_smoothing) + " outside [0, 1]");
  const int32_t* y = targets.ptr<int32_t>();
  for (int64_t r = 0; r < R; ++r)
    ASTRAI_OP_CHECK(
        y[r] == Backend::kIgnoreIndex || (y[r] >= 0 && y[r] < V),
        "cross_entropy: target " + std::to_string(y[r]) + " outside [0, " + std::to_string(V) + ")");
  float* loss = losses.ptr<float>();
  const double e = label_smoothing;
  const float uniform = float(e / double(V)), hit = float(1.0 - e);
#pragma omp parallel for schedule(static) if (R * V > (1 << 16))
  for (int64_t r = 0; r < R; ++r) {
    const float* z = zv.row(r);
    float* dz = dv.row(r);  // may be z: each element is read before it is written
    if (y[r] == Backend::kIgnoreIndex) {
      loss[r] = 0.0f;
      for (int64_t j = 0; j < V; ++j) dz[j] = 0.0f;
      continue;
    }
    float m = z[0];
    for (int64_t j = 1; j < V; ++j) m = std::max(m, z[j]);
    double sum = 0.0, zsum = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      sum += double(std::exp(z[j] - m));
      zsum += double(z[j]);
    }
    const double lse = double(m) + std::log(sum);
    loss[r] = float((1.0 - e) * (lse - double(z[y[r]])) + e * (lse - zsum / double(V)));
    const float lse_f = float(lse);
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) dz[j] = grad_scale * (std::exp(z[j] - lse_f) - uniform);
    dz[y[r]] -= grad_scale * hit;
  }
}

}  // namespace astrai::cpu
