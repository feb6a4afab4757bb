// The CUDA training ops (backend.h's training and optimizer blocks), one file per family:
// train_norm.cu (rms_norm_train, rms_norm_backward, column_sum for bias gradients),
// train_elementwise.cu (swiglu_backward, embedding_backward), rope.cu (rope_backward beside rope),
// train_attention.cu (attention_train and its backward; tensor cores in train_attention_mma.cu),
// cross_entropy.cu, optimizer.cu (adamw, sum_squares) and gemm.cpp (cuBLASLt). Activations bf16 (f32
// accepted), f32 inside every op; parameter gradients, rstd, lse, logits and losses f32. Every op is
// deterministic: no atomics, every sum in a fixed order that depends only on the shapes, so the same step
// gives the same bits (exact resume).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "gpu/ops.h"
#include "src/backend/backend.h"

namespace astrai::gpu {

void rms_norm_train(cudaStream_t stream, const Tensor& x, const Tensor& w, float eps, Tensor out,
                    Tensor rstd);
void rms_norm_backward(cudaStream_t stream, const Tensor& dy, const Tensor& x, const Tensor& w,
                       const Tensor& rstd, Tensor dx, Tensor dw, bool accumulate, Scratch& scratch);
// dst[n] += sum_m x[m, n]   x [M, N] rows (bf16 or f32), dst [N] f32.
void column_sum(cudaStream_t stream, const Tensor& x, Tensor dst, Scratch& scratch);
void rope_backward(cudaStream_t stream, Tensor dx, const Tensor& positions, const Tensor& cos_sin);
void swiglu_backward(cudaStream_t stream, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     Tensor dgate, Tensor dup);
void embedding_backward(cudaStream_t stream, const Tensor& dout, const Tensor& ids, Tensor dtable,
                        Scratch& scratch);
void attention_train(cudaStream_t stream, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& kv_begin, float scale, Tensor out, Tensor lse);
void attention_train_backward(cudaStream_t stream, const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& kv_begin, const Tensor& out, const Tensor& lse,
                              float scale, Tensor dq, Tensor dk, Tensor dv, Scratch& scratch);
// The tensor-core paths (train_attention_mma.cu) the two above take first: false (nothing launched)
// unless bf16, head_dim 64 or 128 and 16-byte aligned rows. `delta` holds N * heads floats.
bool attention_train_mma(cudaStream_t stream, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& kv_begin, float scale, Tensor out, Tensor lse);
bool attention_train_backward_mma(cudaStream_t stream, const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& kv_begin, const Tensor& out,
                                  const Tensor& lse, float scale, Tensor dq, Tensor dk, Tensor dv,
                                  float* delta);
void cross_entropy(cudaStream_t stream, const Tensor& logits, const Tensor& targets, float label_smoothing,
                   float grad_scale, Tensor losses, Tensor dlogits);
void adamw(cudaStream_t stream, Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWStep& s);
// Writes the sum into *host (waits for the stream).
double sum_squares(cudaStream_t stream, const std::vector<Tensor>& xs, Scratch& scratch);

}  // namespace astrai::gpu
