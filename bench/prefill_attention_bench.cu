// Correctness and speed of paged_attention's tensor-core path for prefill and extend steps
// (gpu/train_attention_mma.cuh, PagedKv) against the CUDA-core kernel it replaces there
// (gpu/attention.cu). CUDA-only: it links gpu/attention.cu and the few host files that needs, and
// none of the project's other dependencies, so it builds on a machine that has only nvcc:
//
//   nvcc -O3 -std=c++20 --expt-relaxed-constexpr -I. -gencode=arch=compute_90a,code=sm_90a \
//        bench/prefill_attention_bench.cu gpu/attention.cu gpu/rope.cu gpu/rows.cpp gpu/scratch.cpp \
//        src/backend/attention_shapes.cpp src/backend/rows.cpp src/core/tensor.cpp src/core/dtype.cpp \
//        -o prefill_attention_bench
//   ./prefill_attention_bench [--quick] [--check-only | --prefill-only | --short | --mixed | --profile]
//
// The bench includes gpu/paged_attention_mma.cu under another name and defines the
// paged_attention_mma that astrai::gpu::paged_attention calls as "not taken" unless a call asks for
// tensor cores: "cuda-core" below is the CUDA-core kernel for the whole step, "dispatch" the
// backend's choice.
//
// 1. Checks the tensor-core path (the backend's mma.sync Config and the variants timed below, the
//    variants of gpu/attention_wgmma.cuh's two kernels in every case ("wgmma ws": the
//    warp-specialized one), "dispatch" the backend's choice: the wgmma kernels on Hopper) and the
//    CUDA-core kernel against a float64 host
//    reference over the same paged inputs: random non-contiguous page tables (page sizes 16 and
//    3), q a column slice of a wider qkv-like buffer,
//    ragged batches (lengths 1, 17, 333, 1000), extends after long cached prefixes, a decode row in
//    a prefill batch, GQA 4:1 and 1:1, head_dim 64, 96 and 128, an 8k and a 32k prefill (rows sampled);
//    outputs poisoned with NaN beforehand; relative error ||gpu - ref|| / ||ref|| < 1e-2.
// 2. Times one causal prefill of 1k, 8k and 32k tokens at the qwen3-8b shape (32 heads, 8 KV
//    heads, d128) and the llama-1b shape (32/8, d64), and extends (queries after a cached prefix,
//    to place the dispatch threshold): CUDA events, median of the repetitions, TFLOP/s counting
//    the causal pairs only (4 * pairs * D * H). bench/torch_attention.py --prefill times PyTorch's
//    SDPA on the same shapes.
// 3. Mixed steps (decode rows and a prefill chunk, as when a serving step admits a request): checked
//    through the dispatch with the decode rows on the tensor cores (one kernel) and on the decode
//    kernel (AttentionBatch::num_decode_seqs: two kernels), and timed both ways at B = 8, 31, 63
//    decode rows of 512 or 4k keys plus a chunk of 128 or 2k queries after 2k keys, beside each
//    part alone; --mixed: the mixed checks and times only.
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "gpu/attention_wgmma.cuh"
#include "gpu/ops.h"
#include "gpu/train_attention_mma.cuh"

// The backend's tensor-core entry under another name, so that the one the dispatch calls can choose.
#define paged_attention_mma paged_attention_mma_backend
#include "gpu/paged_attention_mma.cu"
#undef paged_attention_mma

namespace astrai::gpu {
bool g_tensor_cores = false;  // false: the CUDA-core kernel of gpu/attention.cu for every step
bool paged_attention_mma(cudaStream_t s, const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionBatch& b, float scale, Tensor out, int sms) {
  return g_tensor_cores && paged_attention_mma_backend(s, q, k, v, b, scale, out, sms);
}
}  // namespace astrai::gpu

namespace am = astrai::gpu::attention_mma;
using astrai::Rows;
using astrai::bench::bf;
using astrai::bench::download_bf16;
using astrai::bench::median_ms;
using astrai::bench::rel_err;
using bf16 = __nv_bfloat16;

namespace {

// ---- kernels under test --------------------------------------------------------------------------
// The tensor-core forward in several configurations (warps, 16-row blocks per warp, keys per tile,
// stages, blocks per SM); the first of each list is train_attention_mma.cuh's Config.

using PagedFn = cudaError_t (*)(cudaStream_t, const Rows&, const am::PagedKv&, int, int64_t, const am::Geo&,
                                const Rows&);
struct Variant {
  std::string name;
  PagedFn fn;
};

int g_sms = 132;  // the device's multiprocessors (main sets it)

// paged_attention's choice: the backend's Config, small tiles where the large ones leave SMs idle.
template <int kD>
cudaError_t config(cudaStream_t s, const Rows& q, const am::PagedKv& kv, int seqs, int64_t max_q,
                   const am::Geo& g, const Rows& out) {
  return am::paged_forward<kD>(s, q, kv, seqs, max_q, g, out, g_sms);
}

template <int kD, int kW, int kMb, int kT, int kS, int kB>
Variant variant() {
  return {"w" + std::to_string(kW) + " mb" + std::to_string(kMb) + " k" + std::to_string(kT) + " s" +
              std::to_string(kS) + " b" + std::to_string(kB),
          am::launch_paged_forward<kD, kW, kMb, kT, kS, kB>};
}

// The wgmma kernel (gpu/attention_wgmma.cuh): warpgroups of 64 rows, keys per tile.
template <int kD, int kWG, int kN, int kMinBlocks = 1, int kSub = kN>
Variant wgmma() {
  return {"wgmma w" + std::to_string(kWG) + " n" + std::to_string(kN) +
              (kMinBlocks > 1 ? " b" + std::to_string(kMinBlocks) : "") +
              (kSub < kN ? " s" + std::to_string(kSub) : ""),
          astrai::gpu::attention_wgmma::launch_paged_forward<kD, kWG, kN, kMinBlocks, kSub>};
}

// The warp-specialized kernel: a producer warpgroup and kC consumer warpgroups.
template <int kD, int kC, int kN, int kStages>
Variant wgmma_ws() {
  return {"wgmma ws c" + std::to_string(kC) + " n" + std::to_string(kN) + " st" + std::to_string(kStages),
          astrai::gpu::attention_wgmma::launch_paged_forward_ws<kD, kC, kN, kStages>};
}

template <int kD>
std::vector<Variant> variants();
template <>
std::vector<Variant> variants<64>() {
  using C = am::Config<64>;
  return {{"config", config<64>},
          variant<64, C::kPagedWarps, C::kPagedMb, C::kPagedT, C::kPagedStages, C::kPagedBlocks>(),
          variant<64, C::kPagedSmallWarps, C::kPagedSmallMb, C::kPagedSmallT, C::kPagedSmallStages,
                  C::kPagedSmallBlocks>(),
          variant<64, 4, 1, 64, 2, 2>(),
          variant<64, 4, 2, 64, 3, 1>(),
          variant<64, 4, 2, 32, 2, 2>(),
          variant<64, 4, 2, 128, 2, 1>(),
          variant<64, 8, 2, 64, 2, 1>(),
          wgmma<64, 3, 128>(),
          wgmma<64, 3, 64>(),
          wgmma<64, 2, 64>(),
          wgmma<64, 2, 128>(),
          wgmma<64, 4, 64>(),
          wgmma<64, 2, 64, 2>(),
          wgmma<64, 1, 64>(),
          wgmma<64, 1, 128>(),
          wgmma<64, 2, 128, 2, 64>(),
          wgmma<64, 1, 64, 4, 64>(),
          wgmma<64, 1, 128, 4, 64>(),
          wgmma<64, 3, 128, 1, 64>(),
          wgmma_ws<64, 3, 128, 3>(),
          wgmma_ws<64, 3, 128, 2>(),
          wgmma_ws<64, 2, 128, 2>()};
}
template <>
std::vector<Variant> variants<96>() {
  using C = am::Config<96>;
  return {{"config", config<96>},
          variant<96, C::kPagedWarps, C::kPagedMb, C::kPagedT, C::kPagedStages, C::kPagedBlocks>(),
          variant<96, 4, 2, 64, 2, 1>()};
}
template <>
std::vector<Variant> variants<128>() {
  using C = am::Config<128>;
  return {{"config", config<128>},
          variant<128, C::kPagedWarps, C::kPagedMb, C::kPagedT, C::kPagedStages, C::kPagedBlocks>(),
          variant<128, C::kPagedSmallWarps, C::kPagedSmallMb, C::kPagedSmallT, C::kPagedSmallStages,
                  C::kPagedSmallBlocks>(),
          variant<128, 8, 1, 32, 2, 2>(),
          variant<128, 4, 1, 64, 2, 2>(),
          variant<128, 4, 2, 32, 3, 1>(),
          variant<128, 4, 2, 64, 2, 1>(),
          variant<128, 8, 2, 32, 2, 1>(),
          wgmma<128, 3, 64>(),
          wgmma<128, 3, 128>(),
          wgmma<128, 2, 64>(),
          wgmma<128, 2, 128>(),
          wgmma<128, 2, 64, 2>(),
          wgmma<128, 1, 64>(),
          wgmma<128, 3, 128, 1, 64>(),
          wgmma<128, 2, 128, 1, 64>(),
          wgmma_ws<128, 2, 128, 2>(),
          wgmma_ws<128, 3, 64, 2>(),
          wgmma_ws<128, 3, 64, 3>(),
          wgmma_ws<128, 2, 128, 3>()};
}

std::vector<Variant> variants_of(int d) {
  return d == 64 ? variants<64>() : d == 96 ? variants<96>() : variants<128>();
}

// ---- data ----------------------------------------------------------------------------------------

struct Seq {
  int kv_len, q_len;  // the queries are the last q_len of the kv_len positions
};

struct Case {
  std::string what;
  int heads, kv_heads, d, page_size;
  std::vector<Seq> seqs;
  int sample = 0;  // (row, head) pairs checked; 0: all
};

// A cheap generator: the long cases fill hundreds of MB.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  float uniform() { return float(next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }  // [-1, 1)
  int below(int n) { return int(next() % uint64_t(n)); }
};

// The host side of a step: q a column slice of a [T][ld] buffer, K/V in a [slots][KVH][D] cache
// through a random page table; every value bf16-exact.
struct Problem {
  Case c;
  int S = 0, T = 0, max_pages = 0, n_pages = 0, max_q = 0, max_kv = 0;
  int64_t ld = 0;
  std::vector<int32_t> q_start{0}, kv_len, page_table;
  std::vector<float> q, kc, vc;
  float scale = 0;

  int64_t slot(int s, int j) const {
    return int64_t(page_table[size_t(s) * max_pages + j / c.page_size]) * c.page_size + j % c.page_size;
  }
};

Problem make_problem(const Case& c, Rng& rng) {
  Problem p;
  p.c = c;
  p.S = int(c.seqs.size());
  int needed = 0;
  for (const Seq& s : c.seqs) {
    const int pages = (s.kv_len + c.page_size - 1) / c.page_size;
    p.max_pages = std::max(p.max_pages, pages + 1);  // a spare entry past every sequence's pages
    needed += pages;
    p.q_start.push_back(p.q_start.back() + s.q_len);
    p.kv_len.push_back(s.kv_len);
    p.max_q = std::max(p.max_q, s.q_len);
    p.max_kv = std::max(p.max_kv, s.kv_len);
  }
  p.T = p.q_start.back();
  p.n_pages = needed + 3;
  std::vector<int32_t> perm(size_t(p.n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[size_t(rng.below(int(i)))]);
  p.page_table.assign(size_t(p.S) * p.max_pages, -1);  // the spare entries point nowhere
  size_t next = 0;
  for (int s = 0; s < p.S; ++s)
    for (int pg = 0; pg < (c.seqs[s].kv_len + c.page_size - 1) / c.page_size; ++pg)
      p.page_table[size_t(s) * p.max_pages + pg] = perm[next++];
  p.ld = int64_t(c.heads + 2 * c.kv_heads) * c.d;
  p.q.resize(size_t(p.T) * p.ld);
  for (auto& x : p.q) x = bf(2.0f * rng.uniform());
  const size_t cache = size_t(p.n_pages) * c.page_size * c.kv_heads * c.d;
  p.kc.resize(cache);
  p.vc.resize(cache);
  for (auto& x : p.kc) x = bf(rng.uniform());
  for (auto& x : p.vc) x = bf(rng.uniform());
  // Slots no sequence's keys use (its last page's tail, the spare pages) hold NaN: a kernel that
  // reads one and weighs it by 0 (a masked key's P) gives NaN, not the reference.
  std::vector<char> used(size_t(p.n_pages) * c.page_size, 0);
  for (int s = 0; s < p.S; ++s)
    for (int j = 0; j < c.seqs[s].kv_len; ++j) used[size_t(p.slot(s, j))] = 1;
  const size_t row = size_t(c.kv_heads) * c.d;
  for (size_t sl = 0; sl < used.size(); ++sl)
    if (!used[sl])
      for (size_t i = 0; i < row; ++i) p.kc[sl * row + i] = p.vc[sl * row + i] = std::nanf("");
  p.scale = 1.0f / std::sqrt(float(c.d));
  return p;
}

// The (row, head) pairs to check: all, or a sample that always has each sequence's first and last
// query (the shortest and longest key ranges).
std::vector<std::pair<int, int>> picks(const Problem& p, Rng& rng) {
  std::vector<std::pair<int, int>> r;
  if (p.c.sample == 0 || int64_t(p.T) * p.c.heads <= p.c.sample) {
    for (int t = 0; t < p.T; ++t)
      for (int h = 0; h < p.c.heads; ++h) r.push_back({t, h});
    return r;
  }
  for (int s = 0; s < p.S; ++s)
    for (int h = 0; h < p.c.heads; ++h) {
      r.push_back({p.q_start[s], h});
      r.push_back({p.q_start[s + 1] - 1, h});
    }
  while (int(r.size()) < p.c.sample) r.push_back({rng.below(p.T), rng.below(p.c.heads)});
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// float64 causal attention of the picked (row, head) pairs; out[i * D + c].
std::vector<double> reference(const Problem& p, const std::vector<std::pair<int, int>>& pk) {
  const int D = p.c.d, KVH = p.c.kv_heads, group = p.c.heads / KVH;
  std::vector<double> out(pk.size() * D);
  auto work = [&](size_t i0, size_t step) {
    std::vector<double> sc, acc(static_cast<size_t>(D));
    for (size_t i = i0; i < pk.size(); i += step) {
      const auto [t, h] = pk[i];
      const int s = int(std::upper_bound(p.q_start.begin(), p.q_start.end(), t) - p.q_start.begin()) - 1;
      const int pos = p.kv_len[s] - (p.q_start[s + 1] - p.q_start[s]) + (t - p.q_start[s]);
      const int kvh = h / group;
      const float* qr = &p.q[size_t(t) * p.ld + size_t(h) * D];
      sc.assign(size_t(pos + 1), 0.0);
      double m = -1e300;
      for (int j = 0; j <= pos; ++j) {
        const float* kr = &p.kc[size_t(p.slot(s, j) * KVH + kvh) * D];
        double d = 0;
        for (int c = 0; c < D; ++c) d += double(qr[c]) * kr[c];
        sc[size_t(j)] = d * p.scale;
        m = std::max(m, sc[size_t(j)]);
      }
      double sum = 0;
      for (auto& x : sc) sum += (x = std::exp(x - m));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j <= pos; ++j) {
        const float* vr = &p.vc[size_t(p.slot(s, j) * KVH + kvh) * D];
        const double w = sc[size_t(j)] / sum;
        for (int c = 0; c < D; ++c) acc[size_t(c)] += w * vr[c];
      }
      std::copy(acc.begin(), acc.end(), out.begin() + ptrdiff_t(i * D));
    }
  };
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> th;
  for (unsigned i = 0; i < n; ++i) th.emplace_back(work, i, n);
  for (auto& t : th) t.join();
  return out;
}

template <typename T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  CK(cudaMalloc(&d, std::max<size_t>(1, h.size()) * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
bf16* upload_bf16(const std::vector<float>& h) {
  std::vector<bf16> b(h.size());
  for (size_t i = 0; i < h.size(); ++i) b[i] = __float2bfloat16_rn(h[i]);
  return upload(b);
}

// The step on the device, in both the kernel's and the backend's terms.
struct Device {
  const Problem& p;
  bf16 *q, *kc, *vc, *out;
  int32_t *q_start, *kv_len, *pt;
  astrai::gpu::Scratch scratch;

  explicit Device(const Problem& pr)
      : p(pr),
        q(upload_bf16(pr.q)),
        kc(upload_bf16(pr.kc)),
        vc(upload_bf16(pr.vc)),
        q_start(upload(pr.q_start)),
        kv_len(upload(pr.kv_len)),
        pt(upload(pr.page_table)) {
    CK(cudaMalloc(&out, size_t(p.T) * p.c.heads * p.c.d * 2));
  }
  ~Device() {
    for (void* x : {(void*)q, (void*)kc, (void*)vc, (void*)out, (void*)q_start, (void*)kv_len, (void*)pt})
      cudaFree(x);
  }
  Rows q_rows() const {
    return Rows{reinterpret_cast<char*>(q), 2, int64_t(p.T) * p.c.heads, p.c.d, p.c.heads, p.ld, p.c.d};
  }
  Rows out_rows() const {
    return Rows{reinterpret_cast<char*>(out), 2,    int64_t(p.T) * p.c.heads, p.c.d, p.c.heads,
                int64_t(p.c.heads) * p.c.d,   p.c.d};
  }
  am::Geo geo() const {
    am::Geo g;
    g.heads = p.c.heads;
    g.kv_heads = p.c.kv_heads;
    g.group = p.c.heads / p.c.kv_heads;
    g.scale = p.scale;
    g.scale_log2 = p.scale * astrai::gpu::kLog2e;
    return g;
  }
  void tensor_core(const Variant& v) {
    am::PagedKv kv;
    kv.k_cache = kc;
    kv.v_cache = vc;
    kv.q_start = q_start;
    kv.kv_len = kv_len;
    kv.page_table = pt;
    kv.max_pages = p.max_pages;
    kv.page_size = p.c.page_size;
    kv.page_shift =
        std::has_single_bit(unsigned(p.c.page_size)) ? std::countr_zero(unsigned(p.c.page_size)) : -1;
    kv.kv_heads = p.c.kv_heads;
    kv.n_pages = p.n_pages;
    CK(v.fn(nullptr, q_rows(), kv, p.S, p.max_q, geo(), out_rows()));
  }
  // astrai::gpu::paged_attention as the backend runs it (tensor cores for long query runs), with
  // the step's leading one-query sequences as AttentionBatch::num_decode_seqs, or 0: one kernel;
  // over sequences [s0, s0 + n) of the step (n < 0: to the end), to time a part of it alone.
  void dispatch(int num_decode_seqs, int s0 = 0, int n = -1) {
    astrai::gpu::g_tensor_cores = true;
    paged_attention(num_decode_seqs, s0, n);
    astrai::gpu::g_tensor_cores = false;
  }
  void cuda_core() { paged_attention(0, 0, -1); }
  void paged_attention(int num_decode_seqs, int s0, int n) {
    using astrai::DType;
    using astrai::Tensor;
    const auto dev = astrai::Device::cuda;
    const int64_t T = p.T, H = p.c.heads, KVH = p.c.kv_heads, D = p.c.d;
    const int64_t slots = int64_t(p.n_pages) * p.c.page_size;
    if (n < 0) n = p.S - s0;
    int max_q = 0, max_kv = 0;
    for (int s = s0; s < s0 + n; ++s) {
      max_q = std::max(max_q, p.c.seqs[size_t(s)].q_len);
      max_kv = std::max(max_kv, p.c.seqs[size_t(s)].kv_len);
    }
    Tensor qt(q, DType::bf16, {T, H, D}, dev);
    qt.stride = {p.ld, D, 1, 0};
    Tensor kt(kc, DType::bf16, {slots, KVH, D}, dev), vt(vc, DType::bf16, {slots, KVH, D}, dev);
    Tensor ot(out, DType::bf16, {T, H, D}, dev);
    astrai::AttentionBatch b{Tensor(q_start + s0, DType::i32, {n + 1}, dev),
                             Tensor(kv_len + s0, DType::i32, {n}, dev),
                             Tensor(pt + int64_t(s0) * p.max_pages, DType::i32, {n, p.max_pages}, dev),
                             n,
                             p.max_pages,
                             p.c.page_size,
                             max_q,
                             max_kv,
                             num_decode_seqs};
    astrai::gpu::paged_attention(nullptr, qt, kt, vt, b, p.scale, ot, scratch);
  }
};

bool check_one(Device& dev, const std::vector<std::pair<int, int>>& pk, const std::vector<double>& ref,
               const std::string& name, const std::function<void()>& run) {
  const Problem& p = dev.p;
  const size_t no = size_t(p.T) * p.c.heads * p.c.d;
  CK(cudaMemset(dev.out, 0xff, no * 2));  // NaN
  run();
  CK(cudaDeviceSynchronize());
  const std::vector<float> all = download_bf16(dev.out, no);
  std::vector<float> got(pk.size() * p.c.d);
  for (size_t i = 0; i < pk.size(); ++i)
    std::copy_n(&all[(size_t(pk[i].first) * p.c.heads + pk[i].second) * p.c.d], p.c.d, &got[i * p.c.d]);
  size_t nan_rows = 0;  // every row is written, also the ones not picked
  for (size_t i = 0; i < no; i += size_t(p.c.d)) nan_rows += !std::isfinite(all[i]);
  const double e = rel_err(got, ref, [](size_t) { return true; });
  const bool ok = e < 1e-2 && nan_rows == 0;
  std::printf("  %-4s %-22s rel err %.2e over %zu (row, head) pairs%s\n", ok ? "ok" : "FAIL", name.c_str(), e,
              pk.size(), nan_rows ? (", " + std::to_string(nan_rows) + " rows unwritten").c_str() : "");
  return ok;
}

// The case's leading one-query sequences (AttentionBatch::num_decode_seqs).
int leading_decodes(const Case& c) {
  int n = 0;
  while (n < int(c.seqs.size()) && c.seqs[size_t(n)].q_len == 1) ++n;
  return n;
}

std::string describe(const Case& c) {
  std::string d = c.what + ": heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " d " +
                  std::to_string(c.d) + " page " + std::to_string(c.page_size) + " (q, kv)";
  for (size_t i = 0; i < c.seqs.size() && i < 6; ++i)
    d += " " + std::to_string(c.seqs[i].q_len) + "/" + std::to_string(c.seqs[i].kv_len);
  if (c.seqs.size() > 6) d += " ...";
  return d;
}

bool check_case(const Case& c, Rng& rng, bool all_variants) {
  std::printf("check %s\n", describe(c).c_str());
  const Problem p = make_problem(c, rng);
  const auto pk = picks(p, rng);
  const std::vector<double> ref = reference(p, pk);
  Device dev(p);
  const std::vector<Variant> vs = variants_of(c.d);
  bool ok = true;
  for (size_t i = 0; i < vs.size(); ++i)
    if (i == 0 || all_variants || vs[i].name.starts_with("wgmma"))
      ok = check_one(dev, pk, ref, "tensor-core " + vs[i].name, [&] { dev.tensor_core(vs[i]); }) && ok;
  if (p.max_kv <= 10000) ok = check_one(dev, pk, ref, "cuda-core", [&] { dev.cuda_core(); }) && ok;
  if (const int nd = leading_decodes(c); nd > 0) {
    ok = check_one(dev, pk, ref, "dispatch, one kernel", [&] { dev.dispatch(0); }) && ok;
    ok = check_one(dev, pk, ref, "dispatch, two kernels", [&] { dev.dispatch(nd); }) && ok;
  }
  return ok;
}

// ---- timing --------------------------------------------------------------------------------------

double causal_flop(const Problem& p) {
  double pairs = 0;
  for (const Seq& s : p.c.seqs)  // query i at position kv - q + i sees kv - q + i + 1 keys
    pairs += double(s.q_len) * (s.kv_len - s.q_len) + double(s.q_len) * (s.q_len + 1) / 2;
  return 4.0 * pairs * p.c.d * p.c.heads;
}

// cuda_core false: the CUDA-core kernel is neither timed nor printed.
void time_case(const Case& c, Rng& rng, int reps, bool variants_too, bool cuda_core = true) {
  const Problem p = make_problem(c, rng);
  Device dev(p);
  const double flop = causal_flop(p);
  const std::vector<Variant> vs = variants_of(c.d);
  const int old_reps = p.max_kv >= 16384 ? 1 : reps;
  const double old_ms = cuda_core ? median_ms([&] { dev.cuda_core(); }, old_reps) : 0.0;
  const double new_ms = median_ms([&] { dev.tensor_core(vs[0]); }, reps);
  std::printf("time %-58s tensor-core %8.3f ms %6.1f TFLOP/s", describe(c).c_str(), new_ms,
              flop / new_ms * 1e-9);
  if (cuda_core)
    std::printf(" | cuda-core %8.3f ms %6.1f TFLOP/s | x%.1f", old_ms, flop / old_ms * 1e-9, old_ms / new_ms);
  std::printf("\n");
  if (!variants_too) return;
  for (size_t i = 1; i < vs.size(); ++i) {
    const double ms = median_ms([&] { dev.tensor_core(vs[i]); }, reps);
    std::printf("     variant %-20s %8.3f ms %6.1f TFLOP/s\n", vs[i].name.c_str(), ms, flop / ms * 1e-9);
  }
}

// A mixed step (B decode rows, then one chunk): paged_attention's dispatch on one kernel (tensor
// cores for every sequence, as before num_decode_seqs) and on two (the decode kernel for the decode
// rows, tensor cores for the chunk), and each part alone.
void time_mixed(int d, int B, int decode_kv, int chunk_q, int chunk_prefix, Rng& rng, int reps) {
  std::vector<Seq> seqs(size_t(B), Seq{decode_kv, 1});
  seqs.push_back({chunk_prefix + chunk_q, chunk_q});
  const Problem p = make_problem({"mixed", 32, 8, d, 16, seqs}, rng);
  Device dev(p);
  const double one = median_ms([&] { dev.dispatch(0); }, reps);
  const double two = median_ms([&] { dev.dispatch(B); }, reps);
  const double dec = median_ms([&] { dev.dispatch(0, 0, B); }, reps);
  const double chunk = median_ms([&] { dev.dispatch(0, B, 1); }, reps);
  std::printf(
      "mixed d%-3d %2d decodes at %5d keys + chunk %4d after %4d: one kernel %7.3f ms | two %7.3f ms "
      "(x%.2f) | decodes alone %7.3f + chunk alone %7.3f = %7.3f ms\n",
      d, B, decode_kv, chunk_q, chunk_prefix, one, two, one / two, dec, chunk, dec + chunk);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = astrai::bench::has_flag(argc, argv, "--quick");
  const bool check_only = astrai::bench::has_flag(argc, argv, "--check-only");
  // --prefill-only: no checks; the tensor-core prefills alone (to compare two builds of the header).
  const bool prefill_only = astrai::bench::has_flag(argc, argv, "--prefill-only");
  const bool mixed_only = astrai::bench::has_flag(argc, argv, "--mixed");
  // --profile: the backend's dispatch of one causal 32k prefill at head_dim 128, then 64 (32 heads,
  // 8 KV heads), three times each and nothing else, for a profiler (ncu -k regex:paged_forward
  // --launch-skip 2 --launch-count 1 catches the third at head_dim 128).
  const bool profile = astrai::bench::has_flag(argc, argv, "--profile");
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a run cut short by a timeout keeps its lines
  int dev = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev));
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", (unsigned long long)seed);
  Rng rng(seed);
  const std::vector<Seq> ragged = {{1, 1}, {17, 17}, {333, 333}, {1000, 1000}};
  const std::vector<Case> checks = {
      {"ragged prefill", 32, 8, 128, 16, ragged, 4096},
      {"ragged prefill", 8, 2, 64, 16, ragged},
      {"ragged prefill 1:1", 4, 4, 64, 3, ragged},
      {"ragged prefill 1:1", 4, 4, 128, 16, {{77, 77}, {500, 500}}},
      {"extend", 8, 2, 128, 16, {{3100, 100}, {1017, 17}, {500, 1}, {64, 64}}, 4096},
      {"extend", 8, 2, 64, 3, {{3100, 100}, {1017, 17}, {500, 1}, {200, 199}}, 4096},
      {"extend 1:1", 4, 4, 64, 16, {{2000, 333}, {48, 47}}, 4096},
      {"ragged prefill", 8, 2, 96, 16, {{1, 1}, {17, 17}, {333, 333}, {1100, 1000}}, 4096},
      {"8k prefill", 8, 2, 128, 16, {{8192, 8192}}, 1024},
      {"32k prefill", 4, 1, 64, 16, {{32768, 32768}}, 192},
  };
  const int reps = quick ? 3 : 10;
  if (profile) {
    for (int d : {128, 64}) {
      const Problem p = make_problem({"prefill", 32, 8, d, 16, {{32768, 32768}}}, rng);
      Device dev(p);
      for (int i = 0; i < 3; ++i) dev.dispatch(0);
      CK(cudaDeviceSynchronize());
    }
    return 0;
  }
  // --short: steps of short prompts (many sequences, ragged), where the dispatch chooses between the
  // plain kernel (128-row blocks) and the warp-specialized one (192-row blocks) below kSpecializedKv.
  if (astrai::bench::has_flag(argc, argv, "--short")) {
    for (int d : {128, 64}) {
      for (int n : {128, 256, 512, 1024, 2048})
        time_case({"short prompts", 32, 8, d, 16, std::vector<Seq>(size_t(2048 / n), Seq{n, n})}, rng, reps,
                  true, false);
      time_case({"ragged prompts",
                 32,
                 8,
                 d,
                 16,
                 {{37, 37}, {500, 500}, {90, 90}, {1000, 1000}, {256, 256}, {165, 165}}},
                rng, reps, true, false);
      time_case({"extend 200 after 1k", 32, 8, d, 16, std::vector<Seq>(8, Seq{1224, 200})}, rng, reps, true,
                false);
    }
    return 0;
  }
  if (prefill_only) {
    for (int d : {128, 64})
      for (int n : {1024, 2048, 4096, 8192, 16384, 32768})
        time_case({"prefill", 32, 8, d, 16, {{n, n}}}, rng, reps, true, false);
    // The engine's chunked prefill (max_prefill_tokens 2048): the last chunk of an 8k and a 32k prompt.
    for (int kv : {8192, 32768}) time_case({"chunk", 32, 8, 64, 16, {{kv, 2048}}}, rng, reps, true, false);
    return 0;
  }
  // Mixed steps: leading decode rows, then chunks (and more decode rows, which stay with the chunks).
  std::vector<Seq> mixed31(31, Seq{4096, 1}), mixed8(8, Seq{700, 1});
  mixed31.push_back({4096, 2048});
  mixed8.insert(mixed8.end(), {{2000, 100}, {17, 17}, {513, 1}, {90, 1}});
  const std::vector<Case> mixed_checks = {
      {"mixed", 32, 8, 64, 16, mixed31, 8192},   {"mixed", 32, 8, 128, 16, mixed31, 8192},
      {"mixed", 8, 2, 64, 3, mixed8, 4096},      {"mixed", 8, 2, 128, 16, mixed8, 4096},
      {"mixed 1:1", 4, 4, 64, 16, mixed8, 4096}, {"mixed 1:1", 4, 4, 128, 3, mixed8, 4096},
  };
  bool ok = true;
  if (!mixed_only)
    for (size_t i = 0; i < checks.size(); ++i) ok = check_case(checks[i], rng, i < 8) && ok;
  for (const Case& c : mixed_checks) ok = check_case(c, rng, false) && ok;
  std::printf("correctness: %s\n", ok ? "all ok" : "FAILURES");
  if (check_only) return ok ? 0 : 1;
  // Serving steps that admit a request: B decode rows and one prefill chunk after 2k keys; the
  // session's reference case (31 decodes at 4k + 2k queries) first, qwen3-8b's d128 at 4k only.
  time_mixed(128, 31, 4096, 2048, 2048, rng, 20);
  for (int q : {2048, 128})
    for (int kv : {4096, 512})
      for (int B : {31, 8, 63}) time_mixed(64, B, kv, q, 2048, rng, 20);
  for (int q : {2048, 128})
    for (int B : {31, 63})
      if (q != 2048 || B != 31) time_mixed(128, B, 4096, q, 2048, rng, 20);
  if (mixed_only) return ok ? 0 : 1;
  for (int d : {128, 64})
    for (int n : {1024, 2048, 8192, 32768}) time_case({"prefill", 32, 8, d, 16, {{n, n}}}, rng, reps, true);
  // Extends (chunks after a cached prefix) to place paged_attention's dispatch threshold.
  for (int q : {8, 16, 32, 64, 128, 512})
    time_case({"extend", 32, 8, 128, 16, {{4096 + q, q}}}, rng, reps, true);
  for (int q : {16, 64})
    time_case({"extend x8", 32, 8, 128, 16, std::vector<Seq>(8, Seq{2048 + q, q})}, rng, reps, false);
  {  // A mixed step: one prefill chunk and 31 decode rows, all on one path (the dispatch is per step).
    std::vector<Seq> mixed(31, Seq{4096, 1});
    mixed.insert(mixed.begin(), Seq{4096, 2048});
    time_case({"chunk + 31 decodes", 32, 8, 128, 16, mixed}, rng, reps, false);
  }
  // The engine's chunked prefill (max_prefill_tokens 2048): the last chunk of an 8k and a 32k prompt.
  for (int d : {128, 64})
    for (int kv : {8192, 32768}) time_case({"chunk", 32, 8, d, 16, {{kv, 2048}}}, rng, reps, false);
  return ok ? 0 : 1;
}
