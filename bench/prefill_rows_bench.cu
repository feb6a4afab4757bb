// Speed of the prefill forward's row-wise kernels (gpu/elementwise.cu's embedding and swiglu,
// gpu/norm.cu's add_rms_norm, gpu/rope.cu's rope_kv_store) at the shapes of llama-1b and qwen3-8b, beside a
// device-to-device copy of the same bytes timed the same way. CUDA-only: it links those files and
// the few host files they need, so it builds on a machine that has only nvcc:
//
//   nvcc -O3 -std=c++20 --expt-relaxed-constexpr -I. -gencode=arch=compute_90a,code=sm_90a \
//        bench/prefill_rows_bench.cu gpu/norm.cu gpu/elementwise.cu gpu/rope.cu gpu/rows.cpp \
//        src/backend/rows.cpp src/core/tensor.cpp src/core/dtype.cpp src/model/rope.cpp -o prefill_rows_bench
//   ./prefill_rows_bench
//
// In the forward each of these kernels reads what the GEMM before it has just written, much of it
// still in L2. So each op is timed after a copy that rewrites its inputs from a pristine buffer (which
// also undoes the in-place ops): a CUDA graph of 20 (copy, op) pairs less a graph of the 20 copies
// alone, over 20 replays, the median. The reference ("copy") is a device-to-device copy moving as
// many bytes as the op reads and writes, after the same input copy. Bytes counted: each operand read
// or written once (the embedding: its table rows read, the output written, after a copy of the ids
// alone; the norm: residual and x read, the sum and the normed rows written; SwiGLU: gate and up
// read, the product written; rope_kv_store: q and k read and written back, k and v written into the
// cache). First, the count of SwiGLU results that differ from float64's over every bf16 gate.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "gpu/ops.h"
#include "src/model/rope.h"

using astrai::DType;
using astrai::Tensor;

namespace {

constexpr auto kDev = astrai::Device::cuda;
constexpr int kPairs = 20, kReplays = 20;

struct ModelShape {
  const char* name;
  int64_t hidden, inter, heads, kv_heads, head_dim, vocab;
  bool qk_norm;
};

// n bf16 values uniform in [-a, a) on the device: a random block of at most 2^20 repeated (an
// embedding table's 600 million values drawn one by one on the host took half a minute).
void* random_bf16(size_t n, float a, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-a, a);
  std::vector<__nv_bfloat16> h(std::min<size_t>(n, size_t(1) << 20));
  for (auto& x : h) x = __float2bfloat16(u(rng));
  void* d = nullptr;
  CK(cudaMalloc(&d, n * 2));
  for (size_t at = 0; at < n; at += h.size())
    CK(cudaMemcpy(static_cast<char*>(d) + at * 2, h.data(), std::min(h.size(), n - at) * 2,
                  cudaMemcpyHostToDevice));
  return d;
}

void* device_copy_of(const void* src, size_t bytes) {
  void* d = nullptr;
  CK(cudaMalloc(&d, bytes));
  CK(cudaMemcpy(d, src, bytes, cudaMemcpyDeviceToDevice));
  return d;
}

// Milliseconds of a graph of kPairs copies of body, the median of kReplays replays.
double graph_ms(cudaStream_t s, const std::function<void()>& body) {
  return astrai::bench::graph_median_ms(
      s,
      [&] {
        for (int i = 0; i < kPairs; ++i) body();
      },
      kReplays);
}

// Microseconds of one op after its input copy (restore), and of a copy of `bytes` after the same.
struct Timing {
  double op_us, copy_us;
};
Timing time_op(cudaStream_t s, const std::function<void()>& restore, const std::function<void()>& op,
               size_t bytes) {
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, bytes / 2));
  CK(cudaMalloc(&b, bytes / 2));
  CK(cudaMemset(a, 0, bytes / 2));
  const double base = graph_ms(s, restore);
  const double with_op = graph_ms(s, [&] {
    restore();
    op();
  });
  const double with_copy = graph_ms(s, [&] {
    restore();
    CK(cudaMemcpyAsync(b, a, bytes / 2, cudaMemcpyDeviceToDevice, s));
  });
  CK(cudaFree(a));
  CK(cudaFree(b));
  return {(with_op - base) * 1e3 / kPairs, (with_copy - base) * 1e3 / kPairs};
}

void report(const char* op, const ModelShape& m, int64_t T, size_t bytes, const Timing& t) {
  std::printf(
      "%-14s %-9s T %5lld  %7.2f MB  op %7.2f us %6.2f TB/s | copy %7.2f us %6.2f TB/s | op/copy %.2f\n", op,
      m.name, (long long)T, bytes / 1e6, t.op_us, bytes / t.op_us * 1e-6, t.copy_us, bytes / t.copy_us * 1e-6,
      t.op_us / t.copy_us);
}

void bench_shape(const ModelShape& m, int64_t T, cudaStream_t s, std::mt19937_64& rng) {
  namespace g = astrai::gpu;
  const int64_t Hd = m.hidden, F = m.inter, H = m.heads, KVH = m.kv_heads, D = m.head_dim;
  // embedding of T random ids (the table mostly not in L2: the op after a copy of the ids alone).
  {
    void* table = random_bf16(size_t(m.vocab * Hd), 1.0f, rng);
    std::vector<int32_t> h(static_cast<size_t>(T));
    for (auto& id : h) id = int32_t(rng() % uint64_t(m.vocab));
    void *ids0 = nullptr, *ids = nullptr, *out = nullptr;
    CK(cudaMalloc(&ids0, size_t(T) * 4));
    CK(cudaMalloc(&ids, size_t(T) * 4));
    CK(cudaMalloc(&out, size_t(T * Hd) * 2));
    CK(cudaMemcpy(ids0, h.data(), size_t(T) * 4, cudaMemcpyHostToDevice));
    const Tensor tt(table, DType::bf16, {m.vocab, Hd}, kDev), it(ids, DType::i32, {T}, kDev),
        ot(out, DType::bf16, {T, Hd}, kDev);
    auto restore = [&] { CK(cudaMemcpyAsync(ids, ids0, size_t(T) * 4, cudaMemcpyDeviceToDevice, s)); };
    const size_t bytes = 2 * size_t(T * Hd) * 2;
    report("embedding", m, T, bytes,
           time_op(
               s, restore, [&] { g::embedding(s, tt, it, ot); }, bytes));
    for (void* p : {table, ids0, ids, out}) CK(cudaFree(p));
  }
  // add_rms_norm(residual, x) in place: residual += x, out = norm(residual) * w.
  {
    const size_t n = size_t(T * Hd);
    void* res0 = random_bf16(n, 1.0f, rng);
    void* x0 = random_bf16(n, 1.0f, rng);
    void* w = random_bf16(size_t(Hd), 1.0f, rng);
    void* res = device_copy_of(res0, n * 2);
    void* x = device_copy_of(x0, n * 2);
    void* out = device_copy_of(x0, n * 2);
    const Tensor rt(res, DType::bf16, {T, Hd}, kDev), xt(x, DType::bf16, {T, Hd}, kDev),
        wt(w, DType::bf16, {Hd}, kDev), ot(out, DType::bf16, {T, Hd}, kDev);
    auto restore = [&] {
      CK(cudaMemcpyAsync(res, res0, n * 2, cudaMemcpyDeviceToDevice, s));
      CK(cudaMemcpyAsync(x, x0, n * 2, cudaMemcpyDeviceToDevice, s));
    };
    const size_t bytes = 4 * n * 2;
    report("add_rms_norm", m, T, bytes,
           time_op(
               s, restore, [&] { g::add_rms_norm(s, rt, xt, wt, 1e-6f, ot); }, bytes));
    for (void* p : {res0, x0, w, res, x, out}) CK(cudaFree(p));
  }
  // swiglu over the two halves of one [T, 2F] gate_up buffer (as the MLP's fused projection writes it).
  {
    const size_t n = size_t(T * 2 * F);
    void* gu0 = random_bf16(n, 4.0f, rng);
    void* gu = device_copy_of(gu0, n * 2);
    void* out = nullptr;
    CK(cudaMalloc(&out, n));
    Tensor gate(gu, DType::bf16, {T, F}, kDev), up(static_cast<char*>(gu) + F * 2, DType::bf16, {T, F}, kDev);
    gate.stride = {2 * F, 1, 0, 0};
    up.stride = {2 * F, 1, 0, 0};
    const Tensor ot(out, DType::bf16, {T, F}, kDev);
    auto restore = [&] { CK(cudaMemcpyAsync(gu, gu0, n * 2, cudaMemcpyDeviceToDevice, s)); };
    const size_t bytes = 3 * size_t(T * F) * 2;
    report("swiglu", m, T, bytes,
           time_op(
               s, restore, [&] { g::swiglu(s, gate, up, ot); }, bytes));
    for (void* p : {gu0, gu, out}) CK(cudaFree(p));
  }
  // rope_kv_store on q, k, v column slices of one [T, (H + 2 KVH) D] qkv buffer, positions 0..T-1,
  // slots a shuffled permutation of a cache of T rows.
  {
    const int64_t W = (H + 2 * KVH) * D;
    const size_t n = size_t(T * W);
    void* qkv0 = random_bf16(n, 1.0f, rng);
    void* qkv = device_copy_of(qkv0, n * 2);
    void* qn = random_bf16(size_t(D), 1.0f, rng);
    void* kn = random_bf16(size_t(D), 1.0f, rng);
    void *kc = nullptr, *vc = nullptr, *cs = nullptr, *pos = nullptr, *slots = nullptr;
    CK(cudaMalloc(&kc, size_t(T * KVH * D) * 2));
    CK(cudaMalloc(&vc, size_t(T * KVH * D) * 2));
    astrai::ModelConfig config;
    config.head_dim = D;
    config.rope_theta = 1e6;
    const std::vector<float> table = astrai::rope_cos_sin_table(config, T);
    CK(cudaMalloc(&cs, table.size() * 4));
    CK(cudaMemcpy(cs, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int32_t> p(static_cast<size_t>(T)), sl(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) p[size_t(i)] = sl[size_t(i)] = int32_t(i);
    std::shuffle(sl.begin(), sl.end(), rng);
    CK(cudaMalloc(&pos, size_t(T) * 4));
    CK(cudaMalloc(&slots, size_t(T) * 4));
    CK(cudaMemcpy(pos, p.data(), size_t(T) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(slots, sl.data(), size_t(T) * 4, cudaMemcpyHostToDevice));
    char* base = static_cast<char*>(qkv);
    Tensor q(base, DType::bf16, {T, H, D}, kDev), k(base + H * D * 2, DType::bf16, {T, KVH, D}, kDev),
        v(base + (H + KVH) * D * 2, DType::bf16, {T, KVH, D}, kDev);
    for (Tensor* t : {&q, &k, &v}) t->stride = {W, D, 1, 0};
    const Tensor qnt(qn, DType::bf16, {D}, kDev), knt(kn, DType::bf16, {D}, kDev),
        cst(cs, DType::f32, {T, D}, kDev), post(pos, DType::i32, {T}, kDev),
        slt(slots, DType::i32, {T}, kDev), kct(kc, DType::bf16, {T, KVH, D}, kDev),
        vct(vc, DType::bf16, {T, KVH, D}, kDev);
    auto restore = [&] { CK(cudaMemcpyAsync(qkv, qkv0, n * 2, cudaMemcpyDeviceToDevice, s)); };
    const size_t bytes = size_t(T * D) * 2 * (2 * H + 5 * KVH);
    const Tensor* qnp = m.qk_norm ? &qnt : nullptr;
    const Tensor* knp = m.qk_norm ? &knt : nullptr;
    report("rope_kv_store", m, T, bytes,
           time_op(
               s, restore, [&] { g::rope_kv_store(s, q, k, v, qnp, knp, 1e-6f, post, cst, slt, kct, vct); },
               bytes));
    for (void* ptr : {qkv0, qkv, qn, kn, kc, vc, cs, pos, slots}) CK(cudaFree(ptr));
  }
}

// The swiglu op over every finite bf16 gate (up = 1): how many results differ from silu computed in
// float64 and rounded to bf16, and by how many bf16 steps at most (silu_rounded's fast exponential and
// division; tests/backend/elementwise_test.cpp bounds the steps at one).
void silu_exhaustive(cudaStream_t s) {
  std::vector<__nv_bfloat16> h;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    uint16_t bits = uint16_t(b);
    __nv_bfloat16 v;
    std::memcpy(&v, &bits, 2);
    if (std::isfinite(__bfloat162float(v))) h.push_back(v);
  }
  const auto F = int64_t(h.size());
  h.resize(size_t(2 * F), __float2bfloat16(1.0f));
  void *gu = nullptr, *out = nullptr;
  CK(cudaMalloc(&gu, h.size() * 2));
  CK(cudaMalloc(&out, size_t(F) * 2));
  CK(cudaMemcpy(gu, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  Tensor gate(gu, DType::bf16, {1, F}, kDev), up(static_cast<char*>(gu) + F * 2, DType::bf16, {1, F}, kDev);
  astrai::gpu::swiglu(s, gate, up, Tensor(out, DType::bf16, {1, F}, kDev));
  CK(cudaStreamSynchronize(s));
  std::vector<uint16_t> got(static_cast<size_t>(F));
  CK(cudaMemcpy(got.data(), out, size_t(F) * 2, cudaMemcpyDeviceToHost));
  int64_t moved = 0, max_steps = 0, flushed = 0;
  for (int64_t i = 0; i < F; ++i) {
    const double g = __bfloat162float(h[size_t(i)]), want = g / (1.0 + std::exp(-g));
    const __nv_bfloat16 r = __float2bfloat16(float(want));
    uint16_t rb;
    std::memcpy(&rb, &r, 2);
    if (rb == got[size_t(i)]) continue;
    ++moved;
    if ((got[size_t(i)] & 0x7fff) == 0) {
      ++flushed;
      continue;
    }
    max_steps = std::max<int64_t>(max_steps, std::abs(int32_t(got[size_t(i)]) - int32_t(rb)));
  }
  std::printf(
      "swiglu of every finite bf16 gate (up = 1): %lld of %lld differ from silu rounded to bf16 (%lld "
      "flushed to 0, the others by at most %lld step)\n",
      (long long)moved, (long long)F, (long long)flushed, (long long)max_steps);
  CK(cudaFree(gu));
  CK(cudaFree(out));
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  silu_exhaustive(s);
  std::mt19937_64 rng(std::random_device{}());
  const ModelShape models[] = {{"llama-1b", 2048, 8192, 32, 8, 64, 128256, false},
                               {"qwen3-8b", 4096, 12288, 32, 8, 128, 151936, true}};
  for (const ModelShape& m : models)
    for (int64_t T : {1024, 8192}) bench_shape(m, T, s, rng);
  CK(cudaStreamDestroy(s));
  return 0;
}
