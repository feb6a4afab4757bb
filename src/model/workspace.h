// The per-step buffers of the decoder forward. Sized by the largest batch seen so far (or once, up
// front, for the engine's limits) and only ever grown, so steady-state decoding allocates nothing
// and every address stays fixed, which a captured CUDA graph relies on: generation() changes
// whenever a buffer moves.
//
// Step inputs (int32) live in one device buffer with a host staging mirror of the same layout
// (page-locked on a GPU): the model packs a step into the mirror and copies it with one async copy.
//   ids [T] | positions [T] | slots [T] | rows [R] | q_start [S+1] | kv_len [S] | moves [S, 2] |
//   page_table [S, P]
// (capacities T, R, S, P). The page table has a fixed row stride P (pages per sequence at the
// longest context), so its layout does not depend on the step; a step copies up to the end of
// its S rows of the page table.
#pragma once

#include <cstdint>

#include "src/backend/backend.h"
#include "src/model/config.h"

namespace astrai {

struct WorkspaceShape {
  int64_t tokens = 0;       // T: rows of the packed batch
  int64_t seqs = 0;         // S
  int64_t page_stride = 0;  // P: pages per sequence row of the page table
  int64_t logit_rows = 0;   // R
};

// Host pointers into the staging mirror, at the current capacities.
struct StepInputsHost {
  int32_t *ids, *positions, *slots, *rows, *q_start, *kv_len, *moves, *page_table;
};

class Workspace {
 public:
  // Makes every buffer large enough for `need`; reallocates only the ones that are too small,
  // rounding capacities up so that slowly growing batches do not reallocate every step.
  void reserve(Backend& backend, const ModelConfig& config, const WorkspaceShape& need);
  const WorkspaceShape& capacity() const { return cap_; }
  // Changes whenever reserve() moves a buffer.
  uint64_t generation() const { return generation_; }

  // The staging mirror of the step inputs (write a step here, then upload_inputs).
  StepInputsHost host_inputs() const;
  // One async copy of the staged inputs of a step with `seqs` sequences to the device.
  void upload_inputs(Backend& backend, int64_t seqs) const;

  // Activations (compute dtype), [T, width] views of the current step.
  Tensor x(int64_t T) const;         // residual stream [T, hidden]
  Tensor x2(int64_t T) const;        // its second buffer (add_rms_norm_linear writes to the other)
  Tensor h(int64_t T) const;         // normed input of a sub-layer [T, hidden]
  Tensor y(int64_t T) const;         // output of a sub-layer (o_proj, down) [T, hidden]
  Tensor qkv(int64_t T) const;       // fused q|k|v projections [T, q_dim + 2 kv_dim]
  Tensor attn(int64_t T) const;      // attention output [T, heads, head_dim]
  Tensor gate_up(int64_t T) const;   // fused gate|up [T, 2 F]
  Tensor act(int64_t T) const;       // silu(gate) * up [T, F]
  Tensor gathered(int64_t R) const;  // final-normed rows whose logits are wanted [R, hidden]
  Tensor logits(int64_t R) const;    // f32 [R, vocab]
  // Index inputs (i32, on the device).
  Tensor ids(int64_t T) const;
  Tensor positions(int64_t T) const;
  Tensor slots(int64_t T) const;
  Tensor q_start(int64_t S) const;     // [S + 1]
  Tensor kv_len(int64_t S) const;      // [S]
  Tensor page_table(int64_t S) const;  // [S, P]
  Tensor rows(int64_t R) const;
  Tensor moves(int64_t M) const;  // [M, 2] (ForwardBatch::moves; M <= S: one a sequence at most)

 private:
  // Element offsets of each input in the inputs buffer at the current capacities.
  int64_t off_positions() const { return cap_.tokens; }
  int64_t off_slots() const { return 2 * cap_.tokens; }
  int64_t off_rows() const { return 3 * cap_.tokens; }
  int64_t off_q_start() const { return off_rows() + cap_.logit_rows; }
  int64_t off_kv_len() const { return off_q_start() + cap_.seqs + 1; }
  int64_t off_moves() const { return off_kv_len() + cap_.seqs; }
  int64_t off_page_table() const { return off_moves() + 2 * cap_.seqs; }
  Tensor input(int64_t offset, int64_t n) const;

  WorkspaceShape cap_;
  uint64_t generation_ = 0;
  DType dt_ = DType::f32;
  Device dev_ = Device::cpu;
  int64_t hidden_ = 0, qkv_width_ = 0, q_dim_ = 0, heads_ = 0, head_dim_ = 0, ffn_ = 0, vocab_ = 0;
  Buffer x_, x2_, h_, y_, qkv_, attn_, gate_up_, act_, gathered_, logits_;
  Buffer inputs_, staging_;  // device inputs and their host mirror, same layout
};

}  // namespace astrai
