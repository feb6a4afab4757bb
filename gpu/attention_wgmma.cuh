// paged_attention's prefill and extend steps on Hopper's warpgroup MMA (wgmma, sm_90a): the
// FlashAttention forward of train_attention_mma.cuh's PagedKv instance (same spans, grid, masking
// and online softmax in exp2 units), with both GEMMs issued by whole warpgroups from shared memory,
// where mma.sync spends registers and issue slots on ldmatrix. Needs nothing but CUDA, so that
// bench/prefill_attention_bench.cu builds it on a machine with only nvcc. Two kernels: the one
// below, whose warpgroups all copy and compute, and further down a warp-specialized one (a producer
// warpgroup copies, the others compute) that the backend takes from 4k keys.
//
// Block: kWG warpgroups of 64 query rows each (one head of one sequence); key tiles of kN keys
// stream through a ring of shared-memory stages with cp.async (all threads load, one barrier a
// tile). Per tile and warpgroup: S = Q K^T (kD / 16 wgmma, Q and K K-major in shared memory), the
// mask and the online softmax on S in registers, P rounded to bf16 in registers (an accumulator
// fragment of S is, element for element, the A fragment of P), O += P V (kN / 16 wgmma, V read
// transposed). Q, K and V tiles share one layout: blocks of 64 columns, rows of 128 bytes with the
// 128-byte swizzle (wgmma.cuh). Every output element is summed in an order fixed by the shapes.
//
// Tried (docs/performance.md): issuing the next tile's S = Q K^T before this tile's softmax, so the
// tensor cores run under it (FlashAttention-3's pipelining within a warpgroup). ptxas serialized
// every wgmma of that loop (C7513-C7515: other instructions define an operand register of a running
// wgmma), whatever the placement of waits, fences and register pins, and it measured slower. Issuing
// the last tile's P V after this tile's S instead (one S array) is not serialized, and lost 2-6%.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "gpu/train_attention_mma.cuh"
#include "gpu/wgmma.cuh"

namespace astrai::gpu::attention_wgmma {

using attention_mma::Geo;
using attention_mma::PagedKv;
using attention_mma::Span;

template <int kD, int kWG, int kN>
struct Shape {
  static_assert(kD == 64 || kD == 128, "head_dim 64 or 128");
  static_assert(kN == 64 || kN == 128, "64 or 128 keys a tile");
  static constexpr int kM = 64 * kWG;         // query rows a block
  static constexpr int kThreads = 128 * kWG;  // one warpgroup per 64 rows
  static constexpr int kStages = 2;
  static constexpr int kQ = kM * kD;   // bf16 elements of the Q tile
  static constexpr int kKv = kN * kD;  // and of one K or V stage
  static constexpr size_t kSmem = size_t(kQ + 2 * kStages * kKv) * sizeof(bf16) + 1024;  // + alignment
};

// A warpgroup's part of the online softmax over one tile of scores s (its rows r_lo and r_lo + 8):
// masks keys past a row's position or the sequence, turns s into p = exp2(s * scale_log2 - m) in
// place, and updates the sums l; returns whether O must be rescaled by alpha. Without kLazy the
// maxima in use, m, follow every tile's. With kLazy they move only when some row of the warp sees a
// tile maximum more than kSlack above its own (then every row of the warp takes its new maximum and
// alpha the factors that rescale O and l); otherwise p may reach 2^kSlack, exact after the final
// division by l, and nothing is rescaled (FlashAttention-4's conditional rescaling: past the first
// tiles a row's maximum seldom grows that much). Measured (docs/performance.md): 3% faster at
// head_dim 128, whose O rescale is 64 multiplies a tile; 1-2% slower at 64 (32, and the vote).
// (Reading s and writing p straight into bf16 fragments instead measured 20-45% slower.)
constexpr float kSlack = 8.0f;
template <int kN, bool kLazy>
__device__ __forceinline__ bool softmax_tile(float* s, int j0, const int* pos_row, int n_kv, bool edge,
                                             float scale_log2, float* m, float* l, float* alpha) {
  const int qc = int(threadIdx.x % 4);
  if (edge) {
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nt * 8 + qc * 2 + (e & 1);
        if (j > pos_row[e / 2] || j >= n_kv) s[nt * 4 + e] = -INFINITY;
      }
  }
  // Row maxima and sums in four independent chains each, as train_attention_mma.cuh's forward.
  float mx[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float part[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
      part[(2 * nt) % 4] = fmaxf(part[(2 * nt) % 4], s[nt * 4 + 2 * r]);
      part[(2 * nt + 1) % 4] = fmaxf(part[(2 * nt + 1) % 4], s[nt * 4 + 2 * r + 1]);
    }
    mx[r] = attention_mma::quad_max(fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]))) * scale_log2;
  }
  const bool grow = !kLazy || __any_sync(0xffffffffu, mx[0] > m[0] + kSlack || mx[1] > m[1] + kSlack);
  float m_use[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (grow) {
      const float m_new = fmaxf(m[r], mx[r]);
      alpha[r] = fast_exp2(m[r] - (m_new == -INFINITY ? 0.0f : m_new));
      m[r] = m_new;
    }
    m_use[r] = m[r] == -INFINITY ? 0.0f : m[r];  // a row that has seen no key yet: p = 0, not NaN
  }
  float part[2][4];  // the first two column tiles start the chains (no adds to zero)
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = fast_exp2(fmaf(s[nt * 4 + e], scale_log2, -m_use[e / 2]));
      s[nt * 4 + e] = p;
      float& acc = part[e / 2][(2 * nt + (e & 1)) % 4];
      acc = nt < 2 ? p : acc + p;
    }
#pragma unroll
  for (int r = 0; r < 2; ++r)
    l[r] = (grow ? l[r] * alpha[r] : l[r]) + ((part[r][0] + part[r][1]) + (part[r][2] + part[r][3]));
  return grow;
}

// o *= alpha by row when `rescale`, then P (s rounded to bf16, as A fragments) into pa.
template <int kD, int kN>
__device__ __forceinline__ void rescale_and_pack(float* o, bool rescale, const float* alpha, const float* s,
                                                 uint32_t (*pa)[4]) {
  if (rescale) {
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      o[nt * 4 + 0] *= alpha[0];
      o[nt * 4 + 1] *= alpha[0];
      o[nt * 4 + 2] *= alpha[1];
      o[nt * 4 + 3] *= alpha[1];
    }
  }
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      pa[kk][i] = attention_mma::pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}

// A K or V stage of kN swizzled rows as PagedKv::copy_keys's destination.
template <int kN>
struct SwizzledRows {
  __device__ __forceinline__ int operator()(int r, int c) const { return wgmma::swizzled<kN>(r, c); }
};

// Queries [first, first + kRows) of head h (zeros past the sequence) into rows [r0, r0 + kRows) of
// the block's swizzled [kM][kD] Q tile, copied by kThreads threads from thread t.
template <int kD, int kM, int kRows, int kThreads>
__device__ __forceinline__ void copy_query_rows(const Rows& q, const Span& sp, int h, int64_t first, int r0,
                                                int t, bf16* qs) {
  constexpr int kVec = kD / 8;
  static_assert(kRows * kVec % kThreads == 0, "every thread copies as many chunks");
#pragma unroll
  for (int i = 0; i < kRows * kVec / kThreads; ++i) {
    const int e = t + i * kThreads, r = e / kVec, c = e % kVec;
    const bool ok = first + r < sp.n_q;
    cp_async16(qs + wgmma::swizzled<kM>(r0 + r, c),
               attention_mma::head_row(q, sp.row0 + (ok ? first + r : 0), h) + c * 8, ok);
  }
}

// s = Q K^T for the warpgroup's 64 query rows (q_lo: their descriptor low word in a Q tile of kM
// rows) and kS keys of a K tile of kN rows (k_lo: the first key's), issued and committed.
template <int kD, int kM, int kN, int kS>
__device__ __forceinline__ void qk_gemm(float* s, uint32_t q_lo, uint32_t k_lo) {
  constexpr uint32_t kHi = wgmma::desc_hi(1024);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk)
    wgmma::mma_ss<kS>(s, wgmma::desc_of(q_lo + (((kk / 4) * kM * 128 + (kk % 4) * 32) >> 4), kHi),
                      wgmma::desc_of(k_lo + (((kk / 4) * kN * 128 + (kk % 4) * 32) >> 4), kHi), kk > 0);
  wgmma::commit();
}
// o += P V for kS keys (pa: P as A fragments; v_lo: the first key's V row), issued and committed.
template <int kD, int kS>
__device__ __forceinline__ void pv_gemm(float* o, const uint32_t (*pa)[4], uint32_t v_lo) {
  constexpr uint32_t kHi = wgmma::desc_hi(1024);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kS / 16; ++kk)
    wgmma::mma_rs_tb<kD>(o, pa[kk], wgmma::desc_of(v_lo + ((kk * 16 * 128) >> 4), kHi), true);
  wgmma::commit();
}

// The warpgroup's output rows (its queries from w0; this thread's rows r_lo and r_lo + 8, columns
// qc * 2 of each 8): o / l, rounded to bf16.
template <int kD>
__device__ __forceinline__ void store_rows(const float* o, const float* l, const Span& sp, int64_t w0,
                                           int r_lo, int qc, int h, const Rows& out) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float lr = attention_mma::quad_sum(l[r]);
    const int64_t t = w0 + r_lo + 8 * r;
    if (t >= sp.n_q) continue;
    const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
    bf16* orow = attention_mma::head_row_mut(out, sp.row0 + t, h);
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt)
      *reinterpret_cast<__nv_bfloat162*>(orow + nt * 8 + qc * 2) =
          __floats2bfloat162_rn(o[nt * 4 + 2 * r] * inv, o[nt * 4 + 2 * r + 1] * inv);
  }
}

// kMinBlocks: blocks a multiprocessor must hold at once; ptxas caps the registers to fit them (two
// blocks of two warpgroups: 128 a thread). kSub: keys a warpgroup's GEMMs and softmax take at once,
// a part of the kN a stage holds, so a tile's registers (S, P) stay those of kSub keys while the
// block meets at its barrier once per kN.
template <int kD, int kWG, int kN, int kMinBlocks = 1, int kSub = kN>
__global__ void __launch_bounds__(128 * kWG, kMinBlocks)
    paged_forward_kernel(Rows q, PagedKv kv, Geo g, Rows out) {
#if ASTRAI_WGMMA
  static_assert(kN % kSub == 0 && (kSub == 64 || kSub == 128), "kSub: 64 or 128 keys, a part of kN");
  using S = Shape<kD, kWG, kN>;
  constexpr int kStages = S::kStages;
  extern __shared__ unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  bf16* ks = qs + S::kQ;  // kStages stages each
  bf16* vs = ks + kStages * S::kKv;
  const int h = kv.head(), kvh = h / g.group;
  const int wg = int(threadIdx.x) / 128, warp = int(threadIdx.x % 128) / 32, lane = int(threadIdx.x % 32);
  const Span sp = kv.span();
  const int64_t q0 = kv.query_tile() * S::kM;
  if (q0 >= sp.n_q) return;  // a grid sized for the longest sequence of a ragged batch
  const int64_t q_end = min(q0 + S::kM, sp.n_q);
  const int64_t j_end = sp.pos0 + q_end;  // the last query's keys end here
  const int tiles = int((j_end + kN - 1) / kN);
  const int32_t* pages = kv.pages();

  const bf16* k_head = kv.k_cache + kvh * kD;  // the KV head in slot 0 of each cache
  const bf16* v_head = kv.v_cache + kvh * kD;
  const bool lane_pages = kv.lane_pages();
  auto load_tile = [&](int it) {
    kv.copy_keys<kN, kD, S::kThreads, true>(sp, pages, lane_pages, it * kN, int(threadIdx.x), lane, k_head,
                                            v_head, ks + (it % kStages) * S::kKv,
                                            vs + (it % kStages) * S::kKv, SwizzledRows<kN>{});
  };
  copy_query_rows<kD, S::kM, S::kM, S::kThreads>(q, sp, h, q0, 0, int(threadIdx.x), qs);
  load_tile(0);  // in one group with Q
  cp_async_commit();
  // The block waits for key tile `it` (each thread for its own copies, then the barrier) and makes
  // it visible to wgmma, then issues tile it + kStages - 1 into the stage no warpgroup reads any more.
  auto next_tile = [&](int it) {
    cp_async_wait<0>();
    wgmma::fence_async_shared();
    __syncthreads();
    if (it + kStages - 1 < tiles) load_tile(it + kStages - 1);
    cp_async_commit();
  };

  const int64_t w0 = q0 + wg * 64;   // the warpgroup's first query
  const int64_t wp0 = sp.pos0 + w0;  // and its position
  const int r_lo = warp * 16 + lane / 4, qc = lane % 4;
  const int pos_row[2] = {int(wp0 + r_lo), int(wp0 + r_lo + 8)};  // positions fit int (kv_len is int32)
  // The warpgroup's tiles: those with a key at or before its last row's position.
  const int active = w0 < sp.n_q ? min(tiles, int((wp0 + 64 + kN - 1) / kN)) : 0;
  // Descriptor low words (wgmma.cuh): the warpgroup's Q rows, stage 0's K and V; the rest are
  // fixed offsets from these.
  constexpr uint32_t kStageStep = S::kKv * sizeof(bf16) >> 4;
  const uint32_t q_lo = wgmma::desc_lo(smem_addr(qs) + uint32_t(wg * 64 * 128), 16);
  const uint32_t k_lo = wgmma::desc_lo(smem_addr(ks), 16), v_lo = wgmma::desc_lo(smem_addr(vs), kN * 128);
  // The low word of keys [sub * kSub, +kSub) of tile it in a stage from lo.
  auto at = [&](uint32_t lo, int it, int sub) {
    return lo + (it % kStages) * kStageStep + ((sub * kSub * 128) >> 4);
  };
  auto edge = [&](int j0) { return j0 + kSub - 1 > wp0 || j0 + kSub > sp.n_kv; };

  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
  float s[kSub / 2];
  uint32_t pa[kSub / 16][4];

  for (int it = 0; it < tiles; ++it) {
    next_tile(it);
    if (it >= active) continue;  // every key of the tile is in the warpgroup's future
#pragma unroll
    for (int sub = 0; sub < kN / kSub; ++sub) {
      const int j0 = it * kN + sub * kSub;
      if (kSub < kN && j0 > wp0 + 63) break;  // these keys are in the future of all its rows
      qk_gemm<kD, S::kM, kN, kSub>(s, q_lo, at(k_lo, it, sub));
      wgmma::wait<0>();
      wgmma::pin<kSub / 2>(s);
      const bool rescale =
          softmax_tile<kSub, kD == 128>(s, j0, pos_row, int(sp.n_kv), edge(j0), g.scale_log2, m, l, alpha);
      rescale_and_pack<kD, kSub>(o, rescale, alpha, s, pa);
      pv_gemm<kD, kSub>(o, pa, at(v_lo, it, sub));
      wgmma::wait<0>();
      wgmma::pin<kD / 2>(o);
    }
  }

  store_rows<kD>(o, l, sp, w0, r_lo, qc, h, out);
#endif
}

// ---- The warp-specialized kernel ------------------------------------------------------------------
// paged_forward_kernel's arithmetic with the copies taken off the computing warps (FlashAttention-3's
// producer and consumers): warpgroup 0 copies key tiles into a ring of kStages stages and marks each
// full on an mbarrier; kC consumer warpgroups of 64 query rows each wait for a stage, compute on it
// and mark it empty on a second mbarrier. No warpgroup waits at a block-wide barrier for another's
// softmax, and none spends issue slots on copies. setmaxnreg gives the producer's registers to the
// consumers (three consumers: 152 a thread, where paged_forward_kernel's three warpgroups get 168
// and copy besides).
//
// Tried (docs/performance.md, sixteenth session): FlashAttention-3's two schedules on top, the
// consumers issuing their GEMMs in turn (named barriers) and each issuing tile it's S with tile
// it - 1's P V to run the softmax under it: neither gained. Two consumers lose to three.
namespace mbar {
#if ASTRAI_WGMMA
__device__ __forceinline__ void init(uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
// Release: this thread's earlier writes are visible to a thread whose wait sees the phase complete.
__device__ __forceinline__ void arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(b)) : "memory");
}
// Returns once the phase of parity `parity` is complete (at once for the phase before the current one).
__device__ __forceinline__ void wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(smem_addr(b)),
      "r"(parity)
      : "memory");
}
// The threads of named barrier `id` (count of them, whole warps) wait for each other.
__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
template <int kRegs>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
#endif
}  // namespace mbar

template <int kD, int kC, int kN, int kStages>
struct WsShape {
  static_assert(kC == 2 || kC == 3, "two or three consumer warpgroups");
  static constexpr int kM = 64 * kC;  // query rows a block
  static constexpr int kThreads = 128 * (kC + 1);
  static constexpr int kQ = kM * kD;
  static constexpr int kKv = kN * kD;
  // Registers a thread after setmaxnreg: within the block's 65,536 (three consumers) or 384 x 168
  // (two). Three consumers: 40 for the producer (at 32 its copy loop spilled 12 bytes) and 152 each;
  // 5-9% faster at head_dim 64 and 3-6% at 128 than 32 / 160 on the H200 (docs/performance.md).
  static constexpr int kProducerRegs = kC == 2 ? 56 : 40;
  static constexpr int kConsumerRegs = kC == 2 ? 224 : 152;
  static_assert(128 * (kProducerRegs + kC * kConsumerRegs) <= 65536);
  static constexpr size_t kSmem =
      size_t(kQ + 2 * kStages * kKv) * sizeof(bf16) + 1024 + 2 * kStages * sizeof(uint64_t);
};

template <int kD, int kC, int kN, int kStages>
__global__ void __launch_bounds__(128 * (kC + 1), 1)
    paged_forward_ws_kernel(Rows q, PagedKv kv, Geo g, Rows out) {
#if ASTRAI_WGMMA
  using S = WsShape<kD, kC, kN, kStages>;
  extern __shared__ unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  bf16* ks = qs + S::kQ;  // kStages stages each
  bf16* vs = ks + kStages * S::kKv;
  uint64_t* full = reinterpret_cast<uint64_t*>(vs + kStages * S::kKv);  // a stage's keys have landed
  uint64_t* empty = full + kStages;                                     // no consumer reads it any more
  const int h = kv.head(), kvh = h / g.group;
  const int wg = int(threadIdx.x) / 128, warp = int(threadIdx.x % 128) / 32, lane = int(threadIdx.x % 32);
  const Span sp = kv.span();
  const int64_t q0 = kv.query_tile() * S::kM;
  if (q0 >= sp.n_q) return;  // a grid sized for the longest sequence of a ragged batch
  const int64_t j_end = sp.pos0 + min(q0 + S::kM, sp.n_q);  // the last query's keys end here
  const int tiles = int((j_end + kN - 1) / kN);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar::init(&full[i], 128);      // every producer thread, once its copies have landed
      mbar::init(&empty[i], kC * 4);  // every consumer warp
    }
  }
  __syncthreads();

  if (wg == 0) {  // the producer: every tile of the block, in order, each into the stage it frees
    mbar::regs_dec<S::kProducerRegs>();
    const int t = int(threadIdx.x);
    const bf16* k_head = kv.k_cache + kvh * kD;
    const bf16* v_head = kv.v_cache + kvh * kD;
    const int32_t* pages = kv.pages();
    const bool lane_pages = kv.lane_pages();
    for (int it = 0; it < tiles; ++it) {
      const int st = it % kStages;
      mbar::wait(&empty[st], ((it / kStages) & 1) ^ 1);  // the consumers are done with tile it - kStages
      kv.copy_keys<kN, kD, 128, true>(sp, pages, lane_pages, it * kN, t, lane, k_head, v_head,
                                      ks + st * S::kKv, vs + st * S::kKv, SwizzledRows<kN>{});
      cp_async_commit();
      cp_async_wait<0>();
      wgmma::fence_async_shared();  // this thread's copies, visible to wgmma
      mbar::arrive(&full[st]);
    }
    return;
  }

  mbar::regs_inc<S::kConsumerRegs>();
  const int c = wg - 1, ct = int(threadIdx.x % 128);  // this consumer, and its thread
  copy_query_rows<kD, S::kM, 64, 128>(q, sp, h, q0 + c * 64, c * 64, ct, qs);  // its 64 query rows
  cp_async_commit();
  cp_async_wait<0>();
  wgmma::fence_async_shared();
  mbar::bar_sync(1 + c, 128);

  const int64_t w0 = q0 + c * 64;    // the warpgroup's first query
  const int64_t wp0 = sp.pos0 + w0;  // and its position
  const int r_lo = warp * 16 + lane / 4, qc = lane % 4;
  const int pos_row[2] = {int(wp0 + r_lo), int(wp0 + r_lo + 8)};
  // The warpgroup's tiles: those with a key at or before its last row's position.
  const int active = w0 < sp.n_q ? min(tiles, int((wp0 + 64 + kN - 1) / kN)) : 0;
  constexpr uint32_t kStageStep = S::kKv * sizeof(bf16) >> 4;
  const uint32_t q_lo = wgmma::desc_lo(smem_addr(qs) + uint32_t(c * 64 * 128), 16);
  const uint32_t k_lo = wgmma::desc_lo(smem_addr(ks), 16), v_lo = wgmma::desc_lo(smem_addr(vs), kN * 128);
  auto edge = [&](int j0) { return j0 + kN - 1 > wp0 || j0 + kN > sp.n_kv; };
  auto wait_full = [&](int it) { mbar::wait(&full[it % kStages], (it / kStages) & 1); };
  // After the warp's wgmma on the stage are complete. A consumer marks every tile, the ones in its
  // future too, and only after its wait saw it full: one arrival a warp in each phase.
  auto release = [&](int it) {
    if (lane == 0) mbar::arrive(&empty[it % kStages]);
  };

  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
  float s[kN / 2];
  uint32_t pa[kN / 16][4];
  int it = 0;
  for (; it < active; ++it) {
    wait_full(it);
    qk_gemm<kD, S::kM, kN, kN>(s, q_lo, k_lo + (it % kStages) * kStageStep);
    wgmma::wait<0>();
    wgmma::pin<kN / 2>(s);
    const int j0 = it * kN;
    const bool rescale =
        softmax_tile<kN, kD == 128>(s, j0, pos_row, int(sp.n_kv), edge(j0), g.scale_log2, m, l, alpha);
    rescale_and_pack<kD, kN>(o, rescale, alpha, s, pa);
    pv_gemm<kD, kN>(o, pa, v_lo + (it % kStages) * kStageStep);
    wgmma::wait<0>();
    wgmma::pin<kD / 2>(o);
    release(it);
  }
  for (; it < tiles; ++it) {  // tiles wholly in the warpgroup's future
    wait_full(it);
    release(it);
  }

  store_rows<kD>(o, l, sp, w0, r_lo, qc, h, out);
#endif
}

template <int kD, int kC, int kN, int kStages>
cudaError_t launch_paged_forward_ws(cudaStream_t stream, const Rows& q, const PagedKv& kv, int num_seqs,
                                    int64_t max_q, const Geo& g, const Rows& out) {
  using S = WsShape<kD, kC, kN, kStages>;
  auto* kernel = paged_forward_ws_kernel<kD, kC, kN, kStages>;
  if (const cudaError_t e = attention_mma::allow_smem(kernel, S::kSmem); e != cudaSuccess) return e;
  const dim3 grid(unsigned(g.heads), unsigned((max_q + S::kM - 1) / S::kM), unsigned(num_seqs));
  kernel<<<grid, S::kThreads, S::kSmem, stream>>>(q, kv, g, out);
  return cudaGetLastError();
}

// 1 in the code built for sm_90a, 0 in the code built for other architectures.
static __device__ int g_built = ASTRAI_WGMMA;

// Whether the current device runs the kernels above: the build has sm_90a code and the device
// loads it (read once per process and device; a synchronous copy, so not while a stream captures).
inline bool built_for_current_device() {
  static std::atomic<int> known[64] = {};  // 0 unknown, 1 no, 2 yes
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (known[dev].load(std::memory_order_relaxed) == 0) {
    int v = 0;
    const bool yes = cudaMemcpyFromSymbol(&v, g_built, sizeof v) == cudaSuccess && v == 1;
    known[dev].store(yes ? 2 : 1, std::memory_order_relaxed);
  }
  return known[dev].load(std::memory_order_relaxed) == 2;
}

// The paged forward over num_seqs sequences of at most max_q queries each (a bound: the lengths are
// read on the device); grid (heads, query tiles, sequences) as the mma.sync kernel's.
template <int kD, int kWG, int kN, int kMinBlocks = 1, int kSub = kN>
cudaError_t launch_paged_forward(cudaStream_t stream, const Rows& q, const PagedKv& kv, int num_seqs,
                                 int64_t max_q, const Geo& g, const Rows& out) {
  using S = Shape<kD, kWG, kN>;
  auto* kernel = paged_forward_kernel<kD, kWG, kN, kMinBlocks, kSub>;
  if (const cudaError_t e = attention_mma::allow_smem(kernel, S::kSmem); e != cudaSuccess) return e;
  const dim3 grid(unsigned(g.heads), unsigned((max_q + S::kM - 1) / S::kM), unsigned(num_seqs));
  kernel<<<grid, S::kThreads, S::kSmem, stream>>>(q, kv, g, out);
  return cudaGetLastError();
}

// The configuration the backend launches, the fastest of bench/prefill_attention_bench.cu's
// variants on an H200 (docs/performance.md). Where a sequence may reach kSpecializedKv keys (max_kv,
// a bound), the warp-specialized kernel: three consumer warpgroups (192 query rows) and three stages
// of 128 keys (head_dim 64: 3-13% faster than below from 4k keys) or 64 (head_dim 128: 1-3%).
// Below, and where `specialized` is false, paged_forward_kernel with two warpgroups, two blocks a
// multiprocessor (blocks that share no barrier cover each other's softmax; kMinBlocks holds ptxas to
// the 128 registers that takes), 128 keys a stage taken 64 at a time (head_dim 64) or 64 keys a
// tile (128): its smaller blocks fill the machine better below 4k keys (`--short`: steps of 2,048
// tokens as 16 x 128 ... 1 x 2,048, a ragged mix and 200-token extends, where it beat the
// warp-specialized kernel by 4-51%, and by 1% at head_dim 128 with one 2k prompt).
constexpr int64_t kSpecializedKv = 4096;
template <int kD>
cudaError_t paged_forward(cudaStream_t stream, const Rows& q, const PagedKv& kv, int num_seqs, int64_t max_q,
                          int64_t max_kv, const Geo& g, const Rows& out, bool specialized) {
  constexpr int kN = kD == 64 ? 128 : 64;
  if (specialized && max_kv >= kSpecializedKv)
    return launch_paged_forward_ws<kD, 3, kN, 3>(stream, q, kv, num_seqs, max_q, g, out);
  if constexpr (kD == 64)
    return launch_paged_forward<kD, 2, 128, 2, 64>(stream, q, kv, num_seqs, max_q, g, out);
  return launch_paged_forward<kD, 2, 64, 2>(stream, q, kv, num_seqs, max_q, g, out);
}

}  // namespace astrai::gpu::attention_wgmma
