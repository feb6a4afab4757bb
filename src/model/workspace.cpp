#include "src/model/workspace.h"

#include <algorithm>

namespace astrai {
namespace {

// Capacity for n: at least n, rounded up to a multiple of 16 and to 1.5x the previous capacity.
int64_t grow(int64_t cap, int64_t n) {
  if (n <= cap) return cap;
  const int64_t want = std::max(n, cap + cap / 2);
  return (want + 15) / 16 * 16;
}

Tensor view2(const Buffer& b, DType t, int64_t rows, int64_t cols, Device dev) {
  return Tensor(b.data(), t, {rows, cols}, dev);
}

}  // namespace

void Workspace::reserve(Backend& be, const ModelConfig& c, const WorkspaceShape& need) {
  dt_ = be.compute_dtype();
  dev_ = be.device();
  hidden_ = c.hidden_size;
  q_dim_ = c.q_dim();
  qkv_width_ = c.q_dim() + 2 * c.kv_dim();
  heads_ = c.num_heads;
  head_dim_ = c.head_dim;
  ffn_ = c.intermediate_size;
  vocab_ = c.vocab_size;
  const size_t es = dtype_size(dt_);
  if (need.tokens > cap_.tokens) {
    const int64_t T = grow(cap_.tokens, need.tokens);
    x_ = be.alloc(size_t(T * hidden_) * es);
    h_ = be.alloc(size_t(T * hidden_) * es);
    y_ = be.alloc(size_t(T * hidden_) * es);
    qkv_ = be.alloc(size_t(T * qkv_width_) * es);
    attn_ = be.alloc(size_t(T * q_dim_) * es);
    gate_up_ = be.alloc(size_t(T * 2 * ffn_) * es);
    act_ = be.alloc(size_t(T * ffn_) * es);
    ids_ = be.alloc(size_t(T) * 4);
    positions_ = be.alloc(size_t(T) * 4);
    slots_ = be.alloc(size_t(T) * 4);
    cap_.tokens = T;
  }
  if (need.seqs > cap_.seqs) {
    const int64_t S = grow(cap_.seqs, need.seqs);
    q_start_ = be.alloc(size_t(S + 1) * 4);
    kv_len_ = be.alloc(size_t(S) * 4);
    cap_.seqs = S;
  }
  if (need.page_entries > cap_.page_entries) {
    const int64_t P = grow(cap_.page_entries, need.page_entries);
    page_table_ = be.alloc(size_t(P) * 4);
    cap_.page_entries = P;
  }
  if (need.logit_rows > cap_.logit_rows) {
    const int64_t R = grow(cap_.logit_rows, need.logit_rows);
    gathered_ = be.alloc(size_t(R * hidden_) * es);
    logits_ = be.alloc(size_t(R * vocab_) * 4);
    rows_ = be.alloc(size_t(R) * 4);
    cap_.logit_rows = R;
  }
}

Tensor Workspace::x(int64_t T) const {
  return view2(x_, dt_, T, hidden_, dev_);
}
Tensor Workspace::h(int64_t T) const {
  return view2(h_, dt_, T, hidden_, dev_);
}
Tensor Workspace::y(int64_t T) const {
  return view2(y_, dt_, T, hidden_, dev_);
}
Tensor Workspace::qkv(int64_t T) const {
  return view2(qkv_, dt_, T, qkv_width_, dev_);
}
Tensor Workspace::attn(int64_t T) const {
  return Tensor(attn_.data(), dt_, {T, heads_, head_dim_}, dev_);
}
Tensor Workspace::gate_up(int64_t T) const {
  return view2(gate_up_, dt_, T, 2 * ffn_, dev_);
}
Tensor Workspace::act(int64_t T) const {
  return view2(act_, dt_, T, ffn_, dev_);
}
Tensor Workspace::gathered(int64_t R) const {
  return view2(gathered_, dt_, R, hidden_, dev_);
}
Tensor Workspace::logits(int64_t R) const {
  return view2(logits_, DType::f32, R, vocab_, dev_);
}
Tensor Workspace::ids(int64_t T) const {
  return Tensor(ids_.data(), DType::i32, {T}, dev_);
}
Tensor Workspace::positions(int64_t T) const {
  return Tensor(positions_.data(), DType::i32, {T}, dev_);
}
Tensor Workspace::slots(int64_t T) const {
  return Tensor(slots_.data(), DType::i32, {T}, dev_);
}
Tensor Workspace::q_start(int64_t S) const {
  return Tensor(q_start_.data(), DType::i32, {S + 1}, dev_);
}
Tensor Workspace::kv_len(int64_t S) const {
  return Tensor(kv_len_.data(), DType::i32, {S}, dev_);
}
Tensor Workspace::page_table(int64_t S, int64_t max_pages) const {
  return Tensor(page_table_.data(), DType::i32, {S, max_pages}, dev_);
}
Tensor Workspace::rows(int64_t R) const {
  return Tensor(rows_.data(), DType::i32, {R}, dev_);
}

}  // namespace astrai
