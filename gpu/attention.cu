// KV-cache writes and causal grouped-query attention over a paged cache.
//
// Cache layout: [num_pages * page_size, KVH, D]; logical position j of sequence s lives in slot
// page_table[s][j / page_size] * page_size + j % page_size.
//
// paged_attention: one kernel for prefill, extend and decode. A block takes a tile of query rows
// of one sequence (kTileRows query rows of one head for prefill; for decode, the heads of one GQA
// group, which share a KV head, as the rows) and one KV split; it walks its keys in tiles of
// kTileKeys staged in shared memory as f32 (loaded cooperatively with 16-byte loads, so a tile's
// loads are all in flight at once, and shared by the tile's rows). Warp w owns tile rows
// w, w + kWarps, ...; for each row, lane j scores key j of the key tile, the warp reduces the
// tile's max and sum, and each lane updates its dims of the row's accumulator (online softmax, f32):
//   m' = max(m, max_j s_j);  l = l e^(m - m') + sum_j e^(s_j - m');
//   acc = acc e^(m - m') + sum_j e^(s_j - m') v_j;   out = acc / l
// Split-KV: when the blocks are too few to fill the GPU (decode, few sequences, long contexts) the
// keys are cut into `splits` ranges; each block writes its unnormalised (m, l, acc) to scratch and
// a combine kernel merges the splits that saw keys:
//   out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M),  M = max_s m_s.
// Lengths are read from device memory (q_start, kv_len, page_table); the host sizes the grid only,
// from AttentionBatch::max_q_len and max_kv_len, which may be capacities rather than this step's
// lengths (a CUDA graph's grid is fixed at capture). A sequence's split length is its own kv_len /
// splits rounded up to a key tile, so splits past its keys exit at once, and its result depends on
// its own length and the grid only, never on the other sequences' lengths. Any head_dim up to
// kMaxHeadDim (shared memory grows with it).
//
// rope_attention: rope_kv_store then paged_attention. A decode step that the decode kernel takes
// (and that fits one wave of its blocks) runs as that kernel alone: each block norms and rotates
// its q rows itself, and the block that holds the step's own key writes that key's K and V.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

#include "gpu/check.h"
#include "gpu/decode_splits.h"
#include "gpu/device_util.cuh"
#include "gpu/mma_fragments.cuh"
#include "gpu/ops.h"
#include "gpu/rope_head.cuh"
#include "gpu/rows.h"
#include "src/backend/attention_shapes.h"

namespace astrai::gpu {
namespace {

constexpr int kWarps = 4;
constexpr int kTileRows = 16, kTileKeys = 32, kRowsPerWarp = kTileRows / kWarps;
constexpr int64_t kMaxHeadDim = 512;
constexpr int64_t kMinKeysPerSplit = 32;  // one key tile
constexpr int kMmaMinQueries = 16;        // max_q_len from which paged_attention_mma takes the step

template <typename T>
__global__ void kv_store_kernel(Rows k, Rows v, const int32_t* __restrict__ slots, int64_t kvh, int64_t d,
                                int64_t n_slots, T* __restrict__ k_cache, T* __restrict__ v_cache,
                                int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / d, i = e % d;  // r = token * kvh + head
    const int32_t slot = slots[r / kvh];
    if (slot < 0 || slot >= n_slots) continue;  // validated by the model; never write outside the cache
    const int64_t dst = (int64_t(slot) * kvh + r % kvh) * d + i;
    k_cache[dst] = k.row<T>(r)[i];
    v_cache[dst] = v.row<T>(r)[i];
  }
}

struct AttnParams {
  Rows q, out;
  const int32_t* q_start;
  const int32_t* kv_len;
  const int32_t* page_table;
  int num_seqs, max_pages, page_size;
  int page_shift;  // log2(page_size) where it is a power of two, else -1
  int64_t heads, group, kv_heads, head_dim, n_pages;
  float scale;
  int heads_per_tile;  // q heads of one KV head in a tile (decode: the GQA group shares K/V loads)
  int rows_per_tile;   // query rows in a tile: kTileRows / heads_per_tile
  int splits;          // KV ranges per (row, head); 1: write out directly
  float* part_acc;     // [rows * heads * splits, D]   (splits > 1)
  float* part_ml;      // [rows * heads * splits, 2]  m, l
};

// rope_attention's decode kernel (kRope) takes the step's rows as the qkv projection wrote them
// (AttnParams::q before its norm and RoPE) and does rope_kv_store's work for them itself.
struct DecodeRope {
  Rows k, v;                     // [T, KVH, D]
  const bf16* q_norm = nullptr;  // [D], with k_norm, or neither
  const bf16* k_norm = nullptr;
  RopeStep step;
  bf16* k_cache = nullptr;  // the caches the kernel reads, written at this step's slots
  bf16* v_cache = nullptr;
};

// Grid: x = query tile within the sequence, y = group of heads_per_tile heads, z = sequence * splits
// + split. Tile row t is query row t / heads_per_tile of the tile and head t % heads_per_tile of
// the group; warp w owns tile rows w, w + kWarps, ... (so a decode tile of 4 heads keeps 4 warps busy).
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(AttnParams p, const T* __restrict__ k_cache, const T* __restrict__ v_cache) {
  pdl_launch_dependents();  // the o projection's GEMV may start loading its weights
  extern __shared__ float smem[];
  const int64_t D = p.head_dim;
  float* q_s = smem;                       // [kTileRows][D]
  float* acc = q_s + kTileRows * D;        // [kTileRows][D]
  float* k_s = acc + kTileRows * D;        // [kTileKeys][D + 1] (padded: lanes read different banks)
  float* v_s = k_s + kTileKeys * (D + 1);  // [kTileKeys][D]
  float* p_s = v_s + kTileKeys * D;        // [kWarps][kTileKeys]
  int64_t* row_s = reinterpret_cast<int64_t*>(p_s + kWarps * kTileKeys);  // [kTileKeys] cache row offsets
  const int hpt = p.heads_per_tile;
  const int64_t h0 = int64_t(blockIdx.y) * hpt, kvh = h0 / p.group;
  const int s = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t q0 = p.q_start[s], q_len = p.q_start[s + 1] - q0;
  const int64_t r0 = int64_t(blockIdx.x) * p.rows_per_tile;  // first query row of the tile in the sequence
  if (r0 >= q_len) return;
  const int64_t n_q = min(int64_t(p.rows_per_tile), q_len - r0);
  const int n_rows = int(n_q) * hpt;              // valid tile rows: t < n_rows
  const int64_t pos0 = p.kv_len[s] - q_len + r0;  // position of the tile's first query row
  const int64_t n_keys = pos0 + n_q;              // the last row sees keys [0, pos0 + n_q)
  const int64_t kv_len = p.kv_len[s];
  const int64_t chunk =
      p.splits == 1 ? kv_len : (kv_len + p.splits * kTileKeys - 1) / (p.splits * kTileKeys) * kTileKeys;
  const int64_t j0 = split * chunk;
  const int64_t j1 = min(n_keys, j0 + chunk);  // n_keys <= kv_len <= splits * chunk
  const int32_t* pages = p.page_table + int64_t(s) * p.max_pages;
  if (j0 >= j1) {  // a split past the tile's keys (most of a capacity-sized grid): the empty state
    for (int r = warp; r < n_rows; r += kWarps) {
      const int64_t part = ((q0 + r0 + r / hpt) * p.heads + h0 + r % hpt) * p.splits + split;
      for (int64_t i = lane; i < D; i += 32) p.part_acc[part * D + i] = 0.0f;
      if (lane == 0) {
        p.part_ml[2 * part] = -INFINITY;
        p.part_ml[2 * part + 1] = 0.0f;
      }
    }
    return;
  }

  const int d32 = int(D);  // indices inside a tile fit in int: kTileKeys * D <= 16384
  for (int e = threadIdx.x; e < kTileRows * d32; e += blockDim.x) {
    const int t = e / d32, i = e - t * d32;
    q_s[e] = t < n_rows ? to_f32(p.q.row<T>((q0 + r0 + t / hpt) * p.heads + h0 + t % hpt)[i]) : 0.0f;
    acc[e] = 0.0f;
  }
  float m[kRowsPerWarp], l[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) m[rr] = -INFINITY, l[rr] = 0.0f;
  // 16-byte loads of K/V rows when they are bf16 and D is a multiple of 8.
  const bool vec8 = std::is_same_v<T, bf16> && d32 % 8 == 0;
  __syncthreads();  // q_s / acc are read by other threads than wrote them (also when no key is ours)

  for (int64_t kt = j0; kt < j1; kt += kTileKeys) {
    __syncthreads();                // the previous tile is no longer read
    if (threadIdx.x < kTileKeys) {  // each key's cache row, looked up once per tile (-1: none)
      const int64_t key = kt + threadIdx.x;
      int64_t row = -1;
      if (key < j1) {
        const int64_t pg = key / p.page_size;
        const int32_t page = pg < p.max_pages ? pages[pg] : -1;
        if (page >= 0 && page < p.n_pages)  // validated by the model; never read outside the cache
          row = ((int64_t(page) * p.page_size + key % p.page_size) * p.kv_heads + kvh) * D;
      }
      row_s[threadIdx.x] = row;
    }
    __syncthreads();
    if (vec8) {
      const int per_row = d32 / 8;
      for (int e = threadIdx.x; e < kTileKeys * per_row; e += blockDim.x) {
        const int j = e / per_row, c = (e - j * per_row) * 8;
        float kf[8] = {}, vf[8] = {};
        if (row_s[j] >= 0) {
          unpack8(*reinterpret_cast<const uint4*>(k_cache + row_s[j] + c), kf);
          unpack8(*reinterpret_cast<const uint4*>(v_cache + row_s[j] + c), vf);
        }
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          k_s[j * (d32 + 1) + c + t] = kf[t];
          v_s[j * d32 + c + t] = vf[t];
        }
      }
    } else {
      for (int e = threadIdx.x; e < kTileKeys * d32; e += blockDim.x) {
        const int j = e / d32, i = e - j * d32;
        const bool ok = row_s[j] >= 0;
        k_s[j * (d32 + 1) + i] = ok ? to_f32(k_cache[row_s[j] + i]) : 0.0f;
        v_s[j * d32 + i] = ok ? to_f32(v_cache[row_s[j] + i]) : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = rr * kWarps + warp;
      if (r >= n_rows) break;
      const int64_t key = kt + lane;
      const float* qr = q_s + r * D;
      float sc = -INFINITY;
      if (key < j1 && key <= pos0 + r / hpt) {  // causal: a row sees keys up to its own position
        const float* kr = k_s + lane * (D + 1);
        // Four independent partial sums: the shared-memory loads of a row overlap instead of
        // waiting on one chain of adds (the dot product is most of a decode tile's time).
        float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
        int i = 0;
#pragma unroll 4
        for (; i + 4 <= d32; i += 4) {
          d0 += qr[i] * kr[i];
          d1 += qr[i + 1] * kr[i + 1];
          d2 += qr[i + 2] * kr[i + 2];
          d3 += qr[i + 3] * kr[i + 3];
        }
        for (; i < d32; ++i) d0 += qr[i] * kr[i];
        sc = ((d0 + d1) + (d2 + d3)) * p.scale;
      }
      float tile_max = sc;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
      if (tile_max == -INFINITY) continue;  // no key of this tile is visible to the row (uniform in the warp)
      const float m_new = fmaxf(m[rr], tile_max);
      const float corr = expf(m[rr] - m_new);
      const float pj = expf(sc - m_new);  // 0 for masked keys
      l[rr] = l[rr] * corr + warp_sum(pj);
      m[rr] = m_new;
      p_s[warp * kTileKeys + lane] = pj;
      __syncwarp();
      float* ar = acc + r * D;
      for (int64_t i = lane; i < D; i += 32) {
        float a = ar[i] * corr;
#pragma unroll 8
        for (int j = 0; j < kTileKeys; ++j) a += p_s[warp * kTileKeys + j] * v_s[j * D + i];
        ar[i] = a;
      }
      __syncwarp();  // p_s is rewritten by the next row
    }
  }
  // Each warp finishes its own rows (acc rows are private to their warp): the normalised output,
  // or with splits the unnormalised partial state (an empty split leaves m = -inf, l = 0).
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = rr * kWarps + warp;
    if (r >= n_rows) break;
    const int64_t row = (q0 + r0 + r / hpt) * p.heads + h0 + r % hpt;
    if (p.splits == 1) {
      const float inv = l[rr] > 0.0f ? 1.0f / l[rr] : __int_as_float(0x7fc00000);
      T* o = p.out.row<T>(row);
      for (int64_t i = lane; i < D; i += 32) o[i] = from_f32<T>(acc[r * D + i] * inv);
    } else {
      const int64_t part = row * p.splits + split;
      for (int64_t i = lane; i < D; i += 32) p.part_acc[part * D + i] = acc[r * D + i];
      if (lane == 0) {
        p.part_ml[2 * part] = m[rr];
        p.part_ml[2 * part + 1] = l[rr];
      }
    }
  }
}

// One block per (row, head): merges the splits' partial states. Warp 0 finds M and each split's
// weight w_s = e^(m_s - M) (0 for a split that saw no key, whose acc is 0); then thread t sums dim
// t % D over the splits t / D, t / D + G, ... (G = blockDim / D groups), so each thread's loads
// are independent and many are in flight, and the G partial sums meet in shared memory in a fixed
// order (the bits do not depend on timing). A capacity-sized grid has many splits, most empty.
constexpr int kCombineThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) combine_splits_kernel(AttnParams p) {
  pdl_launch_dependents();  // the o projection's GEMV may start loading its weights
  __shared__ float w_s[kMaxSplits];
  __shared__ float part_s[kCombineThreads];
  __shared__ float inv_s;
  const int64_t row = blockIdx.x * p.heads + blockIdx.y;
  const int D = int(p.head_dim), splits = p.splits;
  const int64_t part0 = row * splits;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float M = -INFINITY;
    for (int sp = lane; sp < splits; sp += 32) M = fmaxf(M, p.part_ml[2 * (part0 + sp)]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float L = 0.0f;
    for (int sp = lane; sp < splits; sp += 32) {
      const float l = p.part_ml[2 * (part0 + sp) + 1];
      const float w = l > 0.0f ? expf(p.part_ml[2 * (part0 + sp)] - M) : 0.0f;
      w_s[sp] = w;
      L += l * w;
    }
    L = warp_sum(L);
    if (lane == 0) inv_s = L > 0.0f ? 1.0f / L : __int_as_float(0x7fc00000);
  }
  __syncthreads();
  const float* acc = p.part_acc + part0 * D;
  T* o = p.out.row<T>(row);
  const int groups = int(blockDim.x) / D;
  if (groups <= 1) {  // wide heads: each thread its dims, every split
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
      float sum = 0.0f;
#pragma unroll 4
      for (int sp = 0; sp < splits; ++sp) sum += w_s[sp] * acc[int64_t(sp) * D + i];
      o[i] = from_f32<T>(sum * inv_s);
    }
    return;
  }
  const int g = threadIdx.x / D, i = threadIdx.x % D;
  float sum = 0.0f;
  if (g < groups)
#pragma unroll 4
    for (int sp = g; sp < splits; sp += groups) sum += w_s[sp] * acc[int64_t(sp) * D + i];
  part_s[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x < D) {
    float total = 0.0f;
    for (int gg = 0; gg < groups; ++gg) total += part_s[gg * D + threadIdx.x];
    o[threadIdx.x] = from_f32<T>(total * inv_s);
  }
}

// Decode (one query per sequence, bf16, head_dim 64 or 128, GQA group 1, 2, 4 or 8) runs on tensor
// cores: decode_attention_kernel below. A split gets max(kDecodeMinKeys, its share rounded up to
// the keys a block takes per round) keys (gpu/decode_splits.h).
// The decode kernel's softmax state stays relative to its running maximum m until a score passes m
// by more than this (log2 units): most keys then cost no rescale of the accumulators (their terms
// reach at most 2^kRescaleSlack, far inside f32).
constexpr float kRescaleSlack = 8.0f;

// Asks L1 for the line holding p (no register result, no wait).
__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}

// The cache slot of key `key` of the sequence whose page-table row is `pages`, or -1 where its
// page is outside the cache (validated by the model: never read). 32-bit key arithmetic, a shift
// for a power-of-two page size.
__device__ __forceinline__ int64_t decode_slot(const AttnParams& p, const int32_t* pages, int key) {
  const int pg = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;
  const int32_t page = pg < p.max_pages ? pages[pg] : -1;
  return page >= 0 && page < p.n_pages ? int64_t(page) * p.page_size + (key - pg * p.page_size) : -1;
}
// The empty state of a split past its sequence's keys, for the combine: the group's G rows.
template <int D, int G>
__device__ void write_empty_split(const AttnParams& p, int64_t row0, int split) {
  for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
    const int64_t part_row = (row0 + e / D) * p.splits + split;
    p.part_acc[part_row * D + e % D] = 0.0f;
    if (e % D == 0) {
      p.part_ml[2 * part_row] = -INFINITY;
      p.part_ml[2 * part_row + 1] = 0.0f;
    }
  }
}

// The decode kernel's last step: merges the W warps' states (ml_s[w][g] = m in log2 units and l,
// acc_s[w][g] the unnormalised sum, all relative to 2^m), in a fixed order, into the group's output
// rows (no splits) or the split's partial state (m in natural-log units).
template <int D, int G, int W>
__device__ void merge_warps(const AttnParams& p, const float (*ml_s)[G][2], const float (*acc_s)[G][D],
                            int64_t row0, int split) {
  for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
    const int g = e / D, i = e % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) M = fmaxf(M, ml_s[w][g][0]);
    float L = 0.0f, A = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float c = M == -INFINITY ? 0.0f : exp2f(ml_s[w][g][0] - M);
      L += ml_s[w][g][1] * c;
      A += acc_s[w][g][i] * c;
    }
    const int64_t row = row0 + g;
    if (p.splits == 1) {
      p.out.row<bf16>(row)[i] = from_f32<bf16>(L > 0.0f ? A / L : __int_as_float(0x7fc00000));
    } else {
      const int64_t part_row = row * p.splits + split;
      p.part_acc[part_row * D + i] = A;
      if (i == 0) {
        p.part_ml[2 * part_row] = M * kLn2;  // log2 units to natural
        p.part_ml[2 * part_row + 1] = L;
      }
    }
  }
}

// The decode kernel: a block of W warps per (KV head, sequence, split) computes the GQA group's
// heads together, so each K/V row is read once for all of them. Each warp takes tiles of kDecodeTileKeys
// keys in turn (warp w the keys [base + 16 w, base + 16 w + 16) of each round of 16 W) and runs them
// through mma.sync m16n8k16 with the group's G heads as the rows of the A operand (rows G..15 zero:
// at G = 4 three quarters of each MMA is padding, which costs nothing next to the loads):
//   s[16 x 16 keys] = q[16 x D] k^T (B fragments from the K tile, ldmatrix),
//   online softmax per row in log2 units, p rounded to bf16 as FlashAttention does,
//   o[16 x D] += p v (p's accumulators are, element for element, the A fragment; V through ldmatrix.trans).
// Each warp streams its tiles through its own ring of kS tiles in shared memory (cp.async, kS - 1
// tiles in flight; page-table lookups one per lane, shared by shuffles; tiles in wgmma's 128-byte
// swizzle, wgmma::swizzled, read by mma_fragments.cuh's load_b_swz), so the warps never wait
// for each other inside the key loop; they then merge through shared memory in a fixed order. With
// splits the block writes its unnormalised state as the general kernel does (m in natural-log
// units) and combine_splits_kernel merges. A tile's keys past the split or on an invalid page are
// zero-filled and masked; a tile with none is skipped. Under programmatic dependent launch
// (decode_pdl) the kernel may start while rope_kv_store still runs: the first tiles' copies go out
// before pdl_wait, but the one key that kernel writes (this step's own, kv_len - 1) is held back and
// stored after it; q is read after it too.
// Replacing a CUDA-core kernel (lanes of 8 dims, a score shuffle-reduced per key), measured on the
// H200: qwen3-8b batch 128 at 4k 33.1 -> 25.2 ms a step, llama-1b batch 256 at 512 3.46 -> 2.82 ms,
// and no slower at batch 1 (docs/performance.md).
// W = 2 warps, kS = 3 tiles: against 4 x 2, 4 x 3, 2 x 2, 2 x 4 and 8 x 2 on the H200, the best or
// within noise at qwen3-8b batch 64 / 256 (prompt 192) and 128 (4k); 8 x 2 was 4% faster for
// llama-1b at batch 64 (4k) but 7% slower for qwen3-8b at 256. At head_dim 64 a ring of 4 (three
// tiles in flight a warp) reads faster: llama-1b +2.5% at batch 1 and 64 (32k), +3% at 64 (4k), -1%
// at 8 (32k), even at 512; at head_dim 128 it lost (qwen3-8b -7% at batch 1, -2% at 16, 32k).
// Swizzled rows instead of rows padded to D + 8 (whose cp.async writes met four-way bank
// conflicts): llama-1b -3 to -7% a step at 4k and 32k, qwen3-8b -2.5 to -4.4% at 4k (H200). At
// head_dim 64 a block then takes 32 KB with four stages (six blocks a multiprocessor, as padded) or
// 24 KB with three (nine): the deeper ring reads faster while the step's blocks fit one wave of it
// (llama-1b batch 8 to 64), the shallower one once they spill past it (-6% at batch 128, -3% at 256,
// 4k), so launch_decode picks by the blocks (decode_ring).
// Steps whose blocks fit one wave of a four-warp kernel take that one instead (decode_ring).
constexpr int kDecodeWarps = 2, kDecodeTileKeys = 16;
// The ring's stages: the deeper, the shallower (D = 64 only; at 128 both are three).
template <int D>
constexpr int decode_stages(bool deep) {
  return D <= 64 && deep ? 4 : 3;
}
template <int D, int kS, int W>
constexpr size_t decode_smem() {
  return size_t(W) * kS * 2 * kDecodeTileKeys * D * sizeof(bf16);
}

// kRope (rope_attention): after pdl_wait the block norms and rotates its group's q rows into shared
// memory with rope_kv_store's arithmetic (rope_head.cuh), and the block whose split holds the step's
// own key does the same for that key's K into the step's cache slot (V as it is), then reads both
// back as its tiles need them. Only that block reads the slot, so no other kernel is needed.
template <int D, int G, bool kRope, int kS, int W>
__global__ void __launch_bounds__(W * 32)
    decode_attention_kernel(AttnParams p, const bf16* __restrict__ k_cache, const bf16* __restrict__ v_cache,
                            DecodeRope rp) {
  namespace am = attention_mma;
  pdl_launch_dependents();                    // the o projection's GEMV may start loading its weights
  constexpr int kTile = kDecodeTileKeys * D;  // bf16 per K (or V) tile
  constexpr int kPerLane = kDecodeTileKeys * D / 8 / 32;  // 16-byte pieces a lane copies
  constexpr int kKeysPerIter = W * kDecodeTileKeys;
  static_assert(G <= 8 && kS * kDecodeTileKeys <= 64, "rows g < 8 only; the stages' valid bits fit 64");
  extern __shared__ __align__(16) unsigned char decode_smem_raw[];
  // [W][kS][K, V][D / 64][kDecodeTileKeys][64], in wgmma's swizzle
  bf16* tiles = reinterpret_cast<bf16*>(decode_smem_raw);
  const int kvh = blockIdx.x;
  const int s = blockIdx.y / p.splits, split = blockIdx.y % p.splits;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t q0 = p.q_start[s];
  if (p.q_start[s + 1] - q0 != 1) return;  // a padded row of a graph bucket (or no query)
  const int64_t kv_len = p.kv_len[s];
  int64_t chunk = (kv_len + p.splits - 1) / p.splits;
  chunk = max(kDecodeMinKeys, (chunk + kKeysPerIter - 1) / kKeysPerIter * kKeysPerIter);
  const int64_t j0 = split * chunk, j1 = min(kv_len, j0 + chunk);
  const int64_t row0 = q0 * p.heads + int64_t(kvh) * G;  // the group's first output row
  if (j0 >= j1) {
    write_empty_split<D, G>(p, row0, split);
    return;
  }
  const int32_t* pages = p.page_table + int64_t(s) * p.max_pages;
  const int key_end = int(j1), own = int(kv_len - 1);
  bf16* my_tiles = tiles + warp * kS * 2 * kTile;
  // kRope: the group's q rows after norm and RoPE, [G][D], in warp 0's last stage, which no copy
  // fills before the key loop (static shared memory would cost llama-1b's shapes a resident block
  // per multiprocessor).
  bf16* q_s = tiles + (kS - 1) * 2 * kTile;
  // Tile `round` of this warp into stage st: lane l looks up key l % 16's slot; a lane's pieces are
  // pieces lane + 32 i of the tile (row c / (D / 8), 8 dims at (c % (D / 8)) * 8). Valid keys' bits
  // go to okbits (16 a stage). skip_own: the step's own key is left for after pdl_wait.
  uint64_t okbits = 0;
  auto issue = [&](int round, int st, bool skip_own) {
    const int kb = int(j0) + round * kKeysPerIter + warp * kDecodeTileKeys;
    const int key = kb + lane % kDecodeTileKeys;
    const int slot = key < key_end ? int(decode_slot(p, pages, key)) : -1;
    const uint64_t mask = __ballot_sync(0xffffffffu, slot >= 0) & 0xffffu;
    okbits = (okbits & ~(0xffffull << (16 * st))) | mask << (16 * st);
    if (mask == 0) return;  // the whole tile past the keys: never read
    bf16* kt = my_tiles + st * 2 * kTile;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int c = lane + 32 * i, r = c / (D / 8), part = c % (D / 8);
      const int rs = __shfl_sync(0xffffffffu, slot, r);
      if (skip_own && kb + r == own) continue;
      const int64_t off = (int64_t(max(rs, 0)) * p.kv_heads + kvh) * D + part * 8;
      const int at = wgmma::swizzled<kDecodeTileKeys>(r, part);
      cp_async16_line(kt + at, k_cache + off, rs >= 0);
      cp_async16_line(kt + kTile + at, v_cache + off, rs >= 0);
    }
  };
#pragma unroll
  for (int r = 0; r < kS - 1; ++r) {
    issue(r, r, true);
    cp_async_commit();
  }
  // kRope: the step's position and slot are step inputs, and the table and norm weights constants,
  // so they are read (the table row and the weights asked into L1) before pdl_wait.
  const float* cs = nullptr;
  int32_t rope_slot = -1;
  if constexpr (kRope) {
    cs = rp.step.table_row(rp.step.positions[q0], D);
    rope_slot = rp.step.slots[q0];
    constexpr int kTableLines = D * int(sizeof(float)) / 128, kWeightLines = D * int(sizeof(bf16)) / 128;
    if (cs != nullptr && int(threadIdx.x) < kTableLines)
      prefetch_l1(reinterpret_cast<const char*>(cs) + 128 * threadIdx.x);
    if (rp.q_norm != nullptr && int(threadIdx.x) >= 32 && int(threadIdx.x) < 32 + 2 * kWeightLines) {
      const int i = int(threadIdx.x) - 32;
      prefetch_l1(reinterpret_cast<const char*>(i < kWeightLines ? rp.q_norm : rp.k_norm) +
                  128 * (i % kWeightLines));
    }
  }
  pdl_wait();
  if constexpr (kRope) {
    // Tasks: the group's G q rows, then (the block that holds the own key) its K row and its V row
    // into the cache slot; a group of D / 16 lanes per task, as rope_kv_store takes a row of
    // 16-byte vectors. The __syncthreads below makes the cache rows visible to the block's reads.
    constexpr int kLanes = D / 16, kGroups = W * 32 / kLanes;
    const int task0 = int(threadIdx.x) / kLanes, rl = int(threadIdx.x) % kLanes;
    const unsigned mask = ((1u << kLanes) - 1u) << ((threadIdx.x % 32) & ~unsigned(kLanes - 1));
    const int64_t cache_row = (int64_t(rope_slot) * p.kv_heads + kvh) * D;
    const int tasks = G + (own >= int(j0) && own < key_end && rp.step.slot_ok(rope_slot) ? 2 : 0);
    for (int task = task0; task < tasks; task += kGroups) {  // uniform over each lane group
      if (task < G) {
        rope_head<bf16, 8>(p.q.row<bf16>(row0 + task), q_s + task * D, nullptr, rp.q_norm, rp.step.eps, cs, D,
                           rl, kLanes, mask);
      } else if (task == G) {
        rope_head<bf16, 8>(rp.k.row<bf16>(q0 * p.kv_heads + kvh), rp.k_cache + cache_row, nullptr, rp.k_norm,
                           rp.step.eps, cs, D, rl, kLanes, mask);
      } else {
        const uint4* src = reinterpret_cast<const uint4*>(rp.v.row<bf16>(q0 * p.kv_heads + kvh));
        for (int c = rl; c < D / 8; c += kLanes) reinterpret_cast<uint4*>(rp.v_cache + cache_row)[c] = src[c];
      }
    }
    __syncthreads();
  }
  // The step's own key, if one of the tiles above holds it (a plain store: the other lanes see it
  // after the loop's __syncwarp).
  if (own >= int(j0) && own < key_end) {
    const int rel = own - int(j0), round = rel / kKeysPerIter,
              r = rel % kKeysPerIter - warp * kDecodeTileKeys;
    if (round < kS - 1 && r >= 0 && r < kDecodeTileKeys) {
      const int64_t slot = decode_slot(p, pages, own);
      bf16* kt = my_tiles + round * 2 * kTile;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + 32 * i, part = c % (D / 8);
        if (c / (D / 8) == r) {  // an invalid page (masked): zeros, as the copies' zero fill
          const int64_t off = (max(slot, int64_t(0)) * p.kv_heads + kvh) * D + part * 8;
          const uint4 zero{0u, 0u, 0u, 0u};
          // kRope: this block wrote the row; read it back through the pointer it wrote with (the
          // caches' own are read-only to the compiler).
          const bf16* kc = kRope ? rp.k_cache : k_cache;
          const bf16* vc = kRope ? rp.v_cache : v_cache;
          const int at = wgmma::swizzled<kDecodeTileKeys>(r, part);
          *reinterpret_cast<uint4*>(kt + at) = slot >= 0 ? *reinterpret_cast<const uint4*>(kc + off) : zero;
          *reinterpret_cast<uint4*>(kt + kTile + at) =
              slot >= 0 ? *reinterpret_cast<const uint4*>(vc + off) : zero;
        }
      }
    }
  }
  // q as A fragments: lane 4 g + c holds row g (head g of the group; zero past G), dims 2c, 2c + 1
  // and 2c + 8, 2c + 9 of each 16; rows 8..15 are zero.
  const int g = lane / 4, c4 = lane % 4;
  uint32_t qa[D / 16][2];
  {
    const bf16* qrow = kRope ? q_s + min(g, G - 1) * D : p.q.row<bf16>(row0 + min(g, G - 1));
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      qa[kk][0] = g < G ? *reinterpret_cast<const uint32_t*>(qrow + kk * 16 + 2 * c4) : 0u;
      qa[kk][1] = g < G ? *reinterpret_cast<const uint32_t*>(qrow + kk * 16 + 8 + 2 * c4) : 0u;
    }
  }
  if constexpr (kRope) __syncthreads();  // every warp has its q before warp 0's first round refills q_s
  const float scale_log2 = p.scale * kLog2e;
  float m = -INFINITY, l = 0.0f;  // row g's state (each of the four lanes of a row holds it)
  float o[D / 8][4];
#pragma unroll
  for (int nb = 0; nb < D / 8; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nb][e] = 0.0f;
  for (int round = 0; j0 + int64_t(round) * kKeysPerIter < j1; ++round) {  // uniform over the block
    issue(round + kS - 1, (round + kS - 1) % kS, false);
    cp_async_commit();
    cp_async_wait<kS - 1>();
    __syncwarp();
    const int st = round % kS;
    const uint32_t ok = uint32_t(okbits >> (16 * st)) & 0xffffu;
    if (ok != 0) {  // uniform over the warp
      const bf16* kt = my_tiles + st * 2 * kTile;
      float sc[2][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t b[4];
        am::load_b_swz<kDecodeTileKeys>(kt, 0, kk * 16, b);
        const uint32_t a[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
        am::mma(sc[0], a, b[0], b[1]);
        am::mma(sc[1], a, b[2], b[3]);
      }
      // Row g's scores: keys 8 nb + 2 c4 + e (sc[nb][e], e < 2); [2], [3] are the zero rows.
      float tmax = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const bool valid = ok >> (8 * nb + 2 * c4 + e) & 1u;
          sc[nb][e] = valid ? sc[nb][e] * scale_log2 : -INFINITY;
          tmax = fmaxf(tmax, sc[nb][e]);
        }
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
      if (tmax > m + kRescaleSlack) {  // at the first valid key too (m = -inf): the state moves to tmax
        const float corr = fast_exp2(m - tmax);
        l *= corr;
#pragma unroll
        for (int nb = 0; nb < D / 8; ++nb) {
          o[nb][0] *= corr;
          o[nb][1] *= corr;
        }
        m = tmax;
      }
      const float mu = m == -INFINITY ? 0.0f : m;  // a row that has seen no key: every p is 0
      float pr[2][2];
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          pr[nb][e] = fast_exp2(sc[nb][e] - mu);
          l += pr[nb][e];
        }
      const uint32_t pa[4] = {am::pack_bf16(pr[0][0], pr[0][1]), 0u, am::pack_bf16(pr[1][0], pr[1][1]), 0u};
      const bf16* vt = kt + kTile;
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t b[4];
        am::load_b_trans_swz<kDecodeTileKeys>(vt, 0, np * 16, b);
        am::mma(o[2 * np], pa, b[0], b[1]);
        am::mma(o[2 * np + 1], pa, b[2], b[3]);
      }
    }
    __syncwarp();  // every lane is done with stage st before the next round refills it
  }
  cp_async_wait<0>();  // copies of tiles past the keys (zero fills) may still be landing
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  __syncthreads();  // the tiles' memory becomes the merge's
  auto ml_s = reinterpret_cast<float(*)[G][2]>(decode_smem_raw);
  auto acc_s = reinterpret_cast<float(*)[G][D]>(decode_smem_raw + sizeof(float) * W * G * 2);
  if (g < G) {
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
      acc_s[warp][g][nb * 8 + 2 * c4] = o[nb][0];
      acc_s[warp][g][nb * 8 + 2 * c4 + 1] = o[nb][1];
    }
    if (c4 == 0) {
      ml_s[warp][g][0] = m;
      ml_s[warp][g][1] = l;
    }
  }
  __syncthreads();
  merge_warps<D, G, W>(p, ml_s, acc_s, row0, split);
}

size_t smem_bytes(int64_t D) {
  return size_t(2 * kTileRows * D + kTileKeys * (D + 1) + kTileKeys * D + kWarps * kTileKeys) *
             sizeof(float) +
         kTileKeys * sizeof(int64_t);
}

// Splits per (tile, head): enough blocks for ~4 waves of one block per multiprocessor, with at
// least kMinKeysPerSplit keys each (rounded up); 1 when the tiles already fill the GPU (prefill).
int choose_splits(int64_t blocks, int64_t max_kv) {
  const int64_t want = (4 * int64_t(sm_count()) + blocks - 1) / blocks;
  const int64_t most = (max_kv + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  return int(std::max<int64_t>(1, std::min<int64_t>({want, most, kMaxSplits})));
}

// Shared memory beyond 48 KB must be allowed per kernel, once. The dynamic shared-memory limit is
// an attribute of the kernel on one device: tensor-parallel ranks launch it on several, so it is
// raised once per device, not once per process.
template <auto Kernel>
void allow_smem(size_t bytes) {
  constexpr int kMaxDevices = 64;
  static std::array<std::once_flag, kMaxDevices> once;
  int dev = 0;
  ASTRAI_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices)
    throw Error(internal_error("paged_attention: device index out of range"));
  std::call_once(once[size_t(dev)], [bytes] {
    ASTRAI_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  });
}

// With splits: the scratch for the splits' partial states (p.part_acc, p.part_ml) of T query rows.
void set_partials(AttnParams& p, Scratch& scratch, int64_t T) {
  p.part_acc = p.part_ml = nullptr;
  if (p.splits == 1) return;
  const int64_t H = p.heads, D = p.head_dim;
  float* part = static_cast<float*>(scratch.ensure(size_t(T * H * p.splits * (D + 2)) * sizeof(float)));
  p.part_acc = part;
  p.part_ml = part + T * H * p.splits * D;
}

// With splits: merges them into p.out (one block per query row and head).
template <typename T>
void launch_combine(cudaStream_t stream, const AttnParams& p) {
  if (p.splits == 1) return;
  const dim3 grid{unsigned(p.q.n_rows / p.heads), unsigned(p.heads), 1};
  combine_splits_kernel<T><<<grid, kCombineThreads, 0, stream>>>(p);
  ASTRAI_CUDA_LAUNCH_CHECK(combine_splits_kernel);
}

template <typename T>
void launch(cudaStream_t stream, const AttnParams& p, unsigned tiles, int64_t S, const Tensor& k_cache,
            const Tensor& v_cache) {
  allow_smem<paged_attention_kernel<T>>(smem_bytes(kMaxHeadDim));
  const dim3 grid{tiles, unsigned(p.heads / p.heads_per_tile), unsigned(S * p.splits)};
  paged_attention_kernel<T>
      <<<grid, kWarps * 32, smem_bytes(p.head_dim), stream>>>(p, k_cache.ptr<T>(), v_cache.ptr<T>());
  ASTRAI_CUDA_LAUNCH_CHECK(paged_attention_kernel);
  launch_combine<T>(stream, p);
}

// ASTRAI_DECODE_ATTENTION=general (for A/B timing) sends decode steps through the general kernel.
bool decode_on_general_kernel() {
  static const bool v = env_is("ASTRAI_DECODE_ATTENTION", "general");
  return v;
}

// ASTRAI_DECODE_MIN_KEYS=N (for A/B timing): a decode split takes at least N of the step's longest
// keys (its bound in a graph) instead of kDecodeMinKeys, so short contexts take fewer splits.
int64_t decode_min_keys() {
  static const int64_t v = [] {
    const char* e = std::getenv("ASTRAI_DECODE_MIN_KEYS");
    const int64_t n = e && *e ? std::atoll(e) : kDecodeMinKeys;
    return n >= kDecodeMinKeys ? n : kDecodeMinKeys;
  }();
  return v;
}

// ASTRAI_DECODE_ONE_SPLIT=0 (for A/B timing): short contexts split as longer ones do
// (DecodeSplitOptions::short_one_split off), and few blocks keep the four-warp kernel and its
// splits (decode_ring).
bool decode_short_one_split() {
  static const bool v = !env_is("ASTRAI_DECODE_ONE_SPLIT", "0");
  return v;
}
// ASTRAI_DECODE_ONE_SPLIT=many (for A/B timing): only the few-block choice off.
bool decode_few_one_split() {
  static const bool v = decode_short_one_split() && !env_is("ASTRAI_DECODE_ONE_SPLIT", "many");
  return v;
}

using DecodeKernel = void (*)(AttnParams, const bf16*, const bf16*, DecodeRope);

// A decode kernel with its launch shape: warps per block, dynamic shared memory, and the blocks a
// multiprocessor holds at once (the split count is chosen to fill them).
struct DecodeLaunch {
  DecodeKernel kernel = nullptr;
  int warps = 0;
  size_t smem = 0;
  int per_sm = 1;
  bool one_split = false;  // the step takes one split whatever decode_splits would give (decode_ring)
};

template <int D, int G, bool kRope, int kS, int W>
DecodeLaunch decode_launch() {
  constexpr auto kernel = decode_attention_kernel<D, G, kRope, kS, W>;
  constexpr size_t smem = decode_smem<D, kS, W>();
  allow_smem<kernel>(smem);
  static const int per_sm = [] {
    int n = 0;
    ASTRAI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, W * 32, smem));
    return std::max(n, 1);
  }();
  return {kernel, W, smem, per_sm};
}

// The decode kernel for this head_dim, group, ring and warps (kernel nullptr: none, the general
// kernel runs).
template <int D, bool kRope, int kS, int W = kDecodeWarps>
DecodeLaunch decode_launch_for(int64_t group) {
  switch (group) {
    case 1: return decode_launch<D, 1, kRope, kS, W>();
    case 2: return decode_launch<D, 2, kRope, kS, W>();
    case 4: return decode_launch<D, 4, kRope, kS, W>();
    case 8: return decode_launch<D, 8, kRope, kS, W>();
    default: return {};
  }
}
// ASTRAI_DECODE_WARPS=2, 4 or 8 (for A/B timing): decode blocks of that many warps whatever the
// step (4 and 8 with three-stage rings, 2 as decode_ring picks); 0 (unset): decode_ring's choice.
int decode_warps_env() {
  static const int v = [] {
    const char* e = std::getenv("ASTRAI_DECODE_WARPS");
    const int n = e && *e ? std::atoi(e) : 0;
    return n == 2 || n == 4 || n == 8 ? n : 0;
  }();
  return v;
}
// The warps of a few-block one-split step's blocks (few_blocks_one_split): sixteen, so that each
// warp's share of the keys (and the chain of tiles it streams) is half what eight warps take. On the
// H200 (llama-1b at batch 1, bench decode at the 1,023-key class bound, A B B A in one call): +0.9%
// at 512 keys (1,044.9-1,045.6 against 1,034.2-1,037.8 tok/s), +2.2% at 960 (1,015.7-1,017.3 against
// 994.6-995.5). ASTRAI_DECODE_FEW_WARPS=8 (for A/B timing): eight, as before.
int decode_few_warps() {
  static const int v = env_is("ASTRAI_DECODE_FEW_WARPS", "8") ? 8 : 16;
  return v;
}
// decode_launch_for with its warps and ring picked for `blocks` (sequence, KV head) blocks: four
// warps (kWideDecodeWarps) with three-stage rings while the blocks fit one wave of that kernel's
// resident blocks (the splits then fill the wave with fewer, longer blocks, each reading twice the
// keys a round); past it two warps, the deeper ring while they fit one wave of its resident
// blocks, else the shallower one (decode_stages). Four warps against two, measured on the H200
// (tok/s, bench decode overlapped, same call, four warps run second): llama-1b at 4k +5.4% at batch
// 1, +3.6% at 8, +2.8% at 32; at 512 +1.3-1.8% at batch 1, 8 and 64; at 32k +3.4-3.6% at batch 1
// and 8; qwen3-8b at 512 +0.1-1.3% (docs/performance.md). Eight warps were as good for llama-1b
// but 4-5% slower for qwen3-8b at batch 8.
constexpr int kWideDecodeWarps = 4;
template <int D, bool kRope>
DecodeLaunch decode_ring(int64_t group, int64_t blocks, int64_t max_kv_len) {
  if (decode_on_general_kernel()) return {};
  constexpr int kWideRing = decode_stages<D>(false);
  const int forced = decode_warps_env();
  if (forced == 8) return decode_launch_for<D, kRope, kWideRing, 8>(group);
  if (forced == 4) return decode_launch_for<D, kRope, kWideRing, kWideDecodeWarps>(group);
  if (forced == 0 && few_blocks_one_split(D, blocks, max_kv_len) && decode_few_one_split()) {
    DecodeLaunch few;
    if constexpr (D == 64) {  // the only head_dim that takes this path
      if (decode_few_warps() == 16) few = decode_launch_for<D, kRope, kWideRing, 16>(group);
    }
    if (few.kernel == nullptr) few = decode_launch_for<D, kRope, kWideRing, 8>(group);
    few.one_split = true;
    if (few.kernel != nullptr) return few;
  }
  if (forced == 0) {
    const DecodeLaunch wide = decode_launch_for<D, kRope, kWideRing, kWideDecodeWarps>(group);
    if (wide.kernel != nullptr && blocks <= int64_t(wide.per_sm) * sm_count()) return wide;
  }
  constexpr int kDeep = decode_stages<D>(true), kShallow = decode_stages<D>(false);
  const DecodeLaunch deep = decode_launch_for<D, kRope, kDeep>(group);
  if constexpr (kDeep == kShallow) {
    return deep;
  } else {
    if (deep.kernel == nullptr || blocks <= int64_t(deep.per_sm) * sm_count()) return deep;
    return decode_launch_for<D, kRope, kShallow>(group);
  }
}
// The leading one-query sequences of a mixed step that run apart from the tensor-core launch (0:
// the whole step on one kernel). ASTRAI_MIXED_ATTENTION=one: always 0 (for A/B timing).
int mixed_decode_seqs(const AttentionBatch& b) {
  static const bool one = env_is("ASTRAI_MIXED_ATTENTION", "one");
  return one ? 0 : std::clamp(b.num_decode_seqs, 0, b.num_seqs - 1);  // the tail keeps a sequence
}

// Sequences [0, n) of b (one query each) and [n, num_seqs): views of the same device arrays
// (q_start holds absolute rows, so either part addresses q and out as the whole step does).
AttentionBatch head_of(const AttentionBatch& b, int n) {
  AttentionBatch h = b;
  h.q_start = b.q_start.rows(0, n + 1);
  h.kv_len = b.kv_len.rows(0, n);
  h.page_table = Tensor(b.page_table.data, DType::i32, {n, b.max_pages}, b.page_table.device);
  h.num_seqs = n;
  h.max_q_len = 1;
  h.num_decode_seqs = n;
  return h;
}
AttentionBatch tail_of(const AttentionBatch& b, int n) {
  AttentionBatch t = b;
  t.q_start = b.q_start.rows(n, b.num_seqs + 1);
  t.kv_len = b.kv_len.rows(n, b.num_seqs);
  t.page_table = Tensor(b.page_table.ptr<int32_t>() + int64_t(n) * b.max_pages, DType::i32,
                        {b.num_seqs - n, b.max_pages}, b.page_table.device);
  t.num_seqs = b.num_seqs - n;
  t.num_decode_seqs = 0;
  return t;
}

// The decode kernel goes out with programmatic dependent launch (sm_90 on), so that its first K/V
// loads overlap rope_kv_store (or, under rope_attention, the qkv projection): measured on the H200 at +1-3%
// decode tok/s (batch 1-64, llama-1b and qwen3-8b). ASTRAI_ATTENTION_PDL=0 (or ASTRAI_NO_PDL, which also
// stops the GEMV's) turns it off.
bool decode_pdl() {
  static const bool on = pdl_enabled() && !env_is("ASTRAI_ATTENTION_PDL", "0");
  return on;
}

void check_cache(const Tensor& c, const char* op, const char* name, DType dt) {
  check_tensor(c, op, name, dt);
  ASTRAI_GPU_CHECK(
      c.ndim == 3 && c.is_contiguous(),
      std::string(op) + ": " + name + " must be a contiguous [slots, KVH, D], got " + c.shape_str());
}

// paged_attention's checks, and its kernels' parameters but for the split count and scratch.
AttnParams attention_params(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                            const AttentionBatch& batch, float scale, const Tensor& out) {
  check_tensor(q, "paged_attention", "q", DType::bf16, DType::f32);
  check_tensor(out, "paged_attention", "out", q.dtype);
  check_cache(k_cache, "paged_attention", "k_cache", q.dtype);
  check_cache(v_cache, "paged_attention", "v_cache", q.dtype);
  check_index(batch.q_start, "paged_attention", "q_start");
  check_index(batch.kv_len, "paged_attention", "kv_len");
  check_index(batch.page_table, "paged_attention", "page_table");
  check_attention_shapes(q, k_cache, v_cache, batch, out);
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  const int64_t KVH = k_cache.shape[1], ps = batch.page_size, S = batch.num_seqs;
  ASTRAI_GPU_CHECK(D >= 1 && D <= kMaxHeadDim, "paged_attention: head_dim " + std::to_string(D) + " above " +
                                                   std::to_string(kMaxHeadDim));
  ASTRAI_GPU_CHECK(H <= 65535 && S <= 65535, "paged_attention: more than 65535 heads or sequences");
  ASTRAI_GPU_CHECK(T == 0 || H == 0 || S >= 1, "paged_attention: tokens but no sequences");
  AttnParams p;
  p.q = rows_of(q, "paged_attention");
  p.out = rows_of(out, "paged_attention");
  p.q_start = batch.q_start.ptr<int32_t>();
  p.kv_len = batch.kv_len.ptr<int32_t>();
  p.page_table = batch.page_table.ptr<int32_t>();
  p.num_seqs = int(S);
  p.max_pages = batch.max_pages;
  p.page_size = int(ps);
  p.page_shift = std::has_single_bit(uint64_t(ps)) ? std::countr_zero(uint64_t(ps)) : -1;
  p.heads = H;
  p.group = KVH > 0 ? H / KVH : 0;
  p.kv_heads = KVH;
  p.head_dim = D;
  p.n_pages = k_cache.shape[0] / ps;
  p.scale = scale;
  return p;
}

// The decode kernel for a step of one query per sequence (kernel nullptr: none applies).
template <bool kRope>
DecodeLaunch decode_kernel_for(const Tensor& q, const Tensor& k_cache, const AttnParams& p,
                               const AttentionBatch& batch) {
  const bool decode_step = q.dtype == DType::bf16 && batch.max_q_len == 1 && rows_aligned16(p.q) &&
                           rows_aligned16(rows_of(k_cache, "paged_attention"));
  if (!decode_step) return {};
  const int64_t blocks = int64_t(batch.num_seqs) * p.kv_heads;
  if (p.head_dim == 64) return decode_ring<64, kRope>(p.group, blocks, batch.max_kv_len);
  if (p.head_dim == 128) return decode_ring<128, kRope>(p.group, blocks, batch.max_kv_len);
  return {};
}

// The decode kernel over S sequences (decode_splits of the multiprocessors' resident blocks), then
// the combine of its splits.
void launch_decode(cudaStream_t stream, const DecodeLaunch& decode, AttnParams& p,
                   const AttentionBatch& batch, int64_t T, Scratch& scratch, const Tensor& k_cache,
                   const Tensor& v_cache, const DecodeRope& rope) {
  const int64_t S = batch.num_seqs, KVH = p.kv_heads;
  DecodeSplitOptions so;
  so.min_keys = decode_min_keys();
  so.keys_per_round = int64_t(decode.warps) * kDecodeTileKeys;
  so.short_one_split = decode_short_one_split();
  p.splits =
      decode.one_split ? 1 : decode_splits(S, KVH, int64_t(decode.per_sm) * sm_count(), batch.max_kv_len, so);
  p.heads_per_tile = int(p.group);
  p.rows_per_tile = 1;
  set_partials(p, scratch, T);
  const LaunchConfig lc(dim3(unsigned(KVH), unsigned(S * p.splits)), dim3(unsigned(decode.warps * 32)),
                        decode.smem, stream, decode_pdl());
  ASTRAI_CUDA_CHECK(
      cudaLaunchKernelEx(&lc.cfg, decode.kernel, p, k_cache.ptr<bf16>(), v_cache.ptr<bf16>(), rope));
  launch_combine<bf16>(stream, p);
}

// ASTRAI_ROPE_ATTENTION=unfused (for A/B timing): rope_attention runs rope_kv_store, then
// paged_attention, on every step.
bool rope_attention_unfused() {
  static const bool v = env_is("ASTRAI_ROPE_ATTENTION", "unfused");
  return v;
}

}  // namespace

void kv_store(cudaStream_t stream, const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache,
              Tensor v_cache) {
  check_tensor(k, "kv_store", "k", DType::bf16, DType::f32);
  check_tensor(v, "kv_store", "v", k.dtype);
  check_index(slots, "kv_store", "slots");
  check_cache(k_cache, "kv_store", "k_cache", k.dtype);
  check_cache(v_cache, "kv_store", "v_cache", k.dtype);
  ASTRAI_GPU_CHECK(k.ndim == 3 && v.ndim == 3 && k.shape == v.shape,
                   "kv_store: k and v must be [T, KVH, D], same shape");
  const int64_t T = k.shape[0], KVH = k.shape[1], D = k.shape[2];
  ASTRAI_GPU_CHECK(k_cache.shape == v_cache.shape && k_cache.shape[1] == KVH && k_cache.shape[2] == D,
                   "kv_store: cache " + k_cache.shape_str() + " for k " + k.shape_str());
  ASTRAI_GPU_CHECK(slots.numel() == T, "kv_store: slots size differs from T");
  const Rows kv = rows_of(k, "kv_store"), vv = rows_of(v, "kv_store");
  const int64_t n = T * KVH * D;
  if (n == 0) return;
  const int threads = 256;
  if (k.dtype == DType::bf16)
    kv_store_kernel<<<grid_for(n, threads), threads, 0, stream>>>(
        kv, vv, slots.ptr<int32_t>(), KVH, D, k_cache.shape[0], k_cache.ptr<bf16>(), v_cache.ptr<bf16>(), n);
  else
    kv_store_kernel<<<grid_for(n, threads), threads, 0, stream>>>(kv, vv, slots.ptr<int32_t>(), KVH, D,
                                                                  k_cache.shape[0], k_cache.ptr<float>(),
                                                                  v_cache.ptr<float>(), n);
  ASTRAI_CUDA_LAUNCH_CHECK(kv_store_kernel);
}

namespace {

// paged_attention on arguments attention_params has checked (p: what it returned).
void run_paged_attention(cudaStream_t stream, AttnParams& p, const Tensor& q, const Tensor& k_cache,
                         const Tensor& v_cache, const AttentionBatch& batch, float scale, Tensor out,
                         Scratch& scratch) {
  const int64_t T = q.shape[0], H = q.shape[1], S = batch.num_seqs;
  if (T == 0 || H == 0) return;
  // Prefill and extend steps whose sequences bring many queries run on tensor cores
  // (paged_attention_mma.cu); decode and short extends stay here, where split-KV fills the GPU.
  if (batch.max_q_len >= kMmaMinQueries) {
    // A mixed step: its leading one-query sequences take the decode path below, the rest the
    // tensor cores, each writing its own rows of out.
    const int nd = mixed_decode_seqs(batch);
    if (nd == 0) {
      if (paged_attention_mma(stream, q, k_cache, v_cache, batch, scale, out, sm_count())) return;
    } else if (paged_attention_mma(stream, q, k_cache, v_cache, tail_of(batch, nd), scale, out, sm_count())) {
      paged_attention(stream, q.rows(0, nd), k_cache, v_cache, head_of(batch, nd), scale, out.rows(0, nd),
                      scratch);
      return;
    }
  }
  const int64_t max_q = std::max(1, batch.max_q_len);
  if (const DecodeLaunch decode = decode_kernel_for<false>(q, k_cache, p, batch); decode.kernel != nullptr) {
    launch_decode(stream, decode, p, batch, T, scratch, k_cache, v_cache, DecodeRope{});
    return;
  }
  // Short query runs: the heads of a GQA group share a tile and its K/V loads; prefill: kTileRows
  // query rows of one head.
  p.heads_per_tile = 1;
  if (max_q < kTileRows / 2)
    for (int64_t d = std::min<int64_t>(p.group, kTileRows / max_q); d >= 1; --d)
      if (p.group % d == 0) {
        p.heads_per_tile = int(d);
        break;
      }
  p.rows_per_tile = kTileRows / p.heads_per_tile;
  const unsigned tiles = unsigned((max_q + p.rows_per_tile - 1) / p.rows_per_tile);
  p.splits = choose_splits(int64_t(tiles) * (H / p.heads_per_tile) * S, batch.max_kv_len);
  if (S * p.splits > 65535) p.splits = int(std::max<int64_t>(1, 65535 / S));
  set_partials(p, scratch, T);
  if (q.dtype == DType::bf16)
    launch<bf16>(stream, p, tiles, S, k_cache, v_cache);
  else
    launch<float>(stream, p, tiles, S, k_cache, v_cache);
}

}  // namespace

void paged_attention(cudaStream_t stream, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionBatch& batch, float scale, Tensor out, Scratch& scratch) {
  AttnParams p = attention_params(q, k_cache, v_cache, batch, scale, out);
  run_paged_attention(stream, p, q, k_cache, v_cache, batch, scale, out, scratch);
}

void rope_attention(cudaStream_t stream, Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm,
                    const Tensor* k_norm, float eps, const Tensor& positions, const Tensor& cos_sin,
                    const Tensor& slots, Tensor k_cache, Tensor v_cache, const AttentionBatch& batch,
                    float scale, Tensor out, Scratch& scratch) {
  const bool vec = check_rope_kv_store(q, k, v, q_norm, k_norm, positions, cos_sin, slots, k_cache, v_cache);
  AttnParams p = attention_params(q, k_cache, v_cache, batch, scale, out);
  const int64_t T = q.shape[0];
  DecodeLaunch decode;
  if (vec && !rope_attention_unfused()) decode = decode_kernel_for<true>(q, k_cache, p, batch);
  // Past one wave of resident blocks the norm and RoPE in each block lengthen every wave, where
  // rope_kv_store does that work once, all at the same time: measured on the H200, fused was 1-2%
  // slower at batch 128-256 (llama-1b, qwen3-8b), 1-2% faster at 8-32, even at 1 and 64.
  if (decode.kernel != nullptr && int64_t(batch.num_seqs) * p.kv_heads > int64_t(decode.per_sm) * sm_count())
    decode = {};
  if (decode.kernel == nullptr || T == 0) {
    launch_rope_kv_store(stream, q, k, v, q_norm, k_norm, eps, positions, cos_sin, slots, k_cache, v_cache,
                         vec);
    run_paged_attention(stream, p, q, k_cache, v_cache, batch, scale, out, scratch);
    return;
  }
  DecodeRope r;
  r.k = rows_of(k, "rope_attention");
  r.v = rows_of(v, "rope_attention");
  r.q_norm = q_norm ? q_norm->ptr<bf16>() : nullptr;
  r.k_norm = k_norm ? k_norm->ptr<bf16>() : nullptr;
  r.step = rope_step(positions, cos_sin, slots, k_cache, eps);
  r.k_cache = k_cache.ptr<bf16>();
  r.v_cache = v_cache.ptr<bf16>();
  launch_decode(stream, decode, p, batch, T, scratch, k_cache, v_cache, r);
}

}  // namespace astrai::gpu
