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
#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"

namespace astrai::gpu {
namespace {

constexpr int kWarps = 4;
constexpr int kTileRows = 16, kTileKeys = 32, kRowsPerWarp = kTileRows / kWarps;
constexpr int64_t kMaxHeadDim = 512;
constexpr int64_t kMinKeysPerSplit = 32;  // one key tile
constexpr int kMaxSplits = 64;
constexpr int kMmaMinQueries = 16;  // max_q_len from which paged_attention_mma takes the step

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

// Decode (one query per sequence, bf16, head_dim 64 or 128, GQA group 1, 2, 4 or 8): a block of
// W warps per (KV head, sequence, split) computes the group's heads together, so each K/V row is
// read once for all of them, straight from global memory into registers: no shared memory staging
// and no barrier inside the key loop. A key row is D / 8 lanes wide (16-byte loads, 8 dims a lane),
// so a warp takes 32 / (D / 8) keys at once and U such groups per iteration, all loads issued
// before any is used. kDecodeWarps warps take kDecodeMinKeys keys per iteration at both head dims,
// so a minimal split is one round of loads: at batch 1 the kernel is a chain of dependent loads
// (lengths, page table, K/V), not bandwidth, and the earlier blocks of 4 warps took 4 rounds for
// 64 keys at D = 128. Each lane group keeps its own online-softmax state (in the log2 domain: q is
// pre-scaled by scale * log2 e) over the keys it saw; lane groups then merge through shuffles and
// the warps through shared memory, in a fixed order. With splits the block writes its unnormalised
// state as the general kernel does (m in natural-log units) and combine_splits_kernel merges; a split gets
// max(kDecodeMinKeys, its share rounded up to the keys a block takes per iteration) keys, so short contexts
// use few splits whatever the grid's capacity.
// The narrow blocks (many sequences: several blocks per multiprocessor, a serving step's batch) keep
// kRing - 1 rounds of K/V in flight ahead of the one being used: each thread copies the 16-byte
// pieces it will itself read into a ring in shared memory (cp.async, no barrier: a thread waits only
// for its own copies), so a block does not stall on each round's loads in turn. With the wide
// blocks one round is a whole minimal split, and they load straight into registers.
constexpr int kDecodeWarps = 8;
constexpr int64_t kDecodeMinKeys = 64;
// The decode kernel's softmax state stays relative to its running maximum m until a score passes m
// by more than this (log2 units): most keys then cost no rescale of the accumulators (their terms
// reach at most 2^kRescaleSlack, far inside f32).
constexpr float kRescaleSlack = 8.0f;

// The cache slot of key `key` of the sequence whose page-table row is `pages`, or -1 where its
// page is outside the cache (validated by the model: never read). 32-bit key arithmetic, a shift
// for a power-of-two page size: this runs for every key a lane loads.
__device__ __forceinline__ int64_t decode_slot(const AttnParams& p, const int32_t* pages, int key) {
  const int pg = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;
  const int32_t page = pg < p.max_pages ? pages[pg] : -1;
  return page >= 0 && page < p.n_pages ? int64_t(page) * p.page_size + (key - pg * p.page_size) : -1;
}
// U (groups of keys per iteration): kDecodeMinKeys keys per iteration with kDecodeWarps warps; 2
// with the narrow blocks of 4 warps.
template <int D, int G, int W, int U = (W == kDecodeWarps ? int(kDecodeMinKeys) / (W * (32 / (D / 8))) : 2)>
__global__ void __launch_bounds__(W * 32)
    decode_attention_kernel(AttnParams p, const bf16* __restrict__ k_cache,
                            const bf16* __restrict__ v_cache) {
  pdl_launch_dependents();  // the o projection's GEMV may start loading its weights
  constexpr int kLanesPerKey = D / 8, kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kKeysPerIter = W * kKeysPerWarp * U;
  // Rounds in the ring (1: no ring); the static shared memory stays within 48 KB at G = 8.
  constexpr int kRing = W == kDecodeWarps ? 1 : G >= 8 ? 3 : 4;
  static_assert(kRing * U <= 32, "the ring's valid bits fit one word");
  __shared__ float ml_s[W][G][2];
  __shared__ float acc_s[W][G][D];
  // [round][u][k, v][thread]: each thread's own 16-byte pieces (a single element without the ring).
  __shared__ uint4 ring[kRing > 1 ? kRing : 1][kRing > 1 ? U : 1][2][kRing > 1 ? W * 32 : 1];
  const int kvh = blockIdx.x;
  const int s = blockIdx.y / p.splits, split = blockIdx.y % p.splits;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int sub = lane / kLanesPerKey, part = lane % kLanesPerKey;
  const int64_t q0 = p.q_start[s];
  if (p.q_start[s + 1] - q0 != 1) return;  // a padded row of a graph bucket (or no query)
  const int64_t kv_len = p.kv_len[s];
  int64_t chunk = (kv_len + p.splits - 1) / p.splits;
  chunk = max(kDecodeMinKeys, (chunk + kKeysPerIter - 1) / kKeysPerIter * kKeysPerIter);
  const int64_t j0 = split * chunk, j1 = min(kv_len, j0 + chunk);
  const int64_t row0 = q0 * p.heads + int64_t(kvh) * G;  // the group's first output row
  if (j0 >= j1) {  // past this sequence's keys: the empty state for the combine
    for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
      const int64_t part_row = (row0 + e / D) * p.splits + split;
      p.part_acc[part_row * D + e % D] = 0.0f;
      if (e % D == 0) {
        p.part_ml[2 * part_row] = -INFINITY;
        p.part_ml[2 * part_row + 1] = 0.0f;
      }
    }
    return;
  }
  const int32_t* pages = p.page_table + int64_t(s) * p.max_pages;
  uint4 kr[U], vr[U];
  bool ok[U];
  const int key_end = int(j1), own = int(kv_len - 1);
  auto key_of = [&](int64_t base, int u) { return int(base) + (u * W + warp) * kKeysPerWarp + sub; };
  // Element offset of this lane's 8 dims of key `slot`'s row.
  auto offset = [&](int64_t slot) { return (slot * p.kv_heads + kvh) * D + part * 8; };
  auto load_keys = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int key = key_of(base, u);
      const int64_t slot = key < key_end ? decode_slot(p, pages, key) : -1;
      ok[u] = slot >= 0;
      if (ok[u]) {
        kr[u] = *reinterpret_cast<const uint4*>(k_cache + offset(slot));
        vr[u] = *reinterpret_cast<const uint4*>(v_cache + offset(slot));
      }
    }
  };
  // The ring: round r of the keys from `base` into slot `slot`, its keys' valid bits into okbits
  // (skip_own: not the step's own key, which is stored after pdl_wait).
  uint32_t okbits = 0;
  auto issue = [&](int64_t base, int slot, bool skip_own) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int key = key_of(base, u);
      const uint32_t bit = 1u << (slot * U + u);
      const int64_t cache_slot = key < key_end ? decode_slot(p, pages, key) : -1;
      okbits = cache_slot >= 0 ? okbits | bit : okbits & ~bit;
      if (cache_slot >= 0 && !(skip_own && key == own)) {
        cp_async16(&ring[slot][u][0][threadIdx.x], k_cache + offset(cache_slot), true);
        cp_async16(&ring[slot][u][1][threadIdx.x], v_cache + offset(cache_slot), true);
      }
    }
  };
  // Under programmatic dependent launch (decode_pdl) this kernel may start while rope_kv_store
  // still runs: the first keys' loads go out before pdl_wait, and the one key that kernel writes
  // (this step's own, kv_len - 1) is loaded after it (again, into registers; into the ring, where
  // its copy was held back), as is q. Launched plainly, pdl_wait returns at once.
  if constexpr (kRing > 1) {
#pragma unroll
    for (int r = 0; r < kRing - 1; ++r) {
      issue(j0 + r * kKeysPerIter, r, true);
      cp_async_commit();
    }
  } else {
    load_keys(j0);
  }
  pdl_wait();
  if constexpr (kRing > 1) {
#pragma unroll
    for (int r = 0; r < kRing - 1; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u)
        if ((okbits >> (r * U + u) & 1u) && key_of(j0 + r * kKeysPerIter, u) == own) {
          const int64_t off = offset(decode_slot(p, pages, own));
          ring[r][u][0][threadIdx.x] = *reinterpret_cast<const uint4*>(k_cache + off);
          ring[r][u][1][threadIdx.x] = *reinterpret_cast<const uint4*>(v_cache + off);
        }
  } else {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (ok[u] && key_of(j0, u) == own) {
        const int64_t off = offset(decode_slot(p, pages, own));
        kr[u] = *reinterpret_cast<const uint4*>(k_cache + off);
        vr[u] = *reinterpret_cast<const uint4*>(v_cache + off);
      }
  }
  const float qscale = p.scale * 1.4426950408889634f;  // log2 e
  float q[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    unpack8(*reinterpret_cast<const uint4*>(p.q.row<bf16>(row0 + g) + part * 8), q[g]);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[g][i] *= qscale;
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }
  // The loop bounds are uniform over the block (shuffles below need the whole warp).
  for (int64_t base = j0, round = 0;; ++round) {
    if constexpr (kRing > 1) {
      // The round kRing - 1 ahead goes out (into the slot the last round used), then this round's
      // copies are waited for and taken into registers.
      issue(base + (kRing - 1) * kKeysPerIter, int((round + kRing - 1) % kRing), false);
      cp_async_commit();
      cp_async_wait<kRing - 1>();
      const int slot = int(round % kRing);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        kr[u] = ring[slot][u][0][threadIdx.x];
        vr[u] = ring[slot][u][1][threadIdx.x];
        ok[u] = okbits >> (slot * U + u) & 1u;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8], vf[8];
      unpack8(kr[u], kf);
      unpack8(vr[u], vf);
      // Every group's score first: the shuffles run with the whole warp converged, before the
      // branches below (a shuffle the compiler cannot prove converged costs a collective sequence).
      float d[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        d[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d[g] += q[g][i] * kf[i];
      }
#pragma unroll
      for (int o = kLanesPerKey / 2; o > 0; o >>= 1)
#pragma unroll
        for (int g = 0; g < G; ++g) d[g] += __shfl_xor_sync(0xffffffffu, d[g], o);
      if (!ok[u]) continue;  // a key past the split (or an invalid page): not seen
#pragma unroll
      for (int g = 0; g < G; ++g) {
        // Past the slack (and at the first key, m = -inf): the state moves to m = d.
        if (d[g] > m[g] + kRescaleSlack) {
          const float corr = fast_exp2(m[g] - d[g]);  // m = -inf: 0
          l[g] *= corr;
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][i] *= corr;
          m[g] = d[g];
        }
        const float pj = fast_exp2(d[g] - m[g]);
        l[g] += pj;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] += pj * vf[i];
      }
    }
    base += kKeysPerIter;
    if (base >= j1) break;
    if constexpr (kRing == 1) load_keys(base);
  }
  // Merge the lane groups of the warp (same dims, different keys), then the warps.
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int o = kLanesPerKey; o < 32; o <<= 1) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float l_o = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float m_new = fmaxf(m[g], m_o);
      const float a = m_new == -INFINITY ? 0.0f : exp2f(m[g] - m_new);
      const float b = m_new == -INFINITY ? 0.0f : exp2f(m_o - m_new);
      l[g] = l[g] * a + l_o * b;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float acc_o = __shfl_xor_sync(0xffffffffu, acc[g][i], o);
        acc[g][i] = acc[g][i] * a + acc_o * b;
      }
      m[g] = m_new;
    }
    if (sub == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc_s[warp][g][part * 8 + i] = acc[g][i];
      if (part == 0) {
        ml_s[warp][g][0] = m[g];
        ml_s[warp][g][1] = l[g];
      }
    }
  }
  __syncthreads();
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
        p.part_ml[2 * part_row] = M * 0.6931471805599453f;  // log2 units to natural (ln 2)
        p.part_ml[2 * part_row + 1] = L;
      }
    }
  }
}

size_t smem_bytes(int64_t D) {
  return size_t(2 * kTileRows * D + kTileKeys * (D + 1) + kTileKeys * D + kWarps * kTileKeys) *
             sizeof(float) +
         kTileKeys * sizeof(int64_t);
}

// Splits per (tile, head): enough blocks for ~4 waves of one block per multiprocessor, with at
// least kMinKeysPerSplit keys each (rounded up); 1 when the tiles already fill the GPU (prefill).

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return v;
  }();
  return n;
}

int choose_splits(int64_t blocks, int64_t max_kv) {
  const int64_t want = (4 * int64_t(sm_count()) + blocks - 1) / blocks;
  const int64_t most = (max_kv + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  return int(std::max<int64_t>(1, std::min<int64_t>({want, most, kMaxSplits})));
}

// Shared memory beyond 48 KB (head_dim > 96) must be allowed per kernel, once.
// The dynamic shared-memory limit is an attribute of the kernel on one device: tensor-parallel
// ranks launch it on several, so it is raised once per device, not once per process.
template <typename T>
void allow_smem() {
  constexpr int kMaxDevices = 64;
  static std::array<std::once_flag, kMaxDevices> once;
  int dev = 0;
  ASTRAI_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices)
    throw Error(internal_error("paged_attention: device index out of range"));
  std::call_once(once[size_t(dev)], [] {
    ASTRAI_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<T>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(smem_bytes(kMaxHeadDim))));
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
  allow_smem<T>();
  const dim3 grid{tiles, unsigned(p.heads / p.heads_per_tile), unsigned(S * p.splits)};
  paged_attention_kernel<T>
      <<<grid, kWarps * 32, smem_bytes(p.head_dim), stream>>>(p, k_cache.ptr<T>(), v_cache.ptr<T>());
  ASTRAI_CUDA_LAUNCH_CHECK(paged_attention_kernel);
  launch_combine<T>(stream, p);
}

// ASTRAI_DECODE_ATTENTION (for A/B timing): "general" sends every step through the general
// kernel, "w4" runs the decode kernel's earlier blocks of 4 warps.
const std::string& decode_attention_env() {
  static const std::string v = [] {
    const char* e = std::getenv("ASTRAI_DECODE_ATTENTION");
    return std::string(e ? e : "");
  }();
  return v;
}

// Warps per block of the decode kernel for `blocks` (sequence, KV head) pairs: kDecodeWarps while
// they are few (small batches: the wide blocks need up to 226 registers a thread, so a
// multiprocessor holds one of them), 4 once they fill a quarter of the GPU. Measured on the H200
// (prompt 512): 8 warps gave llama-1b +2.5% and qwen3-8b +4.5% at batch 1 (8 pairs), but at batch 8
// (64 pairs, half the GPU) qwen3-8b lost 6% (1,269 against 1,353 tok/s) and llama-1b gained 2%.
int decode_warps(int64_t blocks) {
  return decode_attention_env() == "w4" || 4 * blocks > sm_count() ? 4 : kDecodeWarps;
}

// The decode kernel for this head_dim and group, or nullptr (the general kernel runs).
using DecodeKernel = void (*)(AttnParams, const bf16*, const bf16*);
template <int D, int W>
DecodeKernel decode_kernel_for(int64_t group) {
  switch (group) {
    case 1: return decode_attention_kernel<D, 1, W>;
    case 2: return decode_attention_kernel<D, 2, W>;
    case 4: return decode_attention_kernel<D, 4, W>;
    case 8: return decode_attention_kernel<D, 8, W>;
    default: return nullptr;
  }
}

template <int D>
DecodeKernel decode_kernel_for(int64_t group, int warps) {
  return warps == 4 ? decode_kernel_for<D, 4>(group) : decode_kernel_for<D, kDecodeWarps>(group);
}

DecodeKernel decode_kernel_for(int64_t D, int64_t group, int warps) {
  if (decode_attention_env() == "general") return nullptr;
  return D == 64    ? decode_kernel_for<64>(group, warps)
         : D == 128 ? decode_kernel_for<128>(group, warps)
                    : nullptr;
}

// The leading one-query sequences of a mixed step that run apart from the tensor-core launch (0:
// the whole step on one kernel). ASTRAI_MIXED_ATTENTION=one: always 0 (for A/B timing).
int mixed_decode_seqs(const AttentionBatch& b) {
  static const bool one = [] {
    const char* e = std::getenv("ASTRAI_MIXED_ATTENTION");
    return e != nullptr && std::string(e) == "one";
  }();
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
// loads overlap rope_kv_store: measured on the H200 at +1-3% decode tok/s (batch 1-64, llama-1b and
// qwen3-8b). ASTRAI_ATTENTION_PDL=0 (or ASTRAI_NO_PDL, which also stops the GEMV's) turns it off.
bool decode_pdl() {
  static const bool on = [] {
    const char* e = std::getenv("ASTRAI_ATTENTION_PDL");
    return pdl_enabled() && !(e && std::string(e) == "0");
  }();
  return on;
}

void launch_decode(cudaStream_t stream, DecodeKernel kernel, dim3 grid, int threads, const AttnParams& p,
                   const Tensor& k_cache, const Tensor& v_cache) {
  const LaunchConfig lc(grid, dim3(unsigned(threads)), 0, stream, decode_pdl());
  ASTRAI_CUDA_CHECK(cudaLaunchKernelEx(&lc.cfg, kernel, p, k_cache.ptr<bf16>(), v_cache.ptr<bf16>()));
}

void check_cache(const Tensor& c, const char* op, const char* name, DType dt) {
  check_tensor(c, op, name, dt);
  ASTRAI_GPU_CHECK(
      c.ndim == 3 && c.is_contiguous(),
      std::string(op) + ": " + name + " must be a contiguous [slots, KVH, D], got " + c.shape_str());
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

void paged_attention(cudaStream_t stream, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionBatch& batch, float scale, Tensor out, Scratch& scratch) {
  check_tensor(q, "paged_attention", "q", DType::bf16, DType::f32);
  check_tensor(out, "paged_attention", "out", q.dtype);
  check_cache(k_cache, "paged_attention", "k_cache", q.dtype);
  check_cache(v_cache, "paged_attention", "v_cache", q.dtype);
  check_index(batch.q_start, "paged_attention", "q_start");
  check_index(batch.kv_len, "paged_attention", "kv_len");
  check_index(batch.page_table, "paged_attention", "page_table");
  ASTRAI_GPU_CHECK(
      q.ndim == 3 && out.ndim == 3 && q.shape == out.shape,
      "paged_attention: q " + q.shape_str() + " and out " + out.shape_str() + " must be [T, H, D]");
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  const int64_t KVH = k_cache.shape[1], ps = batch.page_size, S = batch.num_seqs;
  ASTRAI_GPU_CHECK(k_cache.shape == v_cache.shape && k_cache.shape[2] == D && KVH > 0 && H % KVH == 0,
                   "paged_attention: cache " + k_cache.shape_str() + " for q " + q.shape_str());
  ASTRAI_GPU_CHECK(ps > 0 && k_cache.shape[0] % ps == 0,
                   "paged_attention: cache slots not a multiple of page_size");
  ASTRAI_GPU_CHECK(batch.q_start.numel() == S + 1 && batch.kv_len.numel() == S &&
                       batch.page_table.numel() >= S * int64_t(batch.max_pages),
                   "paged_attention: q_start/kv_len/page_table sizes do not match num_seqs");
  ASTRAI_GPU_CHECK(D >= 1 && D <= kMaxHeadDim, "paged_attention: head_dim " + std::to_string(D) + " above " +
                                                   std::to_string(kMaxHeadDim));
  ASTRAI_GPU_CHECK(H <= 65535 && S <= 65535, "paged_attention: more than 65535 heads or sequences");
  if (T == 0 || H == 0) return;
  ASTRAI_GPU_CHECK(S >= 1, "paged_attention: tokens but no sequences");
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
  p.group = H / KVH;
  p.kv_heads = KVH;
  p.head_dim = D;
  p.n_pages = k_cache.shape[0] / ps;
  p.scale = scale;
  const int64_t max_q = std::max(1, batch.max_q_len);
  const int decode_w = decode_warps(S * KVH);
  const DecodeKernel decode = q.dtype == DType::bf16 && batch.max_q_len == 1 && rows_aligned16(p.q) &&
                                      rows_aligned16(rows_of(k_cache, "paged_attention"))
                                  ? decode_kernel_for(D, p.group, decode_w)
                                  : nullptr;
  if (decode != nullptr) {
    // Enough blocks for about two per multiprocessor (one of the wide blocks), each split at least
    // kDecodeMinKeys keys.
    const int64_t blocks = S * KVH, per_sm = decode_w == 4 ? 2 : 1;
    const int64_t want = (per_sm * sm_count() + blocks - 1) / blocks;
    const int64_t most = (batch.max_kv_len + kDecodeMinKeys - 1) / kDecodeMinKeys;
    p.splits = int(std::clamp<int64_t>(std::min(want, most), 1, std::min<int64_t>(kMaxSplits, 65535 / S)));
    p.heads_per_tile = int(p.group);
    p.rows_per_tile = 1;
    set_partials(p, scratch, T);
    launch_decode(stream, decode, dim3(unsigned(KVH), unsigned(S * p.splits)), decode_w * 32, p, k_cache,
                  v_cache);
    launch_combine<bf16>(stream, p);
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

}  // namespace astrai::gpu
