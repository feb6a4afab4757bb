// linear: out = x @ w^T (+ bias) through OpenBLAS. w is [N, K] row-major (nn.Linear layout), so
// the GEMM is C[M,N] = A[M,K] * B[N,K]^T with B transposed in place by the BLAS call; a single row
// (decode with batch 1) is a GEMV y = W x.
//
// Threads: OpenBLAS runs single-threaded (set by CpuBackend) and we split N into one column block
// per OpenMP thread. One threading runtime instead of two: OpenBLAS's own pool and OpenMP's would
// spin against each other on every op, and small GEMMs (a tiny model's decode step) run on the
// calling thread alone, where a fork/join would cost more than the math.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {
namespace {

// Below this many multiply-adds a GEMM runs on one thread.
constexpr int64_t kParallelMacs = 1 << 20;

void gemm_block(int64_t M, int64_t K, int64_t n0, int64_t n1, const float* x, int64_t lda, const float* w,
                float beta, float* out, int64_t ldc) {
  const int64_t nb = n1 - n0;
  if (nb <= 0) return;
  if (M == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(nb), int(K), 1.0f, w + n0 * K, int(K), x, 1, beta, out + n0,
                1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(nb), int(K), 1.0f, x, int(lda),
                w + n0 * K, int(K), beta, out + n0, int(ldc));
  }
}

}  // namespace

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
  const int threads = M * N * K >= kParallelMacs ? omp_get_max_threads() : 1;
  if (threads <= 1) {
    gemm_block(M, K, 0, N, xp, lda, wp, beta, op, ldc);
    return;
  }
  // Column blocks rounded to 16 so every thread's slice of out starts on a cache line.
  const int64_t block = ((N + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int t = 0; t < threads; ++t)
    gemm_block(M, K, std::min(N, t * block), std::min(N, (t + 1) * block), xp, lda, wp, beta, op, ldc);
}

}  // namespace astrai::cpu
