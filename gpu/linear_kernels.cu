// linear's own kernels beside cuBLASLt (linear.cpp decides which runs):
// - gemv: out[m, n] = x[m, :] . w[n, :] (+ bias[n]) for M <= kGemvMaxRows rows of x (decode). One
//   warp per weight row (or per part of its K, for narrow N), 16-byte loads of w streamed once for
//   all M rows of x (x stays in L1), f32 accumulation, a warp reduction per row of x. A decode step is a
//   stream over the weights, so this is what sets its time.
// - naive: a plain GEMM for the shapes cuBLASLt has no algorithm for (rows that start on 2-byte
//   boundaries, e.g. column slices at odd offsets): one thread per output, f32 accumulation.
//   Correct, not fast; the model's shapes never take it.
#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"

namespace astrai::gpu {
namespace {

constexpr int kGemvMaxRows = 8;
constexpr int kGemvThreads = 256, kGemvWarps = kGemvThreads / 32;
constexpr int kGemvBatch = 8;
// Warps a GEMV launch aims for (a few waves of the ~24 resident warps on 132 multiprocessors): narrow
// projections (N = hidden) split K across warps until they reach it.
constexpr int64_t kGemvTargetWarps = 8192;

// Block: kGemvWarps warps on kGemvWarps / ksplit weight rows; the ksplit warps of a row take
// consecutive ranges of K, and their partial sums meet in shared memory.
template <typename TO>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_kernel(const bf16* __restrict__ x, int64_t ldx, int M, const bf16* __restrict__ w, int64_t K,
                int64_t N, const TO* __restrict__ bias, TO* __restrict__ out, int64_t ldo, int ksplit) {
  __shared__ float partial[kGemvWarps][kGemvMaxRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, part = warp % ksplit;
  const int64_t n = int64_t(blockIdx.x) * (kGemvWarps / ksplit) + warp / ksplit;
  const int64_t chunks = K / 8, per_part = (chunks + ksplit - 1) / ksplit;
  const int64_t begin = part * per_part, end = min(chunks, begin + per_part);
  float acc[kGemvMaxRows];
#pragma unroll
  for (int m = 0; m < kGemvMaxRows; ++m) acc[m] = 0.0f;
  if (n < N) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + n * K);
    // kGemvBatch 16-byte loads of w per lane are issued before any is used, so that a warp has
    // 32 * kGemvBatch * 16 bytes in flight: enough, over the resident warps, to cover the latency
    // of device memory.
    for (int64_t c0 = begin + lane; c0 < end; c0 += 32 * kGemvBatch) {
      uint4 wv[kGemvBatch];
#pragma unroll
      for (int u = 0; u < kGemvBatch; ++u)
        if (c0 + u * 32 < end) wv[u] = __ldg(wr + c0 + u * 32);
#pragma unroll
      for (int u = 0; u < kGemvBatch; ++u) {
        const int64_t c = c0 + u * 32;
        if (c >= end) break;
        float wf[8];
        unpack8(wv[u], wf);
#pragma unroll
        for (int m = 0; m < kGemvMaxRows; ++m) {
          if (m >= M) break;
          float xf[8];
          unpack8(*reinterpret_cast<const uint4*>(x + m * ldx + c * 8), xf);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[m] += wf[i] * xf[i];
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kGemvMaxRows; ++m) {
    if (m >= M) break;
    const float v = warp_sum(acc[m]);
    if (lane == 0) partial[warp][m] = v;
  }
  __syncthreads();
  if (part == 0 && lane < M && n < N) {
    float v = bias ? to_f32(bias[n]) : 0.0f;
    for (int p = 0; p < ksplit; ++p) v += partial[warp + p][lane];
    out[lane * ldo + n] = from_f32<TO>(v);
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

template <typename TI, typename TO>
__global__ void linear_naive_kernel(Rows x, const TI* __restrict__ w, const TO* __restrict__ bias, Rows out,
                                    int64_t K, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = e / out.width, c = e % out.width;
    const TI* xr = x.row<TI>(m);
    const TI* wr = w + c * K;
    float acc = bias ? to_f32(bias[c]) : 0.0f;
    for (int64_t k = 0; k < K; ++k) acc += to_f32(xr[k]) * to_f32(wr[k]);
    out.row<TO>(m)[c] = from_f32<TO>(acc);
  }
}

template <typename TI, typename TO>
void launch(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  const Rows xv = rows_of(x, "linear"), ov = rows_of(out, "linear");
  const int64_t n = ov.n_rows * ov.width;
  linear_naive_kernel<TI, TO><<<grid_for(n, 128), 128, 0, stream>>>(
      xv, w.ptr<TI>(), bias ? bias->ptr<TO>() : nullptr, ov, x.shape[1], n);
  ASTRAI_CUDA_LAUNCH_CHECK(linear_naive_kernel);
}

}  // namespace

bool linear_gemv(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) {
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  const int64_t ldx = M > 1 ? x.stride[0] : K, ldo = M > 1 ? out.stride[0] : N;
  if (x.dtype != DType::bf16 || M < 1 || M > kGemvMaxRows || K % 8 != 0 || ldx % 8 != 0 ||
      !aligned16(x.data) || !aligned16(w.data))
    return false;
  // Split K while the rows are too few to fill the GPU and each part keeps >= 8 loads per lane: on
  // the H200 that took llama-1b's down projection (K 8192) from 22 to 16 us, while splitting K 2048
  // rows (qkv, o) made them slower (8.1 -> 10.4 us, 6.8 -> 7.9 us).
  int ksplit = 1;
  while (ksplit < kGemvWarps && N * ksplit < kGemvTargetWarps && K / 8 / (2 * ksplit) >= 256) ksplit *= 2;
  const int rows_per_block = kGemvWarps / ksplit;
  const unsigned blocks = unsigned((N + rows_per_block - 1) / rows_per_block);
  if (out.dtype == DType::bf16)
    gemv_kernel<bf16><<<blocks, kGemvThreads, 0, stream>>>(x.ptr<bf16>(), ldx, int(M), w.ptr<bf16>(), K, N,
                                                           bias ? bias->ptr<bf16>() : nullptr,
                                                           out.ptr<bf16>(), ldo, ksplit);
  else
    gemv_kernel<float><<<blocks, kGemvThreads, 0, stream>>>(x.ptr<bf16>(), ldx, int(M), w.ptr<bf16>(), K, N,
                                                            bias ? bias->ptr<float>() : nullptr,
                                                            out.ptr<float>(), ldo, ksplit);
  ASTRAI_CUDA_LAUNCH_CHECK(gemv_kernel);
  return true;
}

void linear_fallback(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) {
  if (x.shape[0] == 0 || w.shape[0] == 0) return;
  if (x.dtype == DType::bf16 && out.dtype == DType::bf16)
    launch<bf16, bf16>(stream, x, w, bias, out);
  else if (x.dtype == DType::bf16)
    launch<bf16, float>(stream, x, w, bias, out);
  else
    launch<float, float>(stream, x, w, bias, out);
}

}  // namespace astrai::gpu
