// rms_norm and add_rms_norm against float64 loops, per token and per head (strided rows), on
// every backend.
#include <catch2/catch.hpp>
#include <cmath>

#include "backend/op_test_util.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

std::vector<double> ref_rms_norm(const std::vector<float>& x, const std::vector<float>& w, int64_t rows,
                                 int64_t d, int64_t ld, double eps) {
  std::vector<double> y(size_t(rows * ld), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(x[r * ld + i]) * x[r * ld + i];
    const double inv = 1.0 / std::sqrt(ss / double(d) + eps);
    for (int64_t i = 0; i < d; ++i) y[r * ld + i] = double(x[r * ld + i]) * inv * double(w[i]);
  }
  return y;
}

void require_norm_close(const Backend& be, const std::vector<float>& got, const std::vector<double>& want) {
  require_close(
      be, got, want, [&](size_t i) { return std::abs(want[i]); }, Tol{2e-6, 1e-6});
}

void rms_norm_odd_widths(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int rep = 0; rep < 6; ++rep) {
    // Odd widths, then multiples of 8 up to 8192 (the GPU's 16-byte vector path).
    const int64_t R = rng.randint(1, 40), D = rep < 4 ? rng.randint(1, 1500) : 8 * rng.randint(1, 1024);
    const float eps = rep % 2 ? 1e-6f : 1e-5f;
    auto xh = rng.vec(size_t(R * D), 3.0f);
    auto wh = rng.vec(size_t(D), 2.0f);
    auto x = to_device(be, xh, {R, D});
    auto w = to_device(be, wh, {D});
    auto out = poisoned(be, {R, D});
    be.rms_norm(x.t, w.t, eps, out.t);
    require_norm_close(be, to_host(be, out.t), ref_rms_norm(xh, wh, R, D, D, eps));
    be.rms_norm(x.t, w.t, eps, x.t);  // in place
    require_norm_close(be, to_host(be, x.t), ref_rms_norm(xh, wh, R, D, D, eps));
  }
}

void rms_norm_per_head(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const int64_t T = rng.randint(1, 9), H = rng.randint(1, 6), D = 2 * rng.randint(1, 70),
                extra = rng.randint(1, 50);
  const int64_t ld = H * D + extra;
  auto xh = rng.vec(size_t(T * ld));
  auto wh = rng.vec(size_t(D));
  auto x = to_device(be, xh, {T, ld});
  auto w = to_device(be, wh, {D});
  Tensor q(x.t.data, x.t.dtype, {T, H, D}, x.t.device);
  q.stride = {ld, D, 1, 0};
  be.rms_norm(q, w.t, 1e-6f, q);
  auto got = to_host(be, x.t);
  // Reference: rows of D inside each token's first H*D columns; the other columns stay as they were.
  std::vector<float> per_head;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H * D; ++i) per_head.push_back(xh[t * ld + i]);
  const auto normed = ref_rms_norm(per_head, wh, T * H, D, D, 1e-6);
  std::vector<double> want(xh.begin(), xh.end());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H * D; ++i) want[t * ld + i] = normed[t * H * D + i];
  require_norm_close(be, got, want);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = H * D; i < ld; ++i) REQUIRE(got[t * ld + i] == xh[t * ld + i]);
}

void add_rms_norm_case(Backend& be, Rng& rng, int64_t R, int64_t D) {
  INFO("R " << R << " D " << D);
  auto rh = rng.vec(size_t(R * D));
  auto xh = rng.vec(size_t(R * D));
  auto wh = rng.vec(size_t(D));
  auto res = to_device(be, rh, {R, D});
  auto x = to_device(be, xh, {R, D});
  auto w = to_device(be, wh, {D});
  auto out = poisoned(be, {R, D});
  be.add_rms_norm(res.t, x.t, w.t, 1e-5f, out.t);
  std::vector<float> sum(rh.size());
  // The sum is rounded to the residual's dtype, as the op stores it.
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = round_to(be.compute_dtype(), rh[i] + xh[i]);
  auto got_res = to_host(be, res.t);
  for (size_t i = 0; i < sum.size(); ++i) REQUIRE(got_res[i] == sum[i]);
  require_norm_close(be, to_host(be, out.t), ref_rms_norm(sum, wh, R, D, D, 1e-5));
}

void add_rms_norm_fused(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  add_rms_norm_case(be, rng, rng.randint(1, 33), rng.randint(1, 2100));
  add_rms_norm_case(be, rng, rng.randint(1, 33), 8 * rng.randint(1, 1024));  // 16-byte rows
}

}  // namespace

ASTRAI_BACKEND_TEST("rms_norm matches a float64 loop for odd row widths", rms_norm_odd_widths)
ASTRAI_BACKEND_TEST(
    "rms_norm per head on a column slice of a fused qkv buffer leaves the other columns alone",
    rms_norm_per_head)
ASTRAI_BACKEND_TEST("add_rms_norm adds into the residual and normalises the sum", add_rms_norm_fused)

}  // namespace astrai::test
