// The CUDA training ops (bf16 activations, f32 parameter gradients) against the CPU backend's (f32)
// on the same fresh random inputs: the inputs are drawn, rounded to bf16 on the host, and the CPU
// runs on exactly those values, so the difference is the GPU's bf16 outputs and f32 summation
// order. Tolerance: ||gpu - cpu|| / ||cpu|| over each output, 1e-2 for bf16 outputs (a few
// roundings at 2^-9 each) and 2e-3 for f32 outputs computed from bf16 inputs; f32-only ops
// (cross_entropy, adamw, sum_squares) 1e-5. Inputs are strided column slices where the model
// passes slices. Each case skips itself (with a warning) without a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>

#include "backend/op_test_util.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

constexpr double kBf16Out = 1e-2;  // outputs stored in bf16
constexpr double kF32Out = 2e-3;   // f32 outputs (parameter gradients, rstd, lse) from bf16 inputs
constexpr double kF32Op = 1e-5;    // ops on f32 data on both sides

// The two backends, or nothing (with a warning) when no GPU is visible.
struct Pair {
  std::unique_ptr<Backend> cpu, gpu;
};
std::optional<Pair> backends() {
  auto gpu = gpu_backend();
  if (!gpu) {
    WARN("no CUDA GPU visible: skipped");
    return std::nullopt;
  }
  return Pair{cpu_backend(), std::move(gpu)};
}

// One input on both backends: uploaded to the GPU as bf16 (rounding `host` in place) and to the
// CPU as f32 from the rounded values.
struct Both {
  DeviceTensor cpu, gpu;
};
Both both(Pair& p, std::vector<float> host, std::initializer_list<int64_t> dims,
          DType gpu_dtype = DType::bf16) {
  Both b;
  b.gpu = to_device(*p.gpu, host, dims, gpu_dtype);
  b.cpu = to_device(*p.cpu, host, dims, DType::f32);
  return b;
}
Both both_i32(Pair& p, const std::vector<int32_t>& host, std::initializer_list<int64_t> dims) {
  return {to_device(*p.cpu, host, dims), to_device(*p.gpu, host, dims)};
}

// A [rows, width] view at column `col` of a [rows, ld] tensor (or [rows, heads, d] when heads > 0).
Tensor cols(const DeviceTensor& d, int64_t rows, int64_t ld, int64_t col, int64_t width, int64_t heads = 0) {
  Tensor t(offset(d.t, col), d.t.dtype, {rows, width}, d.t.device);
  t.stride = {ld, 1, 0, 0};
  if (heads > 0) {
    t = Tensor(offset(d.t, col), d.t.dtype, {rows, heads, width / heads}, d.t.device);
    t.stride = {ld, width / heads, 1, 0};
  }
  return t;
}

double rel(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::isfinite(got[i]));
  }
  return rel_l2(got, std::vector<double>(want.begin(), want.end()));
}

// Compares one output of the two backends.
void same(Pair& p, const Both& t, double tol, const char* what) {
  const double e = rel(to_host(*p.gpu, t.gpu.t), to_host(*p.cpu, t.cpu.t));
  std::printf("  %-40s rel l2 %.2e (tol %.0e)\n", what, e, tol);
  INFO(what << ": relative L2 error " << e);
  CHECK(e < tol);
}

TEST_CASE("cuda gemm matches the cpu's for every transpose, alpha and beta (bf16 in, f32 and bf16 out)",
          "[gpu]") {
  auto p = backends();
  if (!p) return;
  Rng rng(fresh_seed());
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t M = rng.randint(1, 70), N = rng.randint(1, 90), K = rng.randint(8, 130);
      INFO("trans_a " << ta << " trans_b " << tb << " M " << M << " N " << N << " K " << K);
      // a is a column slice (row stride K + 8) when not transposed.
      const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, a_ld = ta ? a_cols : a_cols + 8;
      Both a = both(*p, rng.vec(size_t(a_rows * a_ld)), {a_rows, a_ld});
      Both b = both(*p, rng.vec(size_t(K * N)), {tb ? N : K, tb ? K : N});
      const float alpha = rng.uniform(0.5f, 2.0f), beta = (ta + tb) % 2 ? 1.0f : 0.0f;
      Both c = both(*p, rng.vec(size_t(M * N)), {M, N}, DType::f32);
      p->cpu->gemm(cols(a.cpu, a_rows, a_ld, 0, a_cols), ta, b.cpu.t, tb, alpha, beta, c.cpu.t);
      p->gpu->gemm(cols(a.gpu, a_rows, a_ld, 0, a_cols), ta, b.gpu.t, tb, alpha, beta, c.gpu.t);
      same(*p, c, kF32Out, "gemm f32 out");
      Both c16 = both(*p, rng.vec(size_t(M * N)), {M, N});
      p->cpu->gemm(cols(a.cpu, a_rows, a_ld, 0, a_cols), ta, b.cpu.t, tb, alpha, 0.0f, c16.cpu.t);
      p->gpu->gemm(cols(a.gpu, a_rows, a_ld, 0, a_cols), ta, b.gpu.t, tb, alpha, 0.0f, c16.gpu.t);
      same(*p, c16, kBf16Out, "gemm bf16 out");
    }
}

TEST_CASE("cuda linear_backward matches the cpu's (dx, accumulated dw and dbias; f32 dy of the loss)",
          "[gpu]") {
  auto p = backends();
  if (!p) return;
  Rng rng(fresh_seed());
  const int64_t M = rng.randint(20, 300), N = rng.randint(16, 200), K = rng.randint(16, 160);
  INFO("M " << M << " N " << N << " K " << K);
  for (DType dy_type : {DType::bf16, DType::f32}) {
    Both dy = both(*p, rng.vec(size_t(M * N)), {M, N}, dy_type);
    Both x = both(*p, rng.vec(size_t(M * K)), {M, K});
    Both w = both(*p, rng.vec(size_t(N * K)), {N, K});
    Both dx = both(*p, rng.vec(size_t(M * K)), {M, K});
    Both dw = both(*p, rng.vec(size_t(N * K)), {N, K}, DType::f32);
    Both db = both(*p, rng.vec(size_t(N)), {N}, DType::f32);
    p->cpu->linear_backward(dy.cpu.t, x.cpu.t, w.cpu.t, &dx.cpu.t, dw.cpu.t, &db.cpu.t);
    p->gpu->linear_backward(dy.gpu.t, x.gpu.t, w.gpu.t, &dx.gpu.t, dw.gpu.t, &db.gpu.t);
    same(*p, dx, kBf16Out, "linear_backward dx");
    same(*p, dw, kF32Out, "linear_backward dw (accumulated)");
    same(*p, db, kF32Out, "linear_backward dbias (accumulated)");
  }
}

TEST_CASE("cuda rms_norm_train and rms_norm_backward match the cpu's (accumulated and in place)", "[gpu]") {
  auto p = backends();
  if (!p) return;
  Rng rng(fresh_seed());
  // D a multiple of 8 (the 16-byte kernels) or not (the one-element ones).
  for (const int64_t D : {8 * rng.randint(2, 130), 8 * rng.randint(2, 130) + rng.randint(1, 7)}) {
    const int64_t R = rng.randint(1, 400);
    INFO("R " << R << " D " << D);
    Both x = both(*p, rng.vec(size_t(R * D), 3.0f), {R, D});
    Both w = both(*p, rng.vec(size_t(D)), {D});
    Both out = both(*p, std::vector<float>(size_t(R * D), 0.0f), {R, D});
    Both rstd = both(*p, std::vector<float>(size_t(R), 0.0f), {R}, DType::f32);
    p->cpu->rms_norm_train(x.cpu.t, w.cpu.t, 1e-5f, out.cpu.t, rstd.cpu.t);
    p->gpu->rms_norm_train(x.gpu.t, w.gpu.t, 1e-5f, out.gpu.t, rstd.gpu.t);
    same(*p, out, kBf16Out, "rms_norm_train out");
    same(*p, rstd, kF32Out, "rms_norm_train rstd");
    for (bool accumulate : {true, false}) {
      Both dy = both(*p, rng.vec(size_t(R * D)), {R, D});
      Both dx = both(*p, rng.vec(size_t(R * D)), {R, D});
      Both dw = both(*p, rng.vec(size_t(D)), {D}, DType::f32);
      // Not accumulating, dx is dy itself (the q/k norm backward runs in place).
      const Both& dx_t = accumulate ? dx : dy;
      p->cpu->rms_norm_backward(dy.cpu.t, x.cpu.t, w.cpu.t, rstd.cpu.t, dx_t.cpu.t, dw.cpu.t, accumulate);
      p->gpu->rms_norm_backward(dy.gpu.t, x.gpu.t, w.gpu.t, rstd.gpu.t, dx_t.gpu.t, dw.gpu.t, accumulate);
      same(*p, dx_t, kBf16Out,
           accumulate ? "rms_norm_backward dx (accumulated)" : "rms_norm_backward dx (in place)");
      same(*p, dw, kF32Out, "rms_norm_backward dw");
    }
  }
}

TEST_CASE("cuda linear_residual matches the cpu's (the residual added in the GEMM's epilogue)", "[gpu]") {
  auto p = backends();
  if (!p) return;
  Rng rng(fresh_seed());
  const int64_t M = rng.randint(20, 300), N = 8 * rng.randint(2, 40), K = 8 * rng.randint(2, 40);
  INFO("M " << M << " N " << N << " K " << K);
  Both x = both(*p, rng.vec(size_t(M * K)), {M, K});
  Both w = both(*p, rng.vec(size_t(N * K)), {N, K});
  Both res = both(*p, rng.vec(size_t(M * N), 4.0f), {M, N});
  Both out = both(*p, std::vector<float>(size_t(M * N), 0.0f), {M, N});
  p->cpu->linear_residual(x.cpu.t, w.cpu.t, nullptr, res.cpu.t, out.cpu.t);
  p->gpu->linear_residual(x.gpu.t, w.gpu.t, nullptr, res.gpu.t, out.gpu.t);
  same(*p, out, kBf16Out, "linear_residual out");
}

TEST_CASE("cuda embedding_backward matches the cpu's (repeated ids add up)", "[gpu]") {
  auto p = backends();
  if (!p) return;
  Rng rng(fresh_seed());
  const int64_t V = rng.randint(5, 60), H = rng.randint(1, 300), T = rng.randint(1, 500);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& id : ids) id = rng.randint(0, int(V) - 1);
  Both dout = both(*p, rng.vec(size_t(T * H)), {T, H});
  Both idt = both_i32(*p, ids, {T});
  Both dtable = both(*p, rng.vec(size_t(V * H)), {V, H}, DType::f32);
  p->cpu->embedding_backward(dout.cpu.t, idt.cpu.t, dtable.cpu.t);
  p->gpu->embedding_backward(dout.gpu.t, idt.gpu.t, dtable.gpu.t);
  same(*p, dtable, kF32Out, "embedding_backward dtable");
}

TEST_CASE("cuda rope_backward and swiglu_backward match the cpu's on column slices", "[gpu]") {
  auto p = backends();
  if (!p) return;
  Rng rng(fresh_seed());
  const int64_t T = rng.randint(1, 200), heads = rng.randint(1, 6), D = 2 * rng.randint(2, 64), max_pos = 300;
  const int64_t ld = heads * D + 24;
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (auto& x : pos) x = rng.randint(0, int(max_pos) - 1);
  Both cs = both(*p, rng.vec(size_t(max_pos * D)), {max_pos, D}, DType::f32);
  Both post = both_i32(*p, pos, {T});
  Both dx = both(*p, rng.vec(size_t(T * ld)), {T, ld});
  p->cpu->rope_backward(cols(dx.cpu, T, ld, 8, heads * D, heads), post.cpu.t, cs.cpu.t);
  p->gpu->rope_backward(cols(dx.gpu, T, ld, 8, heads * D, heads), post.gpu.t, cs.gpu.t);
  same(*p, dx, kBf16Out, "rope_backward dx");

  for (const int64_t F : {8 * rng.randint(1, 40), rng.randint(1, 300)}) {  // 16-byte rows or any
    INFO("F " << F);
    Both gu = both(*p, rng.vec(size_t(T * 2 * F), 4.0f), {T, 2 * F});
    Both dout = both(*p, rng.vec(size_t(T * F)), {T, F});
    Both dgu = both(*p, std::vector<float>(size_t(T * 2 * F), 0.0f), {T, 2 * F});
    for (auto side : {&Both::cpu, &Both::gpu}) {
      Backend& be = side == &Both::cpu ? *p->cpu : *p->gpu;
      be.swiglu_backward((dout.*side).t, cols(gu.*side, T, 2 * F, 0, F), cols(gu.*side, T, 2 * F, F, F),
                         cols(dgu.*side, T, 2 * F, 0, F), cols(dgu.*side, T, 2 * F, F, F));
    }
    same(*p, dgu, kBf16Out, "swiglu_backward dgate|dup");
  }
}

// Attention over packed documents in a batch of rows: kv_begin[t] = row start + document start.
void check_attention(Pair& p, Rng& rng, int64_t heads, int64_t kv_heads, int64_t D) {
  const int64_t rows = rng.randint(1, 3), T = rng.randint(1, 150), N = rows * T;
  INFO("rows " << rows << " T " << T << " heads " << heads << "/" << kv_heads << " D " << D);
  std::vector<int32_t> kvb(static_cast<size_t>(N));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t doc = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0 && rng.randint(0, 40) == 0) doc = t;
      kvb[size_t(r * T + t)] = int32_t(r * T + doc);
    }
  }
  const int64_t qd = heads * D, kvd = kv_heads * D, ld = qd + 2 * kvd;
  Both qkv = both(p, rng.vec(size_t(N * ld), 2.0f), {N, ld});
  Both begin = both_i32(p, kvb, {N});
  Both out = both(p, std::vector<float>(size_t(N * qd), 0.0f), {N, qd});
  Both lse = both(p, std::vector<float>(size_t(N * heads), 0.0f), {N, heads}, DType::f32);
  const float scale = float(1.0 / std::sqrt(double(D)));
  for (auto side : {&Both::cpu, &Both::gpu}) {
    Backend& be = side == &Both::cpu ? *p.cpu : *p.gpu;
    be.attention_train(cols(qkv.*side, N, ld, 0, qd, heads), cols(qkv.*side, N, ld, qd, kvd, kv_heads),
                       cols(qkv.*side, N, ld, qd + kvd, kvd, kv_heads), (begin.*side).t, scale,
                       cols(out.*side, N, qd, 0, qd, heads), (lse.*side).t);
  }
  same(p, out, kBf16Out, "attention_train out");
  same(p, lse, kF32Out, "attention_train lse");
  // The backward from the GPU's own forward output on both sides (the CPU reads it as f32).
  std::vector<float> out_gpu = to_host(*p.gpu, out.gpu.t);
  Both o = both(p, out_gpu, {N, qd});
  Both dout = both(p, rng.vec(size_t(N * qd)), {N, qd});
  Both dqkv = both(p, std::vector<float>(size_t(N * ld), 0.0f), {N, ld});
  for (auto side : {&Both::cpu, &Both::gpu}) {
    Backend& be = side == &Both::cpu ? *p.cpu : *p.gpu;
    be.attention_train_backward(
        cols(dout.*side, N, qd, 0, qd, heads), cols(qkv.*side, N, ld, 0, qd, heads),
        cols(qkv.*side, N, ld, qd, kvd, kv_heads), cols(qkv.*side, N, ld, qd + kvd, kvd, kv_heads),
        (begin.*side).t, cols(o.*side, N, qd, 0, qd, heads), (lse.*side).t, scale,
        cols(dqkv.*side, N, ld, 0, qd, heads), cols(dqkv.*side, N, ld, qd, kvd, kv_heads),
        cols(dqkv.*side, N, ld, qd + kvd, kvd, kv_heads));
  }
  same(p, dqkv, 2 * kBf16Out, "attention_train_backward dq|dk|dv");
}

TEST_CASE("cuda attention_train and its backward match the cpu's (GQA, packed documents, head_dim 32..128)",
          "[gpu]") {
  auto p = backends();
  if (!p) return;
  Rng rng(fresh_seed());
  check_attention(*p, rng, 4, 2, 32);
  check_attention(*p, rng, 4, 1, 16);
  check_attention(*p, rng, 8, 8, 64);
  check_attention(*p, rng, 8, 2, 64);  // llama-1b's 4:1 grouping on the tensor-core path
  check_attention(*p, rng, 4, 2, 128);
  check_attention(*p, rng, 2, 1, 96);
}

TEST_CASE("cuda cross_entropy matches the cpu's (label smoothing, ignored rows; dz in place or bf16 apart)",
          "[gpu]") {
  auto p = backends();
  if (!p) return;
  Rng rng(fresh_seed());
  const int64_t R = rng.randint(1, 80);
  // A multiple of 4 wide (16-byte loads) and any width.
  for (const int64_t V : {4 * rng.randint(1, 2000), rng.randint(2, 5000)}) {
    INFO("R " << R << " V " << V);
    std::vector<int32_t> y(static_cast<size_t>(R));
    for (auto& t : y) t = rng.randint(0, 5) == 0 ? Backend::kIgnoreIndex : rng.randint(0, int(V) - 1);
    for (float e : {0.0f, 0.1f}) {
      Both z = both(*p, rng.vec(size_t(R * V), 8.0f), {R, V}, DType::f32);
      Both t = both_i32(*p, y, {R});
      Both loss = both(*p, std::vector<float>(size_t(R), -1.0f), {R}, DType::f32);
      // bf16 dz apart from the logits on the GPU (what the model's head backward reads), f32 on the cpu.
      Both dz = both(*p, std::vector<float>(size_t(R * V), 0.0f), {R, V});
      p->cpu->cross_entropy(z.cpu.t, t.cpu.t, e, 0.37f, loss.cpu.t, dz.cpu.t);
      p->gpu->cross_entropy(z.gpu.t, t.gpu.t, e, 0.37f, loss.gpu.t, dz.gpu.t);
      same(*p, loss, kF32Op, "cross_entropy losses (dz apart)");
      same(*p, dz, kBf16Out, "cross_entropy bf16 dz");
      p->cpu->cross_entropy(z.cpu.t, t.cpu.t, e, 0.37f, loss.cpu.t, z.cpu.t);
      p->gpu->cross_entropy(z.gpu.t, t.gpu.t, e, 0.37f, loss.gpu.t, z.gpu.t);
      same(*p, loss, kF32Op, "cross_entropy losses");
      same(*p, z, kF32Op, "cross_entropy dz in place");
    }
  }
}

TEST_CASE("cuda adamw and sum_squares match the cpu's", "[gpu]") {
  auto p = backends();
  if (!p) return;
  Rng rng(fresh_seed());
  const int64_t n = rng.randint(2, 300000), n2 = rng.randint(1, 1000);
  Both pv = both(*p, rng.vec(size_t(n)), {n}, DType::f32);
  Both g = both(*p, rng.vec(size_t(n)), {n}, DType::f32);
  Both m = both(*p, rng.vec(size_t(n), 0.1f), {n}, DType::f32);
  std::vector<float> v0 = rng.vec(size_t(n), 0.01f);
  for (float& x : v0) x = std::abs(x);
  Both v = both(*p, v0, {n}, DType::f32);
  AdamWStep s;
  s.lr = 1e-3f;
  s.weight_decay = 0.1f;
  s.grad_scale = 0.5f;
  s.t = 7;
  p->cpu->adamw(pv.cpu.t, g.cpu.t, m.cpu.t, v.cpu.t, s);
  p->gpu->adamw(pv.gpu.t, g.gpu.t, m.gpu.t, v.gpu.t, s);
  same(*p, pv, kF32Op, "adamw p");
  same(*p, m, kF32Op, "adamw m");
  same(*p, v, kF32Op, "adamw v");
  // Again on the tensors from their second element (not 16-byte aligned: one element per access).
  auto tail = [&](const DeviceTensor& d) { return Tensor(offset(d.t, 1), DType::f32, {n - 1}, d.t.device); };
  s.t = 8;
  p->cpu->adamw(tail(pv.cpu), tail(g.cpu), tail(m.cpu), tail(v.cpu), s);
  p->gpu->adamw(tail(pv.gpu), tail(g.gpu), tail(m.gpu), tail(v.gpu), s);
  same(*p, pv, kF32Op, "adamw p (unaligned)");
  same(*p, m, kF32Op, "adamw m (unaligned)");
  same(*p, v, kF32Op, "adamw v (unaligned)");
  Both g2 = both(*p, rng.vec(size_t(n2)), {n2}, DType::f32);
  const double want = p->cpu->sum_squares({g.cpu.t, g2.cpu.t});
  const double got = p->gpu->sum_squares({g.gpu.t, g2.gpu.t});
  CHECK(got == Approx(want).epsilon(1e-12));
  // Reproducible: the same bits again.
  CHECK(p->gpu->sum_squares({g.gpu.t, g2.gpu.t}) == got);
}

}  // namespace
}  // namespace astrai::test
