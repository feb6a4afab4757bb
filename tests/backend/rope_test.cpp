// rope against a float64 rotate-half loop, on a strided [T, heads, D] slice with random positions.
#include <catch2/catch.hpp>
#include <cmath>

#include "backend/op_test_util.h"
#include "tools/test_util.h"

namespace astrai::test {

TEST_CASE("rope rotates dims i and i + D/2 by the table's angle at each token's position", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  auto be = cpu_backend();
  const int64_t T = rng.randint(1, 30), H = rng.randint(1, 5), D = 2 * rng.randint(1, 48), max_pos = 300;
  const int64_t ld = H * D + rng.randint(0, 20);
  // Any table works for the op; use real angles so cos^2 + sin^2 = 1 like the model's.
  std::vector<float> cs(size_t(max_pos * D));
  std::vector<double> ang(size_t(max_pos * D / 2));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      ang[p * D / 2 + i] = double(p) * std::pow(10000.0, -2.0 * double(i) / double(D));
      cs[p * D + i] = float(std::cos(ang[p * D / 2 + i]));
      cs[p * D + D / 2 + i] = float(std::sin(ang[p * D / 2 + i]));
    }
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (auto& p : pos) p = rng.randint(0, int(max_pos) - 1);
  auto xh = rng.vec(size_t(T * ld));
  auto x = to_device(*be, xh, {T, ld});
  auto table = to_device(*be, cs, {max_pos, D});
  auto positions = to_device(*be, pos, {T});
  Tensor xv(x.t.data, DType::f32, {T, H, D});
  xv.stride = {ld, D, 1, 0};
  be->rope(xv, positions.t, table.t);
  auto got = to_host(*be, x.t);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double c = cs[pos[t] * D + i], s = cs[pos[t] * D + D / 2 + i];
        const double x1 = xh[t * ld + h * D + i], x2 = xh[t * ld + h * D + D / 2 + i];
        REQUIRE(std::abs(got[t * ld + h * D + i] - (x1 * c - x2 * s)) <= 1e-6);
        REQUIRE(std::abs(got[t * ld + h * D + D / 2 + i] - (x2 * c + x1 * s)) <= 1e-6);
      }
    for (int64_t i = H * D; i < ld; ++i) REQUIRE(got[t * ld + i] == xh[t * ld + i]);
  }
}

TEST_CASE("rope rejects a position outside its table", "[unit]") {
  auto be = cpu_backend();
  auto x = zeros(*be, {2, 1, 4});
  auto table = zeros(*be, {8, 4});
  auto positions = to_device(*be, std::vector<int32_t>{3, 8}, {2});
  REQUIRE_THROWS_AS(be->rope(x.t, positions.t, table.t), Error);
}

}  // namespace astrai::test
