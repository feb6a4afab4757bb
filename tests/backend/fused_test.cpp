// The fused forward ops (backend.h) against float64 loops of the ops they replace, on every backend:
// rope_kv_store (q/k RMSNorm, RoPE and the KV-cache write) on q/k/v slices of one qkv buffer, with
// and without the norms; swiglu_linear (silu(gate) * up, then x @ w^T) on the two halves of one
// gate_up buffer, at decode-sized M (the CUDA backend's fused GEMV) and larger M (its unfused path).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "backend/op_test_util.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

std::vector<float> rope_table(int64_t max_pos, int64_t D) {
  std::vector<float> cs(size_t(max_pos * D));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double ang = double(p) * std::pow(10000.0, -2.0 * double(i) / double(D));
      cs[size_t(p * D + i)] = float(std::cos(ang));
      cs[size_t(p * D + D / 2 + i)] = float(std::sin(ang));
    }
  return cs;
}

// head_dim 0: a random even one (mostly rows the CUDA kernel reads element by element); 64 and 128
// take its 16-byte path, with more tokens than one block row.
void check_rope_kv_store(Backend& be, bool qk_norm, Rng& rng, int64_t head_dim = 0) {
  const int64_t T = rng.randint(1, head_dim ? 40 : 12), KVH = rng.randint(1, 4), H = KVH * rng.randint(1, 4);
  const int64_t D = head_dim ? head_dim : 2 * rng.randint(1, 72), max_pos = 200, n_slots = 64;
  const int64_t ld = (H + 2 * KVH) * D;  // one token's row of the qkv buffer: q | k | v heads
  const float eps = 1e-6f;
  INFO("T " << T << " H " << H << " KVH " << KVH << " D " << D << " qk_norm " << qk_norm);
  auto qkv_h = rng.vec(size_t(T * ld), 2.0f);
  auto qn_h = rng.vec(size_t(D), 1.5f), kn_h = rng.vec(size_t(D), 1.5f);
  auto cs = rope_table(max_pos, D);
  std::vector<int32_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(n_slots));
  for (auto& p : pos) p = rng.randint(0, int(max_pos) - 1);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng.gen);
  slots.resize(size_t(T));  // distinct slots: no two tokens write one cache row
  auto qkv = to_device(be, qkv_h, {T, ld});
  auto qn = to_device(be, qn_h, {D});
  auto kn = to_device(be, kn_h, {D});
  auto table = to_device(be, cs, {max_pos, D}, DType::f32);
  auto positions = to_device(be, pos, {T});
  auto slot_t = to_device(be, slots, {T});
  auto k_cache = poisoned(be, {n_slots, KVH, D}), v_cache = poisoned(be, {n_slots, KVH, D});
  auto view = [&](int64_t col, int64_t heads) {
    Tensor t(offset(qkv.t, col), qkv.t.dtype, {T, heads, D}, qkv.t.device);
    t.stride = {ld, D, 1, 0};
    return t;
  };
  be.rope_kv_store(view(0, H), view(H * D, KVH), view((H + KVH) * D, KVH), qk_norm ? &qn.t : nullptr,
                   qk_norm ? &kn.t : nullptr, eps, positions.t, table.t, slot_t.t, k_cache.t, v_cache.t);
  const auto got = to_host(be, qkv.t), got_k = to_host(be, k_cache.t), got_v = to_host(be, v_cache.t);

  // float64: per head row, norm (when asked), then rotate; scale: |y1| + |y2| of the rotated pair.
  std::vector<double> want(qkv_h.begin(), qkv_h.end()), scale(qkv_h.size(), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H + KVH; ++j) {
      const size_t base = size_t(t * ld + j * D);
      const std::vector<float>& nw = j < H ? qn_h : kn_h;
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += double(qkv_h[base + i]) * qkv_h[base + i];
      const double inv = 1.0 / std::sqrt(ss / double(D) + eps);
      auto y = [&](int64_t i) {
        return qk_norm ? qkv_h[base + i] * inv * nw[size_t(i)] : double(qkv_h[base + i]);
      };
      for (int64_t i = 0; i < D / 2; ++i) {
        const double c = cs[size_t(pos[size_t(t)] * D + i)], s = cs[size_t(pos[size_t(t)] * D + D / 2 + i)];
        const double y1 = y(i), y2 = y(D / 2 + i);
        want[base + i] = y1 * c - y2 * s;
        want[base + D / 2 + i] = y2 * c + y1 * s;
        scale[base + i] = scale[base + D / 2 + i] = std::abs(y1) + std::abs(y2);
      }
    }
  require_close(
      be, got, want, [&](size_t i) { return scale[i]; }, Tol{1e-5, 1e-6});
  // The cache rows of this step's slots hold k after RoPE and v as it was; no other row is written.
  std::vector<double> want_k(got_k.size(), std::nan("")), want_v(got_v.size(), std::nan(""));
  std::vector<double> scale_k(got_k.size(), 0.0), scale_v(got_v.size(), 0.0);
  std::vector<size_t> written;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < KVH; ++h)
      for (int64_t i = 0; i < D; ++i) {
        const size_t dst = size_t((slots[size_t(t)] * KVH + h) * D + i);
        const size_t k_src = size_t(t * ld + (H + h) * D + i), v_src = size_t(t * ld + (H + KVH + h) * D + i);
        want_k[dst] = want[k_src];
        scale_k[dst] = scale[k_src];
        want_v[dst] = qkv_h[v_src];
        scale_v[dst] = std::abs(qkv_h[v_src]);
        written.push_back(dst);
      }
  require_close(
      be, got_k, want_k, [&](size_t i) { return scale_k[i]; }, Tol{1e-5, 1e-6}, written);
  require_close(
      be, got_v, want_v, [&](size_t i) { return scale_v[i]; }, Tol{0, 0}, written);
  std::vector<bool> is_written(got_k.size(), false);
  for (size_t i : written) is_written[i] = true;
  for (size_t i = 0; i < got_k.size(); ++i)
    if (!is_written[i]) REQUIRE((std::isnan(got_k[i]) && std::isnan(got_v[i])));
}

void rope_kv_store_matches_the_unfused_ops(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int rep = 0; rep < 4; ++rep) {
    check_rope_kv_store(be, false, rng);
    check_rope_kv_store(be, true, rng);
  }
  for (const int64_t D : {64, 128}) {
    check_rope_kv_store(be, false, rng, D);
    check_rope_kv_store(be, true, rng, D);
  }
}

// out = (silu(gate) * up) @ w^T with gate | up one [M, 2F + pad] buffer. Scale as in linear_test:
// sum_k |act_k w_k| (the activation's own bf16 rounding is relative to each term), and for a bf16 out
// its last rounding, |want| * 2^-8.
void check_swiglu_linear(Backend& be, int64_t M, int64_t F, int64_t N, int64_t pad, Rng& rng) {
  INFO("M " << M << " F " << F << " N " << N << " pad " << pad);
  const int64_t ld = 2 * F + pad;
  auto gu_h = rng.vec(size_t(M * ld), 3.0f);
  auto w_h = rng.vec(size_t(N * F));
  auto gu = to_device(be, gu_h, {M, ld});
  auto w = to_device(be, w_h, {N, F});
  auto act = zeros(be, {M, F});
  auto out = poisoned(be, {M, N});
  Tensor gate(gu.t.data, gu.t.dtype, {M, F}, gu.t.device),
      up(offset(gu.t, F), gu.t.dtype, {M, F}, gu.t.device);
  gate.stride = up.stride = {ld, 1, 0, 0};
  be.swiglu_linear(gate, up, w.t, act.t, out.t);
  const auto got = to_host(be, out.t);
  std::vector<double> want(got.size()), mag(got.size());
  for (int64_t m = 0; m < M; ++m) {
    std::vector<double> a(static_cast<size_t>(F));
    for (int64_t k = 0; k < F; ++k) {
      const double g = gu_h[size_t(m * ld + k)], u = gu_h[size_t(m * ld + F + k)];
      a[size_t(k)] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0, mg = 0;
      for (int64_t k = 0; k < F; ++k) {
        acc += a[size_t(k)] * w_h[size_t(n * F + k)];
        mg += std::abs(a[size_t(k)] * w_h[size_t(n * F + k)]);
      }
      want[size_t(m * N + n)] = acc;
      mag[size_t(m * N + n)] = mg;
    }
  }
  const double out_rounding = be.compute_dtype() == DType::bf16 ? std::ldexp(1.0, -8) / kBf16Tol.rtol : 0.0;
  require_close(
      be, got, want, [&](size_t i) { return mag[i] + out_rounding * std::abs(want[i]); }, Tol{1e-5, 1e-6});
}

void swiglu_linear_matches_swiglu_then_linear(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (int64_t M : {1, 2, 5, 8})
    check_swiglu_linear(be, M, 8 * rng.randint(1, 96), rng.randint(1, 300), 0, rng);
  check_swiglu_linear(be, 3, 8 * rng.randint(1, 64), rng.randint(1, 100), 8 * rng.randint(1, 4), rng);
  check_swiglu_linear(be, rng.randint(9, 40), 8 * rng.randint(1, 64), rng.randint(1, 200), 0, rng);
  check_swiglu_linear(be, rng.randint(1, 8), rng.randint(1, 100) | 1, rng.randint(1, 50), 0, rng);  // odd F
  // The CUDA backend fuses while M x F <= 16 x its GEMV block's threads (8,192 for these small N),
  // else runs swiglu then the GEMV: one row at about that bound, and 8 rows past it.
  check_swiglu_linear(be, 1, 8 * rng.randint(960, 1088), rng.randint(1, 64), 0, rng);
  check_swiglu_linear(be, 8, 8 * rng.randint(330, 400), rng.randint(1, 64), 0, rng);
}

// add_rms_norm_linear against float64: residual + x, its RMSNorm (rounded as the backend's
// add_rms_norm rounds), then the projection; residual_out holds the sum, residual is unchanged.
void check_add_rms_norm_linear(Backend& be, int64_t M, int64_t K, int64_t N, bool bias, Rng& rng) {
  INFO("M " << M << " K " << K << " N " << N << " bias " << bias);
  const float eps = 1e-5f;
  auto r_h = rng.vec(size_t(M * K), 2.0f), x_h = rng.vec(size_t(M * K), 2.0f), g_h = rng.vec(size_t(K), 1.5f),
       w_h = rng.vec(size_t(N * K)), b_h = rng.vec(size_t(N));
  // Inputs as the backend stores them, so the reference starts from the same values.
  auto res = to_device(be, r_h, {M, K}), x = to_device(be, x_h, {M, K}), g = to_device(be, g_h, {K}),
       w = to_device(be, w_h, {N, K}), b = to_device(be, b_h, {N});
  r_h = to_host(be, res.t);
  x_h = to_host(be, x.t);
  g_h = to_host(be, g.t);
  w_h = to_host(be, w.t);
  b_h = to_host(be, b.t);
  auto res_out = poisoned(be, {M, K}), h = zeros(be, {M, K}), out = poisoned(be, {M, N});
  be.add_rms_norm_linear(res.t, x.t, g.t, eps, res_out.t, h.t, w.t, bias ? &b.t : nullptr, out.t);
  const auto got_out = to_host(be, out.t), got_res = to_host(be, res_out.t), res_after = to_host(be, res.t);
  CHECK(res_after == r_h);  // the input residual is left as it was
  const bool bf16 = be.compute_dtype() == DType::bf16;
  std::vector<double> want_res(size_t(M * K)), want(size_t(M * N)), mag(size_t(M * N));
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) {
      const double v = double(r_h[size_t(m * K + k)]) + double(x_h[size_t(m * K + k)]);
      want_res[size_t(m * K + k)] = v;
      ss += v * v;
    }
    const double inv = 1.0 / std::sqrt(ss / double(K) + eps);
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias ? double(b_h[size_t(n)]) : 0.0, mg = std::abs(acc);
      for (int64_t k = 0; k < K; ++k) {
        const double hk = want_res[size_t(m * K + k)] * inv * double(g_h[size_t(k)]);
        acc += hk * double(w_h[size_t(n * K + k)]);
        mg += std::abs(hk * double(w_h[size_t(n * K + k)]));
      }
      want[size_t(m * N + n)] = acc;
      mag[size_t(m * N + n)] = mg;
    }
  }
  require_close(
      be, got_res, want_res, [&](size_t i) { return std::abs(want_res[i]); }, Tol{1e-6, 1e-6});
  // bf16: the sum, the normed row and the output are each rounded once more than the reference.
  const double out_rounding = bf16 ? 3 * std::ldexp(1.0, -8) / kBf16Tol.rtol : 0.0;
  require_close(
      be, got_out, want, [&](size_t i) { return mag[i] + out_rounding * std::abs(want[i]); },
      Tol{1e-5, 1e-6});
}

void add_rms_norm_linear_matches_the_unfused_ops(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  // Decode-sized M (the CUDA backend's fused GEMV where M x K <= 16 x its block's threads) and past it.
  for (int64_t M : {1, 2, 4, 8})
    check_add_rms_norm_linear(be, M, 8 * rng.randint(1, 256), rng.randint(1, 300), M % 2 == 0, rng);
  check_add_rms_norm_linear(be, 1, 8 * rng.randint(900, 1024), rng.randint(1, 40), true, rng);
  check_add_rms_norm_linear(be, rng.randint(9, 24), 8 * rng.randint(1, 64), rng.randint(1, 100), false, rng);
  check_add_rms_norm_linear(be, rng.randint(1, 8), rng.randint(1, 100) | 1, rng.randint(1, 50), true,
                            rng);  // odd K
  // Past the GEMV the CUDA backend adds and norms in one kernel (16-byte rows, and any rows).
  check_add_rms_norm_linear(be, rng.randint(9, 40), rng.randint(1, 100) | 1, rng.randint(1, 50), false, rng);
}

}  // namespace

ASTRAI_BACKEND_TEST("add_rms_norm_linear equals residual + x, RMSNorm and the projection in float64",
                    add_rms_norm_linear_matches_the_unfused_ops)
ASTRAI_BACKEND_TEST("rope_kv_store equals q/k norm, RoPE and kv_store in float64, with and without the norms",
                    rope_kv_store_matches_the_unfused_ops)
ASTRAI_BACKEND_TEST("swiglu_linear equals silu(gate) * up then the down projection in float64",
                    swiglu_linear_matches_swiglu_then_linear)

TEST_CASE("rope_kv_store rejects a q norm without a k norm", "[unit]") {
  auto be = cpu_backend();
  auto q = zeros(*be, {1, 1, 4}), k = zeros(*be, {1, 1, 4}), v = zeros(*be, {1, 1, 4});
  auto w = zeros(*be, {4}), table = zeros(*be, {8, 4}), kc = zeros(*be, {4, 1, 4}),
       vc = zeros(*be, {4, 1, 4});
  auto ids = to_device(*be, std::vector<int32_t>{0}, {1});
  REQUIRE_THROWS_AS(be->rope_kv_store(q.t, k.t, v.t, &w.t, nullptr, 1e-6f, ids.t, table.t, ids.t, kc.t, vc.t),
                    Error);
}

}  // namespace astrai::test
