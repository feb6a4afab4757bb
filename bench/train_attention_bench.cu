// Correctness and speed of the tensor-core training attention (gpu/train_attention_mma.cuh):
// attention_train (out, lse) and its backward (dq, dk, dv). CUDA-only: of the project it includes
// the kernel header, which needs nothing but CUDA and src/backend/rows.h, so it builds on a machine
// that has only nvcc.
//
//   nvcc -O3 -std=c++20 -I. -gencode=arch=compute_90a,code=sm_90a bench/train_attention_bench.cu \
//        -o train_attention_bench
//   ./train_attention_bench [--quick] [--check-only]
//
// 1. Checks every kernel configuration below against a float64 host reference on fresh random
//    inputs (q, k, v column slices of one qkv buffer as the model passes them, dq/dk/dv column
//    slices of one dqkv buffer; packed documents of random lengths; head_dim 64 and 128; GQA 4:1
//    and 1:1; lengths that are not multiples of the tiles): relative error ||gpu - ref|| / ||ref||
//    < 1e-2 for out, lse, dq, dk, dv, outputs poisoned with NaN beforehand; and that two runs of the
//    backward give the same bits.
// 2. Times forward and backward (delta + dq + dk/dv) at the llama-1b training shape (8 documents of
//    2,048 tokens, 32 heads, 8 KV heads, head_dim 64) and at head_dim 128, CUDA events, median of
//    the repetitions, TFLOP/s counting only the unmasked (causal) half: forward 4 * pairs * D * H,
//    backward 2.5 times that (FlashAttention's convention; the recomputed scores not counted).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "gpu/train_attention_mma.cuh"

namespace am = astrai::gpu::attention_mma;
using astrai::Rows;
using bf16 = __nv_bfloat16;
using astrai::bench::bf;
using astrai::bench::download_bf16;
using astrai::bench::median_ms;
using astrai::bench::rel_err;

namespace {

// ---- configurations under test -------------------------------------------------------------------
// Each kernel in several configurations (warps per block, blocks per SM asked of the register
// allocator, query rows per dk/dv step); the first of each list is train_attention_mma.cuh's Config.

using FwdFn = cudaError_t (*)(cudaStream_t, const Rows&, const Rows&, const Rows&, const int32_t*,
                              const am::Geo&, const Rows&, float*);
using DqFn = cudaError_t (*)(cudaStream_t, const Rows&, const Rows&, const Rows&, const Rows&, const int32_t*,
                             const float*, const float*, const am::Geo&, const Rows&);
using DkdvFn = cudaError_t (*)(cudaStream_t, const Rows&, const Rows&, const Rows&, const Rows&,
                               const int32_t*, const float*, const float*, const am::Geo&, const Rows&,
                               const Rows&);
using DeltaFn = cudaError_t (*)(cudaStream_t, const Rows&, const Rows&, const am::Geo&, float*);

template <typename Fn>
struct Variant {
  std::string name;
  Fn fn;
};

struct Kernels {
  Variant<FwdFn> fwd;
  Variant<DqFn> dq;
  Variant<DkdvFn> dkdv;
  DeltaFn delta;
  std::string name() const { return fwd.name + " " + dq.name + " " + dkdv.name; }
};

struct Variants {
  std::vector<Variant<FwdFn>> fwd;
  std::vector<Variant<DqFn>> dq;
  std::vector<Variant<DkdvFn>> dkdv;
  DeltaFn delta;
  Kernels base() const { return {fwd[0], dq[0], dkdv[0], delta}; }
};

template <int kW, int kMb, int kT, int kS, int kB>
std::string tag(const char* kind, const char* tile) {
  return std::string(kind) + ":w" + std::to_string(kW) + "m" + std::to_string(kMb) + tile +
         std::to_string(kT) + "s" + std::to_string(kS) + "b" + std::to_string(kB);
}
template <int kD, int kW, int kMb, int kT, int kS, int kB>
Variant<FwdFn> fwd_v() {
  return {tag<kW, kMb, kT, kS, kB>("fwd", "k"), am::launch_forward<kD, kW, kMb, kT, kS, kB>};
}
template <int kD, int kW, int kMb, int kT, int kS, int kB>
Variant<DqFn> dq_v() {
  return {tag<kW, kMb, kT, kS, kB>("dq", "k"), am::launch_dq<kD, kW, kMb, kT, kS, kB>};
}
template <int kD, int kW, int kMb, int kQ, int kS, int kB>
Variant<DkdvFn> dkdv_v() {
  return {tag<kW, kMb, kQ, kS, kB>("dkdv", "q"), am::launch_dkdv<kD, kW, kMb, kQ, kS, kB>};
}

// Name: warps (w), 16-row blocks per warp (m), keys per tile (k) or query rows per step (q),
// pipeline stages (s), blocks per SM asked of the register allocator (b).
template <int kD>
Variants variants() {
  using C = am::Config<kD>;
  Variants v;
  v.fwd = {fwd_v<kD, C::kFwdWarps, C::kFwdMb, C::kFwdT, C::kFwdStages, C::kFwdBlocks>()};
  v.dq = {dq_v<kD, C::kDqWarps, C::kDqMb, C::kDqT, C::kDqStages, C::kDqBlocks>()};
  v.dkdv = {dkdv_v<kD, C::kKvWarps, C::kKvMb, C::kKvQ, C::kKvStages, C::kKvBlocks>()};
  if constexpr (kD == 64) {
    v.fwd.push_back(fwd_v<kD, 4, 2, 64, 3, 1>());
    v.fwd.push_back(fwd_v<kD, 4, 2, 128, 2, 1>());
    v.fwd.push_back(fwd_v<kD, 8, 1, 64, 2, 2>());
    v.fwd.push_back(fwd_v<kD, 4, 1, 64, 2, 3>());
    v.fwd.push_back(fwd_v<kD, 8, 1, 32, 2, 2>());
    v.dq.push_back(dq_v<kD, 8, 1, 64, 3, 2>());
    v.dq.push_back(dq_v<kD, 8, 1, 32, 2, 2>());
    v.dq.push_back(dq_v<kD, 8, 1, 32, 3, 2>());
    v.dq.push_back(dq_v<kD, 4, 2, 32, 2, 1>());
    v.dq.push_back(dq_v<kD, 4, 2, 32, 3, 1>());
    v.dq.push_back(dq_v<kD, 4, 1, 64, 2, 3>());
    v.dkdv.push_back(dkdv_v<kD, 4, 2, 32, 3, 1>());
    v.dkdv.push_back(dkdv_v<kD, 4, 1, 64, 2, 1>());
    v.dkdv.push_back(dkdv_v<kD, 8, 1, 64, 2, 1>());
    v.dkdv.push_back(dkdv_v<kD, 8, 1, 32, 2, 2>());
    v.dkdv.push_back(dkdv_v<kD, 4, 1, 32, 2, 3>());
    v.dkdv.push_back(dkdv_v<kD, 8, 1, 16, 2, 2>());
  } else {
    v.fwd.push_back(fwd_v<kD, 4, 2, 32, 3, 1>());
    v.fwd.push_back(fwd_v<kD, 8, 1, 32, 2, 2>());
    v.fwd.push_back(fwd_v<kD, 4, 1, 32, 2, 3>());
    v.dq.push_back(dq_v<kD, 4, 2, 32, 3, 1>());
    v.dq.push_back(dq_v<kD, 8, 1, 64, 2, 1>());
    v.dq.push_back(dq_v<kD, 8, 1, 32, 2, 2>());
    v.dkdv.push_back(dkdv_v<kD, 8, 1, 64, 3, 1>());
    v.dkdv.push_back(dkdv_v<kD, 4, 1, 32, 2, 1>());
    v.dkdv.push_back(dkdv_v<kD, 4, 1, 32, 3, 1>());
  }
  v.delta = am::launch_delta<kD>;
  return v;
}

// ---- data ----------------------------------------------------------------------------------------

struct Shape {
  int64_t n;
  int heads, kv_heads, d;
  std::vector<int> docs;  // lengths, summing to n
};

std::vector<int32_t> kv_begin_of(const Shape& s) {
  std::vector<int32_t> kvb;
  int start = 0;
  for (int len : s.docs) {
    for (int i = 0; i < len; ++i) kvb.push_back(start);
    start += len;
  }
  return kvb;
}

// q, k, v: column slices of one qkv buffer [n][(heads + 2 kv_heads) d] (as the model passes them).
struct Problem {
  Shape s;
  int64_t ld = 0;
  std::vector<float> qkv, dout;  // bf16-exact values
  std::vector<int32_t> kvb;
  float scale = 0;
  float q(int64_t t, int h, int c) const { return qkv[t * ld + h * s.d + c]; }
  float k(int64_t t, int h, int c) const { return qkv[t * ld + (s.heads + h) * s.d + c]; }
  float v(int64_t t, int h, int c) const { return qkv[t * ld + (s.heads + s.kv_heads + h) * s.d + c]; }
  float dO(int64_t t, int h, int c) const { return dout[(t * s.heads + h) * s.d + c]; }
};

Problem make_problem(const Shape& s, std::mt19937& rng) {
  Problem p;
  p.s = s;
  p.ld = int64_t(s.heads + 2 * s.kv_heads) * s.d;
  p.scale = 1.0f / std::sqrt(float(s.d));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  p.qkv.resize(size_t(s.n * p.ld));
  for (auto& x : p.qkv) x = bf(1.5f * nd(rng));  // wide enough that the softmax is not flat
  p.dout.resize(size_t(s.n * s.heads * s.d));
  for (auto& x : p.dout) x = bf(nd(rng));
  p.kvb = kv_begin_of(s);
  return p;
}

struct Reference {
  std::vector<double> out, lse, dqkv;  // dqkv laid out like qkv
};

// float64, straight from backend.h's definition.
Reference reference(const Problem& p) {
  const Shape& s = p.s;
  const int D = s.d, group = s.heads / s.kv_heads;
  Reference r;
  r.out.assign(size_t(s.n * s.heads * D), 0.0);
  r.lse.assign(size_t(s.n * s.heads), 0.0);
  r.dqkv.assign(p.qkv.size(), 0.0);
  auto work = [&](int kvh) {  // one thread per KV head: it owns dk/dv of that head and dq of its group
    std::vector<double> pr;
    for (int h = kvh * group; h < (kvh + 1) * group; ++h)
      for (int64_t t = 0; t < s.n; ++t) {
        const int64_t j0 = p.kvb[t];
        pr.assign(size_t(t - j0 + 1), 0.0);
        double mx = -1e300;
        for (int64_t j = j0; j <= t; ++j) {
          double dot = 0;
          for (int c = 0; c < D; ++c) dot += double(p.q(t, h, c)) * p.k(j, kvh, c);
          pr[j - j0] = dot * p.scale;
          mx = std::max(mx, pr[j - j0]);
        }
        double sum = 0;
        for (auto& x : pr) sum += (x = std::exp(x - mx));
        r.lse[t * s.heads + h] = mx + std::log(sum);
        double* o = &r.out[(t * s.heads + h) * D];
        for (int64_t j = j0; j <= t; ++j) {
          pr[j - j0] /= sum;
          for (int c = 0; c < D; ++c) o[c] += pr[j - j0] * p.v(j, kvh, c);
        }
        double delta = 0;
        for (int c = 0; c < D; ++c) delta += double(p.dO(t, h, c)) * o[c];
        double* dq = &r.dqkv[t * p.ld + h * D];
        for (int64_t j = j0; j <= t; ++j) {
          double dp = 0;
          for (int c = 0; c < D; ++c) dp += double(p.dO(t, h, c)) * p.v(j, kvh, c);
          const double pj = pr[j - j0], ds = pj * (dp - delta);
          double* dk = &r.dqkv[j * p.ld + (s.heads + kvh) * D];
          double* dv = &r.dqkv[j * p.ld + (s.heads + s.kv_heads + kvh) * D];
          for (int c = 0; c < D; ++c) {
            dv[c] += pj * p.dO(t, h, c);
            dq[c] += p.scale * ds * p.k(j, kvh, c);
            dk[c] += p.scale * ds * p.q(t, h, c);
          }
        }
      }
  };
  std::vector<std::thread> pool;
  for (int kvh = 0; kvh < s.kv_heads; ++kvh) pool.emplace_back(work, kvh);
  for (auto& th : pool) th.join();
  return r;
}

// ---- device buffers ------------------------------------------------------------------------------

struct Device {
  const Shape* s = nullptr;
  int64_t ld = 0;
  bf16 *qkv = nullptr, *dqkv = nullptr, *out = nullptr, *dout = nullptr;
  float *lse = nullptr, *delta = nullptr;
  int32_t* kvb = nullptr;
  Rows q, k, v, o, dO, dq, dk, dv;
  am::Geo g;

  static Rows slice(bf16* base, int64_t n, int heads, int d, int64_t ld) {
    Rows r;
    r.base = reinterpret_cast<char*>(base);
    r.esize = 2;
    r.n_rows = n * heads;
    r.width = d;
    r.inner = heads;
    r.s_outer = ld;
    r.s_inner = d;
    return r;
  }

  Device(const Shape& sh, const std::vector<float>* qkv_host, const std::vector<float>* dout_host,
         const std::vector<int32_t>& kvb_host, float scale) {
    s = &sh;
    ld = int64_t(sh.heads + 2 * sh.kv_heads) * sh.d;
    const size_t nqkv = size_t(sh.n * ld), no = size_t(sh.n * sh.heads * sh.d);
    CK(cudaMalloc(&qkv, nqkv * 2));
    CK(cudaMalloc(&dqkv, nqkv * 2));
    CK(cudaMalloc(&out, no * 2));
    CK(cudaMalloc(&dout, no * 2));
    CK(cudaMalloc(&lse, size_t(sh.n * sh.heads) * 4));
    CK(cudaMalloc(&delta, size_t(sh.n * sh.heads) * 4));
    CK(cudaMalloc(&kvb, size_t(sh.n) * 4));
    std::vector<bf16> tmp;
    auto upload = [&](bf16* dst, const std::vector<float>* src, size_t count, uint64_t seed) {
      tmp.resize(count);
      if (src) {
        for (size_t i = 0; i < count; ++i) tmp[i] = __float2bfloat16_rn((*src)[i]);
      } else {
        std::mt19937 rng{uint32_t(seed)};
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& x : tmp) x = __float2bfloat16_rn(nd(rng));
      }
      CK(cudaMemcpy(dst, tmp.data(), count * 2, cudaMemcpyHostToDevice));
    };
    upload(qkv, qkv_host, nqkv, 1);
    upload(dout, dout_host, no, 2);
    CK(cudaMemcpy(kvb, kvb_host.data(), kvb_host.size() * 4, cudaMemcpyHostToDevice));
    q = slice(qkv, sh.n, sh.heads, sh.d, ld);
    k = slice(qkv + sh.heads * sh.d, sh.n, sh.kv_heads, sh.d, ld);
    v = slice(qkv + (sh.heads + sh.kv_heads) * sh.d, sh.n, sh.kv_heads, sh.d, ld);
    dq = slice(dqkv, sh.n, sh.heads, sh.d, ld);
    dk = slice(dqkv + sh.heads * sh.d, sh.n, sh.kv_heads, sh.d, ld);
    dv = slice(dqkv + (sh.heads + sh.kv_heads) * sh.d, sh.n, sh.kv_heads, sh.d, ld);
    o = slice(out, sh.n, sh.heads, sh.d, int64_t(sh.heads) * sh.d);
    dO = slice(dout, sh.n, sh.heads, sh.d, int64_t(sh.heads) * sh.d);
    g.n = sh.n;
    g.heads = sh.heads;
    g.kv_heads = sh.kv_heads;
    g.group = sh.heads / sh.kv_heads;
    g.scale = scale;
    g.scale_log2 = scale * astrai::gpu::kLog2e;
  }
  ~Device() {
    cudaFree(qkv);
    cudaFree(dqkv);
    cudaFree(out);
    cudaFree(dout);
    cudaFree(lse);
    cudaFree(delta);
    cudaFree(kvb);
  }
  void forward(const Kernels& kn) { CK(kn.fwd.fn(nullptr, q, k, v, kvb, g, o, lse)); }
  void run_delta(const Kernels& kn) { CK(kn.delta(nullptr, dO, o, g, delta)); }
  void run_dq(const Kernels& kn) { CK(kn.dq.fn(nullptr, dO, q, k, v, kvb, lse, delta, g, dq)); }
  void run_dkdv(const Kernels& kn) { CK(kn.dkdv.fn(nullptr, dO, q, k, v, kvb, lse, delta, g, dk, dv)); }
  void backward(const Kernels& kn) {
    run_delta(kn);
    run_dq(kn);
    run_dkdv(kn);
  }
};

bool check(const Shape& s, const Kernels& kn, const Problem& p, const Reference& ref) {
  Device dev(s, &p.qkv, &p.dout, p.kvb, p.scale);
  const size_t no = size_t(s.n * s.heads * s.d), nqkv = size_t(s.n * dev.ld);
  CK(cudaMemset(dev.out, 0xff, no * 2));  // NaN
  CK(cudaMemset(dev.lse, 0xff, size_t(s.n * s.heads) * 4));
  CK(cudaMemset(dev.dqkv, 0xff, nqkv * 2));
  dev.forward(kn);
  CK(cudaDeviceSynchronize());
  const std::vector<float> out = download_bf16(dev.out, no);
  std::vector<float> lse(size_t(s.n * s.heads));
  CK(cudaMemcpy(lse.data(), dev.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
  dev.backward(kn);
  CK(cudaDeviceSynchronize());
  const std::vector<float> dqkv = download_bf16(dev.dqkv, nqkv);
  // Determinism: the same backward again gives the same bits.
  std::vector<bf16> first(nqkv), second(nqkv);
  CK(cudaMemcpy(first.data(), dev.dqkv, nqkv * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemset(dev.dqkv, 0xff, nqkv * 2));
  dev.backward(kn);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(second.data(), dev.dqkv, nqkv * 2, cudaMemcpyDeviceToHost));
  const bool same_bits = std::memcmp(first.data(), second.data(), nqkv * 2) == 0;

  const int64_t ld = dev.ld, qd = int64_t(s.heads) * s.d, kd = int64_t(s.kv_heads) * s.d;
  auto all = [](size_t) { return true; };
  const double e_out = rel_err(out, ref.out, all), e_lse = rel_err(lse, ref.lse, all);
  const double e_dq = rel_err(dqkv, ref.dqkv, [&](size_t i) { return int64_t(i % ld) < qd; });
  const double e_dk = rel_err(dqkv, ref.dqkv, [&](size_t i) {
    const int64_t c = int64_t(i % ld);
    return c >= qd && c < qd + kd;
  });
  const double e_dv = rel_err(dqkv, ref.dqkv, [&](size_t i) { return int64_t(i % ld) >= qd + kd; });
  const bool ok = e_out < 1e-2 && e_lse < 1e-2 && e_dq < 1e-2 && e_dk < 1e-2 && e_dv < 1e-2 && same_bits;
  std::printf("  %-4s %-36s out %.1e lse %.1e dq %.1e dk %.1e dv %.1e %s\n", ok ? "ok" : "FAIL",
              kn.name().c_str(), e_out, e_lse, e_dq, e_dk, e_dv,
              same_bits ? "bit-identical rerun" : "RERUN DIFFERS");
  return ok;
}

std::string describe(const Shape& s) {
  std::string d = "n " + std::to_string(s.n) + " heads " + std::to_string(s.heads) + "/" +
                  std::to_string(s.kv_heads) + " d " + std::to_string(s.d) + " docs";
  for (int len : s.docs) d += " " + std::to_string(len);
  return d;
}

// ---- timing --------------------------------------------------------------------------------------

void time_shape(const Shape& s, const Variants& vs, int reps) {
  std::vector<int32_t> kvb = kv_begin_of(s);
  Device dev(s, nullptr, nullptr, kvb, 1.0f / std::sqrt(float(s.d)));
  double pairs = 0;
  for (int len : s.docs) pairs += double(len) * (len + 1) / 2;
  const double fwd_flop = 4.0 * pairs * s.d * s.heads, bwd_flop = 2.5 * fwd_flop;
  std::printf("timing %s (%.4g causal pairs per head)\n", describe(s).c_str(), pairs);
  Kernels kn = vs.base();
  double best_f = 1e30, best_dq = 1e30, best_dkdv = 1e30;
  for (const auto& f : vs.fwd) {
    kn.fwd = f;
    const double ms = median_ms([&] { dev.forward(kn); }, reps);
    best_f = std::min(best_f, ms);
    std::printf("  %-20s %8.3f ms %6.1f TFLOP/s\n", f.name.c_str(), ms, fwd_flop / ms * 1e-9);
  }
  kn = vs.base();
  dev.forward(kn);
  const double delta_ms = median_ms([&] { dev.run_delta(kn); }, reps);
  std::printf("  %-20s %8.3f ms\n", "delta", delta_ms);
  for (const auto& d : vs.dq) {
    kn.dq = d;
    const double ms = median_ms([&] { dev.run_dq(kn); }, reps);
    best_dq = std::min(best_dq, ms);
    std::printf("  %-20s %8.3f ms %6.1f TFLOP/s (of the backward's FLOPs: 2 of 5 GEMMs + recompute)\n",
                d.name.c_str(), ms, 0.4 * bwd_flop / ms * 1e-9);
  }
  kn = vs.base();
  for (const auto& d : vs.dkdv) {
    kn.dkdv = d;
    const double ms = median_ms([&] { dev.run_dkdv(kn); }, reps);
    best_dkdv = std::min(best_dkdv, ms);
    std::printf("  %-20s %8.3f ms %6.1f TFLOP/s (of the backward's FLOPs: 4 of 5 GEMMs)\n", d.name.c_str(),
                ms, 0.8 * bwd_flop / ms * 1e-9);
  }
  kn = vs.base();
  const double f = median_ms([&] { dev.forward(kn); }, reps);
  const double b = median_ms([&] { dev.backward(kn); }, reps);
  std::printf(
      "  default: fwd %.3f ms %.1f TFLOP/s | bwd %.3f ms %.1f TFLOP/s | fwd+bwd %.3f ms %.1f TFLOP/s\n", f,
      fwd_flop / f * 1e-9, b, bwd_flop / b * 1e-9, f + b, (fwd_flop + bwd_flop) / (f + b) * 1e-9);
  const double bb = delta_ms + best_dq + best_dkdv;
  std::printf(
      "  best variants: fwd %.3f ms %.1f TFLOP/s | bwd %.3f ms %.1f TFLOP/s | fwd+bwd %.3f ms %.1f TFLOP/s\n",
      best_f, fwd_flop / best_f * 1e-9, bb, bwd_flop / bb * 1e-9, best_f + bb,
      (fwd_flop + bwd_flop) / (best_f + bb) * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = astrai::bench::has_flag(argc, argv, "--quick");
  const bool check_only = astrai::bench::has_flag(argc, argv, "--check-only");
  std::mt19937 rng(std::random_device{}());
  bool ok = true;
  std::vector<Shape> checks = {
      {533, 8, 2, 64, {1, 63, 200, 77, 9, 183}},  // GQA 4:1, documents at unaligned starts
      {300, 4, 4, 64, {300}},                     // 1:1, one document, n not a multiple of 64
      {389, 8, 2, 128, {130, 2, 257}},            // d 128, GQA 4:1
      {256, 4, 4, 128, {64, 64, 128}},            // d 128, 1:1, aligned documents
  };
  for (const Shape& s : checks) {
    std::printf("check %s\n", describe(s).c_str());
    const Problem p = make_problem(s, rng);
    const Reference ref = reference(p);
    const Variants vs = s.d == 64 ? variants<64>() : variants<128>();
    ok = check(s, vs.base(), p, ref) && ok;
    Kernels kn = vs.base();
    for (size_t i = 1; i < vs.fwd.size(); ++i, kn = vs.base()) {
      kn.fwd = vs.fwd[i];
      ok = check(s, kn, p, ref) && ok;
    }
    for (size_t i = 1; i < vs.dq.size(); ++i, kn = vs.base()) {
      kn.dq = vs.dq[i];
      ok = check(s, kn, p, ref) && ok;
    }
    for (size_t i = 1; i < vs.dkdv.size(); ++i, kn = vs.base()) {
      kn.dkdv = vs.dkdv[i];
      ok = check(s, kn, p, ref) && ok;
    }
  }
  std::printf("correctness: %s\n", ok ? "all ok" : "FAILURES");
  if (check_only) return ok ? 0 : 1;
  const int reps = quick ? 3 : 10;
  const std::vector<int> docs(8, 2048);
  time_shape({16384, 32, 8, 64, docs}, variants<64>(), reps);
  time_shape({16384, 32, 8, 128, docs}, variants<128>(), reps);
  return ok ? 0 : 1;
}
