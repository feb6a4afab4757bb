// linear: out = x @ w^T (+ bias), batch-invariant; its backward and the general gemm the backward
// uses, through OpenBLAS. w is [N, K] row-major (nn.Linear layout).
//
// Batch invariance: every element out[m, n] is computed by the same arithmetic in the same order
// whatever M is, wherever row m sits in the batch and however the work is split over threads, so
// a sequence's logits do not change in the last bit when other sequences share its step, when its
// prompt is a prefix-cache hit instead of a fresh prefill, or when the prefill is chunked
// differently (docs/architecture.md, "What a seed promises"). OpenBLAS does not give that: sgemv (M = 1) and
// sgemm round differently, and sgemm's full 16-row tiles differ from its edge tiles, so a row's
// result depends on M. Here each element is one of lanes.h's dot products (kLanes interleaved
// partial sums in a fixed tree, no FMA), then added to the bias, in tiles of MR rows x NR columns
// that share their loads; the edge tiles run the same per-element code.
//
// Instruction sets (lanes.h): AVX-512VL's registers take 6 x 4 tiles, AVX2's 3 x 3, the
// baseline's 4 x 3. On the development VM (AMD EPYC, one thread) the 4 x 3 tile in AVX2's registers
// spilled and ran large prefill GEMMs at 1.6x OpenBLAS's time; table in docs/performance.md.
//
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "src/backend/cpu/lanes.h"
#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {
namespace {

// Below this many multiply-adds a GEMM runs on one thread.
constexpr int64_t kParallelMacs = 1 << 20;

// Rows of x kept hot in cache while a thread sweeps its columns of w (rounded down to whole tiles).
constexpr int64_t kBlockM = 64;

// What a path computes: columns [n0, n1) of out for all M rows. TW: w's element (float, or
// uint16_t for bf16 bits).
template <typename TW>
struct Columns {
  int64_t M, K, n0, n1;
  const float* x;
  int64_t lda;
  const TW* w;
  const float* bias;
  float* out;
  int64_t ldc;
};

template <int64_t MR, int64_t NR, typename TW>
[[gnu::always_inline]] inline void columns(const Columns<TW>& c) {
  constexpr int64_t block_m = kBlockM / MR * MR;
  // bf16 weights: a full block of rows (a prefill) widens each tile's NR weight rows once into an
  // f32 panel that its row tiles share; fewer rows (decode) widen them as the tiles load them. The
  // same bits either way (widening is exact). On the development VM (AVX-512, one thread) the
  // panel took bf16 weights from 8-16% over f32's time to 2-4% at 128 and 512 rows, and was
  // slower than widening in the tiles at 8 rows (docs/performance.md).
  constexpr bool kBf16 = !std::is_same_v<TW, float>;
  std::vector<float> panel(kBf16 && c.M >= block_m ? size_t(NR * c.K) : 0);
  for (int64_t mb = 0; mb < c.M; mb += block_m) {
    const int64_t me = std::min(c.M, mb + block_m);
    for (int64_t n = c.n0; n < c.n1; n += NR) {
      const int64_t nr = std::min(NR, c.n1 - n);
      const TW* wn = c.w + n * c.K;
      const float* bn = c.bias ? c.bias + n : nullptr;
      if constexpr (kBf16) {
        if (me - mb == block_m) {
          widen_bf16(wn, panel.data(), nr * c.K);  // rows n.. are contiguous
          for (int64_t m = mb; m < me; m += MR)
            lanes::edge_tile<MR, NR>(MR, nr, c.K, c.x + m * c.lda, c.lda, panel.data(), c.K, bn,
                                     c.out + m * c.ldc + n, c.ldc);
          continue;
        }
      }
      for (int64_t m = mb; m < me; m += MR)
        lanes::edge_tile<MR, NR, TW>(std::min(MR, me - m), nr, c.K, c.x + m * c.lda, c.lda, wn, c.K, bn,
                                     c.out + m * c.ldc + n, c.ldc);
    }
  }
}

// The paths (see the top of the file), for weights of element TW; every one computes the same bits,
// and bf16 weights the bits of their f32 copies.
template <typename TW>
struct Paths {
  ASTRAI_NO_FP_CONTRACT static void columns_baseline(const Columns<TW>& c) { columns<4, 3>(c); }
#if defined(__x86_64__)
  ASTRAI_ISA_AVX2 static void columns_avx2(const Columns<TW>& c) {
    columns<3, 3>(c);
  }
  ASTRAI_ISA_AVX512 static void columns_avx512(const Columns<TW>& c) {
    columns<6, 4>(c);
  }
#endif
};

// Splits the columns over threads (large GEMMs) and runs `run` on each slice.
template <typename TW, typename Run>
void run_columns(Run run, Columns<TW> c) {
  const int threads = c.M * c.n1 * c.K >= kParallelMacs ? omp_get_max_threads() : 1;
  if (threads <= 1) {
    run(c);
    return;
  }
  // Column blocks rounded to 16 so every thread's slice of out starts on a cache line.
  const int64_t N = c.n1, block = ((N + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int t = 0; t < threads; ++t) {
    Columns<TW> s = c;
    s.n0 = std::min(N, t * block);
    s.n1 = std::min(N, (t + 1) * block);
    run(s);
  }
}

}  // namespace

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out, Isa isa) {
  check_f32(x, "linear", "x");
  ASTRAI_OP_CHECK(w.dtype == DType::f32 || w.dtype == DType::bf16,
                  "linear: w must be f32 or bf16, got " + std::string(dtype_name(w.dtype)));
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
  const float* bp = nullptr;
  if (bias) {
    check_f32(*bias, "linear", "bias");
    ASTRAI_OP_CHECK(bias->numel() == N && bias->is_contiguous(),
                    "linear: bias " + bias->shape_str() + " for N = " + std::to_string(N));
    bp = bias->ptr<float>();
  }
  const int64_t lda = M > 1 ? x.stride[0] : K, ldc = M > 1 ? out.stride[0] : N;
  if (w.dtype == DType::bf16)
    run_columns(
        ASTRAI_ISA_PICK(isa, "linear", Paths<uint16_t>::columns),
        Columns<uint16_t>{M, K, 0, N, x.ptr<float>(), lda, w.ptr<uint16_t>(), bp, out.ptr<float>(), ldc});
  else
    run_columns(ASTRAI_ISA_PICK(isa, "linear", Paths<float>::columns),
                Columns<float>{M, K, 0, N, x.ptr<float>(), lda, w.ptr<float>(), bp, out.ptr<float>(), ldc});
}

namespace {

// Leading dimension of a 2-D tensor with a contiguous last dim (a single row may carry any stride).
int64_t lead_dim(const Tensor& t) {
  return t.shape[0] > 1 ? t.stride[0] : t.shape[1];
}

void check_matrix(const Tensor& t, const char* op, const char* name) {
  check_f32(t, op, name);
  ASTRAI_OP_CHECK(
      t.ndim == 2 && (t.shape[1] <= 1 || t.stride[1] == 1) && (t.shape[0] <= 1 || t.stride[0] >= t.shape[1]),
      std::string(op) + ": " + name + " must be 2-D with a contiguous last dim, got " + t.shape_str());
}

}  // namespace

// Threads as linear(): OpenBLAS single-threaded per OpenMP thread, C split into row blocks (or
// column blocks when it is wider than tall) so that no two threads write the same element.
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha, float beta, Tensor c) {
  check_matrix(a, "gemm", "a");
  check_matrix(b, "gemm", "b");
  check_matrix(c, "gemm", "c");
  const int64_t M = c.shape[0], N = c.shape[1];
  const int64_t K = trans_a ? a.shape[0] : a.shape[1];
  const int64_t a_m = trans_a ? a.shape[1] : a.shape[0];
  const int64_t b_k = trans_b ? b.shape[1] : b.shape[0], b_n = trans_b ? b.shape[0] : b.shape[1];
  ASTRAI_OP_CHECK(a_m == M && b_k == K && b_n == N, "gemm: shapes a " + a.shape_str() +
                                                        (trans_a ? "^T" : "") + " b " + b.shape_str() +
                                                        (trans_b ? "^T" : "") + " c " + c.shape_str());
  if (M == 0 || N == 0) return;
  const int64_t lda = lead_dim(a), ldb = lead_dim(b), ldc = lead_dim(c);
  const float* ap = a.ptr<float>();
  const float* bp = b.ptr<float>();
  float* cp = c.ptr<float>();
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) cp[m * ldc + n] = beta == 0.0f ? 0.0f : beta * cp[m * ldc + n];
    return;
  }
  const bool split_rows = M >= N;
  const int64_t extent = split_rows ? M : N;
  const int threads = int(std::min<int64_t>(M * N * K >= kParallelMacs ? omp_get_max_threads() : 1, extent));
  const int64_t block = ((extent + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int t = 0; t < threads; ++t) {
    const int64_t lo = std::min(extent, t * block), hi = std::min(extent, (t + 1) * block);
    if (hi <= lo) continue;
    const float* a0 = ap;
    const float* b0 = bp;
    float* c0 = cp;
    int64_t m = M, n = N;
    if (split_rows) {  // rows [lo, hi) of C: rows of op(A)
      a0 = trans_a ? ap + lo : ap + lo * lda;
      c0 = cp + lo * ldc;
      m = hi - lo;
    } else {  // columns [lo, hi) of C: columns of op(B)
      b0 = trans_b ? bp + lo * ldb : bp + lo;
      c0 = cp + lo;
      n = hi - lo;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                int(m), int(n), int(K), alpha, a0, int(lda), b0, int(ldb), beta, c0, int(ldc));
  }
}

// dx = dy @ w, dw += dy^T @ x, dbias += column sums of dy.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, Tensor dw,
                     const Tensor* dbias) {
  check_matrix(dy, "linear_backward", "dy");
  check_matrix(x, "linear_backward", "x");
  check_matrix(w, "linear_backward", "w");
  check_matrix(dw, "linear_backward", "dw");
  const int64_t M = dy.shape[0], N = dy.shape[1], K = x.shape[1];
  ASTRAI_OP_CHECK(x.shape[0] == M && w.shape[0] == N && w.shape[1] == K && dw.shape == w.shape,
                  "linear_backward: shapes dy " + dy.shape_str() + " x " + x.shape_str() + " w " +
                      w.shape_str() + " dw " + dw.shape_str());
  if (dx) gemm(dy, false, w, false, 1.0f, 0.0f, *dx);
  gemm(dy, true, x, false, 1.0f, 1.0f, dw);
  if (dbias) {
    check_f32(*dbias, "linear_backward", "dbias");
    ASTRAI_OP_CHECK(dbias->numel() == N && dbias->is_contiguous(),
                    "linear_backward: dbias " + dbias->shape_str() + " for N = " + std::to_string(N));
    float* db = dbias->ptr<float>();
    const int64_t ld = lead_dim(dy);
    for (int64_t m = 0; m < M; ++m) {
      const float* row = dy.ptr<float>() + m * ld;
#pragma omp simd
      for (int64_t n = 0; n < N; ++n) db[n] += row[n];
    }
  }
}

}  // namespace astrai::cpu
