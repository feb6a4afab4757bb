// The training GEMM on the GPU: C = alpha * op(A) @ op(B) + beta * C through cuBLASLt (backend.h's
// gemm), bf16 (or f32) operands with f32 accumulation, C bf16 or f32. linear_backward is two of
// them (dx = dy w, dw += dy^T x) plus a column sum for the bias. One cuBLASLt handle and workspace;
// a plan (descriptors and the heuristic's algorithm) cached per shape, so a steady training step
// makes no heuristic queries and picks the same algorithm every time (reproducible results).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "src/backend/backend.h"

namespace astrai::gpu {

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // c_src: where beta * C is read from (Backend::linear_residual's residual; same shape, dtype and
  // row stride as c, not overlapping it); null: c itself.
  void run(cudaStream_t stream, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,
           float beta, Tensor c, const Tensor* c_src = nullptr);

 private:
  // M, N, K, lda, ldb, ldc, trans_a, trans_b, in dtype, out dtype, alignments of a, b, c.
  using Key =
      std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int, int, int, int, int>;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool found = false;
  };
  const Plan& plan(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace astrai::gpu
