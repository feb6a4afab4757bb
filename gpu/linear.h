// linear on the GPU: out = x @ w^T (+ bias) through cuBLASLt, bf16 operands with f32 accumulation
// (out bf16 or f32: the LM head writes f32 logits), bias through the GEMM's epilogue.
// Decode-sized M (<= 8 rows of x, aligned) takes our own weight-streaming GEMV (linear_kernels.cu).
// fp8 weights (Weight with scales): the GEMV reads them as they are; a GEMM of more rows widens the
// matrix into a bf16 scratch first (the dequantize op) and runs on that.
// Otherwise one cuBLASLt handle and workspace per backend; a plan (descriptors and an algorithm) is
// cached per shape, so a steady step makes no heuristic queries. The algorithm is the heuristic's
// first; with ASTRAI_GEMM_TUNE=1 it is picked once per (M bucket, N, K, ...) by timing the
// heuristic's top candidates on the first GEMM of that bucket (outside graph capture), which was
// slower in whole decode steps on the H200 (see tuning_enabled in linear.cpp).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "gpu/ops.h"
#include "src/backend/backend.h"

namespace astrai::gpu {

// run_mlp's bound on a long down projection (bytes of its weight).
constexpr int64_t kLongDownBytes = int64_t(64) << 20;

class Linear {
 public:
  Linear();
  ~Linear();
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;

  // gemv_pdl false: the decode GEMV, where it runs, goes out with a plain launch (run_mlp).
  void run(cudaStream_t stream, const Tensor& x, const Weight& w, const Tensor* bias, Tensor out,
           bool gemv_pdl = true);
  // out = swiglu(gate, up) @ w^T (run_mlp's second half): decode-sized M computes the activation
  // inside the GEMV where that prologue is short; otherwise swiglu into act, then run.
  void run_swiglu(cudaStream_t stream, const Tensor& gate, const Tensor& up, const Weight& w, Tensor act,
                  Tensor out);
  // Backend::add_rms_norm_linear: decode-sized M computes residual + x and its norm inside the GEMV
  // (each block for itself; block 0 writes residual_out); otherwise add, rms_norm into h, then run.
  void run_add_norm(cudaStream_t stream, const Tensor& residual, const Tensor& x, const Tensor& norm_w,
                    float eps, Tensor residual_out, Tensor h, const Weight& w, const Tensor* bias,
                    Tensor out);

  // Backend::add_rms_norm_mlp. Two to eight rows: one GEMV adds, norms (or add_rms_norm first, as
  // run_add_norm would) and projects gate and up in pairs into act (their SwiGLU), then the down
  // GEMV. One row, or more than eight: run_add_norm into gate_up, then run_swiglu.
  // A down weight of kLongDownBytes or more (qwen3-8b's 100 MB; llama-1b's is 34, qwen3-0.6b's 6)
  // goes out with a plain launch after the pairs, and then one row takes the pairs too. Measured on
  // the H200 (docs/performance.md): launched early under programmatic launch, a long down GEMV slowed
  // the pairs before it (qwen3-8b batch 2 / 8 +2% / +3% plain, batch 1 with the pairs 214.9 against
  // 212.3 tok/s), where the short ones gained from it (llama-1b and qwen3-0.6b batch 2 -1.5% / -2.5%
  // plain) and their one row lost with the pairs (-2% / -5%).
  void run_mlp(cudaStream_t stream, const Tensor& residual, const Tensor& x, const Tensor& norm_w, float eps,
               Tensor residual_out, Tensor h, const Weight& w_gate_up, Tensor gate_up, Tensor act,
               const Weight& w_down, Tensor out);
  // Backend::prepare_weight: an fp8 weight's widened copy fits the scratch from here on (no step
  // allocates it, and graphs keep its address).
  void prepare(const Weight& w);

 private:
  // M, N, K, ldx, ldo, in dtype, out dtype, bias, alignments of x, w, out, bias.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool, int, int, int, int>;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool fallback = false;  // no cuBLASLt algorithm: the plain kernel of linear_fallback.cu
  };
  const Plan& plan(const Key& key, cudaStream_t stream, const void* x, const void* w, const void* bias,
                   void* out);
  // The fastest of the heuristic's candidates for p on these operands (times each a few times on
  // stream; synchronises it).
  cublasLtMatmulAlgo_t timed_pick(const Plan& p, const cublasLtMatmulHeuristicResult_t* cand, int n,
                                  cudaStream_t stream, const void* x, const void* w, void* out);

  // An fp8 weight widened to bf16 into widened_ (for a GEMM of more rows than the GEMV's).
  Tensor widen(cudaStream_t stream, const Weight& w);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
  std::map<Key, cublasLtMatmulAlgo_t> picked_;  // by the key with M rounded up to its bucket
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  Scratch widened_;
};

}  // namespace astrai::gpu
