// RMSNorm as Hugging Face's LlamaRMSNorm computes it: y = x * rsqrt(mean(x^2) + eps) * w, the
// mean taken in higher precision (double here) so long rows lose nothing to the sum; and its
// training pair: rms_norm_train (saves rstd) / rms_norm_backward.
#include <omp.h>

#include <cmath>
#include <vector>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {
namespace {

// Normalises one row and returns its rstd.
inline float norm_row(const float* x, const float* w, float eps, int64_t d, float* y) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) ss += double(x[i]) * double(x[i]);
  const float inv = float(1.0 / std::sqrt(ss / double(d) + double(eps)));
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] = (x[i] * inv) * w[i];
  return inv;
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

void rms_norm_train(const Tensor& x, const Tensor& w, float eps, Tensor out, Tensor rstd) {
  check_f32(x, "rms_norm_train", "x");
  check_f32(w, "rms_norm_train", "w");
  check_f32(out, "rms_norm_train", "out");
  check_f32(rstd, "rms_norm_train", "rstd");
  const RowView xv = rows_of(x, "rms_norm_train"), ov = rows_of(out, "rms_norm_train");
  check_norm_args(xv, w, ov, "rms_norm_train");
  ASTRAI_OP_CHECK(rstd.numel() == xv.n_rows && rstd.is_contiguous(),
                  "rms_norm_train: rstd " + rstd.shape_str() + " for " + std::to_string(xv.n_rows) + " rows");
  const float* wp = w.ptr<float>();
  float* rs = rstd.ptr<float>();
#pragma omp parallel for schedule(static) if (xv.n_rows * xv.width > (1 << 18))
  for (int64_t r = 0; r < xv.n_rows; ++r) rs[r] = norm_row(xv.row(r), wp, eps, xv.width, ov.row(r));
}

// Per row, with xhat = x * rstd and g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)).
// dw sums dy * xhat over rows: each thread sums its rows in double, then the partial sums are
// added in thread order (deterministic for a fixed thread count).
void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor dx,
                       Tensor dw, bool accumulate) {
  check_f32(dy, "rms_norm_backward", "dy");
  check_f32(x, "rms_norm_backward", "x");
  check_f32(w, "rms_norm_backward", "w");
  check_f32(rstd, "rms_norm_backward", "rstd");
  check_f32(dx, "rms_norm_backward", "dx");
  check_f32(dw, "rms_norm_backward", "dw");
  const RowView dyv = rows_of(dy, "rms_norm_backward"), xv = rows_of(x, "rms_norm_backward"),
                dxv = rows_of(dx, "rms_norm_backward");
  check_norm_args(xv, w, dyv, "rms_norm_backward");
  ASTRAI_OP_CHECK(dxv.n_rows == xv.n_rows && dxv.width == xv.width,
                  "rms_norm_backward: dx shape differs from x");
  ASTRAI_OP_CHECK(dw.numel() == xv.width && dw.is_contiguous(), "rms_norm_backward: dw " + dw.shape_str());
  ASTRAI_OP_CHECK(rstd.numel() == xv.n_rows && rstd.is_contiguous(),
                  "rms_norm_backward: rstd " + rstd.shape_str());
  const int64_t R = xv.n_rows, D = xv.width;
  const float* wp = w.ptr<float>();
  const float* rs = rstd.ptr<float>();
  const int threads = R * D > (1 << 16) ? omp_get_max_threads() : 1;
  std::vector<double> partial(size_t(threads) * size_t(D), 0.0);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    double* acc = partial.data() + size_t(omp_get_thread_num()) * size_t(D);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const float* g = dyv.row(r);
      const float* xr = xv.row(r);
      float* o = dxv.row(r);
      const float inv = rs[r];
      double m = 0.0;
#pragma omp simd reduction(+ : m)
      for (int64_t i = 0; i < D; ++i) m += double(g[i]) * double(wp[i]) * double(xr[i]);
      const float mean = float(m / double(D)) * inv;  // mean(g * xhat)
      // dw first: dx may alias dy.
      for (int64_t i = 0; i < D; ++i) acc[i] += double(g[i]) * double(xr[i] * inv);
      if (accumulate) {
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) o[i] += inv * (g[i] * wp[i] - xr[i] * inv * mean);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) o[i] = inv * (g[i] * wp[i] - xr[i] * inv * mean);
      }
    }
  }
  float* dwp = dw.ptr<float>();
  for (int64_t i = 0; i < D; ++i) {
    double sum = 0.0;
    for (int t = 0; t < threads; ++t) sum += partial[size_t(t) * size_t(D) + size_t(i)];
    dwp[i] += float(sum);
  }
}

}  // namespace astrai::cpu
