// rms_norm_train (the forward that saves rstd: the serving rms_norm's kernels, norm.cu),
// rms_norm_backward, and column_sum (bias gradients).
// Parameter gradients are summed over rows in two deterministic stages: block b of a
// fixed grid of kPartials blocks takes rows b, b + kPartials, ... in order and keeps its partial
// sums per column in shared memory; a second kernel adds the partials in block order into the f32
// gradient. No atomics, so the sum's bits depend only on the shapes.
#include <algorithm>
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/rows.h"
#include "gpu/rows_map.cuh"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kPartials = 264;  // 2 blocks per SM on an H100/H200
// The vectorised backward's blocks are D / 8 threads (256 for a 2048-wide row): 8 per SM.
constexpr int64_t kVecPartials = 1056;
constexpr int64_t kVecMaxWidth = 8 * 1024;

// dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd; partial dw per block.
template <typename T>
__global__ void rms_norm_backward_kernel(Rows dy, Rows x, const T* __restrict__ w,
                                         const float* __restrict__ rstd, Rows dx, bool accumulate,
                                         float* __restrict__ partial) {
  extern __shared__ float dw_acc[];
  __shared__ float scratch[32];
  const int64_t d = x.width;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dw_acc[i] = 0.0f;
  for (int64_t r = blockIdx.x; r < x.n_rows; r += gridDim.x) {
    const T* dyr = dy.row<T>(r);
    const T* xr = x.row<T>(r);
    const float rs = rstd[r];
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
      dot += to_f32(dyr[i]) * to_f32(w[i]) * to_f32(xr[i]) * rs;
    const float mean = block_sum(dot, scratch) / float(d);
    T* dxr = dx.row<T>(r);  // may alias dyr (not accumulating): each thread reads before it writes
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float g = to_f32(dyr[i]), xhat = to_f32(xr[i]) * rs;
      const float v = rs * (g * to_f32(w[i]) - xhat * mean);
      dw_acc[i] += g * xhat;
      dxr[i] = from_f32<T>(accumulate ? to_f32(dxr[i]) + v : v);
    }
  }
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) partial[blockIdx.x * d + i] = dw_acc[i];
}

// The same for bf16 rows of a multiple of 8 elements on 16-byte boundaries: thread c owns columns
// [8c, 8c + 8) of every row, so each row is read once (held in registers across the reduction) and
// the block's dw partial stays in registers.
__global__ void __launch_bounds__(1024)
    rms_norm_backward_vec8_kernel(Rows dy, Rows x, const bf16* __restrict__ w, const float* __restrict__ rstd,
                                  Rows dx, bool accumulate, float* __restrict__ partial) {
  __shared__ float scratch[32];
  const int64_t d = x.width, c = int64_t(threadIdx.x) * 8;
  const bool active = c < d;
  float wf[8] = {}, acc[8] = {};
  if (active) unpack8(*reinterpret_cast<const uint4*>(w + c), wf);
  for (int64_t r = blockIdx.x; r < x.n_rows; r += gridDim.x) {
    const float rs = rstd[r];
    float g[8] = {}, xhat[8] = {}, dot = 0.0f;
    if (active) {
      unpack8(*reinterpret_cast<const uint4*>(row_ptr<bf16>(dy, r) + c), g);
      unpack8(*reinterpret_cast<const uint4*>(row_ptr<bf16>(x, r) + c), xhat);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        xhat[i] *= rs;
        dot += g[i] * wf[i] * xhat[i];
      }
    }
    const float mean = block_sum(dot, scratch) / float(d);
    if (!active) continue;
    bf16* dxr = row_ptr<bf16>(dx, r) + c;  // may alias dy's row: read above, before the write
    float v[8], old[8] = {};
    if (accumulate) unpack8(*reinterpret_cast<const uint4*>(dxr), old);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[i] = old[i] + rs * (g[i] * wf[i] - xhat[i] * mean);
      acc[i] += g[i] * xhat[i];
    }
    *reinterpret_cast<uint4*>(dxr) = pack8(v);
  }
  if (!active) return;
  float4* out = reinterpret_cast<float4*>(partial + blockIdx.x * d + c);
  out[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  out[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
}

template <typename T>
__global__ void column_partial_kernel(Rows x, float* __restrict__ partial) {
  extern __shared__ float acc[];
  const int64_t d = x.width;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) acc[i] = 0.0f;
  for (int64_t r = blockIdx.x; r < x.n_rows; r += gridDim.x) {
    const T* xr = x.row<T>(r);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) acc[i] += to_f32(xr[i]);
  }
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) partial[blockIdx.x * d + i] = acc[i];
}

// dst[i] += sum_b partial[b, i]. A block takes 32 columns; its warp w sums (lane = column) the
// partials w, w + kSumWarps, ... in order, then warp 0 adds the kSumWarps sums in warp order: a fixed
// tree, and a thousand partials cost each thread a few dozen loads instead of a thousand.
constexpr int kSumWarps = 32;
__global__ void __launch_bounds__(32 * kSumWarps)
    add_partials_kernel(const float* __restrict__ partial, int64_t blocks, int64_t d,
                        float* __restrict__ dst) {
  __shared__ float sums[kSumWarps][33];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t i = int64_t(blockIdx.x) * 32 + lane;
  float s = 0.0f;
  if (i < d)
    for (int64_t b = warp; b < blocks; b += kSumWarps) s += partial[b * d + i];
  sums[warp][lane] = s;
  __syncthreads();
  if (warp != 0 || i >= d) return;
  float total = 0.0f;
  for (int w = 0; w < kSumWarps; ++w) total += sums[w][lane];
  dst[i] += total;
}

void check_width_fits(int64_t d, const char* op) {
  ASTRAI_GPU_CHECK(d * int64_t(sizeof(float)) <= 96 * 1024,
                   std::string(op) + ": rows of " + std::to_string(d) + " are too wide for the gradient sum");
}

void add_partials(cudaStream_t stream, const float* partial, int64_t blocks, int64_t d, Tensor dst) {
  add_partials_kernel<<<unsigned((d + 31) / 32), 32 * kSumWarps, 0, stream>>>(partial, blocks, d,
                                                                              dst.ptr<float>());
  ASTRAI_CUDA_LAUNCH_CHECK(add_partials_kernel);
}

template <typename K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    ASTRAI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

}  // namespace

void rms_norm_train(cudaStream_t stream, const Tensor& x, const Tensor& w, float eps, Tensor out,
                    Tensor rstd) {
  check_tensor(x, "rms_norm_train", "x", DType::bf16, DType::f32);
  check_tensor(w, "rms_norm_train", "w", x.dtype);
  check_tensor(out, "rms_norm_train", "out", x.dtype);
  check_tensor(rstd, "rms_norm_train", "rstd", DType::f32);
  const Rows xv = rows_of(x, "rms_norm_train"), ov = rows_of(out, "rms_norm_train");
  ASTRAI_GPU_CHECK(
      w.numel() == xv.width && w.is_contiguous() && ov.n_rows == xv.n_rows && ov.width == xv.width,
      "rms_norm_train: x " + x.shape_str() + " w " + w.shape_str() + " out " + out.shape_str());
  ASTRAI_GPU_CHECK(
      rstd.numel() == xv.n_rows && rstd.is_contiguous(),
      "rms_norm_train: rstd " + rstd.shape_str() + " for " + std::to_string(xv.n_rows) + " rows");
  gpu::rms_norm(stream, x, w, eps, out, rstd.ptr<float>());  // norm.cu's kernels, saving rstd
}

void rms_norm_backward(cudaStream_t stream, const Tensor& dy, const Tensor& x, const Tensor& w,
                       const Tensor& rstd, Tensor dx, Tensor dw, bool accumulate, Scratch& scratch) {
  check_tensor(x, "rms_norm_backward", "x", DType::bf16, DType::f32);
  check_tensor(dy, "rms_norm_backward", "dy", x.dtype);
  check_tensor(dx, "rms_norm_backward", "dx", x.dtype);
  check_tensor(w, "rms_norm_backward", "w", x.dtype);
  check_tensor(rstd, "rms_norm_backward", "rstd", DType::f32);
  check_tensor(dw, "rms_norm_backward", "dw", DType::f32);
  const Rows xv = rows_of(x, "rms_norm_backward"), dyv = rows_of(dy, "rms_norm_backward"),
             dxv = rows_of(dx, "rms_norm_backward");
  const int64_t R = xv.n_rows, D = xv.width;
  ASTRAI_GPU_CHECK(dyv.n_rows == R && dyv.width == D && dxv.n_rows == R && dxv.width == D && w.numel() == D &&
                       dw.numel() == D && w.is_contiguous() && dw.is_contiguous() && rstd.numel() == R,
                   "rms_norm_backward: dy " + dy.shape_str() + " x " + x.shape_str() + " dx " +
                       dx.shape_str() + " w " + w.shape_str() + " dw " + dw.shape_str() + " rstd " +
                       rstd.shape_str());
  if (R == 0) return;
  if (x.dtype == DType::bf16 && D % 8 == 0 && D <= kVecMaxWidth && rows_aligned16(xv) &&
      rows_aligned16(dyv) && rows_aligned16(dxv) && reinterpret_cast<uintptr_t>(w.data) % 16 == 0) {
    const int64_t blocks = std::min(R, kVecPartials);
    float* partial = static_cast<float*>(scratch.ensure(size_t(blocks * D) * sizeof(float)));
    const int threads = int((D / 8 + 31) / 32 * 32);
    rms_norm_backward_vec8_kernel<<<unsigned(blocks), threads, 0, stream>>>(
        dyv, xv, w.ptr<bf16>(), rstd.ptr<float>(), dxv, accumulate, partial);
    ASTRAI_CUDA_LAUNCH_CHECK(rms_norm_backward_vec8_kernel);
    add_partials(stream, partial, blocks, D, dw);
    return;
  }
  check_width_fits(D, "rms_norm_backward");
  const int64_t blocks = std::min(R, kPartials);
  float* partial = static_cast<float*>(scratch.ensure(size_t(blocks * D) * sizeof(float)));
  const size_t smem = size_t(D) * sizeof(float);
  if (x.dtype == DType::bf16) {
    allow_smem(rms_norm_backward_kernel<bf16>, smem);
    rms_norm_backward_kernel<bf16><<<unsigned(blocks), kThreads, smem, stream>>>(
        dyv, xv, w.ptr<bf16>(), rstd.ptr<float>(), dxv, accumulate, partial);
  } else {
    allow_smem(rms_norm_backward_kernel<float>, smem);
    rms_norm_backward_kernel<float><<<unsigned(blocks), kThreads, smem, stream>>>(
        dyv, xv, w.ptr<float>(), rstd.ptr<float>(), dxv, accumulate, partial);
  }
  ASTRAI_CUDA_LAUNCH_CHECK(rms_norm_backward_kernel);
  add_partials(stream, partial, blocks, D, dw);
}

void column_sum(cudaStream_t stream, const Tensor& x, Tensor dst, Scratch& scratch) {
  check_tensor(x, "column_sum", "x", DType::bf16, DType::f32);
  check_tensor(dst, "column_sum", "dst", DType::f32);
  const Rows xv = rows_of(x, "column_sum");
  const int64_t R = xv.n_rows, D = xv.width;
  ASTRAI_GPU_CHECK(dst.numel() == D && dst.is_contiguous(),
                   "column_sum: dst " + dst.shape_str() + " for rows of " + std::to_string(D));
  if (R == 0 || D == 0) return;
  check_width_fits(D, "column_sum");
  const int64_t blocks = std::min(R, kPartials);
  float* partial = static_cast<float*>(scratch.ensure(size_t(blocks * D) * sizeof(float)));
  const size_t smem = size_t(D) * sizeof(float);
  if (x.dtype == DType::bf16) {
    allow_smem(column_partial_kernel<bf16>, smem);
    column_partial_kernel<bf16><<<unsigned(blocks), kThreads, smem, stream>>>(xv, partial);
  } else {
    allow_smem(column_partial_kernel<float>, smem);
    column_partial_kernel<float><<<unsigned(blocks), kThreads, smem, stream>>>(xv, partial);
  }
  ASTRAI_CUDA_LAUNCH_CHECK(column_partial_kernel);
  add_partials(stream, partial, blocks, D, dst);
}

}  // namespace astrai::gpu
