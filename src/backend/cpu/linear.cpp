// linear: out = x @ w^T (+ bias) through OpenBLAS. w is [N, K] row-major (nn.Linear layout), so
// the GEMM is C[M,N] = A[M,K] * B[N,K]^T with B transposed in place by the BLAS call.
// A single row (decode with batch 1) is a GEMV y = W x.
#include <cblas.h>

#include <cstring>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) {
  check_f32(x, "linear", "x");
  check_f32(w, "linear", "w");
  check_f32(out, "linear", "out");
  ASTRAI_OP_CHECK(x.ndim == 2 && w.ndim == 2 && out.ndim == 2, "linear: x, w, out must be 2-D");
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  ASTRAI_OP_CHECK(w.shape[1] == K && out.shape[0] == M && out.shape[1] == N,
                  "linear: shapes x " + x.shape_str() + " w " + w.shape_str() + " out " + out.shape_str());
  ASTRAI_OP_CHECK(w.is_contiguous(), "linear: w must be contiguous");
  ASTRAI_OP_CHECK(x.stride[1] == 1 && out.stride[1] == 1, "linear: x and out need a contiguous last dim");
  if (M == 0 || N == 0) return;
  ASTRAI_OP_CHECK(M == 1 || (x.stride[0] >= K && out.stride[0] >= N),
                  "linear: row stride smaller than the width");
  const int64_t lda = M > 1 ? x.stride[0] : K, ldc = M > 1 ? out.stride[0] : N;
  const float* xp = x.ptr<float>();
  const float* wp = w.ptr<float>();
  float* op = out.ptr<float>();
  float beta = 0.0f;
  if (bias) {
    check_f32(*bias, "linear", "bias");
    ASTRAI_OP_CHECK(bias->numel() == N,
                    "linear: bias " + bias->shape_str() + " for N = " + std::to_string(N));
    for (int64_t m = 0; m < M; ++m) std::memcpy(op + m * ldc, bias->ptr<float>(), size_t(N) * sizeof(float));
    beta = 1.0f;
  }
  if (K == 0) {
    if (!bias)
      for (int64_t m = 0; m < M; ++m) std::memset(op + m * ldc, 0, size_t(N) * sizeof(float));
    return;
  }
  if (M == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(N), int(K), 1.0f, wp, int(K), xp, 1, beta, op, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(N), int(K), 1.0f, xp, int(lda), wp,
                int(K), beta, op, int(ldc));
  }
}

}  // namespace astrai::cpu
