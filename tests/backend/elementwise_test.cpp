// embedding, swiglu, add, gather_rows and convert against float64 / scalar references.
#include <catch2/catch.hpp>
#include <cmath>

#include "backend/op_test_util.h"
#include "tools/test_util.h"

namespace astrai::test {

TEST_CASE("embedding copies the table row of each id", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  const int64_t V = rng.randint(1, 300), H = rng.randint(1, 77), T = rng.randint(1, 50);
  auto th = rng.vec(size_t(V * H));
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& i : ids) i = rng.randint(0, int(V) - 1);
  auto table = to_device(*be, th, {V, H});
  auto idt = to_device(*be, ids, {T});
  auto out = zeros(*be, {T, H});
  be->embedding(table.t, idt.t, out.t);
  auto got = to_host(*be, out.t);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) REQUIRE(got[t * H + i] == th[ids[t] * H + i]);
  auto bad = to_device(*be, std::vector<int32_t>{int32_t(V)}, {1});
  auto out1 = zeros(*be, {1, H});
  REQUIRE_THROWS_AS(be->embedding(table.t, bad.t, out1.t), Error);
}

TEST_CASE("swiglu on the two halves of a fused gate_up buffer is silu(gate) * up", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  const int64_t T = rng.randint(1, 20), F = rng.randint(1, 300);
  auto gu = rng.vec(size_t(T * 2 * F), 12.0f);  // large |g| exercises exp overflow / underflow
  auto buf = to_device(*be, gu, {T, 2 * F});
  Tensor gate = buf.t, up = buf.t;
  gate.shape[1] = F;
  up.shape[1] = F;
  up.data = buf.t.ptr<float>() + F;
  auto out = zeros(*be, {T, F});
  be->swiglu(gate, up, out.t);
  auto got = to_host(*be, out.t);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < F; ++i) {
      const double g = gu[t * 2 * F + i], u = gu[t * 2 * F + F + i];
      const double want = g / (1.0 + std::exp(-g)) * u;
      REQUIRE(std::abs(got[t * F + i] - want) <= 1e-6 * std::abs(want) + 1e-6);
    }
}

TEST_CASE("add sums element-wise", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  const int64_t R = rng.randint(1, 20), D = rng.randint(1, 300);
  auto ah = rng.vec(size_t(R * D)), bh = rng.vec(size_t(R * D));
  auto a = to_device(*be, ah, {R, D}), b = to_device(*be, bh, {R, D});
  auto out = zeros(*be, {R, D});
  be->add(a.t, b.t, out.t);
  auto got = to_host(*be, out.t);
  for (size_t i = 0; i < ah.size(); ++i) REQUIRE(got[i] == ah[i] + bh[i]);
}

TEST_CASE("gather_rows picks rows in the given order, repeats allowed", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  const int64_t T = rng.randint(1, 40), H = rng.randint(1, 90), R = rng.randint(1, 12);
  auto xh = rng.vec(size_t(T * H));
  std::vector<int32_t> rows(static_cast<size_t>(R));
  for (auto& r : rows) r = rng.randint(0, int(T) - 1);
  auto x = to_device(*be, xh, {T, H});
  auto rt = to_device(*be, rows, {R});
  auto out = zeros(*be, {R, H});
  be->gather_rows(x.t, rt.t, out.t);
  auto got = to_host(*be, out.t);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < H; ++j) REQUIRE(got[i * H + j] == xh[rows[i] * H + j]);
}

TEST_CASE("convert rounds f32 to bf16 / f16 and widens back", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  const int64_t n = rng.randint(1, 5000);
  auto xh = rng.vec(size_t(n), 100.0f);
  auto x = to_device(*be, xh, {n});
  for (DType t : {DType::bf16, DType::f16}) {
    auto half = zeros(*be, {n}, t);
    auto back = zeros(*be, {n});
    be->convert(x.t, half.t);
    be->convert(half.t, back.t);
    auto got = to_host(*be, back.t);
    // Round to nearest: relative error at most the unit roundoff 2^-8 (bf16, 8-bit significand) or
    // 2^-11 (f16, 11-bit significand).
    const double rel = t == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
    for (int64_t i = 0; i < n; ++i) REQUIRE(std::abs(double(got[i]) - xh[i]) <= rel * std::abs(xh[i]) + 1e-7);
  }
}

}  // namespace astrai::test
