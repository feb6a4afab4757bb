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
  const WorkspaceShape old = cap_;
  if (need.tokens > cap_.tokens) {
    const int64_t T = grow(cap_.tokens, need.tokens);
    x_ = be.alloc(size_t(T * hidden_) * es);
    x2_ = be.alloc(size_t(T * hidden_) * es);
    h_ = be.alloc(size_t(T * hidden_) * es);
    y_ = be.alloc(size_t(T * hidden_) * es);
    qkv_ = be.alloc(size_t(T * qkv_width_) * es);
    attn_ = be.alloc(size_t(T * q_dim_) * es);
    gate_up_ = be.alloc(size_t(T * 2 * ffn_) * es);
    act_ = be.alloc(size_t(T * ffn_) * es);
    cap_.tokens = T;
  }
  if (need.logit_rows > cap_.logit_rows) {
    const int64_t R = grow(cap_.logit_rows, need.logit_rows);
    gathered_ = be.alloc(size_t(R * hidden_) * es);
    logits_ = be.alloc(size_t(R * vocab_) * 4);
    cap_.logit_rows = R;
  }
  cap_.seqs = grow(cap_.seqs, need.seqs);
  // The stride is exact when it is first set (the engine's longest context), grown like the rest after.
  if (need.page_stride > cap_.page_stride)
    cap_.page_stride = cap_.page_stride == 0 ? need.page_stride : grow(cap_.page_stride, need.page_stride);
  if (cap_.tokens != old.tokens || cap_.logit_rows != old.logit_rows || cap_.seqs != old.seqs ||
      cap_.page_stride != old.page_stride) {
    const size_t bytes = size_t(off_page_table() + cap_.seqs * cap_.page_stride) * sizeof(int32_t);
    inputs_ = be.alloc(bytes);
    staging_ = be.alloc_host_pinned(bytes);
    ++generation_;
  }
}

StepInputsHost Workspace::host_inputs() const {
  int32_t* p = static_cast<int32_t*>(staging_.data());
  return {p,
          p + off_positions(),
          p + off_slots(),
          p + off_rows(),
          p + off_q_start(),
          p + off_kv_len(),
          p + off_moves(),
          p + off_page_table()};
}

void Workspace::upload_inputs(Backend& be, int64_t seqs) const {
  be.upload_async(input(0, off_page_table() + seqs * cap_.page_stride), staging_.data());
}

Tensor Workspace::input(int64_t offset, int64_t n) const {
  return Tensor(static_cast<int32_t*>(inputs_.data()) + offset, DType::i32, {n}, dev_);
}

Tensor Workspace::x(int64_t T) const {
  return view2(x_, dt_, T, hidden_, dev_);
}
Tensor Workspace::x2(int64_t T) const {
  return view2(x2_, dt_, T, hidden_, dev_);
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
  return input(0, T);
}
Tensor Workspace::positions(int64_t T) const {
  return input(off_positions(), T);
}
Tensor Workspace::slots(int64_t T) const {
  return input(off_slots(), T);
}
Tensor Workspace::rows(int64_t R) const {
  return input(off_rows(), R);
}
Tensor Workspace::q_start(int64_t S) const {
  return input(off_q_start(), S + 1);
}
Tensor Workspace::kv_len(int64_t S) const {
  return input(off_kv_len(), S);
}
Tensor Workspace::moves(int64_t M) const {
  return Tensor(static_cast<int32_t*>(inputs_.data()) + off_moves(), DType::i32, {M, 2}, dev_);
}
Tensor Workspace::page_table(int64_t S) const {
  return Tensor(static_cast<int32_t*>(inputs_.data()) + off_page_table(), DType::i32, {S, cap_.page_stride},
                dev_);
}

}  // namespace astrai
