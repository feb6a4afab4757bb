// linear on the GPU: out = x @ w^T (+ bias) through cuBLASLt, bf16 operands with f32 accumulation
// (out bf16 or f32: the LM head writes f32 logits), bias through the GEMM's epilogue.
// Decode-sized M (<= 8 rows of x, aligned) takes our own weight-streaming GEMV (linear_kernels.cu).
// Otherwise one cuBLASLt handle and workspace per backend; a plan (descriptors and the heuristic's
// algorithm) is cached per shape, so a steady step makes no heuristic queries.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "src/backend/backend.h"

namespace astrai::gpu {

class Linear {
 public:
  Linear();
  ~Linear();
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;

  void run(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out);

 private:
  // M, N, K, ldx, ldo, in dtype, out dtype, bias, alignments of x, w, out, bias.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool, int, int, int, int>;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool fallback = false;  // no cuBLASLt algorithm: the plain kernel of linear_fallback.cu
  };
  const Plan& plan(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace astrai::gpu
