// The per-step buffers of the decoder forward. Sized by the largest batch seen so far and only
// ever grown, so steady-state decoding allocates nothing (and, on the GPU, keeps every address
// fixed for CUDA-graph capture once the capacity covers the captured batch sizes).
#pragma once

#include <cstdint>

#include "src/backend/backend.h"
#include "src/model/config.h"

namespace astrai {

struct WorkspaceShape {
  int64_t tokens = 0;        // T: rows of the packed batch
  int64_t seqs = 0;          // S
  int64_t page_entries = 0;  // S * max_pages
  int64_t logit_rows = 0;    // R
};

class Workspace {
 public:
  // Makes every buffer large enough for `need`; reallocates only the ones that are too small,
  // rounding capacities up so that slowly growing batches do not reallocate every step.
  void reserve(Backend& backend, const ModelConfig& config, const WorkspaceShape& need);

  // Activations (compute dtype), [T, width] views of the current step.
  Tensor x(int64_t T) const;         // residual stream [T, hidden]
  Tensor h(int64_t T) const;         // normed input of a sub-layer [T, hidden]
  Tensor y(int64_t T) const;         // output of a sub-layer (o_proj, down) [T, hidden]
  Tensor qkv(int64_t T) const;       // fused q|k|v projections [T, q_dim + 2 kv_dim]
  Tensor attn(int64_t T) const;      // attention output [T, heads, head_dim]
  Tensor gate_up(int64_t T) const;   // fused gate|up [T, 2 F]
  Tensor act(int64_t T) const;       // silu(gate) * up [T, F]
  Tensor gathered(int64_t R) const;  // final-normed rows whose logits are wanted [R, hidden]
  Tensor logits(int64_t R) const;    // f32 [R, vocab]
  // Index inputs (i32).
  Tensor ids(int64_t T) const;
  Tensor positions(int64_t T) const;
  Tensor slots(int64_t T) const;
  Tensor q_start(int64_t S) const;  // [S + 1]
  Tensor kv_len(int64_t S) const;
  Tensor page_table(int64_t S, int64_t max_pages) const;
  Tensor rows(int64_t R) const;

 private:
  WorkspaceShape cap_;
  DType dt_ = DType::f32;
  Device dev_ = Device::cpu;
  int64_t hidden_ = 0, qkv_width_ = 0, q_dim_ = 0, heads_ = 0, head_dim_ = 0, ffn_ = 0, vocab_ = 0;
  Buffer x_, h_, y_, qkv_, attn_, gate_up_, act_, gathered_, logits_;
  Buffer ids_, positions_, slots_, q_start_, kv_len_, page_table_, rows_;
};

}  // namespace astrai
