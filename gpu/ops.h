// The CUDA implementations of the Backend ops, one file per family with the launch sizing in one
// host function each: norm.cu (rms_norm, add_rms_norm), rope.cu (rope, rope_kv_store), elementwise.cu
// (embedding, swiglu, add, gather_rows, convert, dequantize, prefetch_l2), attention.cu (kv_store,
// paged_attention), sample.cu (sample), linear.cpp (cuBLASLt, see linear.h) with linear_kernels.cu (small-M
// GEMV, fallback). CudaBackend forwards to these on its stream; the argument order and shapes are those of
// src/backend/backend.h. Activations are bf16 (f32 accepted where noted).
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "src/backend/backend.h"

namespace astrai::gpu {

// Device memory an op needs between its kernels, owned by the backend and only ever grown.
class Scratch {
 public:
  Scratch() = default;
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  // At least `bytes` of device memory (contents undefined). Growing frees the old block, which
  // cudaFree orders after every kernel already launched.
  void* ensure(size_t bytes);
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

void embedding(cudaStream_t stream, const Tensor& table, const Tensor& ids, Tensor out);
// rstd (training's rms_norm_train): 1 / sqrt(mean(x^2) + eps) per row into rstd[r] when not null.
void rms_norm(cudaStream_t stream, const Tensor& x, const Tensor& w, float eps, Tensor out,
              float* rstd = nullptr);
// residual + x (rounded to the dtype) goes to *sum when given, else back into residual; out = its norm.
void add_rms_norm(cudaStream_t stream, const Tensor& residual, const Tensor& x, const Tensor& w, float eps,
                  Tensor out, const Tensor* sum = nullptr);
void rope(cudaStream_t stream, Tensor x, const Tensor& positions, const Tensor& cos_sin);
void swiglu(cudaStream_t stream, const Tensor& gate, const Tensor& up, Tensor out);
void add(cudaStream_t stream, const Tensor& a, const Tensor& b, Tensor out);
// rope_kv_store (rope.cu): q/k norm, RoPE and the cache write in one kernel (Backend::rope_kv_store).
void rope_kv_store(cudaStream_t stream, Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm,
                   const Tensor* k_norm, float eps, const Tensor& positions, const Tensor& cos_sin,
                   const Tensor& slots, Tensor k_cache, Tensor v_cache);
// rope_kv_store's argument checks, shared with rope_attention: throws as rope_kv_store would; true
// where every row, table row and weight allows 16-byte vectors.
bool check_rope_kv_store(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* q_norm,
                         const Tensor* k_norm, const Tensor& positions, const Tensor& cos_sin,
                         const Tensor& slots, const Tensor& k_cache, const Tensor& v_cache);
// rope_kv_store on arguments check_rope_kv_store has passed (use_vec: what it returned).
void launch_rope_kv_store(cudaStream_t stream, Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm,
                          const Tensor* k_norm, float eps, const Tensor& positions, const Tensor& cos_sin,
                          const Tensor& slots, Tensor k_cache, Tensor v_cache, bool use_vec);
void kv_store(cudaStream_t stream, const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache,
              Tensor v_cache);
// scratch: the split-KV partial results (grown as needed).
void paged_attention(cudaStream_t stream, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionBatch& batch, float scale, Tensor out, Scratch& scratch);
// rope_kv_store then paged_attention (Backend::rope_attention; attention.cu): a decode step that the
// decode kernel takes runs as that kernel alone, which norms and rotates q and the step's K itself.
void rope_attention(cudaStream_t stream, Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm,
                    const Tensor* k_norm, float eps, const Tensor& positions, const Tensor& cos_sin,
                    const Tensor& slots, Tensor k_cache, Tensor v_cache, const AttentionBatch& batch,
                    float scale, Tensor out, Scratch& scratch);
// The tensor-core path of paged_attention for prefill/extend steps (paged_attention_mma.cu), on
// arguments paged_attention has validated; false (nothing launched) where it does not apply.
// sm_count: the device's multiprocessors (the tile size depends on how many blocks fill them).
bool paged_attention_mma(cudaStream_t stream, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const AttentionBatch& batch, float scale, Tensor out, int sm_count);
// Reads, once per device, whether the build's code for the current device has the wgmma prefill
// kernel (paged_attention_mma.cu): a synchronous copy, so the backend calls it at its start, before
// any stream captures a graph.
void probe_paged_attention();
void gather_rows(cudaStream_t stream, const Tensor& x, const Tensor& rows, Tensor out);
void take_tokens(cudaStream_t stream, Tensor ids, const Tensor& moves, const Tensor& draws);
// Backend::prefetch (elementwise.cu): asks L2 for up to `budget` bytes of the tensors in `next`,
// in order, on `stream` (sm_90 on; elsewhere a kernel that does nothing). Arguments checked by
// check_prefetch (throws), which the backend calls before it forks the stream for it.
void prefetch_l2(cudaStream_t stream, std::span<const Tensor* const> next, int64_t budget);
void check_prefetch(std::span<const Tensor* const> next);
void convert(cudaStream_t stream, const Tensor& src, Tensor dst);
void dequantize(cudaStream_t stream, const Tensor& q, const Tensor& scale, int64_t block_rows,
                int64_t block_cols, Tensor out);
// sample.cu: the draws; batch.workspace holds at least sample_workspace_bytes(R, V).
void sample(cudaStream_t stream, const SampleBatch& batch);
size_t sample_workspace_bytes(int rows, int vocab);
// linear's own kernels (linear_kernels.cu; arguments checked by Linear): the small-M GEMV, which
// returns false when the shape or alignment does not suit it, and the plain path for shapes
// cuBLASLt has no algorithm for.
// The GEMV's rows: at most this many rows of x (a decode step's) take it.
constexpr int kGemvMaxRows = 8;
// Each GEMV takes bf16 weights, and fp8_e4m3 ones with their scales (Weight) where a scale block
// spans whole multiples of 128 columns (or every column): it reads the fp8 bytes, multiplies them
// by x on the tensor cores as bf16 (exact), and scales each 128 columns' partial sums.
// pdl false: launched plainly (it starts once the kernel before it has finished).
bool linear_gemv(cudaStream_t stream, const Tensor& x, const Weight& w, const Tensor* bias, Tensor out,
                 bool pdl = true);
// The same GEMV with x = swiglu(gate, up) computed as it is read (the down projection without the
// swiglu kernel); false unless gate and up are the two halves of one bf16 [M, 2K] buffer.
bool swiglu_linear_gemv(cudaStream_t stream, const Tensor& gate, const Tensor& up, const Weight& w,
                        Tensor out);
// add_rms_norm_linear's decode GEMV (Linear::run_add_norm); false (nothing launched) when the shapes
// do not take it.
bool add_rms_norm_linear_gemv(cudaStream_t stream, const Tensor& residual, const Tensor& x,
                              const Tensor& norm_w, float eps, Tensor residual_out, const Weight& w,
                              const Tensor* bias, Tensor out);
// The same with the SwiGLU of the projection's two halves after it (the MLP's gate_up, w [2F, K]):
// act [M, F]. Where the GEMV would not add and norm, add_rms_norm into h first (as
// add_rms_norm_linear does there). False (nothing launched) when the shapes do not take it.
bool add_rms_norm_linear_swiglu_gemv(cudaStream_t stream, const Tensor& residual, const Tensor& x,
                                     const Tensor& norm_w, float eps, Tensor residual_out, Tensor h,
                                     const Weight& w, Tensor act);
// Whether the GEMV reads fp8 weight w as it is (its scale blocks; see above).
bool gemv_takes_fp8(const Weight& w);
void linear_fallback(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out);

}  // namespace astrai::gpu
