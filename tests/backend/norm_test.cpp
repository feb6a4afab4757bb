// rms_norm and add_rms_norm against float64 loops, per token and per head (strided rows).
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

void require_close(const std::vector<float>& got, const std::vector<double>& want, int64_t rows, int64_t d,
                   int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < d; ++i) {
      INFO("row " << r << " col " << i);
      REQUIRE(std::abs(got[r * ld + i] - want[r * ld + i]) <= 2e-6 * std::abs(want[r * ld + i]) + 1e-6);
    }
}

}  // namespace

TEST_CASE("rms_norm matches a float64 loop for odd row widths", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t R = rng.randint(1, 40), D = rng.randint(1, 700);
    const float eps = rep % 2 ? 1e-6f : 1e-5f;
    auto xh = rng.vec(size_t(R * D), 3.0f);
    auto wh = rng.vec(size_t(D), 2.0f);
    auto x = to_device(*be, xh, {R, D});
    auto w = to_device(*be, wh, {D});
    auto out = zeros(*be, {R, D});
    be->rms_norm(x.t, w.t, eps, out.t);
    require_close(to_host(*be, out.t), ref_rms_norm(xh, wh, R, D, D, eps), R, D, D);
    be->rms_norm(x.t, w.t, eps, x.t);  // in place
    require_close(to_host(*be, x.t), ref_rms_norm(xh, wh, R, D, D, eps), R, D, D);
  }
}

TEST_CASE("rms_norm per head on a column slice of a fused qkv buffer leaves the other columns alone",
          "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  const int64_t T = rng.randint(1, 9), H = rng.randint(1, 6), D = 2 * rng.randint(1, 40),
                extra = rng.randint(1, 50);
  const int64_t ld = H * D + extra;
  auto xh = rng.vec(size_t(T * ld));
  auto wh = rng.vec(size_t(D));
  auto x = to_device(*be, xh, {T, ld});
  auto w = to_device(*be, wh, {D});
  Tensor q(x.t.data, DType::f32, {T, H, D});
  q.stride = {ld, D, 1, 0};
  be->rms_norm(q, w.t, 1e-6f, q);
  auto got = to_host(*be, x.t);
  // Reference: rows of D inside each token's first H*D columns.
  std::vector<float> per_head;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H * D; ++i) per_head.push_back(xh[t * ld + i]);
  auto want = ref_rms_norm(per_head, wh, T * H, D, D, 1e-6);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < H * D; ++i)
      REQUIRE(std::abs(got[t * ld + i] - want[t * H * D + i]) <= 2e-6 * std::abs(want[t * H * D + i]) + 1e-6);
    for (int64_t i = H * D; i < ld; ++i) REQUIRE(got[t * ld + i] == xh[t * ld + i]);
  }
}

TEST_CASE("add_rms_norm adds into the residual and normalises the sum", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  const int64_t R = rng.randint(1, 33), D = rng.randint(1, 513);
  auto rh = rng.vec(size_t(R * D));
  auto xh = rng.vec(size_t(R * D));
  auto wh = rng.vec(size_t(D));
  auto res = to_device(*be, rh, {R, D});
  auto x = to_device(*be, xh, {R, D});
  auto w = to_device(*be, wh, {D});
  auto out = zeros(*be, {R, D});
  be->add_rms_norm(res.t, x.t, w.t, 1e-5f, out.t);
  std::vector<float> sum(rh.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = rh[i] + xh[i];  // f32 add, as the op does
  auto got_res = to_host(*be, res.t);
  for (size_t i = 0; i < sum.size(); ++i) REQUIRE(got_res[i] == sum[i]);
  require_close(to_host(*be, out.t), ref_rms_norm(sum, wh, R, D, D, 1e-5), R, D, D);
}

}  // namespace astrai::test
