// linear (out = x @ w^T + bias) against a float64 loop on every backend: odd sizes, the GEMV path
// (M = 1), bias or not, x / out as column slices of wider buffers (row stride > width), and an f32
// out from compute-dtype operands (the LM head's logits).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "backend/op_test_util.h"
#include "src/backend/cpu/ops.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

// f32: per element |got - want| <= 1e-5 * sum_k |x_k w_k| + 1e-6, since f32 accumulation error
// grows with the magnitude of the terms, not of their (possibly cancelling) sum.
// bf16 (require_close's kBf16Tol: rtol * scale + atol): the accumulation error grows with
// sum_k |x_k w_k| as in f32; a bf16 out then rounds the result once more, by up to half a unit in its
// last place, at most |want| * 2^-8 (8-bit significand), which does not shrink with the terms: with
// K = 1 and a bias near 1 the sum is about the bias and the rounding alone is ~0.002, more than
// rtol * |x_0 w_0| + atol. So a bf16 out's scale also carries |want| * 2^-8 / rtol.
void check_linear(Backend& be, int64_t M, int64_t K, int64_t N, bool with_bias, int64_t x_pad,
                  int64_t out_pad, Rng& rng, DType out_dtype) {
  const int64_t ldx = K + x_pad, ldo = N + out_pad;
  auto xh = rng.vec(size_t(M * ldx));
  auto wh = rng.vec(size_t(N * K));
  auto bh = rng.vec(size_t(N));
  auto x = to_device(be, xh, {M, ldx});
  auto w = to_device(be, wh, {N, K});
  auto b = to_device(be, bh, {N}, out_dtype);  // bias in out's dtype
  auto out = poisoned(be, {M, ldo}, out_dtype);
  Tensor xv = x.t, ov = out.t;  // column slices [M, K] of [M, ldx] and [M, N] of [M, ldo]
  xv.shape[1] = K;
  ov.shape[1] = N;
  be.linear(xv, w.t, with_bias ? &b.t : nullptr, ov);
  auto got = to_host(be, out.t);
  std::vector<double> want(got.size(), 0.0), mag(got.size(), 0.0);
  std::vector<size_t> written;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = with_bias ? bh[n] : 0.0, mg = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        acc += double(xh[m * ldx + k]) * double(wh[n * K + k]);
        mg += std::abs(double(xh[m * ldx + k]) * double(wh[n * K + k]));
      }
      want[m * ldo + n] = acc;
      mag[m * ldo + n] = mg;
      written.push_back(size_t(m * ldo + n));
    }
  INFO("M " << M << " K " << K << " N " << N << " out " << dtype_name(out_dtype));
  const double out_rounding = out_dtype == DType::bf16 ? std::ldexp(1.0, -8) / kBf16Tol.rtol : 0.0;
  require_close(
      be, got, want, [&](size_t i) { return mag[i] + out_rounding * std::abs(want[i]); }, Tol{1e-5, 1e-6},
      written);
  // The padding columns of out are not written.
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = N; n < ldo; ++n) REQUIRE(std::isnan(got[m * ldo + n]));
}

void linear_odd_sizes(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int rep = 0; rep < 6; ++rep) {
    const int64_t M = rng.randint(2, 37), K = rng.randint(1, 133), N = rng.randint(1, 71);
    check_linear(be, M, K, N, rep % 2 == 0, 0, 0, rng, be.compute_dtype());
  }
}

void linear_one_row(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  check_linear(be, 1, rng.randint(1, 300), rng.randint(1, 300), true, 0, 0, rng, be.compute_dtype());
  check_linear(be, 1, rng.randint(1, 300), rng.randint(1, 300), false, 0, 0, rng, be.compute_dtype());
}

void linear_large(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  check_linear(be, rng.randint(20, 40), rng.randint(300, 400), rng.randint(300, 400), true, rng.randint(0, 3),
               rng.randint(0, 3), rng, be.compute_dtype());
  check_linear(be, 1, rng.randint(2000, 2400), rng.randint(500, 600), true, 0, 0, rng,
               be.compute_dtype());  // >= 1M MACs: threaded GEMV on the CPU
  // Aligned sizes, as a model's are (the tensor-core paths).
  check_linear(be, 8 * rng.randint(1, 40), 64 * rng.randint(4, 12), 64 * rng.randint(4, 12), false, 0, 0, rng,
               be.compute_dtype());
}

void linear_column_slices(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  check_linear(be, rng.randint(2, 20), rng.randint(3, 50), rng.randint(3, 50), true, rng.randint(1, 9),
               rng.randint(1, 9), rng, be.compute_dtype());
  check_linear(be, 1, rng.randint(3, 50), rng.randint(3, 50), false, rng.randint(1, 9), rng.randint(1, 9),
               rng, be.compute_dtype());
}

void linear_f32_out(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  check_linear(be, rng.randint(1, 20), 64 * rng.randint(1, 8), rng.randint(100, 1100), false, 0, 0, rng,
               DType::f32);
  check_linear(be, rng.randint(2, 20), rng.randint(3, 200), rng.randint(3, 200), true, 0, 0, rng, DType::f32);
}

// linear_residual: out = residual + x @ w^T (+ bias) against a float64 loop, bias or not, odd and
// aligned sizes (the GPU's epilogue path takes the bias-free ones). Tolerance as check_linear's, the
// scale also carrying |residual| (a bf16 residual add rounds once more).
void linear_residual_adds(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int rep = 0; rep < 4; ++rep) {
    const bool aligned = rep >= 2, with_bias = rep == 1;
    const int64_t M = aligned ? 8 * rng.randint(1, 30) : rng.randint(1, 37),
                  K = aligned ? 64 * rng.randint(1, 6) : rng.randint(1, 133),
                  N = aligned ? 64 * rng.randint(1, 6) : rng.randint(1, 71);
    INFO("M " << M << " K " << K << " N " << N << " bias " << with_bias);
    auto xh = rng.vec(size_t(M * K)), wh = rng.vec(size_t(N * K)), bh = rng.vec(size_t(N)),
         rh = rng.vec(size_t(M * N));
    auto x = to_device(be, xh, {M, K}), w = to_device(be, wh, {N, K}), b = to_device(be, bh, {N}),
         res = to_device(be, rh, {M, N});
    auto out = poisoned(be, {M, N});
    be.linear_residual(x.t, w.t, with_bias ? &b.t : nullptr, res.t, out.t);
    auto got = to_host(be, out.t);
    // The residual itself is not written.
    REQUIRE(to_host(be, res.t) == rh);
    std::vector<double> want(got.size()), mag(got.size());
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = double(rh[m * N + n]) + (with_bias ? bh[n] : 0.0), mg = std::abs(double(rh[m * N + n]));
        for (int64_t k = 0; k < K; ++k) {
          acc += double(xh[m * K + k]) * double(wh[n * K + k]);
          mg += std::abs(double(xh[m * K + k]) * double(wh[n * K + k]));
        }
        want[m * N + n] = acc;
        mag[m * N + n] = mg;
      }
    const double out_rounding = be.compute_dtype() == DType::bf16 ? std::ldexp(1.0, -8) / kBf16Tol.rtol : 0.0;
    require_close(
        be, got, want, [&](size_t i) { return mag[i] + out_rounding * std::abs(want[i]); }, Tol{1e-5, 1e-6});
  }
}

// Up to 8 rows with K a multiple of 8 (16-byte rows): the GPU's own GEMV path, with x as a column
// slice too, and both out dtypes.
void linear_few_rows(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int M = 1; M <= 8; ++M) {
    // K up to 8800: the GPU splits long rows of narrow outputs across warps.
    const int64_t K = 8 * rng.randint(1, 1100), N = rng.randint(1, 700);
    check_linear(be, M, K, N, M % 2 == 1, M % 3 == 0 ? 8 * rng.randint(1, 4) : 0, rng.randint(0, 3), rng,
                 M % 4 == 0 ? DType::f32 : be.compute_dtype());
  }
  // Wider N, as the model's are: on the GPU, N > 2048 takes 8-warp blocks with K split 8 ways, 1 to 8
  // waves of them fewer ways, N >= 65536 (an LM head) 8 ways again.
  check_linear(be, rng.randint(1, 8), 8 * rng.randint(1, 300), rng.randint(2049, 3000), true, 0,
               rng.randint(0, 3), rng, be.compute_dtype());
  check_linear(be, rng.randint(1, 8), 8 * rng.randint(1, 40), rng.randint(16400, 20000), false, 0, 0, rng,
               be.compute_dtype());
  check_linear(be, rng.randint(1, 8), 8 * rng.randint(1, 4), rng.randint(65600, 70000), false, 0, 0, rng,
               DType::f32);
}

void linear_rejects_shapes(Backend& be) {
  auto x = zeros(be, {3, 4});
  auto w = zeros(be, {5, 6});
  auto out = zeros(be, {3, 5});
  REQUIRE_THROWS_AS(be.linear(x.t, w.t, nullptr, out.t), Error);
}

// The CPU backend's promise (src/backend/cpu/linear.cpp): a row's output bits depend only on that
// row, never on how many rows share the call, where the row sits among them, or the thread count.
// Each row alone (one thread) is the reference; every row of every batch must equal it exactly.
void check_rows_batch_invariant(int64_t K, int64_t N, bool with_bias, Rng& rng) {
  const int64_t rows = 70;
  auto xh = rng.vec(size_t(rows * K));
  auto wh = rng.vec(size_t(N * K));
  auto bh = rng.vec(size_t(N));
  Tensor w(wh.data(), DType::f32, {N, K}), b(bh.data(), DType::f32, {N});
  const Tensor* bias = with_bias ? &b : nullptr;
  auto run = [&](Backend& be, int64_t first, int64_t M) {
    std::vector<float> out(size_t(M * N));
    be.linear(Tensor(xh.data() + first * K, DType::f32, {M, K}), w, bias,
              Tensor(out.data(), DType::f32, {M, N}));
    return out;
  };
  BackendOptions one;
  one.threads = 1;
  auto single = make_backend(one).value();
  std::vector<std::vector<float>> alone;
  for (int64_t r = 0; r < rows; ++r) alone.push_back(run(*single, r, 1));
  for (int threads : {1, 2, 3}) {
    BackendOptions o;
    o.threads = threads;
    auto be = make_backend(o).value();
    for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 9, 17, 64, 65, 70}) {
      const int64_t first = rng.randint(0, int(rows - M));
      const auto out = run(*be, first, M);
      for (int64_t i = 0; i < M; ++i) {
        INFO("K " << K << " N " << N << " bias " << with_bias << " threads " << threads << " M " << M
                  << " row " << first + i);
        REQUIRE(std::memcmp(out.data() + i * N, alone[size_t(first + i)].data(), size_t(N) * sizeof(float)) ==
                0);
      }
    }
  }
}

// prefetch is a hint: a linear after a prefetch of its weight (4 rows, a decode step's, and 64)
// gives the bits it gives without one, eagerly and replayed from a graph whose capture forked the
// prefetch off (where the backend records graphs; the CUDA backend prefetches only there); a
// prefetch of a column slice is refused clearly where the backend acts on it (the CPU's does nothing).
void prefetch_is_a_hint(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const int64_t K = 1024, N = 4096 + 8 * rng.randint(0, 64);
  auto wh = rng.vec(size_t(N * K));
  auto w = to_device(be, wh, {N, K});
  for (const int64_t M : {int64_t(4), int64_t(64)}) {
    INFO("M " << M);
    auto xh = rng.vec(size_t(M * K));
    auto x = to_device(be, xh, {M, K});
    auto plain = poisoned(be, {M, N}), hinted = poisoned(be, {M, N}), replayed = poisoned(be, {M, N});
    be.linear(x.t, w.t, nullptr, plain.t);
    const Tensor* next[] = {&w.t, &x.t};
    be.prefetch(next, M);
    be.linear(x.t, w.t, nullptr, hinted.t);
    const auto want = to_host(be, plain.t);
    auto same_bits = [&](const std::vector<float>& got) {
      return std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0;
    };
    REQUIRE(same_bits(to_host(be, hinted.t)));
    if (be.supports_graphs()) {
      auto graph = be.capture([&] {
        be.prefetch(next, M);
        be.linear(x.t, w.t, nullptr, replayed.t);
      });
      REQUIRE(graph);
      graph->replay();
      be.synchronize();
      REQUIRE(same_bits(to_host(be, replayed.t)));
    }
  }
  if (be.device() == Device::cuda) {
    Tensor slice = w.t;  // [N, K / 2] of [N, K]: not contiguous
    slice.shape[1] = K / 2;
    const Tensor* bad[] = {&slice};
    REQUIRE_THROWS_WITH(be.capture([&] { be.prefetch(bad, 4); }), Catch::Contains("contiguous"));
  }
}

}  // namespace

TEST_CASE("linear on the cpu gives a row the same bits alone, in any batch, at any thread count", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  check_rows_batch_invariant(rng.randint(1, 40), rng.randint(1, 40), true, rng);  // K tails, edge tiles
  check_rows_batch_invariant(8 * rng.randint(16, 40), rng.randint(200, 400), false, rng);
  check_rows_batch_invariant(rng.randint(100, 300) | 1, rng.randint(4000, 6000), true,
                             rng);  // threaded at M = 1
}

// Each instruction-set path of the CPU's linear (its own tile shape, 4 x 3 to 6 x 4) gives the
// baseline's bits, at edge tiles of every shape, K tails, a bias, strided rows, and threaded; the
// paths this CPU lacks are refused.
TEST_CASE("linear on the cpu gives the same bits on every instruction-set path", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  const cpu::Isa paths[] = {cpu::Isa::avx2, cpu::Isa::avx512};
  for (int round = 0; round < 6; ++round) {
    const int64_t M = round < 4 ? rng.randint(1, 80) : rng.randint(100, 140), K = rng.randint(1, 300),
                  N = round < 4 ? rng.randint(1, 60) : rng.randint(500, 900), lda = K + rng.randint(0, 5);
    const bool with_bias = round % 2 == 0;
    auto xh = rng.vec(size_t(M * lda)), wh = rng.vec(size_t(N * K)), bh = rng.vec(size_t(N));
    Tensor x(xh.data(), DType::f32, {M, K}), w(wh.data(), DType::f32, {N, K}), b(bh.data(), DType::f32, {N});
    x.stride[0] = lda;
    auto run = [&](cpu::Isa path) {
      std::vector<float> out(size_t(M * N), std::nanf(""));
      cpu::linear(x, w, with_bias ? &b : nullptr, Tensor(out.data(), DType::f32, {M, N}), path);
      return out;
    };
    const auto want = run(cpu::Isa::baseline);
    for (cpu::Isa path : paths) {
      INFO("M " << M << " K " << K << " N " << N << " lda " << lda << " bias " << with_bias << " path "
                << int(path));
      if (!cpu::isa_available(path)) {
        REQUIRE_THROWS_WITH(run(path), Catch::Contains("instruction set"));
        continue;
      }
      const auto got = run(path);
      REQUIRE(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
    }
  }
}

// bf16 weights (a bf16 checkpoint's, as the CPU keeps them: Backend::weight_dtype) give the bits of
// their f32 copies on every path: at one row, a few, past a block of rows, with K tails, edge tiles,
// a bias, strided rows and threaded.
TEST_CASE("linear on the cpu with bf16 weights gives the bits of their f32 copies on every path", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int round = 0; round < 8; ++round) {
    // Rows: one; a few; under a block of rows (60-64 by path); whole blocks (the widened panel) and a
    // partial one; then threaded at one row and at whole blocks.
    const int64_t M = round < 2   ? 1
                      : round < 4 ? rng.randint(2, 12)
                      : round < 5 ? rng.randint(13, 59)
                      : round < 6 ? rng.randint(128, 200)
                      : round < 7 ? 1
                                  : rng.randint(64, 130),
                  K = round < 6 ? rng.randint(1, 300) : 8 * rng.randint(20, 200),
                  N = round < 6 ? rng.randint(1, 80) : rng.randint(600, 1200), lda = K + rng.randint(0, 5);
    const bool with_bias = round % 2 == 0;
    auto xh = rng.vec(size_t(M * lda)), wf = rng.vec(size_t(N * K)), bh = rng.vec(size_t(N));
    std::vector<uint16_t> wb(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) {
      wb[i] = f32_to_bf16(wf[i]);
      wf[i] = bf16_to_f32(wb[i]);
    }
    Tensor x(xh.data(), DType::f32, {M, K}), w32(wf.data(), DType::f32, {N, K}),
        w16(wb.data(), DType::bf16, {N, K}), b(bh.data(), DType::f32, {N});
    x.stride[0] = lda;
    auto run = [&](const Tensor& w, cpu::Isa path) {
      std::vector<float> out(size_t(M * N), std::nanf(""));
      cpu::linear(x, w, with_bias ? &b : nullptr, Tensor(out.data(), DType::f32, {M, N}), path);
      return out;
    };
    const auto want = run(w32, cpu::Isa::baseline);
    for (cpu::Isa path : {cpu::Isa::baseline, cpu::Isa::avx2, cpu::Isa::avx512}) {
      if (!cpu::isa_available(path)) continue;
      INFO("M " << M << " K " << K << " N " << N << " lda " << lda << " bias " << with_bias << " path "
                << int(path));
      const auto got = run(w16, path);
      REQUIRE(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
    }
  }
}

ASTRAI_BACKEND_TEST("linear matches a float64 loop for odd sizes, with and without bias", linear_odd_sizes)
ASTRAI_BACKEND_TEST("linear with one row (the GEMV path) matches a float64 loop", linear_one_row)
ASTRAI_BACKEND_TEST("linear on large and aligned shapes matches a float64 loop", linear_large)
ASTRAI_BACKEND_TEST("linear reads and writes column slices of wider buffers", linear_column_slices)
ASTRAI_BACKEND_TEST("linear with 1 to 8 rows and 16-byte rows (the GPU's GEMV) matches a float64 loop",
                    linear_few_rows)
ASTRAI_BACKEND_TEST("linear writes f32 out from compute-dtype operands (the LM head)", linear_f32_out)
ASTRAI_BACKEND_TEST("linear_residual adds the residual to the projection (with and without bias)",
                    linear_residual_adds)
ASTRAI_BACKEND_TEST("prefetch changes no result, eager or in a graph", prefetch_is_a_hint)
ASTRAI_BACKEND_TEST("linear rejects mismatched shapes with an error instead of reading out of bounds",
                    linear_rejects_shapes)

}  // namespace astrai::test
