#include "gpu/gemm.h"

#include <algorithm>
#include <string>

#include "gpu/check.h"
#include "gpu/cublaslt_util.h"
#include "gpu/rows.h"

namespace astrai::gpu {

Gemm::Gemm() {
  ASTRAI_CUBLAS_CHECK(cublasLtCreate(&handle_));
  ASTRAI_CUDA_CHECK(cudaMalloc(&workspace_, kCublasWorkspaceBytes));
  workspace_bytes_ = kCublasWorkspaceBytes;
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatmulDescDestroy(p.op);
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

// cuBLASLt is column-major; a row-major X [r, c] with row stride ld is the column-major X^T [c, r].
// Row-major C = op(A) op(B) is therefore column-major C^T = op(B)^T op(A)^T, so cuBLASLt's first
// operand is our B and its second our A:
//   B stored [K, N] (no trans_b) is column-major N x K: used as is (OP_N); stored [N, K] (trans_b) it
//   is column-major K x N: used transposed (OP_T). Likewise A: [M, K] -> K x M with OP_N, [K, M] ->
//   M x K with OP_T. The result is column-major N x M with ld = C's row stride.
const Gemm::Plan& Gemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [M, N, K, lda, ldb, ldc, ta, tb, in_t, out_t, al_a, al_b, al_c] = key;
  const cudaDataType_t in = cuda_type(DType(in_t)), out = cuda_type(DType(out_t));
  Plan p;
  ASTRAI_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                          op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  ASTRAI_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  ASTRAI_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  // Stored shapes (column-major rows x cols) of cuBLASLt's A (= our B) and B (= our A).
  const uint64_t first_rows = tb ? K : N, first_cols = tb ? N : K;
  const uint64_t second_rows = ta ? M : K, second_cols = ta ? K : M;
  ASTRAI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in, first_rows, first_cols, ldb));
  ASTRAI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in, second_rows, second_cols, lda));
  ASTRAI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out, uint64_t(N), uint64_t(M), ldc));

  cublasLtMatmulPreference_t pref;
  ASTRAI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  const uint32_t a_al = uint32_t(al_b), b_al = uint32_t(al_a), c_al = uint32_t(al_c);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_al, sizeof(a_al));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_al, sizeof(b_al));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_al, sizeof(c_al));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_al, sizeof(c_al));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.found) p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Gemm::run(cudaStream_t stream, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,
               float beta, Tensor c, const Tensor* c_src) {
  check_tensor(a, "gemm", "a", DType::bf16, DType::f32);
  check_tensor(b, "gemm", "b", a.dtype);
  check_tensor(c, "gemm", "c", DType::bf16, DType::f32);
  ASTRAI_GPU_CHECK(a.ndim == 2 && b.ndim == 2 && c.ndim == 2, "gemm: a, b, c must be 2-D");
  ASTRAI_GPU_CHECK(a.stride[1] == 1 && b.stride[1] == 1 && c.stride[1] == 1,
                   "gemm: a, b, c need a contiguous last dim");
  const int64_t M = trans_a ? a.shape[1] : a.shape[0], K = trans_a ? a.shape[0] : a.shape[1];
  const int64_t N = trans_b ? b.shape[0] : b.shape[1], Kb = trans_b ? b.shape[1] : b.shape[0];
  ASTRAI_GPU_CHECK(K == Kb && c.shape[0] == M && c.shape[1] == N,
                   "gemm: shapes a " + a.shape_str() + (trans_a ? "^T" : "") + " b " + b.shape_str() +
                       (trans_b ? "^T" : "") + " c " + c.shape_str());
  if (c_src) {
    check_tensor(*c_src, "gemm", "c_src", c.dtype);
    ASTRAI_GPU_CHECK(c_src->ndim == 2 && c_src->shape[0] == M && c_src->shape[1] == N &&
                         (M <= 1 || c_src->stride[0] == c.stride[0]) && c_src->stride[1] == 1,
                     "gemm: c_src " + c_src->shape_str() + " must be laid out as c " + c.shape_str());
  }
  if (M == 0 || N == 0) return;
  const int64_t lda = a.shape[0] > 1 ? a.stride[0] : a.shape[1],
                ldb = b.shape[0] > 1 ? b.stride[0] : b.shape[1], ldc = M > 1 ? c.stride[0] : N;
  ASTRAI_GPU_CHECK(lda >= a.shape[1] && ldb >= b.shape[1] && ldc >= N,
                   "gemm: row stride smaller than the width");
  const Key key{
      M,
      N,
      K,
      lda,
      ldb,
      ldc,
      trans_a,
      trans_b,
      int(a.dtype),
      int(c.dtype),
      row_alignment(a.data, lda, a.dtype),
      row_alignment(b.data, ldb, b.dtype),
      std::min(row_alignment(c.data, ldc, c.dtype), c_src ? row_alignment(c_src->data, ldc, c.dtype) : 256)};
  const Plan& p = plan(key);
  ASTRAI_GPU_CHECK(p.found, "gemm: cuBLASLt has no algorithm for M " + std::to_string(M) + " N " +
                                std::to_string(N) + " K " + std::to_string(K));
  ASTRAI_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, b.data, p.a, a.data, p.b, &beta,
                                     c_src ? c_src->data : c.data, p.c, c.data, p.c, &p.algo, workspace_,
                                     workspace_bytes_, stream));
}

}  // namespace astrai::gpu
