// KV-cache writes and causal grouped-query attention over a paged cache.
//
// Cache layout: [num_pages * page_size, KVH, D]; logical position j of sequence s lives in slot
// page_table[s][j / page_size] * page_size + j % page_size.
//
// paged_attention splits the work into tasks of (sequence, query head, block of up to tiles::kQueryBlock
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
#include <cstring>
#include <vector>

#include "src/backend/attention_shapes.h"
#include "src/backend/cpu/attend.h"
#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {
namespace {

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
    blk[s + 1] = blk[s] + (qlen + tiles::kQueryBlock - 1) / tiles::kQueryBlock;
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
  const auto run = ASTRAI_ISA_PICK(isa, "paged_attention", tiles::attend);

#pragma omp parallel for schedule(dynamic, 1) if (n_tasks > 1 && work > (1 << 20))
  for (int64_t task = 0; task < n_tasks; ++task) {
    const int64_t b = task / H, h = task % H, kvh = h / group;
    const int64_t s = std::upper_bound(blk_p, blk_p + S + 1, b) - blk_p - 1;
    const int64_t qlen = qs[s + 1] - qs[s];
    const int64_t r0 = qs[s] + (b - blk_p[s]) * tiles::kQueryBlock;
    const int64_t nr = std::min<int64_t>(tiles::kQueryBlock, qs[s + 1] - r0);
    const int64_t pos0 = kvl[s] - qlen + (r0 - qs[s]);  // position of the block's first row
    thread_local std::vector<float> scores;
    if (scores.size() < size_t(nr * (pos0 + nr))) scores.resize(size_t(nr * (pos0 + nr)));
    tiles::Task t;
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
    t.ld_k = t.ld_v = KVH * D;
    t.out = ov.row(r0 * H + h);
    t.ldo = nr > 1 ? ov.row((r0 + 1) * H + h) - t.out : 0;
    t.scale = scale;
    t.scores = scores.data();
    run(t);
  }
}

}  // namespace astrai::cpu
