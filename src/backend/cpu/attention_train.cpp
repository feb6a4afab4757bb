// Causal grouped-query attention over contiguous sequences, for training: the forward saves each
// row's log-sum-exp, the backward recomputes the probabilities from it (no [T, T] matrix is kept).
// Query row t attends to key rows [kv_begin[t], t]; packed documents and the rows of a batch are
// separated only through kv_begin.
//
// Forward: one task per (query row, head); softmax two-pass over a scratch row as paged_attention
// does (scores, max-subtracted exp and sum, weighted sum of V scaled by 1 / sum), so the training
// forward rounds like the serving one.
// Backward: the rows split into independent segments (no query of a segment reads a key before
// it: a segment starts at t when every row from t on has kv_begin >= t — each packed document, and
// each batch row, is one). One task per (segment, KV head) owns dk / dv of its keys and dq of its
// group's query heads, so tasks never write the same element.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"
#include "src/backend/cpu/vec.h"

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

void attention_train(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_begin, float scale,
                     Tensor out, Tensor lse) {
  const AttnShape s = check_attention(q, k, v, kv_begin, out, lse, "attention_train");
  const RowView qv = rows_of(q, "attention_train"), kv = rows_of(k, "attention_train"),
                vv = rows_of(v, "attention_train"), ov = rows_of(out, "attention_train");
  const int32_t* kb = kv_begin.ptr<int32_t>();
  float* lp = lse.ptr<float>();
  const int64_t N = s.N, H = s.H, KVH = s.KVH, D = s.D, group = H / KVH;
  int64_t work = 0;
  for (int64_t t = 0; t < N; ++t) work += (t - kb[t] + 1) * H * D;
#pragma omp parallel for schedule(dynamic, 8) if (work > (1 << 18))
  for (int64_t r = 0; r < N * H; ++r) {
    const int64_t t = r / H, h = r % H, kvh = h / group, b = kb[t], n = t - b + 1;
    thread_local std::vector<float> scores;
    if (scores.size() < size_t(n)) scores.resize(size_t(n));
    float* sc = scores.data();
    const float* qr = qv.row(r);
    const HeadRows keys = head_rows(kv, kvh), values = head_rows(vv, kvh);
    for (int64_t j = 0; j < n; ++j) sc[j] = dot(qr, keys[b + j], D) * scale;
    const ExpSum e = exp_shifted(sc, n);
    const float inv = 1.0f / e.sum;
    float* o = ov.row(r);
    std::memset(o, 0, size_t(D) * sizeof(float));
    for (int64_t j = 0; j < n; ++j) axpy(sc[j] * inv, values[b + j], o, D);
    lp[r] = e.max + std::log(e.sum);
  }
}

void attention_train_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& kv_begin, const Tensor& out, const Tensor& lse, float scale,
                              Tensor dq, Tensor dk, Tensor dv) {
  const char* op = "attention_train_backward";
  const AttnShape s = check_attention(q, k, v, kv_begin, out, lse, op);
  check_f32(dout, op, "dout");
  check_f32(dq, op, "dq");
  check_f32(dk, op, "dk");
  check_f32(dv, op, "dv");
  ASTRAI_OP_CHECK(dout.ndim == 3 && dout.shape == q.shape && dq.ndim == 3 && dq.shape == q.shape &&
                      dk.ndim == 3 && dk.shape == k.shape && dv.ndim == 3 && dv.shape == v.shape,
                  std::string(op) + ": dout/dq must be shaped as q, dk/dv as k");
  const RowView qv = rows_of(q, op), kv = rows_of(k, op), vv = rows_of(v, op), ov = rows_of(out, op),
                dov = rows_of(dout, op), dqv = rows_of(dq, op), dkv = rows_of(dk, op), dvv = rows_of(dv, op);
  const int32_t* kb = kv_begin.ptr<int32_t>();
  const float* lp = lse.ptr<float>();
  const int64_t N = s.N, H = s.H, KVH = s.KVH, D = s.D, group = H / KVH;

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
  for (int64_t task = 0; task < n_segs * KVH; ++task) {
    const int64_t seg = task / KVH, kvh = task % KVH;
    const int64_t s0 = starts[size_t(seg)], s1 = starts[size_t(seg) + 1];
    const HeadRows keys = head_rows(kv, kvh), values = head_rows(vv, kvh), dkeys = head_rows(dkv, kvh),
                   dvalues = head_rows(dvv, kvh);
    for (int64_t j = s0; j < s1; ++j) {
      std::memset(dkeys[j], 0, size_t(D) * sizeof(float));
      std::memset(dvalues[j], 0, size_t(D) * sizeof(float));
    }
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
      for (int64_t t = s0; t < s1; ++t) {
        const int64_t r = t * H + h;
        const float* qr = qv.row(r);
        const float* dor = dov.row(r);
        float* dqr = dqv.row(r);
        std::memset(dqr, 0, size_t(D) * sizeof(float));
        const float delta = dot(dor, ov.row(r), D), L = lp[r];
        for (int64_t j = kb[t]; j <= t; ++j) {
          const float* kr = keys[j];
          const float* vr = values[j];
          const float p = std::exp(dot(qr, kr, D) * scale - L);
          const float ds = p * (dot(dor, vr, D) - delta) * scale;
          axpy(ds, kr, dqr, D);
          axpy(ds, qr, dkeys[j], D);
          axpy(p, dor, dvalues[j], D);
        }
      }
  }
}

}  // namespace astrai::cpu
