// The CUDA implementations of the Backend ops, one file per family with the launch sizing in one
// host function each: norm.cu (rms_norm, add_rms_norm), rope.cu, elementwise.cu (embedding,
// swiglu, add, gather_rows, convert), attention.cu (kv_store, paged_attention), linear.cpp
// (cuBLASLt, see linear.h). CudaBackend forwards to these on its stream; the argument order and
// shapes are those of src/backend/backend.h. Activations are bf16 (f32 accepted where noted).
#pragma once

#include <cuda_runtime_api.h>

#include "src/backend/backend.h"

namespace astrai::gpu {

void embedding(cudaStream_t stream, const Tensor& table, const Tensor& ids, Tensor out);
void rms_norm(cudaStream_t stream, const Tensor& x, const Tensor& w, float eps, Tensor out);
void add_rms_norm(cudaStream_t stream, Tensor residual, const Tensor& x, const Tensor& w, float eps,
                  Tensor out);
void rope(cudaStream_t stream, Tensor x, const Tensor& positions, const Tensor& cos_sin);
void swiglu(cudaStream_t stream, const Tensor& gate, const Tensor& up, Tensor out);
void add(cudaStream_t stream, const Tensor& a, const Tensor& b, Tensor out);
void kv_store(cudaStream_t stream, const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache,
              Tensor v_cache);
void paged_attention(cudaStream_t stream, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionBatch& batch, float scale, Tensor out);
void gather_rows(cudaStream_t stream, const Tensor& x, const Tensor& rows, Tensor out);
void convert(cudaStream_t stream, const Tensor& src, Tensor dst);
// linear's plain-kernel path for shapes cuBLASLt has no algorithm for (arguments checked by Linear).
void linear_fallback(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out);

}  // namespace astrai::gpu
