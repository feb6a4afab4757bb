// Causal grouped-query attention over contiguous sequences, for training: the forward saves each
// row's log-sum-exp, the backward recomputes the probabilities from it (no [T, T] matrix is kept).
// Query row t attends to key rows [kv_begin[t], t]; packed documents and the rows of a batch are
// separated only through kv_begin.
//
// Forward: paged_attention's own tiles (attend.h) over one page holding a document's contiguous
// keys, one task per (block of up to 16 rows that share kv_begin, head), which also store each
// row's log-sum-exp; so the training forward gives the serving one's bits (a test holds them equal).
// Backward: the rows split into independent segments (no query of a segment reads a key before
// it: a segment starts at t when every row from t on has kv_begin >= t — each packed document, and
// each batch row, is one). One task per (segment, KV head) owns dk / dv of its keys and dq of its
// group's query heads, so tasks never write the same element. A task walks tiles of query rows x
// keys (the score tiles lanes.h's, each gradient row loaded once a tile), every element summed in
// the order of a plain loop over heads, query rows and keys.
// Both run on lanes.h's instruction-set paths (dot products in lanes, the rest elementwise, no
// FMA), so every path gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/backend/cpu/attend.h"
#include "src/backend/cpu/lanes.h"
#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {
namespace {

// Rows of one head of a [N, heads, D] tensor: row j of head h is at head(h) + j * step floats
// (no division per access, unlike Rows::row).
struct HeadRows {
  float* base;
  int64_t step;
  float* operator[](int64_t j) const { return base + j * step; }
};
inline HeadRows head_rows(const RowView& v, int64_t h) {
  return {v.row(h), v.s_outer};
}

struct AttnShape {
  int64_t N = 0, H = 0, KVH = 0, D = 0;
};

// Checks the shapes shared by forward and backward and kv_begin's range.
AttnShape check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_begin,
                          const Tensor& out, const Tensor& lse, const char* op) {
  const std::string name = op;
  check_f32(q, op, "q");
  check_f32(k, op, "k");
  check_f32(v, op, "v");
  check_f32(out, op, "out");
  check_f32(lse, op, "lse");
  check_i32(kv_begin, op, "kv_begin");
  ASTRAI_OP_CHECK(q.ndim == 3 && k.ndim == 3 && v.ndim == 3 && out.ndim == 3,
                  name + ": q, k, v, out must be [N, heads, D]");
  AttnShape s{q.shape[0], q.shape[1], k.shape[1], q.shape[2]};
  ASTRAI_OP_CHECK(
      k.shape == v.shape && k.shape[0] == s.N && k.shape[2] == s.D && s.KVH > 0 && s.H % s.KVH == 0,
      name + ": q " + q.shape_str() + " k " + k.shape_str() + " v " + v.shape_str());
  ASTRAI_OP_CHECK(out.shape == q.shape,
                  name + ": out " + out.shape_str() + " differs from q " + q.shape_str());
  ASTRAI_OP_CHECK(lse.numel() == s.N * s.H && lse.is_contiguous(), name + ": lse " + lse.shape_str());
  ASTRAI_OP_CHECK(kv_begin.numel() == s.N, name + ": kv_begin size differs from N");
  const int32_t* kb = kv_begin.ptr<int32_t>();
  for (int64_t t = 0; t < s.N; ++t)
    ASTRAI_OP_CHECK(kb[t] >= 0 && kb[t] <= t, name + ": kv_begin[" + std::to_string(t) +
                                                  "] = " + std::to_string(kb[t]) + " outside [0, " +
                                                  std::to_string(t) + "]");
  return s;
}

}  // namespace

namespace {

struct Forward {
  RowView q, k, v, out;
  const int32_t* kv_begin;
  float* lse;
  int64_t H, D, group;
  float scale;
};

Forward forward_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_begin,
                     const Tensor& out, const Tensor& lse, const AttnShape& s, float scale, const char* op) {
  return {rows_of(q, op),
          rows_of(k, op),
          rows_of(v, op),
          rows_of(out, op),
          kv_begin.ptr<int32_t>(),
          lse.ptr<float>(),
          s.H,
          s.D,
          s.H / s.KVH,
          scale};
}

}  // namespace

void attention_train(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_begin, float scale,
                     Tensor out, Tensor lse, Isa isa) {
  const AttnShape s = check_attention(q, k, v, kv_begin, out, lse, "attention_train");
  const char* op = "attention_train";
  const Forward f = forward_args(q, k, v, kv_begin, out, lse, s, scale, op);
  const auto run = ASTRAI_ISA_PICK(isa, op, tiles::attend);
  const int64_t N = s.N, H = s.H;
  // Blocks of up to kQueryBlock consecutive rows that share kv_begin (a packed document's rows do):
  // each block's rows see keys [kv_begin, t], as a prefill of that document sees its own.
  std::vector<int64_t> starts;
  for (int64_t t = 0; t < N; ++t)
    if (starts.empty() || t - starts.back() == tiles::kQueryBlock || f.kv_begin[t] != f.kv_begin[t - 1])
      starts.push_back(t);
  starts.push_back(N);
  const int64_t n_blocks = int64_t(starts.size()) - 1;
  int64_t work = 0;
  for (int64_t t = 0; t < N; ++t) work += (t - f.kv_begin[t] + 1) * H * s.D;
#pragma omp parallel for schedule(dynamic, 1) if (n_blocks * H > 1 && work > (1 << 18))
  for (int64_t task = 0; task < n_blocks * H; ++task) {
    const int64_t t0 = starts[size_t(task / H)], t1 = starts[size_t(task / H) + 1], h = task % H;
    const int64_t b = f.kv_begin[t0], nr = t1 - t0;
    const HeadRows qs = head_rows(f.q, h), outs = head_rows(f.out, h), keys = head_rows(f.k, h / f.group),
                   values = head_rows(f.v, h / f.group);
    thread_local std::vector<float> scores;
    const int64_t n_keys = t1 - b;  // the block's last row sees keys [b, t1 - 1]
    if (scores.size() < size_t(nr * n_keys)) scores.resize(size_t(nr * n_keys));
    static const int32_t kOnePage = 0;  // the keys are contiguous: one page holding them all
    tiles::Task t;
    t.q = qs[t0];
    t.ldq = qs.step;
    t.nr = nr;
    t.pos0 = t0 - b;
    t.n_keys = n_keys;
    t.D = s.D;
    t.pages = &kOnePage;
    t.page_size = n_keys;
    t.k = keys[b];
    t.v = values[b];
    t.ld_k = keys.step;
    t.ld_v = values.step;
    t.out = outs[t0];
    t.ldo = outs.step;
    t.scale = f.scale;
    t.scores = scores.data();
    t.lse = f.lse + t0 * H + h;
    t.ld_lse = H;
    run(t);
  }
}

namespace {

struct Backward {
  Forward f;  // its operands (out and lse read, not written)
  RowView dout, dq, dk, dv;
};

// dst[d] += coef[i] * src_i[d] for i = 0, 1, ... n - 1 in order, skipping the i where skip[i]: each
// element's additions in the order the untiled loop made them (a multiply, then an add), the
// element kept in a register across the n sources.
[[gnu::always_inline]] inline void add_rows(float* dst, int64_t D, int64_t n, const float* coef,
                                            const bool* skip, const float* const* src) {
  const int64_t D8 = D / lanes::kLanes * lanes::kLanes;
  for (int64_t d = 0; d < D8; d += lanes::kLanes) {
    lanes::Lanes acc = lanes::load(dst + d);
    for (int64_t i = 0; i < n; ++i)
      if (!skip[i]) acc += coef[i] * lanes::load(src[i] + d);
    lanes::store(dst + d, acc);
  }
  for (int64_t d = D8; d < D; ++d) {
    float acc = dst[d];
    for (int64_t i = 0; i < n; ++i)
      if (!skip[i]) acc += coef[i] * src[i][d];
    dst[d] = acc;
  }
}

// One task of the backward: keys and query rows [s0, s1) of KV head kvh, in tiles of MR query rows
// of one head x NR keys. Per tile: the scores q.k and dO.v as lanes.h's tiles (the dot products
// the untiled loop took), p = exp(s scale - lse), ds = p (dO.v - delta) scale, then
//   dq_t += ds_tj k_j  (j in order),  dk_j += ds_tj q_t,  dv_j += p_tj dO_t  (t in order),
// each destination row loaded once a tile. For every element the terms and their order are the
// untiled loop's (heads in order, then query rows, then keys), so the bits are too.
template <int64_t MR, int64_t NR>
[[gnu::always_inline]] inline void backward_task(const Backward& a, int64_t s0, int64_t s1, int64_t kvh) {
  const Forward& f = a.f;
  const int64_t H = f.H, D = f.D;
  const HeadRows keys = head_rows(f.k, kvh), values = head_rows(f.v, kvh), dkeys = head_rows(a.dk, kvh),
                 dvalues = head_rows(a.dv, kvh);
  for (int64_t j = s0; j < s1; ++j) {
    std::memset(dkeys[j], 0, size_t(D) * sizeof(float));
    std::memset(dvalues[j], 0, size_t(D) * sizeof(float));
  }
  for (int64_t h = kvh * f.group; h < (kvh + 1) * f.group; ++h) {
    const HeadRows qs = head_rows(f.q, h), dos = head_rows(a.dout, h), dqs = head_rows(a.dq, h);
    for (int64_t t0 = s0; t0 < s1; t0 += MR) {
      const int64_t mr = std::min(MR, s1 - t0);
      float delta[MR], L[MR];
      int64_t first = t0;  // the block's first key
      for (int64_t i = 0; i < mr; ++i) {
        const int64_t r = (t0 + i) * H + h;
        std::memset(dqs[t0 + i], 0, size_t(D) * sizeof(float));
        delta[i] = lanes::dot(dos[t0 + i], f.out.row(r), D);
        L[i] = f.lse[r];
        first = std::min<int64_t>(first, f.kv_begin[t0 + i]);
      }
      for (int64_t j0 = first; j0 < t0 + mr; j0 += NR) {
        const int64_t nr = std::min(NR, t0 + mr - j0);
        float sc[MR][NR], dp[MR][NR], ds[MR][NR], pt[NR][MR], dst[NR][MR];
        bool out_row[MR][NR], out_col[NR][MR];  // (t, j) outside t's keys
        lanes::edge_tile<MR, NR>(mr, nr, D, qs[t0], qs.step, keys[j0], keys.step, nullptr, &sc[0][0], NR);
        lanes::edge_tile<MR, NR>(mr, nr, D, dos[t0], dos.step, values[j0], values.step, nullptr, &dp[0][0],
                                 NR);
        for (int64_t i = 0; i < mr; ++i)
          for (int64_t jj = 0; jj < nr; ++jj) {
            const int64_t t = t0 + i, j = j0 + jj;
            const bool outside = j < f.kv_begin[t] || j > t;
            const float p = outside ? 0.0f : std::exp(sc[i][jj] * f.scale - L[i]);
            ds[i][jj] = outside ? 0.0f : p * (dp[i][jj] - delta[i]) * f.scale;
            out_row[i][jj] = out_col[jj][i] = outside;
            pt[jj][i] = p;
            dst[jj][i] = ds[i][jj];
          }
        const float* krows[NR];
        const float* qrows[MR];
        const float* drows[MR];
        for (int64_t jj = 0; jj < nr; ++jj) krows[jj] = keys[j0 + jj];
        for (int64_t i = 0; i < mr; ++i) {
          qrows[i] = qs[t0 + i];
          drows[i] = dos[t0 + i];
        }
        for (int64_t i = 0; i < mr; ++i) add_rows(dqs[t0 + i], D, nr, ds[i], out_row[i], krows);
        for (int64_t jj = 0; jj < nr; ++jj) {
          add_rows(dkeys[j0 + jj], D, mr, dst[jj], out_col[jj], qrows);
          add_rows(dvalues[j0 + jj], D, mr, pt[jj], out_col[jj], drows);
        }
      }
    }
  }
}

ASTRAI_NO_FP_CONTRACT void backward_baseline(const Backward& a, int64_t s0, int64_t s1, int64_t kvh) {
  backward_task<4, 3>(a, s0, s1, kvh);
}
#if defined(__x86_64__)
ASTRAI_ISA_AVX2 void backward_avx2(const Backward& a, int64_t s0, int64_t s1, int64_t kvh) {
  backward_task<3, 3>(a, s0, s1, kvh);
}
ASTRAI_ISA_AVX512 void backward_avx512(const Backward& a, int64_t s0, int64_t s1, int64_t kvh) {
  backward_task<6, 4>(a, s0, s1, kvh);
}
#endif

}  // namespace

void attention_train_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& kv_begin, const Tensor& out, const Tensor& lse, float scale,
                              Tensor dq, Tensor dk, Tensor dv, Isa isa) {
  const char* op = "attention_train_backward";
  const AttnShape s = check_attention(q, k, v, kv_begin, out, lse, op);
  check_f32(dout, op, "dout");
  check_f32(dq, op, "dq");
  check_f32(dk, op, "dk");
  check_f32(dv, op, "dv");
  ASTRAI_OP_CHECK(dout.ndim == 3 && dout.shape == q.shape && dq.ndim == 3 && dq.shape == q.shape &&
                      dk.ndim == 3 && dk.shape == k.shape && dv.ndim == 3 && dv.shape == v.shape,
                  std::string(op) + ": dout/dq must be shaped as q, dk/dv as k");
  const Backward a{forward_args(q, k, v, kv_begin, out, lse, s, scale, op), rows_of(dout, op),
                   rows_of(dq, op), rows_of(dk, op), rows_of(dv, op)};
  const auto run = ASTRAI_ISA_PICK(isa, op, backward);
  const int32_t* kb = a.f.kv_begin;
  const int64_t N = s.N, H = s.H, KVH = s.KVH, D = s.D;

  // Segment starts: t such that min(kv_begin[t..N)) == t.
  std::vector<int64_t> starts;
  int64_t suffix_min = N;
  for (int64_t t = N - 1; t >= 0; --t) {
    suffix_min = std::min<int64_t>(suffix_min, kb[t]);
    if (suffix_min == t) starts.push_back(t);
  }
  std::reverse(starts.begin(), starts.end());
  starts.push_back(N);
  const int64_t n_segs = int64_t(starts.size()) - 1;
  int64_t work = 0;
  for (int64_t t = 0; t < N; ++t) work += (t - kb[t] + 1) * H * D;

#pragma omp parallel for schedule(dynamic, 1) if (n_segs * KVH > 1 && work > (1 << 16))
  for (int64_t task = 0; task < n_segs * KVH; ++task)
    run(a, starts[size_t(task / KVH)], starts[size_t(task / KVH) + 1], task % KVH);
}

}  // namespace astrai::cpu
