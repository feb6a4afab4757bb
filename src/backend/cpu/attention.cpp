// KV-cache writes and causal grouped-query attention over a paged cache.
//
// Cache layout: [num_pages * page_size, KVH, D]; logical position j of sequence s lives in slot
// page_table[s][j / page_size] * page_size + j % page_size.
//
// paged_attention splits the work into tasks of (sequence, query head, block of up to kQueryBlock
// query rows) run in parallel. A task reads each K and V row once for the whole block, so a prefill
// block of 16 rows costs one pass over the cache, and a decode row (q_len 1) is one pass. Softmax is
// two-pass over a scratch row of scores: scores, then max-subtracted exp and sum, then the weighted
// sum of V scaled by 1 / sum.
//
// Batch invariance (docs/architecture.md, "What a seed promises"): a row's output depends on that
// row alone, whatever block, batch or chunk it came in. Its score against key j is lanes.h's dot
// product times the scale; its softmax runs over its own causal prefix in key order; its output
// element d adds p_j * v_j[d] over the keys in order (a plain multiply and add, no FMA). The block
// computes the scores of every page row against every block row and multiplies V over the block's
// keys, so a row also meets keys past its own position: their probabilities are set to exactly 0,
// and adding 0 * v (v finite, the cache rows the block's later rows wrote) leaves a sum that did not
// start at -0 unchanged. Scores and the V products are register tiles (lanes.h's instruction-set
// paths), each path giving the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/backend/attention_shapes.h"
#include "src/backend/cpu/lanes.h"
#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"
#include "src/backend/cpu/vec.h"

namespace astrai::cpu {
namespace {

constexpr int64_t kQueryBlock = 16;

// One task's operands: rows q_i = q + i * ldq (i < nr) see keys [0, pos0 + i]; the keys of the
// block are [0, n_keys) with n_keys = pos0 + nr, key j at k / v + slot(j) * ld_kv; out_i = out + i * ldo.
struct Task {
  const float* q;
  int64_t ldq, nr, pos0, n_keys, D;
  const int32_t* pages;
  int64_t page_size;
  const float* k;
  const float* v;
  int64_t ld_kv;
  float* out;
  int64_t ldo;
  float scale;
  float* scores;  // [nr, n_keys]
};

// Output elements [d0, d0 + DC * kLanes) of rows [i0, i0 + RM): sum over the keys in order of
// p_ij * v_j, in DC vectors per row.
template <int64_t RM, int64_t DC>
[[gnu::always_inline]] inline void pv_tile(const Task& t, int64_t i0, int64_t d0) {
  using lanes::Lanes;
  Lanes acc[RM][DC] = {};
  const int64_t keys = t.pos0 + i0 + RM;  // the last row's prefix; later keys have p = 0 for all
  for (int64_t j0 = 0; j0 < keys; j0 += t.page_size) {
    const float* vp = t.v + int64_t(t.pages[j0 / t.page_size]) * t.page_size * t.ld_kv + d0;
    const int64_t n = std::min(t.page_size, keys - j0);
    for (int64_t jj = 0; jj < n; ++jj) {
      Lanes vv[DC];
      for (int64_t c = 0; c < DC; ++c) vv[c] = lanes::load(vp + jj * t.ld_kv + c * lanes::kLanes);
      for (int64_t i = 0; i < RM; ++i) {
        const float p = t.scores[(i0 + i) * t.n_keys + j0 + jj];
        for (int64_t c = 0; c < DC; ++c) acc[i][c] += vv[c] * p;
      }
    }
  }
  for (int64_t i = 0; i < RM; ++i)
    for (int64_t c = 0; c < DC; ++c)
      lanes::store(t.out + (i0 + i) * t.ldo + d0 + c * lanes::kLanes, acc[i][c]);
}

template <int64_t RM, int64_t DC>
[[gnu::always_inline]] inline void pv_rows(const Task& t, int64_t i0, int64_t rm, int64_t d0) {
  if constexpr (RM > 1) {
    if (rm < RM) return pv_rows<RM - 1, DC>(t, i0, rm, d0);
  }
  pv_tile<RM, DC>(t, i0, d0);
}

// One task (see Task) with score tiles of MR rows x NR keys and V tiles of RM rows x DC vectors.
template <int64_t MR, int64_t NR, int64_t RM, int64_t DC>
[[gnu::always_inline]] inline void attend(const Task& t) {
  const int64_t D = t.D, nk = t.n_keys;
  // Scores: every block row against every key of the block, page by page.
  for (int64_t j0 = 0; j0 < nk; j0 += t.page_size) {
    const float* kp = t.k + int64_t(t.pages[j0 / t.page_size]) * t.page_size * t.ld_kv;
    const int64_t n = std::min(t.page_size, nk - j0);
    for (int64_t jj = 0; jj < n; jj += NR)
      for (int64_t i = 0; i < t.nr; i += MR)
        lanes::edge_tile<MR, NR>(std::min(MR, t.nr - i), std::min(NR, n - jj), D, t.q + i * t.ldq, t.ldq,
                                 kp + jj * t.ld_kv, t.ld_kv, nullptr, t.scores + i * nk + j0 + jj, nk);
  }
  // Softmax per row over its causal prefix; the keys past it get probability 0.
  for (int64_t i = 0; i < t.nr; ++i) {
    float* row = t.scores + i * nk;
    const int64_t n = t.pos0 + i + 1;
    for (int64_t j = 0; j < n; ++j) row[j] *= t.scale;
    const float inv = 1.0f / exp_shifted(row, n).sum;
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    std::fill(row + n, row + nk, 0.0f);
  }
  // Weighted sum of V: whole vectors of D in tiles, the tail element by element (the same
  // multiply and add per element, in key order).
  const int64_t D_vec = D / (DC * lanes::kLanes) * (DC * lanes::kLanes);
  for (int64_t i = 0; i < t.nr; i += RM) {
    const int64_t rm = std::min(RM, t.nr - i);
    for (int64_t d0 = 0; d0 < D_vec; d0 += DC * lanes::kLanes) pv_rows<RM, DC>(t, i, rm, d0);
    for (int64_t d0 = D_vec; d0 + lanes::kLanes <= D; d0 += lanes::kLanes) pv_rows<RM, 1>(t, i, rm, d0);
    for (int64_t d = D / lanes::kLanes * lanes::kLanes; d < D; ++d)
      for (int64_t r = i; r < i + rm; ++r) {
        const int64_t keys = t.pos0 + i + rm;
        float acc = 0.0f;
        for (int64_t j = 0; j < keys; ++j) {
          const int64_t slot = int64_t(t.pages[j / t.page_size]) * t.page_size + j % t.page_size;
          acc += t.v[slot * t.ld_kv + d] * t.scores[r * nk + j];
        }
        t.out[r * t.ldo + d] = acc;
      }
  }
}

// The paths (lanes.h); every one computes the same bits.
ASTRAI_NO_FP_CONTRACT void attend_baseline(const Task& t) {
  attend<4, 3, 2, 2>(t);
}
#if defined(__x86_64__)
ASTRAI_ISA_AVX2 void attend_avx2(const Task& t) {
  attend<3, 3, 3, 3>(t);
}
ASTRAI_ISA_AVX512 void attend_avx512(const Task& t) {
  attend<6, 4, 6, 4>(t);
}
#endif

void check_cache(const Tensor& c, const char* name) {
  check_f32(c, "paged_attention", name);
  ASTRAI_OP_CHECK(c.ndim == 3 && c.is_contiguous(), std::string("paged_attention: ") + name +
                                                        " must be a contiguous [slots, KVH, D], got " +
                                                        c.shape_str());
}

}  // namespace

void kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache, Tensor v_cache) {
  check_f32(k, "kv_store", "k");
  check_f32(v, "kv_store", "v");
  check_i32(slots, "kv_store", "slots");
  check_cache(k_cache, "k_cache");
  check_cache(v_cache, "v_cache");
  ASTRAI_OP_CHECK(k.ndim == 3 && v.ndim == 3 && k.shape == v.shape,
                  "kv_store: k and v must be [T, KVH, D], same shape");
  const int64_t T = k.shape[0], KVH = k.shape[1], D = k.shape[2], n_slots = k_cache.shape[0];
  ASTRAI_OP_CHECK(k_cache.shape == v_cache.shape && k_cache.shape[1] == KVH && k_cache.shape[2] == D,
                  "kv_store: cache " + k_cache.shape_str() + " for k " + k.shape_str());
  ASTRAI_OP_CHECK(slots.numel() == T, "kv_store: slots size differs from T");
  const int32_t* sl = slots.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    ASTRAI_OP_CHECK(sl[t] >= 0 && sl[t] < n_slots, "kv_store: slot " + std::to_string(sl[t]) +
                                                       " outside the cache of " + std::to_string(n_slots));
  const RowView kv = rows_of(k, "kv_store"), vv = rows_of(v, "kv_store");
  const size_t row_bytes = size_t(D) * sizeof(float);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < KVH; ++h) {
      const int64_t dst = (int64_t(sl[t]) * KVH + h) * D;
      std::memcpy(k_cache.ptr<float>() + dst, kv.row(t * KVH + h), row_bytes);
      std::memcpy(v_cache.ptr<float>() + dst, vv.row(t * KVH + h), row_bytes);
    }
}

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionBatch& batch, float scale, Tensor out, Isa isa) {
  check_f32(q, "paged_attention", "q");
  check_f32(out, "paged_attention", "out");
  check_cache(k_cache, "k_cache");
  check_cache(v_cache, "v_cache");
  check_i32(batch.q_start, "paged_attention", "q_start");
  check_i32(batch.kv_len, "paged_attention", "kv_len");
  check_i32(batch.page_table, "paged_attention", "page_table");
  check_attention_shapes(q, k_cache, v_cache, batch, out);
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  const int64_t KVH = k_cache.shape[1], ps = batch.page_size, S = batch.num_seqs, max_pages = batch.max_pages;
  const int64_t n_pages = k_cache.shape[0] / ps;
  const int32_t* qs = batch.q_start.ptr<int32_t>();
  const int32_t* kvl = batch.kv_len.ptr<int32_t>();
  const int32_t* pt = batch.page_table.ptr<int32_t>();
  ASTRAI_OP_CHECK(S == 0 || (qs[0] == 0 && qs[S] == T), "paged_attention: q_start must run from 0 to T");

  // Block prefix sums: sequence s owns query blocks [blk[s], blk[s+1]).
  thread_local std::vector<int64_t> blk;
  blk.assign(size_t(S) + 1, 0);
  int64_t max_kv = 1;
  for (int64_t s = 0; s < S; ++s) {
    max_kv = std::max<int64_t>(max_kv, kvl[s]);
    const int64_t qlen = qs[s + 1] - qs[s];
    ASTRAI_OP_CHECK(qlen >= 0 && kvl[s] >= qlen, "paged_attention: sequence " + std::to_string(s) +
                                                     " has q_len " + std::to_string(qlen) + " > kv_len " +
                                                     std::to_string(kvl[s]));
    const int64_t used_pages = (int64_t(kvl[s]) + ps - 1) / ps;
    ASTRAI_OP_CHECK(used_pages <= max_pages, "paged_attention: kv_len " + std::to_string(kvl[s]) +
                                                 " needs more than max_pages " + std::to_string(max_pages));
    for (int64_t p = 0; p < used_pages; ++p)
      ASTRAI_OP_CHECK(
          pt[s * max_pages + p] >= 0 && pt[s * max_pages + p] < n_pages,
          "paged_attention: page " + std::to_string(pt[s * max_pages + p]) + " outside the cache");
    blk[s + 1] = blk[s] + (qlen + kQueryBlock - 1) / kQueryBlock;
  }
  const int64_t n_tasks = blk[S] * H;
  // Fork only when there is enough work (about T * H * keys * D multiply-adds, twice): on 2 busy
  // cores a fork/join can cost more than a small decode step's attention.
  const int64_t work = T * H * max_kv * D;
  const int64_t group = H / KVH;
  const RowView qv = rows_of(q, "paged_attention"), ov = rows_of(out, "paged_attention");
  const float* kc = k_cache.ptr<float>();
  const float* vc = v_cache.ptr<float>();
  const int64_t* blk_p = blk.data();
  const auto run = ASTRAI_ISA_PICK(isa, "paged_attention", attend);

#pragma omp parallel for schedule(dynamic, 1) if (n_tasks > 1 && work > (1 << 20))
  for (int64_t task = 0; task < n_tasks; ++task) {
    const int64_t b = task / H, h = task % H, kvh = h / group;
    const int64_t s = std::upper_bound(blk_p, blk_p + S + 1, b) - blk_p - 1;
    const int64_t qlen = qs[s + 1] - qs[s];
    const int64_t r0 = qs[s] + (b - blk_p[s]) * kQueryBlock;
    const int64_t nr = std::min<int64_t>(kQueryBlock, qs[s + 1] - r0);
    const int64_t pos0 = kvl[s] - qlen + (r0 - qs[s]);  // position of the block's first row
    thread_local std::vector<float> scores;
    if (scores.size() < size_t(nr * (pos0 + nr))) scores.resize(size_t(nr * (pos0 + nr)));
    Task t;
    t.q = qv.row(r0 * H + h);
    t.ldq = nr > 1 ? qv.row((r0 + 1) * H + h) - t.q : 0;
    t.nr = nr;
    t.pos0 = pos0;
    t.n_keys = pos0 + nr;  // the last row sees keys [0, pos0 + nr - 1]
    t.D = D;
    t.pages = pt + s * max_pages;
    t.page_size = ps;
    t.k = kc + kvh * D;
    t.v = vc + kvh * D;
    t.ld_kv = KVH * D;
    t.out = ov.row(r0 * H + h);
    t.ldo = nr > 1 ? ov.row((r0 + 1) * H + h) - t.out : 0;
    t.scale = scale;
    t.scores = scores.data();
    run(t);
  }
}

}  // namespace astrai::cpu
