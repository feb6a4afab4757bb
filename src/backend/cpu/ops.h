// The CPU implementations of the Backend ops (f32), one file per family:
//   linear.cpp (OpenBLAS), norm.cpp, rope.cpp, elementwise.cpp (embedding, swiglu, add, gather,
//   convert), attention.cpp (kv_store, paged_attention). CpuBackend forwards to these; the
//   argument order and shapes are those of src/backend/backend.h.
#pragma once

#include "src/backend/backend.h"

namespace astrai::cpu {

void embedding(const Tensor& table, const Tensor& ids, Tensor out);
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out);
void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& w, float eps, Tensor out);
void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out);
void rope(Tensor x, const Tensor& positions, const Tensor& cos_sin);
void swiglu(const Tensor& gate, const Tensor& up, Tensor out);
void add(const Tensor& a, const Tensor& b, Tensor out);
void kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache, Tensor v_cache);
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionBatch& batch, float scale, Tensor out);
void gather_rows(const Tensor& x, const Tensor& rows, Tensor out);
void convert(const Tensor& src, Tensor dst);

}  // namespace astrai::cpu
