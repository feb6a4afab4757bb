// RMSNorm as Hugging Face's LlamaRMSNorm computes it: y = x * rsqrt(mean(x^2) + eps) * w, the
// mean taken in higher precision (double here) so long rows lose nothing to the sum.
#include <cmath>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {
namespace {

inline void norm_row(const float* x, const float* w, float eps, int64_t d, float* y) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) ss += double(x[i]) * double(x[i]);
  const float inv = float(1.0 / std::sqrt(ss / double(d) + double(eps)));
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] = (x[i] * inv) * w[i];
}

void check_norm_args(const RowView& x, const Tensor& w, const RowView& out, const char* op) {
  ASTRAI_OP_CHECK(
      w.numel() == x.width && w.is_contiguous(),
      std::string(op) + ": weight size " + w.shape_str() + " for rows of " + std::to_string(x.width));
  ASTRAI_OP_CHECK(out.n_rows == x.n_rows && out.width == x.width,
                  std::string(op) + ": out shape differs from x");
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) {
  check_f32(x, "rms_norm", "x");
  check_f32(w, "rms_norm", "w");
  check_f32(out, "rms_norm", "out");
  const RowView xv = rows_of(x, "rms_norm"), ov = rows_of(out, "rms_norm");
  check_norm_args(xv, w, ov, "rms_norm");
  const float* wp = w.ptr<float>();
#pragma omp parallel for schedule(static) if (xv.n_rows * xv.width > (1 << 18))
  for (int64_t r = 0; r < xv.n_rows; ++r) norm_row(xv.row(r), wp, eps, xv.width, ov.row(r));
}

void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& w, float eps, Tensor out) {
  check_f32(residual, "add_rms_norm", "residual");
  check_f32(x, "add_rms_norm", "x");
  check_f32(w, "add_rms_norm", "w");
  check_f32(out, "add_rms_norm", "out");
  const RowView rv = rows_of(residual, "add_rms_norm"), xv = rows_of(x, "add_rms_norm"),
                ov = rows_of(out, "add_rms_norm");
  check_norm_args(rv, w, ov, "add_rms_norm");
  ASTRAI_OP_CHECK(xv.n_rows == rv.n_rows && xv.width == rv.width,
                  "add_rms_norm: x shape differs from residual");
  const float* wp = w.ptr<float>();
  const int64_t d = rv.width;
#pragma omp parallel for schedule(static) if (rv.n_rows * d > (1 << 18))
  for (int64_t r = 0; r < rv.n_rows; ++r) {
    float* res = rv.row(r);
    const float* xr = xv.row(r);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) res[i] += xr[i];
    norm_row(res, wp, eps, d, ov.row(r));
  }
}

}  // namespace astrai::cpu
