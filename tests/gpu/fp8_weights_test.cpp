// fp8 checkpoints on the CUDA backend: the e4m3 matrices and their scales go up as stored and widen
// to bf16 there (Backend::dequantize), in chunks of whole blocks of rows through the loader's
// staging buffer; the logits equal, bit for bit, those of the f32 checkpoint holding the widened
// values (converted to bf16 on load: the same rounding of the same f32 products). Kept in fp8
// (LoadOptions::keep_fp8): linear on fp8 Weights against float64, the fused decode ops against their
// unfused sequence, and a kept checkpoint's logits against the widened copy's. Skips itself (with
// a warning) without a GPU.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "backend/op_test_util.h"
#include "gpu/cuda_backend.h"
#include "model/fp8_check.h"

namespace astrai::test {

TEST_CASE("an fp8 checkpoint on cuda gives the logits of its widened copy bit for bit", "[gpu]") {
  if (!gpu::register_cuda_backend()) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  auto cuda = [] { return make_backend(BackendOptions{Device::cuda, 0, 0}).value(); };
  check_fp8_matches_widened(qwen3_style_config(), {48, 40, {0, 1, 2}}, cuda);
  check_fp8_matches_widened(preset_config("tiny").value(), {16, 8, {0, 1, 2}}, cuda);
  // Matrices past the loader's 16M-element staging round trip: gate/up 12,288 x 2,048 in two
  // rounds of whole 128-row blocks, down 2,048 x 12,288 in two.
  ModelConfig big = preset_config("tiny").value();
  big.num_layers = 1;
  big.hidden_size = 2048;
  big.num_heads = 16;
  big.num_kv_heads = 4;
  big.head_dim = 128;
  big.intermediate_size = 12288;
  check_fp8_matches_widened(big, {128, 128, {1, 2}}, cuda);
}

namespace {

// An fp8 weight on the device as linear takes it, and its values q * scale in float64.
struct Fp8Weight {
  Buffer q;
  DeviceTensor s;
  Weight w;
  std::vector<double> wide;  // [N, K]
};

// Random e4m3 bytes (every finite one) and f32 scales over 2^-12 .. 2^2, in blocks of br x bc.
Fp8Weight fp8_weight(Backend& be, int64_t N, int64_t K, int64_t br, int64_t bc, Rng& rng) {
  const int64_t sr = (N + br - 1) / br, sc = (K + bc - 1) / bc;
  std::vector<uint8_t> bytes(size_t(N * K));
  for (auto& b : bytes) {
    do {
      b = uint8_t(rng.randint(0, 255));
    } while ((b & 0x7f) == 0x7f);  // NaN
  }
  std::vector<float> scales(size_t(sr * sc));
  for (auto& v : scales) v = std::ldexp(rng.uniform(1.0f, 2.0f), rng.randint(-12, 1));
  Fp8Weight f;
  f.q = be.alloc(bytes.size());
  f.w = Weight(f.q.as(DType::fp8_e4m3, {N, K}));
  be.upload(f.w, bytes.data());
  f.s = to_device(be, scales, {sr, sc}, DType::f32);
  f.w.scale = f.s.t;
  f.w.block_rows = br;
  f.w.block_cols = bc;
  f.wide.resize(bytes.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      f.wide[size_t(n * K + k)] =
          double(fp8_e4m3_to_f32(bytes[size_t(n * K + k)])) * double(scales[size_t((n / br) * sc + k / bc)]);
  return f;
}

// out = x @ w^T (+ bias) on cuda against float64 over the exact weights q * scale, per element:
// |got - want| <= tol * sum_k |x_k w_k| + 2^-8 |want| (out's rounding when bf16) + 1e-6. The GEMV
// multiplies the exact weights, so its bound is f32 accumulation's (tol 1e-5); a GEMM runs on
// the weights widened to bf16, each off by up to 2^-9 of itself (tol 2^-9).
void check_fp8_linear(Backend& be, int64_t M, int64_t K, int64_t N, int64_t br, int64_t bc, bool with_bias,
                      DType out_dtype, Rng& rng) {
  Fp8Weight f = fp8_weight(be, N, K, br, bc, rng);
  auto xh = rng.vec(size_t(M * K));
  auto bh = rng.vec(size_t(N));
  auto x = to_device(be, xh, {M, K});
  auto b = to_device(be, bh, {N}, out_dtype);
  auto out = poisoned(be, {M, N}, out_dtype);
  be.linear(x.t, f.w, with_bias ? &b.t : nullptr, out.t);
  const auto got = to_host(be, out.t);
  const bool gemv = M <= 8 && (bc % 128 == 0 || bc >= K);
  const double tol = gemv ? 1e-5 : std::ldexp(1.0, -9),
               out_round = out_dtype == DType::bf16 ? 1.0 / 256 : 0.0;
  INFO("M " << M << " K " << K << " N " << N << " blocks " << br << " x " << bc << " out "
            << dtype_name(out_dtype) << (gemv ? " (GEMV)" : " (GEMM on the widened copy)"));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double want = with_bias ? bh[size_t(n)] : 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(xh[size_t(m * K + k)]) * f.wide[size_t(n * K + k)];
        want += p;
        mag += std::abs(p);
      }
      const double g = got[size_t(m * N + n)];
      INFO("m " << m << " n " << n << " got " << g << " want " << want);
      REQUIRE(std::abs(g - want) <= tol * mag + out_round * std::abs(want) + 1e-6);
    }
}

}  // namespace

TEST_CASE("linear and the fused decode ops on fp8 weights on cuda", "[gpu]") {
  auto be = gpu_backend();
  if (!be) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  Rng rng(seed);

  SECTION("linear against float64 over the exact weights") {
    // Qwen3-FP8's 128 x 128 blocks (K and N they do not divide too), one scale a row, one for all,
    // blocks of 256 columns; blocks of 64 columns, which the GEMV does not take (a GEMM on the
    // widened copy at every M); 1 to 8 rows (the GEMV) and more (the widened GEMM).
    struct Shape {
      int64_t K, N, br, bc;
    };
    const Shape shapes[] = {{1024, 384, 128, 128}, {1000, 200, 128, 128}, {512, 300, 1, 512},
                            {768, 96, 96, 768},    {2048, 64, 128, 256},  {256, 40, 16, 64}};
    for (const Shape& s : shapes)
      for (int64_t M : {1, 2, 3, 8, 9, 33}) {
        const DType out_dtype = M == 3 ? DType::f32 : DType::bf16;
        check_fp8_linear(*be, M, s.K, s.N, s.br, s.bc, M % 2 == 1, out_dtype, rng);
      }
  }

  SECTION("add_rms_norm_linear and add_rms_norm_mlp equal their unfused sequence bit for bit") {
    const int64_t H = 512, F = 1024;
    Fp8Weight qkv = fp8_weight(*be, 768, H, 128, 128, rng),
              gate_up = fp8_weight(*be, 2 * F, H, 128, 128, rng), down = fp8_weight(*be, H, F, 128, 128, rng);
    auto norm_h = rng.vec(size_t(H), 0.3f);
    for (auto& v : norm_h) v += 1.0f;
    auto norm = to_device(*be, norm_h, {H});
    for (int64_t M : {1, 2, 5, 8}) {
      INFO("M " << M);
      auto rh = rng.vec(size_t(M * H)), xh = rng.vec(size_t(M * H));
      auto residual = to_device(*be, rh, {M, H}), x = to_device(*be, xh, {M, H});
      auto run_linear = [&](bool fused) {
        auto r_out = poisoned(*be, {M, H}), h = poisoned(*be, {M, H}), out = poisoned(*be, {M, 768});
        if (fused)
          be->add_rms_norm_linear(residual.t, x.t, norm.t, 1e-6f, r_out.t, h.t, qkv.w, nullptr, out.t);
        else
          be->Backend::add_rms_norm_linear(residual.t, x.t, norm.t, 1e-6f, r_out.t, h.t, qkv.w, nullptr,
                                           out.t);
        auto a = to_host(*be, r_out.t), o = to_host(*be, out.t);
        a.insert(a.end(), o.begin(), o.end());
        return a;
      };
      auto run_mlp = [&](bool fused) {
        auto r_out = poisoned(*be, {M, H}), h = poisoned(*be, {M, H}), gu = poisoned(*be, {M, 2 * F}),
             act = poisoned(*be, {M, F}), out = poisoned(*be, {M, H});
        if (fused)
          be->add_rms_norm_mlp(residual.t, x.t, norm.t, 1e-6f, r_out.t, h.t, gate_up.w, gu.t, act.t, down.w,
                               out.t);
        else
          be->Backend::add_rms_norm_mlp(residual.t, x.t, norm.t, 1e-6f, r_out.t, h.t, gate_up.w, gu.t, act.t,
                                        down.w, out.t);
        auto a = to_host(*be, r_out.t), o = to_host(*be, out.t);
        a.insert(a.end(), o.begin(), o.end());
        return a;
      };
      const auto lf = run_linear(true), lu = run_linear(false);
      REQUIRE(std::memcmp(lf.data(), lu.data(), lf.size() * sizeof(float)) == 0);
      const auto mf = run_mlp(true), mu = run_mlp(false);
      REQUIRE(std::memcmp(mf.data(), mu.data(), mf.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("an fp8 checkpoint kept in fp8 on cuda gives its widened copy's logits within bf16 tolerance",
          "[gpu]") {
  if (!gpu::register_cuda_backend()) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  auto cuda = [] { return make_backend(BackendOptions{Device::cuda, 0, 0}).value(); };
  // Blocks the GEMV reads (128 x 128), one scale a matrix or a row (stacked into one a row for
  // q/k/v and gate/up), and 48 x 40 blocks it does not (every step a GEMM on the widened copy).
  check_fp8_kept(qwen3_style_config(), {128, 128, {2}}, cuda);
  check_fp8_kept(preset_config("tiny").value(), {128, 128, {0, 1}}, cuda);
  check_fp8_kept(qwen3_style_config(), {48, 40, {2}}, cuda);
}

}  // namespace astrai::test
