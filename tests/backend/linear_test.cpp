// linear (out = x @ w^T + bias) against a float64 loop: odd sizes, the GEMV path (M = 1), bias or
// not, and x / out as column slices of wider buffers (row stride > width).
#include <catch2/catch.hpp>

#include "backend/op_test_util.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

// Per element |got - want| <= 1e-5 * sum_k |x_k w_k| + 1e-6: f32 accumulation error grows with
// the magnitude of the terms, not of their (possibly cancelling) sum.
void check_linear(int64_t M, int64_t K, int64_t N, bool with_bias, int64_t x_pad, int64_t out_pad, Rng& rng) {
  auto be = cpu_backend();
  const int64_t ldx = K + x_pad, ldo = N + out_pad;
  auto xh = rng.vec(size_t(M * ldx));
  auto wh = rng.vec(size_t(N * K));
  auto bh = rng.vec(size_t(N));
  auto x = to_device(*be, xh, {M, ldx});
  auto w = to_device(*be, wh, {N, K});
  auto b = to_device(*be, bh, {N});
  auto out = zeros(*be, {M, ldo});
  Tensor xv = x.t, ov = out.t;  // column slices [M, K] of [M, ldx] and [M, N] of [M, ldo]
  xv.shape[1] = K;
  ov.shape[1] = N;
  be->linear(xv, w.t, with_bias ? &b.t : nullptr, ov);
  auto got = to_host(*be, out.t);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = with_bias ? bh[n] : 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        acc += double(xh[m * ldx + k]) * double(wh[n * K + k]);
        mag += std::abs(double(xh[m * ldx + k]) * double(wh[n * K + k]));
      }
      INFO("M " << M << " K " << K << " N " << N << " m " << m << " n " << n);
      REQUIRE(std::abs(got[m * ldo + n] - acc) <= 1e-5 * mag + 1e-6);
    }
  // The padding columns of out are not written.
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = N; n < ldo; ++n) REQUIRE(got[m * ldo + n] == 0.0f);
}

}  // namespace

TEST_CASE("linear matches a float64 loop for odd sizes, with and without bias", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int rep = 0; rep < 6; ++rep) {
    const int64_t M = rng.randint(2, 37), K = rng.randint(1, 133), N = rng.randint(1, 71);
    check_linear(M, K, N, rep % 2 == 0, 0, 0, rng);
  }
}

TEST_CASE("linear with one row (the GEMV path) matches a float64 loop", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  check_linear(1, rng.randint(1, 300), rng.randint(1, 300), true, 0, 0, rng);
  check_linear(1, rng.randint(1, 300), rng.randint(1, 300), false, 0, 0, rng);
}

TEST_CASE("linear large enough to be split over threads matches a float64 loop", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  check_linear(rng.randint(20, 40), rng.randint(300, 400), rng.randint(300, 400), true, rng.randint(0, 3),
               rng.randint(0, 3), rng);
  check_linear(1, rng.randint(2000, 2400), rng.randint(500, 600), true, 0, 0,
               rng);  // >= 1M MACs: threaded GEMV
}

TEST_CASE("linear reads and writes column slices of wider buffers", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  check_linear(rng.randint(2, 20), rng.randint(3, 50), rng.randint(3, 50), true, rng.randint(1, 9),
               rng.randint(1, 9), rng);
  check_linear(1, rng.randint(3, 50), rng.randint(3, 50), false, rng.randint(1, 9), rng.randint(1, 9), rng);
}

TEST_CASE("linear rejects mismatched shapes with an error instead of reading out of bounds", "[unit]") {
  auto be = cpu_backend();
  auto x = zeros(*be, {3, 4});
  auto w = zeros(*be, {5, 6});
  auto out = zeros(*be, {3, 5});
  REQUIRE_THROWS_AS(be->linear(x.t, w.t, nullptr, out.t), Error);
}

}  // namespace astrai::test
