// The fused forward ops (backend.h) against float64 loops of the ops they replace, on every backend:
// rope_kv_store (q/k RMSNorm, RoPE and the KV-cache write) on q/k/v slices of one qkv buffer, with
// and without the norms; add_rms_norm_linear; add_rms_norm_mlp (the MLP sub-layer after the residual
// add), at decode-sized M (the CUDA backend's fused GEMVs) and larger M (its unfused path);
// rope_attention against the two ops it fuses.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
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
// take its 16-byte path, with more tokens than one block row. model_heads: 32 q heads and 8 KV heads
// (llama-1b's and qwen3-8b's), whose 48 heads a token the CUDA kernel splits over blocks.
void check_rope_kv_store(Backend& be, bool qk_norm, Rng& rng, int64_t head_dim = 0,
                         bool model_heads = false) {
  const int64_t T = rng.randint(1, head_dim ? 40 : 12);
  const int64_t KVH = model_heads ? 8 : rng.randint(1, 4), H = model_heads ? 32 : KVH * rng.randint(1, 4);
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
  for (const int64_t D : {64, 128})
    for (const bool model_heads : {false, true}) {
      check_rope_kv_store(be, false, rng, D, model_heads);
      check_rope_kv_store(be, true, rng, D, model_heads);
    }
}

// The float64 reference of the add and norm before a sub-layer's first projection, rows of K: sum =
// residual + x, h = sum / sqrt(mean(sum^2) + eps) * g.
void add_rms_norm_reference(const std::vector<float>& r_h, const std::vector<float>& x_h,
                            const std::vector<float>& g_h, int64_t M, int64_t K, float eps,
                            std::vector<double>& sum, std::vector<double>& h) {
  sum.assign(size_t(M * K), 0.0);
  h.assign(size_t(M * K), 0.0);
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) {
      const double v = double(r_h[size_t(m * K + k)]) + double(x_h[size_t(m * K + k)]);
      sum[size_t(m * K + k)] = v;
      ss += v * v;
    }
    const double inv = 1.0 / std::sqrt(ss / double(K) + eps);
    for (int64_t k = 0; k < K; ++k)
      h[size_t(m * K + k)] = sum[size_t(m * K + k)] * inv * double(g_h[size_t(k)]);
  }
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
  std::vector<double> want_res, hk_all, want(size_t(M * N)), mag(size_t(M * N));
  add_rms_norm_reference(r_h, x_h, g_h, M, K, eps, want_res, hk_all);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias ? double(b_h[size_t(n)]) : 0.0, mg = std::abs(acc);
      for (int64_t k = 0; k < K; ++k) {
        const double hk = hk_all[size_t(m * K + k)];
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

// add_rms_norm_mlp against the ops it stands for on the same backend, bit for bit
// (add_rms_norm_linear into gate_up, swiglu of its halves, the down projection: on the GPU the decode
// GEMVs that pair gate and up rows, or compute the SwiGLU in the down projection, must sum and round
// as those ops do), and those ops' act and out against float64, each from the device's inputs: act =
// silu(gate) * up of the device's gate and up (add_rms_norm_linear's own accuracy is checked below),
// out = act @ w_down^T of the device's act (scale as in linear_test). (Against the exact projection
// instead, act carries gate's and up's roundings too, and over a few elements, M 2 F 8, its relative
// L2 error reached 1.008e-2 on the H200.)
void check_add_rms_norm_mlp(Backend& be, int64_t M, int64_t K, int64_t F, int64_t N, Rng& rng) {
  INFO("M " << M << " K " << K << " F " << F << " N " << N);
  const float eps = 1e-5f;
  auto r_h = rng.vec(size_t(M * K), 2.0f), x_h = rng.vec(size_t(M * K), 2.0f), g_h = rng.vec(size_t(K), 1.5f),
       wgu_h = rng.vec(size_t(2 * F * K), 0.5f), wd_h = rng.vec(size_t(N * F));
  auto res = to_device(be, r_h, {M, K}), x = to_device(be, x_h, {M, K}), g = to_device(be, g_h, {K}),
       wgu = to_device(be, wgu_h, {2 * F, K}), wd = to_device(be, wd_h, {N, F});
  wd_h = to_host(be, wd.t);  // as the device holds it
  auto res_out = poisoned(be, {M, K}), h = zeros(be, {M, K}), gu = zeros(be, {M, 2 * F}),
       act = zeros(be, {M, F}), out = poisoned(be, {M, N});
  be.add_rms_norm_mlp(res.t, x.t, g.t, eps, res_out.t, h.t, wgu.t, gu.t, act.t, wd.t, out.t);
  const auto got = to_host(be, out.t), got_res = to_host(be, res_out.t);
  // The unfused ops.
  auto res_out2 = poisoned(be, {M, K}), gu2 = poisoned(be, {M, 2 * F}), act2 = poisoned(be, {M, F}),
       out2 = poisoned(be, {M, N});
  be.add_rms_norm_linear(res.t, x.t, g.t, eps, res_out2.t, h.t, wgu.t, nullptr, gu2.t);
  be.swiglu(gu2.t.cols(0, F), gu2.t.cols(F, 2 * F), act2.t);
  be.linear(act2.t, wd.t, nullptr, out2.t);
  const auto unfused = to_host(be, out2.t), unfused_res = to_host(be, res_out2.t),
             act_h = to_host(be, act2.t), gu_h = to_host(be, gu2.t);
  REQUIRE(std::memcmp(got.data(), unfused.data(), got.size() * sizeof(float)) == 0);
  REQUIRE(std::memcmp(got_res.data(), unfused_res.data(), got_res.size() * sizeof(float)) == 0);
  std::vector<double> want_act(size_t(M * F)), want(size_t(M * N)), mag(size_t(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < F; ++n) {
      const double gate = gu_h[size_t(m * 2 * F + n)], up = gu_h[size_t(m * 2 * F + F + n)];
      want_act[size_t(m * F + n)] = gate / (1.0 + std::exp(-gate)) * up;
    }
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0, mg = 0;
      for (int64_t k = 0; k < F; ++k) {
        acc += double(act_h[size_t(m * F + k)]) * double(wd_h[size_t(n * F + k)]);
        mg += std::abs(double(act_h[size_t(m * F + k)]) * double(wd_h[size_t(n * F + k)]));
      }
      want[size_t(m * N + n)] = acc;
      mag[size_t(m * N + n)] = mg;
    }
  }
  require_close(
      be, act_h, want_act, [&](size_t i) { return std::abs(want_act[i]); }, Tol{1e-5, 1e-6});
  const double out_rounding = be.compute_dtype() == DType::bf16 ? std::ldexp(1.0, -8) / kBf16Tol.rtol : 0.0;
  require_close(
      be, unfused, want, [&](size_t i) { return mag[i] + out_rounding * std::abs(want[i]); },
      Tol{1e-5, 1e-6});
}

void add_rms_norm_mlp_matches_the_unfused_ops(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  // Decode-sized M (on the GPU: one row computes the SwiGLU in the down projection's GEMV where that
  // prologue is short, two to eight pair gate and up rows, adding and norming in the GEMV where that
  // prologue is short), long rows, a wide projection, the SwiGLU prologue about its bound at one row
  // (M x F against 16 x 512 threads), then past the GEMV, an F of odd fours (no pairs), and a long
  // down projection.
  for (int64_t M : {1, 2, 5, 8})
    check_add_rms_norm_mlp(be, M, 8 * rng.randint(1, 64), 8 * rng.randint(1, 40), rng.randint(1, 300), rng);
  check_add_rms_norm_mlp(be, rng.randint(1, 8), 8 * rng.randint(64, 200), 8 * rng.randint(1, 40),
                         rng.randint(1, 100), rng);
  check_add_rms_norm_mlp(be, rng.randint(1, 8), 8 * rng.randint(4, 32), 8 * rng.randint(150, 300),
                         rng.randint(1, 100), rng);
  check_add_rms_norm_mlp(be, 1, 8 * rng.randint(1, 8), 8 * rng.randint(960, 1088), rng.randint(1, 64), rng);
  check_add_rms_norm_mlp(be, rng.randint(9, 24), 8 * rng.randint(1, 64), 8 * rng.randint(1, 40),
                         rng.randint(1, 200), rng);
  check_add_rms_norm_mlp(be, rng.randint(1, 8), 8 * rng.randint(1, 64), 4 * (2 * rng.randint(1, 40) + 1),
                         rng.randint(1, 100), rng);
  // A down weight of 64 MiB in bf16 (on the GPU: the pairs at one row too, the down GEMV launched
  // plainly after them).
  for (int64_t M : {1, 3}) check_add_rms_norm_mlp(be, M, 8 * rng.randint(2, 8), 8192, 4096, rng);
  // A gate_up of 530-792 16-row tiles, 265-396 blocks: on the H200 (132 multiprocessors) the pairs
  // at two rows are one wave of 3 blocks a multiprocessor but not of 2, so they take the GEMV held
  // to fewer registers (gpu/waves.h).
  for (int64_t M : {1, 2})
    check_add_rms_norm_mlp(be, M, 8 * rng.randint(2, 64), 8 * rng.randint(265, 396), rng.randint(1, 100),
                           rng);
}

// rope_attention against rope_kv_store then paged_attention on the same backend, over one step of
// S sequences: decode (one query each, which the CUDA backend runs as one kernel that norms and
// rotates q and the step's K itself) or query runs of up to 20 (its fallback to the two ops); q/k/v
// column slices of one qkv buffer (rows padded by 0 or 8 elements), a random paged cache, the grid
// sometimes sized for a longer context than the step's (a graph's). The output and both caches must
// be the same bits; the two-op path is itself checked against float64 (attention_test.cpp and
// rope_kv_store above).
void check_rope_attention(Backend& be, Rng& rng, int64_t D, int64_t group, bool qk_norm, bool decode) {
  const int64_t KVH = std::vector<int64_t>{1, 2, 3, 4, 8}[size_t(rng.randint(0, 4))], H = KVH * group,
                S = rng.randint(1, 5);
  const int ps = std::vector<int>{16, 1, 3}[size_t(rng.randint(0, 2))];
  const int64_t max_pos = 1200, ld = (H + 2 * KVH) * D + 8 * rng.randint(0, 1);
  const float eps = 1e-6f, scale = 1.0f / std::sqrt(float(D));
  std::vector<int32_t> kv_len, q_start{0};
  int max_kv = 0, max_q = 0, pages_needed = 0, max_pages = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int n = rng.randint(1, rng.randint(0, 1) ? 40 : 700);
    const int q = decode ? 1 : rng.randint(1, std::min(n, 20));
    kv_len.push_back(n);
    q_start.push_back(q_start.back() + q);
    max_kv = std::max(max_kv, n);
    max_q = std::max(max_q, q);
    pages_needed += (n + ps - 1) / ps;
    max_pages = std::max(max_pages, (n + ps - 1) / ps);
  }
  const int64_t T = q_start.back(), n_pages = pages_needed + 3, n_slots = n_pages * ps;
  INFO("S " << S << " T " << T << " H " << H << " KVH " << KVH << " D " << D << " page_size " << ps
            << " qk_norm " << qk_norm << " decode " << decode);
  std::vector<int32_t> perm(static_cast<size_t>(n_pages)), page_table(size_t(S * max_pages), 0);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen);
  std::vector<int32_t> positions, slots;
  size_t next = 0;
  for (int64_t s = 0; s < S; ++s) {
    for (int p = 0; p < (kv_len[size_t(s)] + ps - 1) / ps; ++p)
      page_table[size_t(s * max_pages + p)] = perm[next++];
    for (int i = q_start[size_t(s)]; i < q_start[size_t(s) + 1]; ++i) {
      const int pos = kv_len[size_t(s)] - (q_start[size_t(s) + 1] - i);
      positions.push_back(pos);
      slots.push_back(page_table[size_t(s * max_pages + pos / ps)] * ps + pos % ps);
    }
  }
  auto qkv_h = rng.vec(size_t(T * ld), 2.0f);
  auto kc_h = rng.vec(size_t(n_slots * KVH * D)), vc_h = rng.vec(kc_h.size());
  auto qn_h = rng.vec(size_t(D), 1.5f), kn_h = rng.vec(size_t(D), 1.5f);
  auto cs = rope_table(max_pos, D);
  auto qn = to_device(be, qn_h, {D});
  auto kn = to_device(be, kn_h, {D});
  auto table = to_device(be, cs, {max_pos, D}, DType::f32);
  auto pos_t = to_device(be, positions, {T});
  auto slot_t = to_device(be, slots, {T});
  auto qs_t = to_device(be, q_start, {S + 1});
  auto kl_t = to_device(be, kv_len, {S});
  auto pt_t = to_device(be, page_table, {S, max_pages});
  AttentionBatch batch{qs_t.t, kl_t.t, pt_t.t, int(S), max_pages, ps, max_q, max_kv};
  if (rng.randint(0, 1)) batch.max_kv_len = int(max_pos);  // a graph's grid, sized for the longest context
  batch.num_decode_seqs = decode ? int(S) : 0;
  // Two copies of everything the op writes: the fused op on one, the two ops on the other.
  struct Run {
    DeviceTensor qkv, k_cache, v_cache, out;
  };
  std::vector<Run> runs;
  for (int r = 0; r < 2; ++r)
    runs.push_back(Run{to_device(be, qkv_h, {T, ld}), to_device(be, kc_h, {n_slots, KVH, D}),
                       to_device(be, vc_h, {n_slots, KVH, D}), poisoned(be, {T, H, D})});
  auto view = [&](const Tensor& qkv, int64_t col, int64_t heads) {
    Tensor t(offset(qkv, col), qkv.dtype, {T, heads, D}, qkv.device);
    t.stride = {ld, D, 1, 0};
    return t;
  };
  const Tensor* qnp = qk_norm ? &qn.t : nullptr;
  const Tensor* knp = qk_norm ? &kn.t : nullptr;
  {
    const Run& r = runs[0];
    be.rope_attention(view(r.qkv.t, 0, H), view(r.qkv.t, H * D, KVH), view(r.qkv.t, (H + KVH) * D, KVH), qnp,
                      knp, eps, pos_t.t, table.t, slot_t.t, r.k_cache.t, r.v_cache.t, batch, scale, r.out.t);
  }
  {
    const Run& r = runs[1];
    const Tensor q = view(r.qkv.t, 0, H);
    be.rope_kv_store(q, view(r.qkv.t, H * D, KVH), view(r.qkv.t, (H + KVH) * D, KVH), qnp, knp, eps, pos_t.t,
                     table.t, slot_t.t, r.k_cache.t, r.v_cache.t);
    be.paged_attention(q, r.k_cache.t, r.v_cache.t, batch, scale, r.out.t);
  }
  const auto out = to_host(be, runs[0].out.t), out2 = to_host(be, runs[1].out.t);
  REQUIRE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));
  REQUIRE(std::memcmp(out.data(), out2.data(), out.size() * sizeof(float)) == 0);
  REQUIRE(to_host(be, runs[0].k_cache.t) == to_host(be, runs[1].k_cache.t));
  REQUIRE(to_host(be, runs[0].v_cache.t) == to_host(be, runs[1].v_cache.t));
}

void rope_attention_matches_the_two_ops(Backend& be) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);
  for (const int64_t D : {64, 128})
    for (const int64_t group : {1, 2, 4, 8})
      for (const bool qk_norm : {false, true}) check_rope_attention(be, rng, D, group, qk_norm, true);
  // Steps the CUDA backend does not fuse: query runs, a head_dim its decode kernel lacks, a group of 3.
  check_rope_attention(be, rng, 64, 4, true, false);
  check_rope_attention(be, rng, 128, 2, false, false);
  check_rope_attention(be, rng, 96, 2, true, true);
  check_rope_attention(be, rng, 64, 3, false, true);
}
}  // namespace

ASTRAI_BACKEND_TEST(
    "rope_attention equals rope_kv_store then paged_attention bit for bit, decode steps and not",
    rope_attention_matches_the_two_ops)
ASTRAI_BACKEND_TEST("add_rms_norm_mlp equals add_rms_norm_linear, swiglu and linear bit for bit, and float64",
                    add_rms_norm_mlp_matches_the_unfused_ops)
ASTRAI_BACKEND_TEST("add_rms_norm_linear equals residual + x, RMSNorm and the projection in float64",
                    add_rms_norm_linear_matches_the_unfused_ops)
ASTRAI_BACKEND_TEST("rope_kv_store equals q/k norm, RoPE and kv_store in float64, with and without the norms",
                    rope_kv_store_matches_the_unfused_ops)

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
