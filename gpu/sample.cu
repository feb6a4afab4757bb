// The sample op on the GPU (src/backend/backend.h, "sampling"; the CPU version is
// src/backend/cpu/sample.cpp). Three kernels:
//   load_rows    grid (chunks, R): work[r, :] = logits[src_row[r], :] with the mask applied (only
//                with a mask or edits: otherwise sample_rows reads the logits in place)
//   apply_edits  grid R: the bias entries in order (one thread), then the penalty entries (one token
//                each, in parallel)
//   sample_rows  grid R, one block per draw: the argmax; for temperature > 0 the kept prefix and the
//                draw found by radix selection (below); the raw logprobs.
// A draw that keeps every candidate (no top_k below their count, top_p 1, min_p 0: the OpenAI
// default) walks them in id order (backend.h): the masses' sums over 32 contiguous pieces of the row
// (one per warp), the piece that holds u * mass, and again within it, down to a warp's scan (one
// pass over the row, then a few thousand tokens). No atomics, no selection.
// A draw that truncates: no sort; every question the sampler asks is "where in the (e desc, id asc)
// order does a count or a cumulative mass reach x", answered by a descent with a histogram of counts
// and masses per level (one pass over the row each): a linear bucket of (max - l) / T, then three
// radix levels of the logit's order key within that bucket (11 + 11 + 10 bits), then, among the
// tokens of the selected key (equal logits, so equal masses), the answer's position by id. Masses
// are e = exp((l - max) / T) in f32, summed in f64; in the histograms, as fixed point (below).
#include <climits>
#include <cmath>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "src/backend/sample_math.h"

namespace astrai::gpu {
namespace {

constexpr int kThreads = 1024;  // sample_rows' block: one row of up to 262144 logits per block
constexpr int kBins = 2048;     // radix digits of at most 11 bits
constexpr int kLevels = 3;      // digits of the 32-bit key: bits 31..21, 20..10, 9..0
__device__ __forceinline__ int level_shift(int level) {
  return level == 0 ? 21 : level == 1 ? 10 : 0;
}
__device__ __forceinline__ int level_width(int level) {
  return level == 2 ? 10 : 11;
}
// Below this (l - max) / T, exp underflows in f64 and the CPU drops the token (e == 0).
constexpr float kMinExponent = -745.13f;

// Visits tokens [lo, hi) of a row, f(t, l[t]), as thread `id` of `n` that share the range, with
// several loads per thread issued before the first visit, so a pass over the row is not one
// device-memory latency per n tokens (a block samples a row alone: at batch 1 each pass was a chain
// of ~125 dependent loads per thread). vec (lo and hi multiples of 4, 16-byte aligned rows,
// Shared::vec): float4 loads, kUnroll4 of them in flight, thread id visiting tokens 4 (lo / 4 + id)
// .. + 3, then + 4 n, ...; otherwise kUnroll floats, t = lo + id, + n, .... The order of the visits
// is fixed by the range, n and vec alone, so a row's sums round the same in any batch.
template <int kUnroll, int kUnroll4, class F>
__device__ __forceinline__ void visit_range(const float* l, int lo, int hi, int id, int n, bool vec, F&& f) {
  if (vec) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const int end = hi / 4;
    int i = lo / 4 + id;
    for (; i + (kUnroll4 - 1) * n < end; i += kUnroll4 * n) {
      float4 v[kUnroll4];
#pragma unroll
      for (int u = 0; u < kUnroll4; ++u) v[u] = l4[i + u * n];
#pragma unroll
      for (int u = 0; u < kUnroll4; ++u) {
        const int t = 4 * (i + u * n);
        f(t, v[u].x);
        f(t + 1, v[u].y);
        f(t + 2, v[u].z);
        f(t + 3, v[u].w);
      }
    }
    for (; i < end; i += n) {
      const float4 v = l4[i];
      f(4 * i, v.x);
      f(4 * i + 1, v.y);
      f(4 * i + 2, v.z);
      f(4 * i + 3, v.w);
    }
    return;
  }
  int t = lo + id;
  for (; t + (kUnroll - 1) * n < hi; t += kUnroll * n) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = l[t + u * n];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) f(t + u * n, v[u]);
  }
  for (; t < hi; t += n) f(t, l[t]);
}

// Every token of a row, visited by the whole block: 64 bytes per thread in flight either way.
template <class F>
__device__ __forceinline__ void for_each_token(const float* l, int V, bool vec, F&& f) {
  visit_range<8, 4>(l, 0, V, int(threadIdx.x), kThreads, vec, f);
}

// A float's order as an unsigned key (larger float, larger key; -inf lowest).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Level 0 of a selection buckets the tokens linearly by x = (max - l) / T over [0, kBucketRange)
// (the f32 masses exp(-x) are 0 beyond it; the last bucket holds that tail), which spreads them over
// the histogram (the float keys' top bits would put most of a row in a few bins and serialise the
// atomics); the levels after it refine within the chosen bucket by the order key. The bucket is
// monotone in l, so it never reorders tokens.
constexpr float kBucketRange = 104.0f;

// The processed row of a draw with temperature > 0: candidates are the tokens with e > 0.
// A histogram bin's mass is a u64 sum of e * 2^(62 - ceil(log2 V)) rounded: below 2^62 for the
// whole row, and an integer add is one native shared-memory atomic (an f64 add is a compare-and-swap
// loop, serialised over the tokens that share a bin: ~1,000 in a level-0 bin of a flat row). It
// differs from the f64 sum of the masses by at most V / 2 units (2^-28 of the row's mass at
// V = 128k, which is >= 1): far below the f32 rounding of the masses themselves.
__device__ __forceinline__ double mass_units(int V) {
  return ldexp(1.0, 62 - (32 - __clz(V - 1 | 1)));
}

// The sum of x over the lanes in `group` (the lanes that share a bin; x < 2^63), as three 21-bit
// limbs, each a native 32-bit warp reduction that cannot overflow.
__device__ __forceinline__ unsigned long long group_sum(unsigned group, unsigned long long x) {
  const unsigned a = __reduce_add_sync(group, unsigned(x & 0x1fffffu));
  const unsigned b = __reduce_add_sync(group, unsigned((x >> 21) & 0x1fffffu));
  const unsigned c = __reduce_add_sync(group, unsigned(x >> 42));
  return (unsigned long long)a + ((unsigned long long)b << 21) + ((unsigned long long)c << 42);
}

struct ProcessedRow {
  static constexpr bool kMass = true;
  const float* l;
  float max, temperature, bucket_scale;
  double units;  // mass_units(V)
  __device__ ProcessedRow(const float* l_, int V, float max_, float t_)
      : l(l_),
        max(max_),
        temperature(t_),
        bucket_scale(float(kBins - 1) / (kBucketRange * t_)),
        units(mass_units(V)) {}
  __device__ bool candidate_value(float v, uint32_t& key) const {
    key = order_key(v);
    return (v - max) / temperature > kMinExponent;  // false for -inf and NaN
  }
  __device__ bool candidate(int t, uint32_t& key) const { return candidate_value(l[t], key); }
  __device__ float mass_of(float v) const { return expf((v - max) / temperature); }
  __device__ unsigned long long mass_fixed(float v) const {
    return __double2ull_rn(double(mass_of(v)) * units);
  }
  __device__ int bucket(float v) const {
    const float x = (max - v) * bucket_scale;
    return x < float(kBins - 1) ? int(x) : kBins - 1;
  }
};

// The raw row for the top logprobs: every token but NaN, counted only.
struct RawRow {
  static constexpr bool kMass = false;
  const float* l;
  float max;
  __device__ bool candidate_value(float v, uint32_t& key) const {
    key = order_key(v);
    return v == v;
  }
  __device__ bool candidate(int t, uint32_t& key) const { return candidate_value(l[t], key); }
  __device__ float mass_of(float) const { return 0.0f; }
  double units = 1.0;  // unused: no masses
  __device__ int bucket(float v) const {
    const float x = (max - v) * (float(kBins - 1) / kBucketRange);
    return x < float(kBins - 1) ? int(x) : kBins - 1;  // NaN (max -inf): the tail
  }
};

enum class Select { count_ge, mass_ge, mass_gt };

// A prefix of the order: every candidate with key > `key`, then the first `t` (by id) of the
// `n_eq` candidates with key == `key`; `count` tokens of total mass `mass`.
struct Prefix {
  uint32_t key;
  int t, n_eq, count;
  double mass;
};

struct Acc {
  int count;
  double mass;
};
struct AccSum {
  __device__ Acc operator()(const Acc& a, const Acc& b) const { return {a.count + b.count, a.mass + b.mass}; }
};
struct Best {
  float v;
  int i;
};
struct BestOf {  // the larger value, the lower id on ties (so the argmax is the first maximum)
  __device__ Best operator()(const Best& a, const Best& b) const {
    if (a.v != b.v) return (a.v > b.v || b.v != b.v) ? a : b;
    return a.i < b.i ? a : b;
  }
};
struct Counts {
  int n, n_min_p;
  double s, s_min_p;
};
struct CountsSum {
  __device__ Counts operator()(const Counts& a, const Counts& b) const {
    return {a.n + b.n, a.n_min_p + b.n_min_p, a.s + b.s, a.s_min_p + b.s_min_p};
  }
};

constexpr int kWarps = kThreads / 32;

struct Shared {
  int hist_count[kBins];
  unsigned long long hist_mass[kBins];  // fixed point (mass_units)
  union {
    cub::BlockScan<Acc, kThreads>::TempStorage scan;
    cub::BlockScan<int, kThreads>::TempStorage scan_int;
    cub::BlockReduce<Best, kThreads>::TempStorage best;
    cub::BlockReduce<Counts, kThreads>::TempStorage counts;
    cub::BlockReduce<double, kThreads>::TempStorage sum;
  } tmp;
  int sel_bin, sel_count_before, found;
  double sel_mass_before;
  int top_ids[kSampleMaxTopLogprobs];
  int top_n;
  // draw_in_id_order: each warp's piece of the range (its mass, its last candidate), then the
  // piece that holds the target.
  double piece_mass[kWarps];
  int piece_last[kWarps];
  int range_lo, range_hi, drawn;
  double range_target;
  bool vec;  // visit_range's float4 loads (the host checked V and the alignment)
};

__device__ bool reaches(Select mode, const Acc& a, int need_count, double need_mass) {
  switch (mode) {
    case Select::count_ge: return a.count >= need_count;
    case Select::mass_ge: return a.mass >= need_mass;
    default: return a.mass > need_mass;
  }
}

// The shortest prefix of row's order whose count reaches `target_count` (count_ge), whose mass
// reaches `target_mass` (mass_ge), or exceeds it (mass_gt); never empty. Level 0 picks a bucket
// (above), levels 1-3 the key's digits within it. When rounding leaves the mass short of the
// target, the whole bin (at the last level: every tie) is taken.
template <class Row>
__device__ Prefix select_prefix(const Row& row, int V, Select mode, int target_count, double target_mass,
                                Shared& sh) {
  uint32_t prefix = 0, prefix_mask = 0;
  int bucket = 0, count_gt = 0, bin_count = 0;
  double mass_gt = 0;
  for (int level = 0; level <= kLevels; ++level) {
    const bool linear = level == 0;
    const int shift = linear ? 0 : level_shift(level - 1), nb = linear ? kBins : 1 << level_width(level - 1);
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
      sh.hist_count[b] = 0;
      sh.hist_mass[b] = 0;
    }
    __syncthreads();
    for_each_token(row.l, V, sh.vec, [&](int, float v) {
      uint32_t key;
      if (!row.candidate_value(v, key)) return;
      int b = row.bucket(v);
      if (!linear) {
        if (b != bucket || (key & prefix_mask) != prefix) return;
        b = int((key >> shift) & uint32_t(nb - 1));
      }
      // Lanes of a warp that hit one bin add their count and mass once (the tail bucket can hold
      // most of a row, a level-0 bin of a flat row ~1,000 tokens).
      const unsigned peers = __match_any_sync(__activemask(), b);
      const bool leader = int(threadIdx.x % 32) == __ffs(peers) - 1;
      if (leader) atomicAdd(&sh.hist_count[b], __popc(peers));
      if constexpr (Row::kMass) {
        const unsigned long long m = group_sum(peers, row.mass_fixed(v));
        if (leader && m > 0) atomicAdd(&sh.hist_mass[b], m);
      }
    });
    __syncthreads();
    // Thread i holds the bins at positions 2i, 2i + 1 of the order: ascending buckets (larger logits
    // first), descending key digits.
    Acc mine[2];
    int bins[2];
    for (int j = 0; j < 2; ++j) {
      const int pos = 2 * int(threadIdx.x) + j;
      bins[j] = pos < nb ? (linear ? pos : nb - 1 - pos) : -1;
      mine[j] =
          bins[j] >= 0 ? Acc{sh.hist_count[bins[j]], double(sh.hist_mass[bins[j]]) / row.units} : Acc{0, 0.0};
    }
    if (threadIdx.x == 0) {  // overwritten below by the one thread that holds the crossing
      sh.sel_bin = 0;
      sh.sel_count_before = 0;
      sh.sel_mass_before = 0;
    }
    Acc before, total;
    cub::BlockScan<Acc, kThreads>(sh.tmp.scan)
        .ExclusiveScan(AccSum()(mine[0], mine[1]), before, Acc{0, 0.0}, AccSum(), total);
    const int need_count = target_count - count_gt;
    const double need_mass = target_mass - mass_gt;
    Select m = mode;
    int need = need_count;
    if (!reaches(mode, total, need_count, need_mass)) {  // rounding: take the whole bin
      m = Select::count_ge;
      need = total.count;
    }
    for (int j = 0; j < 2; ++j) {
      const Acc after = AccSum()(before, mine[j]);
      if (mine[j].count > 0 && reaches(m, after, need, need_mass) &&
          !(before.count > 0 && reaches(m, before, need, need_mass))) {
        sh.sel_bin = bins[j];
        sh.sel_count_before = before.count;
        sh.sel_mass_before = before.mass;
      }
      before = after;
    }
    __syncthreads();
    const int b = sh.sel_bin;
    count_gt += sh.sel_count_before;
    mass_gt += sh.sel_mass_before;
    bin_count = sh.hist_count[b];
    if (linear) {
      bucket = b;
    } else {
      prefix |= uint32_t(b) << shift;
      prefix_mask |= uint32_t(nb - 1) << shift;
    }
    if (m != mode) {  // fell back to the whole bin: every remaining level takes all of it
      mode = Select::count_ge;
      target_count = count_gt + bin_count;
    }
    __syncthreads();  // everyone has read sel_* and the histogram before the next level rewrites them
  }
  const double e = row.mass_of(key_value(prefix));
  int t = 1;
  if (mode == Select::count_ge) {
    t = target_count - count_gt;
  } else if (e > 0) {
    const double need = fmin((target_mass - mass_gt) / e, double(bin_count));
    t = mode == Select::mass_ge ? int(ceil(need)) : int(floor(need)) + 1;
  }
  t = max(1, min(t, bin_count));
  return Prefix{prefix, t, bin_count, count_gt + t, mass_gt + t * e};
}

// The id of the t-th (1-based, by id) candidate whose key is `key`.
template <class Row>
__device__ int nth_with_key(const Row& row, int V, uint32_t key, int t, Shared& sh) {
  if (t == 1) {
    if (threadIdx.x == 0) sh.found = INT_MAX;
    __syncthreads();
    int lowest = INT_MAX;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
      uint32_t k;
      if (row.candidate(i, k) && k == key) {
        lowest = i;
        break;
      }
    }
    if (lowest != INT_MAX) atomicMin(&sh.found, lowest);
    __syncthreads();
    return sh.found;
  }
  // Contiguous segments per thread, so that a scan of their counts orders the matches by id.
  const int seg = (V + int(blockDim.x) - 1) / int(blockDim.x);
  const int lo = min(V, int(threadIdx.x) * seg), hi = min(V, lo + seg);
  int n = 0;
  for (int i = lo; i < hi; ++i) {
    uint32_t k;
    n += row.candidate(i, k) && k == key;
  }
  if (threadIdx.x == 0) sh.found = 0;  // only if the caller's t exceeds the matches (a bug)
  __syncthreads();
  int before;
  cub::BlockScan<int, kThreads>(sh.tmp.scan_int).ExclusiveSum(n, before);
  if (before < t && t <= before + n) {
    int need = t - before;
    for (int i = lo; i < hi; ++i) {
      uint32_t k;
      if (row.candidate(i, k) && k == key && --need == 0) {
        sh.found = i;
        break;
      }
    }
  }
  __syncthreads();
  return sh.found;
}

__global__ void load_rows(const float* __restrict__ logits, int L, int V,
                          const SampleRowParams* __restrict__ rows, const uint32_t* __restrict__ mask,
                          float* __restrict__ work) {
  const int r = blockIdx.y;
  const int src = rows[r].src_row;
  if (src < 0 || src >= L) return;  // sample_rows reports the row as invalid
  const float* in = logits + size_t(src) * V;
  const uint32_t* m = mask ? mask + size_t(src) * ((V + 31) / 32) : nullptr;
  float* out = work + size_t(r) * V;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < V; t += gridDim.x * blockDim.x) {
    float l = in[t];
    if (m && !((m[t >> 5] >> (t & 31)) & 1u)) l = -INFINITY;
    out[t] = l;
  }
}

// Bias entries may name a token twice (applied in order, as on the CPU); penalty entries name each
// token once (SamplePacker), so they go in parallel.
__global__ void apply_edits(const SampleRowParams* __restrict__ rows, const SampleEdit* __restrict__ edits,
                            int E, int V, float* __restrict__ work) {
  const SampleRowParams p = rows[blockIdx.x];
  if (p.edit_begin < 0 || p.edit_begin > p.penalty_begin || p.penalty_begin > p.edit_end || p.edit_end > E)
    return;
  float* w = work + size_t(blockIdx.x) * V;
  if (threadIdx.x == 0)
    for (int e = p.edit_begin; e < p.penalty_begin; ++e)
      if (edits[e].token >= 0 && edits[e].token < V)
        w[edits[e].token] = sample_math::add_rn(w[edits[e].token], edits[e].bias);
  __syncthreads();
  for (int e = p.penalty_begin + int(threadIdx.x); e < p.edit_end; e += blockDim.x) {
    const SampleEdit ed = edits[e];
    if (ed.token < 0 || ed.token >= V) continue;
    w[ed.token] = sample_math::apply_penalty(w[ed.token], ed, p.repetition_penalty, p.frequency_penalty,
                                             p.presence_penalty);
  }
}

__device__ Best row_argmax(const float* l, int V, Shared& sh) {
  Best b{-INFINITY, INT_MAX};
  for_each_token(l, V, sh.vec, [&](int t, float v) {
    if (v > b.v || (v == b.v && t < b.i)) b = Best{v, t};
  });
  b = cub::BlockReduce<Best, kThreads>(sh.tmp.best).Reduce(b, BestOf());
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.found = b.i == INT_MAX ? 0 : b.i;  // every logit NaN: token 0, as std::max_element
    sh.sel_mass_before = b.v;
  }
  __syncthreads();
  return Best{float(sh.sel_mass_before), sh.found};
}

// Step 4 over every candidate in id order (backend.h): the first token whose cumulative mass
// exceeds u * (the total), else the last candidate. The range [lo, hi) (first the row) is cut into
// one contiguous piece per warp, whose lanes read it coalesced and sum its masses in f64; warp 0
// scans the pieces' sums and keeps the piece where the target falls, which is cut again, until a
// piece is small enough for warp 0 to walk with a warp-wide scan, 32 tokens at a time. A cut's sums
// are of the same masses in another order, so the target may, by rounding, not fall inside the
// piece: then the piece's last candidate (as the CPU's walk takes the last when rounding leaves
// u * total at the total). Returns `fallback` (the argmax) when no token has mass.
__device__ int draw_in_id_order(const ProcessedRow& row, int V, double u, int fallback, Shared& sh) {
  constexpr int kWalk = 256;  // a piece this small is walked
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  int lo = 0, hi = V;
  double target = -1;  // u * total, once the first cut has summed the row
  while (hi - lo > kWalk) {
    // Pieces of whole float4 rows of the warp when vec (so every piece starts 16-byte aligned).
    const int align = sh.vec ? 128 : 32;
    const int piece = ((hi - lo + kWarps - 1) / kWarps + align - 1) / align * align;
    const int p_lo = min(hi, lo + warp * piece), p_hi = min(hi, p_lo + piece);
    double m = 0;
    int last = -1;
    auto visit = [&](int t, float v) {
      uint32_t key;
      if (row.candidate_value(v, key)) {
        m += double(row.mass_of(v));
        last = max(last, t);
      }
    };
    // Four loads in flight per lane (p_lo and p_hi are multiples of 4 when vec: whole float4s).
    visit_range<4, 4>(row.l, p_lo, p_hi, lane, 32, sh.vec, visit);
    for (int o = 16; o > 0; o >>= 1) {
      m += __shfl_xor_sync(0xffffffffu, m, o);
      last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    }
    if (lane == 0) {
      sh.piece_mass[warp] = m;
      sh.piece_last[warp] = last;
    }
    __syncthreads();
    if (warp == 0) {
      const double mine = sh.piece_mass[lane];
      double incl = mine;
      for (int o = 1; o < 32; o <<= 1) {
        const double up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
      }
      if (target < 0) target = u * __shfl_sync(0xffffffffu, incl, 31);
      const unsigned hit = __ballot_sync(0xffffffffu, incl > target);
      if (hit) {
        const int w = __ffs(hit) - 1;
        const double before = __shfl_sync(0xffffffffu, incl - mine, w);
        if (lane == 0) {
          sh.range_lo = min(hi, lo + w * piece);
          sh.range_hi = min(hi, lo + (w + 1) * piece);
          sh.range_target = target - before;
          sh.drawn = -1;
        }
      } else {  // no mass (every logit -inf or NaN), or rounding: the last candidate of the range
        int l = sh.piece_last[lane];
        for (int o = 16; o > 0; o >>= 1) l = max(l, __shfl_xor_sync(0xffffffffu, l, o));
        if (lane == 0) sh.drawn = l >= 0 ? l : fallback;
      }
    }
    __syncthreads();
    const int drawn = sh.drawn;
    lo = sh.range_lo;
    hi = sh.range_hi;
    target = sh.range_target;
    __syncthreads();  // read before warp 0 writes the next cut's
    if (drawn >= 0) return drawn;
  }
  if (warp == 0) {
    if (target < 0) {  // a row of at most kWalk tokens: its total first
      double m = 0;
      uint32_t key;
      for (int t = lo + lane; t < hi; t += 32)
        if (row.candidate_value(row.l[t], key)) m += double(row.mass_of(row.l[t]));
      for (int o = 16; o > 0; o >>= 1) m += __shfl_xor_sync(0xffffffffu, m, o);
      target = u * m;
    }
    double before = 0;
    int drawn = -1, last = -1;
    for (int base = lo; base < hi && drawn < 0; base += 32) {
      const int t = base + lane;
      double e = 0;
      uint32_t key;
      if (t < hi && row.candidate_value(row.l[t], key)) {
        e = double(row.mass_of(row.l[t]));
        last = t;
      }
      double incl = e;
      for (int o = 1; o < 32; o <<= 1) {
        const double up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, e > 0 && before + incl > target);
      if (hit) drawn = base + __ffs(hit) - 1;
      before += __shfl_sync(0xffffffffu, incl, 31);
    }
    for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    if (lane == 0) sh.drawn = drawn >= 0 ? drawn : last >= 0 ? last : fallback;
  }
  __syncthreads();
  const int drawn = sh.drawn;
  __syncthreads();
  return drawn;
}

// The draw of one row with temperature > 0 (work row l, its max m and argmax).
__device__ int draw(const SampleRowParams& p, const float* l, int V, Best top, Shared& sh) {
  const ProcessedRow row{l, V, top.v, p.temperature};
  const double u = counter_uniform(p.seed, uint64_t(p.choice), uint64_t(p.index));
  // Only a top_k below V needs the candidates' count to know whether anything truncates.
  if (sample_math::keeps_every_candidate(p, V)) return draw_in_id_order(row, V, u, top.i, sh);
  Counts c{0, 0, 0.0, 0.0};
  for_each_token(l, V, sh.vec, [&](int, float v) {
    uint32_t key;
    if (!row.candidate_value(v, key)) return;
    const float e = row.mass_of(v);
    c.n += 1;
    c.s += e;
    if (e >= p.min_p) {
      c.n_min_p += 1;
      c.s_min_p += e;
    }
  });
  c = cub::BlockReduce<Counts, kThreads>(sh.tmp.counts).Reduce(c, CountsSum());
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.hist_count[0] = c.n;
    sh.hist_count[1] = c.n_min_p;
    sh.piece_mass[0] = c.s;
    sh.piece_mass[1] = c.s_min_p;
  }
  __syncthreads();
  c = Counts{sh.hist_count[0], sh.hist_count[1], sh.piece_mass[0], sh.piece_mass[1]};
  __syncthreads();
  if (c.n <= 1) return top.i;
  if (sample_math::keeps_every_candidate(p, c.n)) return draw_in_id_order(row, V, u, top.i, sh);
  // The kept prefix: its length and mass.
  int keep = c.n;
  double mass = c.s;
  if (p.top_k > 0 && p.top_k < keep) {
    const Prefix k = select_prefix(row, V, Select::count_ge, p.top_k, 0.0, sh);
    keep = k.count;
    mass = k.mass;
  }
  if (p.top_p < 1.0f) {
    const Prefix tp = select_prefix(row, V, Select::mass_ge, 0, double(p.top_p) * mass, sh);
    if (tp.count < keep) {
      keep = tp.count;
      mass = tp.mass;
    }
  }
  if (p.min_p > 0.0f && c.n_min_p < keep) {
    keep = max(1, c.n_min_p);
    mass = c.s_min_p;
  }
  if (keep == 1) return top.i;
  Prefix d = select_prefix(row, V, Select::mass_gt, 0, u * mass, sh);
  if (d.count > keep) d = select_prefix(row, V, Select::count_ge, keep, 0.0, sh);  // rounding: the last kept
  return nth_with_key(row, V, d.key, d.t, sh);
}

__global__ void __launch_bounds__(kThreads)
    sample_rows(const float* __restrict__ logits, int L, int V, const SampleRowParams* __restrict__ rows,
                const float* __restrict__ work, bool direct, bool vec, int32_t* __restrict__ out,
                int out_words, int max_top) {
  __shared__ Shared sh;
  const SampleRowParams p = rows[blockIdx.x];
  int32_t* o = out + size_t(blockIdx.x) * out_words;
  if (p.src_row < 0 || p.src_row >= L) {  // the CPU op throws; here the host finds token -1
    if (threadIdx.x == 0) o[0] = -1;
    return;
  }
  const float* l = direct ? logits + size_t(p.src_row) * V : work + size_t(blockIdx.x) * V;
  if (threadIdx.x == 0) sh.vec = vec;
  __syncthreads();
  const Best top = row_argmax(l, V, sh);
  const int token = p.temperature > 0.0f ? draw(p, l, V, top, sh) : top.i;
  float logprob = 0.0f;
  const int n_top = min(min(p.top_logprobs, max_top), V);
  if (p.want_logprob || n_top > 0) {
    const float* raw = logits + size_t(p.src_row) * V;
    const Best rmax = direct ? top : row_argmax(raw, V, sh);  // direct: raw is l
    double z = 0;
    for_each_token(raw, V, sh.vec, [&](int, float v) { z += double(expf(v - rmax.v)); });
    z = cub::BlockReduce<double, kThreads>(sh.tmp.sum).Sum(z);
    __syncthreads();
    if (threadIdx.x == 0) sh.sel_mass_before = double(rmax.v) + log(z);
    __syncthreads();
    const double lse = sh.sel_mass_before;
    logprob = float(double(raw[token]) - lse);
    if (n_top > 0) {
      const RawRow rrow{raw, rmax.v};
      const Prefix k = select_prefix(rrow, V, Select::count_ge, n_top, 0.0, sh);
      const int last_tie = k.t < k.n_eq ? nth_with_key(rrow, V, k.key, k.t, sh) : INT_MAX;
      if (threadIdx.x == 0) sh.top_n = 0;
      __syncthreads();
      for (int t = threadIdx.x; t < V; t += blockDim.x) {
        uint32_t key;
        if (!rrow.candidate(t, key) || key < k.key || (key == k.key && t > last_tie)) continue;
        const int slot = atomicAdd(&sh.top_n, 1);
        if (slot < kSampleMaxTopLogprobs) sh.top_ids[slot] = t;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        const int n = min(sh.top_n, n_top);
        for (int i = 1; i < n; ++i) {  // insertion sort of at most 20: raw desc, id asc
          const int id = sh.top_ids[i];
          int j = i;
          for (; j > 0; --j) {
            const int prev = sh.top_ids[j - 1];
            if (raw[prev] > raw[id] || (raw[prev] == raw[id] && prev < id)) break;
            sh.top_ids[j] = prev;
          }
          sh.top_ids[j] = id;
        }
        for (int i = 0; i < n; ++i) {
          const float lp = float(double(raw[sh.top_ids[i]]) - lse);
          o[2 + 2 * i] = sh.top_ids[i];
          o[3 + 2 * i] = __float_as_int(lp);
        }
      }
    }
  }
  if (threadIdx.x == 0) {
    o[0] = token;
    o[1] = __float_as_int(logprob);
  }
}

}  // namespace

size_t sample_workspace_bytes(int rows, int vocab) {
  return size_t(rows) * size_t(vocab) * sizeof(float);
}

void sample(cudaStream_t stream, const SampleBatch& b) {
  if (const std::string err = sample_batch_error(b, Device::cuda); !err.empty())
    ASTRAI_GPU_CHECK(false, "sample: " + err);
  const int64_t L = b.logits.size(0), V = b.logits.size(1), R = b.rows.size(0);
  const int words = sample_out_words(b.max_top_logprobs);
  const int64_t E = b.edits.data ? b.edits.size(0) : 0;
  if (R == 0) return;
  ASTRAI_GPU_CHECK(b.workspace.data && b.workspace.device == Device::cuda &&
                       b.workspace.nbytes() >= sample_workspace_bytes(int(R), int(V)),
                   "sample: workspace smaller than sample_workspace_bytes(R, V)");
  const auto* rows = static_cast<const SampleRowParams*>(b.rows.data);
  auto* work = static_cast<float*>(b.workspace.data);
  // Without a mask or edits the draws read the logits in place (no copy to the workspace).
  const bool direct = !b.mask.data && E == 0;
  if (!direct) {
    const int chunks = int(std::min<int64_t>((V + 2047) / 2048, 256));
    load_rows<<<dim3(unsigned(chunks), unsigned(R)), 256, 0, stream>>>(
        b.logits.ptr<float>(), int(L), int(V), rows, static_cast<const uint32_t*>(b.mask.data), work);
    ASTRAI_CUDA_LAUNCH_CHECK(load_rows);
  }
  if (E > 0) {
    apply_edits<<<unsigned(R), 256, 0, stream>>>(rows, static_cast<const SampleEdit*>(b.edits.data), int(E),
                                                 int(V), work);
    ASTRAI_CUDA_LAUNCH_CHECK(apply_edits);
  }
  // float4 loads need 16-byte aligned rows: V % 4 == 0 and aligned bases.
  // ASTRAI_SAMPLE_VEC=0 turns them off (an A/B switch for the benchmarks).
  static const bool vec_env = !env_is("ASTRAI_SAMPLE_VEC", "0");
  const bool vec = vec_env && V % 4 == 0 && reinterpret_cast<uintptr_t>(b.logits.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(work) % 16 == 0;
  sample_rows<<<unsigned(R), kThreads, 0, stream>>>(b.logits.ptr<float>(), int(L), int(V), rows, work, direct,
                                                    vec, b.out.ptr<int32_t>(), words, b.max_top_logprobs);
  ASTRAI_CUDA_LAUNCH_CHECK(sample_rows);
}

}  // namespace astrai::gpu
