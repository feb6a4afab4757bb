// rope against a float64 rotate-half loop, on a strided [T, heads, D] slice with random positions,
// on every backend.
#include <catch2/catch.hpp>
#include <cmath>

#include "backend/op_test_util.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

void rope_rotates_pairs(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const int64_t T = rng.randint(1, 30), H = rng.randint(1, 5), D = 2 * rng.randint(1, 80), max_pos = 300;
  const int64_t ld = H * D + rng.randint(0, 20);
  // Any table works for the op; use real angles so cos^2 + sin^2 = 1 like the model's.
  std::vector<float> cs(size_t(max_pos * D));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double ang = double(p) * std::pow(10000.0, -2.0 * double(i) / double(D));
      cs[p * D + i] = float(std::cos(ang));
      cs[p * D + D / 2 + i] = float(std::sin(ang));
    }
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (auto& p : pos) p = rng.randint(0, int(max_pos) - 1);
  auto xh = rng.vec(size_t(T * ld));
  auto x = to_device(be, xh, {T, ld});
  auto table = to_device(be, cs, {max_pos, D}, DType::f32);  // the table is f32 on every backend
  auto positions = to_device(be, pos, {T});
  Tensor xv(x.t.data, x.t.dtype, {T, H, D}, x.t.device);
  xv.stride = {ld, D, 1, 0};
  be.rope(xv, positions.t, table.t);
  auto got = to_host(be, x.t);
  std::vector<double> want(xh.begin(), xh.end()), scale(xh.size(), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double c = cs[pos[t] * D + i], s = cs[pos[t] * D + D / 2 + i];
        const size_t a = size_t(t * ld + h * D + i), b = a + size_t(D / 2);
        const double x1 = xh[a], x2 = xh[b];
        want[a] = x1 * c - x2 * s;
        want[b] = x2 * c + x1 * s;
        scale[a] = scale[b] = std::abs(x1) + std::abs(x2);
      }
  require_close(
      be, got, want, [&](size_t i) { return scale[i]; }, Tol{0, 1e-6});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = H * D; i < ld; ++i) REQUIRE(got[t * ld + i] == xh[t * ld + i]);
}

}  // namespace

ASTRAI_BACKEND_TEST("rope rotates dims i and i + D/2 by the table's angle at each token's position",
                    rope_rotates_pairs)

TEST_CASE("rope rejects a position outside its table", "[unit]") {
  auto be = cpu_backend();
  auto x = zeros(*be, {2, 1, 4});
  auto table = zeros(*be, {8, 4});
  auto positions = to_device(*be, std::vector<int32_t>{3, 8}, {2});
  REQUIRE_THROWS_AS(be->rope(x.t, positions.t, table.t), Error);
}

}  // namespace astrai::test
