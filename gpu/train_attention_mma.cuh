// The tensor-core kernels of attention_train and its backward (FlashAttention-2 layout), kept in a
// header that needs nothing but CUDA and src/backend/rows.h, so that bench/train_attention_bench.cu
// builds them on a machine with only nvcc. gpu/train_attention_mma.cu wraps them for the backend.
// The forward also serves paged_attention's prefill and extend steps (gpu/paged_attention_mma.cu,
// bench/prefill_attention_bench.cu): it is templated on how it addresses K/V (PackedKv, PagedKv).
//
// Every GEMM is mma.sync m16n8k16 (bf16 in, f32 accumulate) on fragments loaded with ldmatrix
// (.trans where the operand is needed column-wise: V in the forward, K in dq, Q and dO in dk/dv).
// Each warp owns 16 kMb rows of the output tile (each B fragment it loads serves kMb row blocks);
// scores, probabilities and accumulators stay in registers (an accumulator fragment of S is,
// element for element, the A fragment of P for the next GEMM). Tiles come in with cp.async through
// a ring of kStages shared-memory buffers, one barrier per tile, rows padded by 16 bytes (ldmatrix's
// eight row addresses then fall in eight different bank groups).
//
//   forward  (block: kWarps warps of 16 kMb queries of one head): over the key tiles
//            [min kv_begin, last query], s2 = (q . k) * scale * log2(e), online softmax with exp2,
//            o += p v; lse = (m + log2 l) ln 2.
//   delta    (one 16-byte chunk per thread): delta_t = dO_t . out_t.
//   dq       (block: kWarps warps of 16 kMb queries of one head): over the same key tiles,
//            p = exp2(s2 - lse log2 e), ds = p (dO . v - delta), dq += ds k; dq *= scale.
//   dk/dv    (block: kWarps warps of 16 kMb keys of one KV head): over the group's heads and the
//            query tiles that can see the keys, with the transposed products s^T = k q^T,
//            dp^T = v dO^T, dv += p^T dO, dk += ds^T q; dk *= scale.
// P and dS are rounded to bf16 for their GEMMs (as FlashAttention does). Every output element is
// summed by one thread in an order fixed by the shapes (no atomics): the same inputs give the same
// bits. Causality and kv_begin are masked only on the tiles that need it; a warp whose rows see none
// of a tile's keys skips it. Config (at the end) holds the tile shapes the backend launches.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "gpu/device_util.cuh"
#include "gpu/mma_fragments.cuh"
#include "src/backend/rows.h"

namespace astrai::gpu::attention_mma {

struct Geo {
  int64_t n = 0;  // tokens
  int heads = 0, kv_heads = 0, group = 1;
  float scale = 1.0f;       // softmax scale
  float scale_log2 = 1.0f;  // scale * log2(e): scores in log2 units, for exp2
};

constexpr int kKeyTile = 64;  // keys per tile of the forward and dq kernels
template <int kD>
constexpr int kPitch = kD + 8;  // bf16 elements per shared-memory row

// ---- warp GEMMs ---------------------------------------------------------------------------------

// c[kMb][16][kN] (+)= A[16 kMb][kK] B, A from rows [r0, r0 + 16 kMb) of tile a, B[k][n] = b[n][k].
// Each B fragment loaded serves the kMb row blocks (the reason a warp may own more than 16 rows).
template <int kMb, int kK, int kN, int kP>
__device__ __forceinline__ void gemm_abt(const bf16* a, int r0, const bf16* b, float (*c)[kN / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    uint32_t fa[kMb][4];
#pragma unroll
    for (int mb = 0; mb < kMb; ++mb) load_a<kP>(a, r0 + 16 * mb, kk * 16, fa[mb]);
#pragma unroll
    for (int np = 0; np < kN / 16; ++np) {
      uint32_t fb[4];
      load_b<kP>(b, np * 16, kk * 16, fb);
#pragma unroll
      for (int mb = 0; mb < kMb; ++mb) {
        mma(c[mb][2 * np], fa[mb], fb[0], fb[1]);
        mma(c[mb][2 * np + 1], fa[mb], fb[2], fb[3]);
      }
    }
  }
}

// c[kMb][16][kN] += P[16 kMb][kK] B, P held as accumulators p[kMb][kK / 8][4], B[k][n] = b[k][n].
template <int kMb, int kK, int kN, int kP>
__device__ __forceinline__ void gemm_pb(const float (*p)[kK / 8][4], const bf16* b, float (*c)[kN / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    uint32_t fa[kMb][4];
#pragma unroll
    for (int mb = 0; mb < kMb; ++mb) acc_to_a(p[mb], kk, fa[mb]);
#pragma unroll
    for (int np = 0; np < kN / 16; ++np) {
      uint32_t fb[4];
      load_b_trans<kP>(b, kk * 16, np * 16, fb);
#pragma unroll
      for (int mb = 0; mb < kMb; ++mb) {
        mma(c[mb][2 * np], fa[mb], fb[0], fb[1]);
        mma(c[mb][2 * np + 1], fa[mb], fb[2], fb[3]);
      }
    }
  }
}

// ---- tiles ---------------------------------------------------------------------------------------

// Row t of head `head` of x (a Rows over [N, heads, D]: inner == heads).
__device__ __forceinline__ const bf16* head_row(const Rows& x, int64_t t, int head) {
  return reinterpret_cast<const bf16*>(x.base) + t * x.s_outer + int64_t(head) * x.s_inner;
}
__device__ __forceinline__ bf16* head_row_mut(const Rows& x, int64_t t, int head) {
  return reinterpret_cast<bf16*>(x.base) + t * x.s_outer + int64_t(head) * x.s_inner;
}

// Rows [t0, t0 + kRows) of head `head` of x into dst[kRows][kD + 8] (cp.async; zeros past n).
template <int kRows, int kD, int kThreads>
__device__ __forceinline__ void load_rows(const Rows& x, int64_t t0, int head, int64_t n, bf16* dst) {
  constexpr int kVec = kD / 8, kTotal = kRows * kVec;
#pragma unroll
  for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
    const int e = int(threadIdx.x) + i * kThreads;
    if (kTotal % kThreads != 0 && e >= kTotal) break;
    const int r = e / kVec, c = (e % kVec) * 8;
    const int64_t t = t0 + r;
    const bool ok = t < n;
    cp_async16(dst + r * kPitch<kD> + c, head_row(x, ok ? t : 0, head) + c, ok);
  }
}

// lo/hi = min/max of kv_begin over rows [t0, t_end) (block-wide; lo clamped at 0).
__device__ __forceinline__ void kv_range(const int32_t* kv_begin, int64_t t0, int64_t t_end, int* lo,
                                         int* hi) {
  if (threadIdx.x == 0) {
    *lo = INT_MAX;
    *hi = 0;
  }
  __syncthreads();
  int mn = INT_MAX, mx = 0;
  for (int64_t t = t0 + threadIdx.x; t < t_end; t += blockDim.x) {
    mn = min(mn, kv_begin[t]);
    mx = max(mx, kv_begin[t]);
  }
  mn = __reduce_min_sync(0xffffffffu, mn);
  mx = __reduce_max_sync(0xffffffffu, mx);
  if (threadIdx.x % 32 == 0) {
    atomicMin(lo, max(mn, 0));  // integer min/max: the result does not depend on the order
    atomicMax(hi, mx);
  }
  __syncthreads();
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- pipeline ------------------------------------------------------------------------------------
// Tiles stream through a ring of kStages shared-memory buffers: tile i goes into buffer i % kStages,
// kStages - 1 tiles ahead of the one in use. One cp.async group is committed per tile (empty past
// the end), so "all but the newest kStages - 2 groups are complete" means "tile i is in".

// Issues the first kStages - 1 tiles (whatever the caller loaded before is in the first group).
template <int kStages, typename Load>
__device__ __forceinline__ void prologue(int tiles, Load load) {
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < tiles) load(i);
    cp_async_commit();
  }
}

// Before computing tile it: waits for it, then issues tile it + kStages - 1 into the buffer that
// tile it - 1 used. The barrier both publishes tile it to every warp and ensures that every warp
// is done with tile it - 1 before that buffer is overwritten.
template <int kStages, typename Load>
__device__ __forceinline__ void next_stage(int it, int tiles, Load load) {
  cp_async_wait<kStages - 2>();
  __syncthreads();
  if (it + kStages - 1 < tiles) load(it + kStages - 1);
  cp_async_commit();
}

// ---- forward -------------------------------------------------------------------------------------
// The forward kernel is templated on how it finds a block's queries and keys (FlashInfer's split
// of one kernel by KV addressing): PackedKv for training (one run of tokens, K/V rows beside the
// queries, documents cut by kv_begin), PagedKv for inference (ragged sequences whose K/V live in
// the paged cache). Both see a block's sequence as a Span: query t (0-based) is q/out row
// row0 + t at position pos0 + t, it sees the keys at positions [kv_begin_t, pos0 + t], and keys
// exist at positions [0, n_kv). Training's span is {0, n, 0, n}, so its arithmetic is what it was.

struct Span {
  int64_t row0 = 0;  // q/out row of query 0
  int64_t n_q = 0;   // queries
  int64_t pos0 = 0;  // position of query 0 (the queries are the last n_q of the n_kv positions)
  int64_t n_kv = 0;  // keys
};

// Training: K/V are [n, kv_heads, D] rows, key j at row j; query t starts at key kv_begin[t].
struct PackedKv {
  static constexpr bool kRowBegin = true;  // kv_begin varies by row (documents)
  Rows k, v;
  const int32_t* kv_begin;
  int64_t n;

  __device__ __forceinline__ Span span() const { return {0, n, 0, n}; }
  // Grid (query tiles, heads): the longest rows of a head start first.
  __device__ __forceinline__ int64_t query_tile() const { return gridDim.x - 1 - blockIdx.x; }
  __device__ __forceinline__ int head() const { return blockIdx.y; }
  __device__ __forceinline__ int row_begin(int64_t t) const { return kv_begin[t]; }
  // Key rows [j0, j0 + kRows) of KV head kvh into kdst/vdst[kRows][kD + 8] (cp.async; zeros past n).
  template <int kRows, int kD, int kThreads>
  __device__ __forceinline__ void load(const Span&, int64_t j0, int kvh, bf16* kdst, bf16* vdst) const {
    load_rows<kRows, kD, kThreads>(k, j0, kvh, n, kdst);
    load_rows<kRows, kD, kThreads>(v, j0, kvh, n, vdst);
  }
};

// Inference: sequence blockIdx.z has queries [q_start[s], q_start[s + 1]) at the end of its kv_len[s]
// keys; key j sits in cache slot page_table[s][j / page_size] * page_size + j % page_size of a
// [slots, kv_heads, D] cache. Keys past kv_len and pages outside the cache read as zeros (never
// outside the cache; the model validates the table).
struct PagedKv {
  static constexpr bool kRowBegin = false;  // every query sees its sequence from position 0
  const bf16* k_cache;
  const bf16* v_cache;
  const int32_t* q_start;
  const int32_t* kv_len;
  const int32_t* page_table;  // [num_seqs, max_pages]
  int max_pages = 0, page_size = 1, kv_heads = 1;
  int page_shift = -1;  // log2(page_size) when it is a power of two (a shift, not a division)
  int64_t n_pages = 0;

  __device__ __forceinline__ Span span() const {
    const int s = blockIdx.z;
    const int64_t r0 = q_start[s], n_q = q_start[s + 1] - r0, n_kv = kv_len[s];
    return {r0, n_q, n_kv - n_q, n_kv};
  }
  // Grid (heads, query tiles, sequences): every head's longest rows start before any head's shorter
  // ones (a long prompt's last blocks are its lightest, so the GPU drains evenly).
  __device__ __forceinline__ int64_t query_tile() const { return gridDim.y - 1 - blockIdx.y; }
  __device__ __forceinline__ int head() const { return blockIdx.x; }
  __device__ __forceinline__ int row_begin(int64_t) const { return 0; }
  // The block's sequence's row of the page table.
  __device__ __forceinline__ const int32_t* pages() const {
    return page_table + int64_t(blockIdx.z) * max_pages;
  }
  // slot = the cache slot of key j (its row of the [slots, kv_heads, D] cache); false (and slot 0)
  // for a key past the sequence or a page outside the cache. Slots and positions fit int (the cache
  // has fewer than 2^31 slots).
  __device__ __forceinline__ bool key_slot(const int32_t* pages, const Span& sp, int j, int& slot) const {
    const int pg = page_shift >= 0 ? j >> page_shift : j / page_size;
    const int32_t page = j < sp.n_kv && pg < max_pages ? pages[pg] : -1;
    const bool ok = page >= 0 && page < n_pages;
    slot = ok ? page * page_size + (j - pg * page_size) : 0;
    return ok;
  }
  // Column c of KV head kvh in slot `slot` of a cache whose slot 0 starts at `at` (the cache plus
  // kvh * kD + c, fixed per thread): one wide multiply-add, where 64-bit offsets cost several.
  template <int kD>
  __device__ __forceinline__ const bf16* slot_row(const bf16* at, int slot) const {
    return at + uint64_t(uint32_t(slot)) * uint32_t(kv_heads * kD);
  }
  // For a tile of kTile keys from j0 (a multiple of kTile) when page_size is a power of two of at
  // least kTile / 32: the page of the tile's lane-th page, -1 past the tile, the table, the sequence
  // or the cache. A warp's lanes hold the tile's pages (at most 32), and a copy takes its row's page
  // with a shuffle instead of a load and the bounds checks.
  template <int kTile>
  __device__ __forceinline__ int32_t tile_page(const int32_t* pages, const Span& sp, int j0, int lane) const {
    const int pg = (j0 >> page_shift) + lane;
    const bool in =
        lane < max(1, kTile >> page_shift) && pg < max_pages && (int64_t(pg) << page_shift) < sp.n_kv;
    const int32_t page = in ? pages[pg] : -1;
    return page >= 0 && page < n_pages ? page : -1;
  }
  // slot = the cache slot of key j0 + r of that tile, its page taken by shuffle from the lane that
  // holds it (my_page: this lane's tile_page; every lane of the warp calls this together); false (and
  // slot 0) past the sequence or for a page outside the cache.
  __device__ __forceinline__ bool tile_slot(int32_t my_page, const Span& sp, int j0, int r, int& slot) const {
    const int page = __shfl_sync(0xffffffffu, my_page, r >> page_shift), j = j0 + r;
    const bool ok = page >= 0 && j < int(sp.n_kv);
    slot = ok ? page * page_size + (j & (page_size - 1)) : 0;
    return ok;
  }
  // Whether the tile loaders take a tile's pages one a lane (tile_page, then tile_slot by shuffle):
  // pages of 4 keys or more, a power of two (at most 32 of them in a tile of up to 128 keys); with
  // others each copy looks its key up (key_slot).
  __device__ __forceinline__ bool lane_pages() const { return page_shift >= 2; }
  // Key rows [j0, j0 + kRows) (j0 a multiple of kRows) into kdst/vdst, copied 16 bytes at a time by
  // kThreads threads from thread t (lane: its lane in its warp; whole warps take part) with cp.async,
  // each copy's slot as lane_pages says; zeros past the sequence. k_head / v_head: the KV head's row
  // in slot 0 of each cache; dst(r, c): the element of kdst and vdst that 16-byte chunk c of row r goes to.
  // Both families of kernels (forward_kernel here, attention_wgmma's) copy their key tiles through this.
  // kOneColumn (kThreads a multiple of the chunks of a row): a thread copies the same column of every
  // row, its source column taken once (the wgmma kernels: without it ptxas spills there); otherwise
  // each copy computes its own (forward_kernel's code as measured).
  template <int kRows, int kD, int kThreads, bool kOneColumn, typename Dst>
  __device__ __forceinline__ void copy_keys(const Span& sp, const int32_t* pages, bool lane_pages, int j0,
                                            int t, int lane, const bf16* k_head, const bf16* v_head,
                                            bf16* kdst, bf16* vdst, Dst dst) const {
    constexpr int kVec = kD / 8, kTotal = kRows * kVec;
    static_assert(kRows / 4 <= 32 && kTotal % 32 == 0,
                  "a tile's pages of 4 keys fit a warp; whole warps copy");
    static_assert(!kOneColumn || kThreads % kVec == 0, "one column a thread");
    const int32_t my_page = lane_pages ? tile_page<kRows>(pages, sp, j0, lane) : -1;
    const bf16* k_col = k_head + (t % kVec) * 8;
    const bf16* v_col = v_head + (t % kVec) * 8;
#pragma unroll
    for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
      const int e = t + i * kThreads, r = e / kVec, c = e % kVec;
      if (kTotal % kThreads != 0 && e >= kTotal) break;  // whole warps
      int slot;
      const bool ok = lane_pages ? tile_slot(my_page, sp, j0, r, slot) : key_slot(pages, sp, j0 + r, slot);
      const int d = dst(r, c);
      cp_async16(kdst + d, slot_row<kD>(kOneColumn ? k_col : k_head + c * 8, slot), ok);
      cp_async16(vdst + d, slot_row<kD>(kOneColumn ? v_col : v_head + c * 8, slot), ok);
    }
  }
  // Key rows [j0, j0 + kRows) of KV head kvh into kdst/vdst[kRows][kD + 8] (copy_keys).
  template <int kRows, int kD, int kThreads>
  __device__ __forceinline__ void load(const Span& sp, int64_t j0, int kvh, bf16* kdst, bf16* vdst) const {
    copy_keys<kRows, kD, kThreads, false>(sp, pages(), lane_pages(), int(j0), int(threadIdx.x),
                                          int(threadIdx.x % 32), k_cache + kvh * kD, v_cache + kvh * kD, kdst,
                                          vdst, [](int r, int c) { return r * kPitch<kD> + c * 8; });
  }
};

template <int kD, int kWarps, int kMb, int kT, int kStages>
constexpr size_t forward_smem() {
  return size_t(16 * kMb * kWarps + 2 * kStages * kT) * kPitch<kD> * sizeof(bf16);
}

// Block: kWarps warps of 16 kMb query rows (tile kv.query_tile()) of head kv.head() of the span
// kv.span(); key tiles of kT in a ring of kStages buffers (see the loop). lse may be null.
template <int kD, int kWarps, int kMb, int kT, int kStages, int kMinBlocks, typename Kv>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    forward_kernel(Rows q, Kv kv, Geo g, Rows out, float* __restrict__ lse) {
  constexpr int kWr = 16 * kMb, kRows = kWr * kWarps, kThreads = 32 * kWarps, kP = kPitch<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + kRows * kP;  // kStages buffers each
  bf16* vs = ks + kStages * kT * kP;
  const int h = kv.head(), kvh = h / g.group, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Span sp = kv.span();
  const int64_t q0 = kv.query_tile() * kRows;
  if (q0 >= sp.n_q) return;  // a grid sized for the longest sequence of a ragged batch
  const int64_t q_end = min(q0 + kRows, sp.n_q);
  int kv_lo = 0, kv_hi = 0;
  if constexpr (Kv::kRowBegin) {
    __shared__ int lo_s, hi_s;
    kv_range(kv.kv_begin, q0, q_end, &lo_s, &hi_s);
    kv_lo = lo_s, kv_hi = hi_s;
  }
  const int64_t j_first = int64_t(kv_lo / kT) * kT;  // aligned: the diagonal tiles line up with warps
  const int64_t j_end = sp.pos0 + q_end;             // the last query's keys end here
  const int tiles = j_end > j_first ? int((j_end - j_first + kT - 1) / kT) : 0;
  auto load_tile = [&](int it) {
    const int64_t j0 = j_first + int64_t(it) * kT;
    kv.template load<kT, kD, kThreads>(sp, j0, kvh, ks + (it % kStages) * kT * kP,
                                       vs + (it % kStages) * kT * kP);
  };
  load_rows<kRows, kD, kThreads>(q, sp.row0 + q0, h, sp.row0 + sp.n_q, qs);
  prologue<kStages>(tiles, load_tile);

  const int gr = lane / 4, qc = lane % 4;
  const int64_t w0 = q0 + warp * kWr;  // the warp's first query
  const int64_t wp0 = sp.pos0 + w0;    // and its position
  int t_row[kMb][2];                   // positions fit int: kv_begin and kv_len are int32
  int kvb_row[kMb][2];
#pragma unroll
  for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t t = w0 + 16 * mb + gr + 8 * r;
      t_row[mb][r] = int(sp.pos0 + t);
      kvb_row[mb][r] = t < sp.n_q ? kv.row_begin(t) : 0;
    }
  float o[kMb][kD / 8][4] = {};
  float m[kMb][2], l[kMb][2];
#pragma unroll
  for (int mb = 0; mb < kMb; ++mb) m[mb][0] = m[mb][1] = -INFINITY, l[mb][0] = l[mb][1] = 0.0f;

  for (int it = 0; it < tiles; ++it) {
    const int64_t j0 = j_first + int64_t(it) * kT;
    const int buf = it % kStages;
    next_stage<kStages>(it, tiles, load_tile);
    if (j0 < wp0 + kWr && w0 < sp.n_q) {  // otherwise every key of the tile is in the warp's future
      const bf16* kt = ks + buf * kT * kP;
      const bf16* vt = vs + buf * kT * kP;
      float s[kMb][kT / 8][4] = {};
      gemm_abt<kMb, kD, kT, kP>(qs, warp * kWr, kt, s);
      const bool edge = j0 + kT - 1 > wp0 || j0 < kv_hi || j0 + kT > sp.n_kv;
#pragma unroll
      for (int mb = 0; mb < kMb; ++mb) {
        if (edge) {
#pragma unroll
          for (int nt = 0; nt < kT / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = e / 2, j = int(j0) + nt * 8 + qc * 2 + (e & 1);
              if (j > t_row[mb][r] || j < kvb_row[mb][r] || j >= sp.n_kv) s[mb][nt][e] = -INFINITY;
            }
        }
        // Row maxima of the raw scores (scale > 0 keeps the order), in four independent chains.
        float mx[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float part[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
          for (int nt = 0; nt < kT / 8; ++nt) {
            part[(2 * nt) % 4] = fmaxf(part[(2 * nt) % 4], s[mb][nt][2 * r]);
            part[(2 * nt + 1) % 4] = fmaxf(part[(2 * nt + 1) % 4], s[mb][nt][2 * r + 1]);
          }
          mx[r] = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
        }
        float m_use[2], alpha[2];  // m in log2 units
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float m_new = fmaxf(m[mb][r], quad_max(mx[r]) * g.scale_log2);
          m_use[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen no key yet: p = 0, not NaN
          alpha[r] = fast_exp2(m[mb][r] - m_use[r]);
          m[mb][r] = m_new;
        }
        float part[2][4] = {};  // row sums in four independent chains, added in a fixed order
#pragma unroll
        for (int nt = 0; nt < kT / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float p = fast_exp2(fmaf(s[mb][nt][e], g.scale_log2, -m_use[e / 2]));
            s[mb][nt][e] = p;
            part[e / 2][(2 * nt + (e & 1)) % 4] += p;
          }
#pragma unroll
        for (int r = 0; r < 2; ++r)
          l[mb][r] = l[mb][r] * alpha[r] + ((part[r][0] + part[r][1]) + (part[r][2] + part[r][3]));
        // Past the first tiles a row's maximum rarely moves, so alpha is mostly exactly 1: the warp
        // skips the kD / 2 multiplies per thread of the rescale unless one of its rows needs it
        // (x * 1 == x, so the result has the same bits either way).
        if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
          for (int nt = 0; nt < kD / 8; ++nt) {
            o[mb][nt][0] *= alpha[0];
            o[mb][nt][1] *= alpha[0];
            o[mb][nt][2] *= alpha[1];
            o[mb][nt][3] *= alpha[1];
          }
        }
      }
      gemm_pb<kMb, kT, kD, kP>(s, vt, o);
    }
  }

#pragma unroll
  for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float lr = quad_sum(l[mb][r]);
      const int64_t t = w0 + 16 * mb + gr + 8 * r;
      if (t >= sp.n_q) continue;
      const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
      bf16* orow = head_row_mut(out, sp.row0 + t, h);
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt)
        *reinterpret_cast<__nv_bfloat162*>(orow + nt * 8 + qc * 2) =
            __floats2bfloat162_rn(o[mb][nt][2 * r] * inv, o[mb][nt][2 * r + 1] * inv);
      if (lse != nullptr && qc == 0)
        lse[(sp.row0 + t) * g.heads + h] = lr > 0.0f ? (m[mb][r] + log2f(lr)) * kLn2 : -INFINITY;
    }
}
// ---- backward ------------------------------------------------------------------------------------

// delta[t * heads + h] = dout_t,h . out_t,h; kD / 8 threads per row, 16 bytes each.
template <int kD>
__global__ void __launch_bounds__(256) delta_kernel(Rows dout, Rows out, Geo g, float* __restrict__ delta) {
  constexpr int kPer = kD / 8;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kPer;
  const int c = int(threadIdx.x % kPer) * 8;
  const int64_t rows = g.n * g.heads;
  float acc = 0.0f;
  if (row < rows) {
    const int64_t t = row / g.heads;
    const int h = int(row % g.heads);
    float a[8], b[8];
    unpack8(*reinterpret_cast<const uint4*>(head_row(dout, t, h) + c), a);
    unpack8(*reinterpret_cast<const uint4*>(head_row(out, t, h) + c), b);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc += a[i] * b[i];
  }
#pragma unroll
  for (int o = kPer / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (row < rows && c == 0) delta[row] = acc;
}

template <int kD, int kWarps, int kMb, int kT, int kStages>
constexpr size_t dq_smem() {
  return size_t(2 * 16 * kMb * kWarps + 2 * kStages * kT) * kPitch<kD> * sizeof(bf16);
}

// Block: kWarps warps of 16 kMb query rows of head blockIdx.y; key tiles of kT in a ring of kStages.
template <int kD, int kWarps, int kMb, int kT, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    dq_kernel(Rows dout, Rows q, Rows k, Rows v, const int32_t* __restrict__ kv_begin,
              const float* __restrict__ lse, const float* __restrict__ delta, Geo g, Rows dq) {
  constexpr int kWr = 16 * kMb, kRows = kWr * kWarps, kThreads = 32 * kWarps, kP = kPitch<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + kRows * kP;
  bf16* ks = dos + kRows * kP;  // kStages buffers each
  bf16* vs = ks + kStages * kT * kP;
  __shared__ int kv_lo, kv_hi;
  const int h = blockIdx.y, kvh = h / g.group, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kRows;
  const int64_t q_end = min(q0 + kRows, g.n);
  kv_range(kv_begin, q0, q_end, &kv_lo, &kv_hi);
  const int64_t j_first = int64_t(kv_lo / kT) * kT;
  const int tiles = q_end > j_first ? int((q_end - j_first + kT - 1) / kT) : 0;
  auto load_tile = [&](int it) {
    const int64_t j0 = j_first + int64_t(it) * kT;
    load_rows<kT, kD, kThreads>(k, j0, kvh, g.n, ks + (it % kStages) * kT * kP);
    load_rows<kT, kD, kThreads>(v, j0, kvh, g.n, vs + (it % kStages) * kT * kP);
  };
  load_rows<kRows, kD, kThreads>(q, q0, h, g.n, qs);
  load_rows<kRows, kD, kThreads>(dout, q0, h, g.n, dos);
  prologue<kStages>(tiles, load_tile);

  const int gr = lane / 4, qc = lane % 4;
  const int64_t w0 = q0 + warp * kWr;
  int t_row[kMb][2];  // positions fit int: kv_begin is int32
  int kvb_row[kMb][2];
  float lse2[kMb][2], dl[kMb][2];
#pragma unroll
  for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = int(w0) + 16 * mb + gr + 8 * r;
      const bool ok = t < g.n;
      t_row[mb][r] = t;
      kvb_row[mb][r] = ok ? kv_begin[t] : 0;
      lse2[mb][r] = ok ? lse[t * g.heads + h] * kLog2e : 0.0f;
      dl[mb][r] = ok ? delta[t * g.heads + h] : 0.0f;
    }
  float acc[kMb][kD / 8][4] = {};

  for (int it = 0; it < tiles; ++it) {
    const int64_t j0 = j_first + int64_t(it) * kT;
    const int buf = it % kStages;
    next_stage<kStages>(it, tiles, load_tile);
    if (j0 < w0 + kWr && w0 < g.n) {
      const bf16* kt = ks + buf * kT * kP;
      const bf16* vt = vs + buf * kT * kP;
      float s[kMb][kT / 8][4] = {}, dp[kMb][kT / 8][4] = {};
      gemm_abt<kMb, kD, kT, kP>(qs, warp * kWr, kt, s);
      gemm_abt<kMb, kD, kT, kP>(dos, warp * kWr, vt, dp);
      const bool edge = j0 + kT - 1 > w0 || j0 < kv_hi || j0 + kT > g.n;
#pragma unroll
      for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
        for (int nt = 0; nt < kT / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e / 2;
            float p = fast_exp2(fmaf(s[mb][nt][e], g.scale_log2, -lse2[mb][r]));
            if (edge) {
              const int j = int(j0) + nt * 8 + qc * 2 + (e & 1);
              if (j > t_row[mb][r] || j < kvb_row[mb][r] || j >= g.n) p = 0.0f;
            }
            s[mb][nt][e] = p * (dp[mb][nt][e] - dl[mb][r]);  // ds
          }
      gemm_pb<kMb, kT, kD, kP>(s, kt, acc);
    }
  }

#pragma unroll
  for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t t = t_row[mb][r];
      if (t >= g.n) continue;
      bf16* drow = head_row_mut(dq, t, h);
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt)
        *reinterpret_cast<__nv_bfloat162*>(drow + nt * 8 + qc * 2) =
            __floats2bfloat162_rn(acc[mb][nt][2 * r] * g.scale, acc[mb][nt][2 * r + 1] * g.scale);
    }
}

template <int kD, int kWarps, int kMb, int kQ, int kStages>
constexpr size_t dkdv_smem() {
  return size_t(2 * 16 * kMb * kWarps + 2 * kStages * kQ) * kPitch<kD> * sizeof(bf16) +
         size_t(kStages * 3 * kQ) * 4;
}

// How many queries from j0 on reach a key of [j0, j_end) at the latest (*reach: the last such query
// is j0 + *reach - 1; causal, so none before j0), and the first query from j0 on whose keys start
// after j0 (*late, as an offset from j0; kv_begin must be masked when it falls among the queries the
// steps visit). Block-wide.
__device__ __forceinline__ void query_range(const int32_t* kv_begin, int64_t j0, int64_t j_end, int64_t n,
                                            unsigned long long* reach, unsigned long long* late) {
  if (threadIdx.x == 0) {
    *reach = 0;
    *late = ULLONG_MAX;
  }
  __syncthreads();
  unsigned long long my_reach = 0, my_late = ULLONG_MAX;
#pragma unroll 8
  for (int64_t t = j0 + threadIdx.x; t < n; t += blockDim.x) {
    const int b = kv_begin[t];
    if (b < j_end) my_reach = (unsigned long long)(t - j0 + 1);  // t only grows
    if (b > j0) my_late = min(my_late, (unsigned long long)(t - j0));
  }
  if (my_reach > 0) atomicMax(reach, my_reach);  // integer min/max: independent of the order
  if (my_late != ULLONG_MAX) atomicMin(late, my_late);
  __syncthreads();
}

// Block: kWarps warps of 16 kMb keys of KV head blockIdx.y; steps of kQ query rows of one head in a
// ring of kStages buffers.
template <int kD, int kWarps, int kMb, int kQ, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    dkdv_kernel(Rows dout, Rows q, Rows k, Rows v, const int32_t* __restrict__ kv_begin,
                const float* __restrict__ lse, const float* __restrict__ delta, Geo g, Rows dk, Rows dv) {
  constexpr int kWr = 16 * kMb, kKeys = kWr * kWarps, kThreads = 32 * kWarps, kP = kPitch<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + kKeys * kP;
  bf16* qs = vs + kKeys * kP;  // kStages buffers each, from here on
  bf16* dos = qs + kStages * kQ * kP;
  float* lse_s = reinterpret_cast<float*>(dos + kStages * kQ * kP);
  float* dl_s = lse_s + kStages * kQ;
  int* kvb_s = reinterpret_cast<int*>(dl_s + kStages * kQ);
  __shared__ unsigned long long reach, late;
  const int kvh = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j0 = int64_t(blockIdx.x) * kKeys;
  const int64_t j_end = min(j0 + kKeys, g.n);
  query_range(kv_begin, j0, j_end, g.n, &reach, &late);
  const int q_tiles = int((reach + kQ - 1) / kQ);
  const bool mask_kv = late < (unsigned long long)q_tiles * kQ;  // over every query the steps visit
  const int steps = q_tiles * g.group;
  load_rows<kKeys, kD, kThreads>(k, j0, kvh, g.n, ks);
  load_rows<kKeys, kD, kThreads>(v, j0, kvh, g.n, vs);

  // Step i: head kvh * group + i / q_tiles, queries [j0 + (i % q_tiles) * kQ, + kQ).
  auto load_step = [&](int i) {
    const int buf = i % kStages;
    const int h = kvh * g.group + i / q_tiles;
    const int64_t t0 = j0 + int64_t(i % q_tiles) * kQ;
    load_rows<kQ, kD, kThreads>(q, t0, h, g.n, qs + buf * kQ * kP);
    load_rows<kQ, kD, kThreads>(dout, t0, h, g.n, dos + buf * kQ * kP);
    for (int c = threadIdx.x; c < kQ; c += kThreads) {
      const int64_t t = t0 + c;
      const bool ok = t < g.n;
      const int64_t idx = (ok ? t : 0) * g.heads + h;
      cp_async4(lse_s + buf * kQ + c, lse + idx, ok);
      cp_async4(dl_s + buf * kQ + c, delta + idx, ok);
      cp_async4(kvb_s + buf * kQ + c, kv_begin + (ok ? t : 0), ok);
    }
  };
  prologue<kStages>(steps, load_step);

  const int gr = lane / 4, qc = lane % 4;
  const int64_t w0 = j0 + warp * kWr;  // the warp's first key
  int j_row[kMb][2];                   // positions fit int: kv_begin is int32
#pragma unroll
  for (int mb = 0; mb < kMb; ++mb)
    j_row[mb][0] = int(w0) + 16 * mb + gr, j_row[mb][1] = int(w0) + 16 * mb + gr + 8;
  float dk_acc[kMb][kD / 8][4] = {}, dv_acc[kMb][kD / 8][4] = {};

  for (int i = 0; i < steps; ++i) {
    const int buf = i % kStages;
    next_stage<kStages>(i, steps, load_step);
    const int64_t t0 = j0 + int64_t(i % q_tiles) * kQ;
    if (t0 + kQ > w0 && w0 < g.n) {  // otherwise every query of the step precedes the warp's keys
      const bf16* qt = qs + buf * kQ * kP;
      const bf16* dot = dos + buf * kQ * kP;
      const float* lse_t = lse_s + buf * kQ;
      const float* dl_t = dl_s + buf * kQ;
      const int* kvb_t = kvb_s + buf * kQ;
      float st[kMb][kQ / 8][4] = {}, dpt[kMb][kQ / 8][4] = {};
      gemm_abt<kMb, kD, kQ, kP>(ks, warp * kWr, qt, st);
      gemm_abt<kMb, kD, kQ, kP>(vs, warp * kWr, dot, dpt);
      const bool edge = t0 < w0 + kWr - 1 || mask_kv || t0 + kQ > g.n;
#pragma unroll
      for (int nt = 0; nt < kQ / 8; ++nt)
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          const int c = nt * 8 + qc * 2 + cc;
          const float lse2 = lse_t[c] * kLog2e, dl = dl_t[c];
#pragma unroll
          for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int e = 2 * r + cc;
              float p = fast_exp2(fmaf(st[mb][nt][e], g.scale_log2, -lse2));
              if (edge) {
                const int t = int(t0) + c, j = j_row[mb][r];
                if (j > t || j < kvb_t[c] || t >= g.n) p = 0.0f;
              }
              st[mb][nt][e] = p;
              dpt[mb][nt][e] = p * (dpt[mb][nt][e] - dl);  // ds^T
            }
        }
      gemm_pb<kMb, kQ, kD, kP>(st, dot, dv_acc);
      gemm_pb<kMb, kQ, kD, kP>(dpt, qt, dk_acc);
    }
  }

#pragma unroll
  for (int mb = 0; mb < kMb; ++mb)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t j = j_row[mb][r];
      if (j >= g.n) continue;
      bf16* krow = head_row_mut(dk, j, kvh);
      bf16* vrow = head_row_mut(dv, j, kvh);
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) {
        *reinterpret_cast<__nv_bfloat162*>(krow + nt * 8 + qc * 2) =
            __floats2bfloat162_rn(dk_acc[mb][nt][2 * r] * g.scale, dk_acc[mb][nt][2 * r + 1] * g.scale);
        *reinterpret_cast<__nv_bfloat162*>(vrow + nt * 8 + qc * 2) =
            __floats2bfloat162_rn(dv_acc[mb][nt][2 * r], dv_acc[mb][nt][2 * r + 1]);
      }
    }
}

// ---- launches ------------------------------------------------------------------------------------
// Each returns the launch's error (cudaSuccess when queued); the caller decides how to report it.

template <typename K>
cudaError_t allow_smem(K kernel, size_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

template <int kD, int kWarps, int kMb, int kT, int kStages, int kMinBlocks>
cudaError_t launch_forward(cudaStream_t stream, const Rows& q, const Rows& k, const Rows& v,
                           const int32_t* kv_begin, const Geo& g, const Rows& out, float* lse) {
  constexpr size_t smem = forward_smem<kD, kWarps, kMb, kT, kStages>();
  constexpr int kRows = 16 * kMb * kWarps;
  auto* kernel = forward_kernel<kD, kWarps, kMb, kT, kStages, kMinBlocks, PackedKv>;
  if (const cudaError_t e = allow_smem(kernel, smem); e != cudaSuccess) return e;
  const dim3 grid(unsigned((g.n + kRows - 1) / kRows), unsigned(g.heads));
  kernel<<<grid, kWarps * 32, smem, stream>>>(q, PackedKv{k, v, kv_begin, g.n}, g, out, lse);
  return cudaGetLastError();
}

// The paged forward over num_seqs sequences of at most max_q queries each (a bound: the lengths are
// read on the device). g.n is unused; no lse.
template <int kD, int kWarps, int kMb, int kT, int kStages, int kMinBlocks>
cudaError_t launch_paged_forward(cudaStream_t stream, const Rows& q, const PagedKv& kv, int num_seqs,
                                 int64_t max_q, const Geo& g, const Rows& out) {
  constexpr size_t smem = forward_smem<kD, kWarps, kMb, kT, kStages>();
  constexpr int kRows = 16 * kMb * kWarps;
  auto* kernel = forward_kernel<kD, kWarps, kMb, kT, kStages, kMinBlocks, PagedKv>;
  if (const cudaError_t e = allow_smem(kernel, smem); e != cudaSuccess) return e;
  const dim3 grid(unsigned(g.heads), unsigned((max_q + kRows - 1) / kRows), unsigned(num_seqs));
  kernel<<<grid, kWarps * 32, smem, stream>>>(q, kv, g, out, nullptr);
  return cudaGetLastError();
}

template <int kD>
cudaError_t launch_delta(cudaStream_t stream, const Rows& dout, const Rows& out, const Geo& g, float* delta) {
  const int64_t threads = g.n * g.heads * (kD / 8);
  delta_kernel<kD><<<unsigned((threads + 255) / 256), 256, 0, stream>>>(dout, out, g, delta);
  return cudaGetLastError();
}

template <int kD, int kWarps, int kMb, int kT, int kStages, int kMinBlocks>
cudaError_t launch_dq(cudaStream_t stream, const Rows& dout, const Rows& q, const Rows& k, const Rows& v,
                      const int32_t* kv_begin, const float* lse, const float* delta, const Geo& g,
                      const Rows& dq) {
  constexpr size_t smem = dq_smem<kD, kWarps, kMb, kT, kStages>();
  constexpr int kRows = 16 * kMb * kWarps;
  auto* kernel = dq_kernel<kD, kWarps, kMb, kT, kStages, kMinBlocks>;
  if (const cudaError_t e = allow_smem(kernel, smem); e != cudaSuccess) return e;
  const dim3 grid(unsigned((g.n + kRows - 1) / kRows), unsigned(g.heads));
  kernel<<<grid, kWarps * 32, smem, stream>>>(dout, q, k, v, kv_begin, lse, delta, g, dq);
  return cudaGetLastError();
}

template <int kD, int kWarps, int kMb, int kQ, int kStages, int kMinBlocks>
cudaError_t launch_dkdv(cudaStream_t stream, const Rows& dout, const Rows& q, const Rows& k, const Rows& v,
                        const int32_t* kv_begin, const float* lse, const float* delta, const Geo& g,
                        const Rows& dk, const Rows& dv) {
  constexpr size_t smem = dkdv_smem<kD, kWarps, kMb, kQ, kStages>();
  constexpr int kKeys = 16 * kMb * kWarps;
  auto* kernel = dkdv_kernel<kD, kWarps, kMb, kQ, kStages, kMinBlocks>;
  if (const cudaError_t e = allow_smem(kernel, smem); e != cudaSuccess) return e;
  const dim3 grid(unsigned((g.n + kKeys - 1) / kKeys), unsigned(g.kv_heads));
  kernel<<<grid, kWarps * 32, smem, stream>>>(dout, q, k, v, kv_begin, lse, delta, g, dk, dv);
  return cudaGetLastError();
}

// The configurations the backend uses, the fastest of bench/train_attention_bench.cu's variants on
// an H200 (docs/performance.md): warps per block, 16-row blocks per warp, keys per tile (forward,
// dq) or query rows per step (dk/dv), pipeline stages, and blocks per SM asked of the register
// allocator. kPaged*: the paged forward (bench/prefill_attention_bench.cu), large tiles for long
// prompts and kPagedSmall* where those leave SMs idle (see paged_forward).
template <int kD>
struct Config;
template <>
struct Config<64> {
  static constexpr int kFwdWarps = 4, kFwdMb = 2, kFwdT = 64, kFwdStages = 2, kFwdBlocks = 1;
  static constexpr int kPagedWarps = 4, kPagedMb = 2, kPagedT = 64, kPagedStages = 2, kPagedBlocks = 1;
  static constexpr int kPagedSmallWarps = 8, kPagedSmallMb = 1, kPagedSmallT = 64, kPagedSmallStages = 2,
                       kPagedSmallBlocks = 2;
  static constexpr int kDqWarps = 8, kDqMb = 1, kDqT = 64, kDqStages = 2, kDqBlocks = 2;
  static constexpr int kKvWarps = 4, kKvMb = 2, kKvQ = 32, kKvStages = 2, kKvBlocks = 1;
};
// head_dim 96 (no model we train has it) only serves paged_attention.
template <>
struct Config<96> {
  static constexpr int kPagedWarps = 4, kPagedMb = 2, kPagedT = 32, kPagedStages = 2, kPagedBlocks = 1;
  static constexpr int kPagedSmallWarps = 0;  // not measured: one configuration
};
template <>
struct Config<128> {
  static constexpr int kFwdWarps = 4, kFwdMb = 2, kFwdT = 32, kFwdStages = 2, kFwdBlocks = 1;
  static constexpr int kPagedWarps = 4, kPagedMb = 2, kPagedT = 32, kPagedStages = 2, kPagedBlocks = 1;
  static constexpr int kPagedSmallWarps = 8, kPagedSmallMb = 1, kPagedSmallT = 64, kPagedSmallStages = 2,
                       kPagedSmallBlocks = 1;
  static constexpr int kDqWarps = 4, kDqMb = 2, kDqT = 32, kDqStages = 2, kDqBlocks = 1;
  static constexpr int kKvWarps = 8, kKvMb = 1, kKvQ = 64, kKvStages = 2, kKvBlocks = 1;
};

template <int kD>
cudaError_t forward(cudaStream_t stream, const Rows& q, const Rows& k, const Rows& v, const int32_t* kv_begin,
                    const Geo& g, const Rows& out, float* lse) {
  using C = Config<kD>;
  return launch_forward<kD, C::kFwdWarps, C::kFwdMb, C::kFwdT, C::kFwdStages, C::kFwdBlocks>(
      stream, q, k, v, kv_begin, g, out, lse);
}

// Prefill/extend attention over the paged cache (Backend::paged_attention's tensor-core path).
// Steps whose 128-row tiles would not fill one wave of two blocks per SM (a 1k prompt, extends of a
// few hundred queries) take the small-tile configuration, whose blocks are more and shorter.
template <int kD>
cudaError_t paged_forward(cudaStream_t stream, const Rows& q, const PagedKv& kv, int num_seqs, int64_t max_q,
                          const Geo& g, const Rows& out, int sm_count) {
  using C = Config<kD>;
  constexpr int kRows = 16 * C::kPagedMb * C::kPagedWarps;
  if constexpr (C::kPagedSmallWarps > 0) {
    const int64_t blocks = (max_q + kRows - 1) / kRows * g.heads * num_seqs;
    if (blocks <= 2 * int64_t(sm_count))
      return launch_paged_forward<kD, C::kPagedSmallWarps, C::kPagedSmallMb, C::kPagedSmallT,
                                  C::kPagedSmallStages, C::kPagedSmallBlocks>(stream, q, kv, num_seqs, max_q,
                                                                              g, out);
  }
  return launch_paged_forward<kD, C::kPagedWarps, C::kPagedMb, C::kPagedT, C::kPagedStages, C::kPagedBlocks>(
      stream, q, kv, num_seqs, max_q, g, out);
}

// `delta` holds n * heads floats.
template <int kD>
cudaError_t backward(cudaStream_t stream, const Rows& dout, const Rows& q, const Rows& k, const Rows& v,
                     const int32_t* kv_begin, const Rows& out, const float* lse, const Geo& g, const Rows& dq,
                     const Rows& dk, const Rows& dv, float* delta) {
  using C = Config<kD>;
  if (const cudaError_t e = launch_delta<kD>(stream, dout, out, g, delta); e != cudaSuccess) return e;
  if (const cudaError_t e = launch_dq<kD, C::kDqWarps, C::kDqMb, C::kDqT, C::kDqStages, C::kDqBlocks>(
          stream, dout, q, k, v, kv_begin, lse, delta, g, dq);
      e != cudaSuccess)
    return e;
  return launch_dkdv<kD, C::kKvWarps, C::kKvMb, C::kKvQ, C::kKvStages, C::kKvBlocks>(
      stream, dout, q, k, v, kv_begin, lse, delta, g, dk, dv);
}

}  // namespace astrai::gpu::attention_mma
