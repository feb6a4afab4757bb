// rms_norm and add_rms_norm: one block per row, sum of squares in f32.
// Rounding follows Hugging Face's LlamaRMSNorm in the storage dtype T:
//   out = w * T(x * rsqrt(mean(x^2) + eps))      (the normed row is cast to T before the weight)
// and the fused residual add rounds residual + x to T before it is normed, as the bf16 add would.
// For T = float every rounding is a no-op.
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"

namespace astrai::gpu {
namespace {

template <typename T>
__global__ void rms_norm_kernel(Rows x, const T* __restrict__ w, float eps, Rows out) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* xr = x.row<T>(r);
  T* orow = out.row<T>(r);
  const int64_t d = x.width;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / float(d) + eps);
  // In place is safe: each thread reads and writes the same elements, after the reduction.
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    orow[i] = from_f32<T>(round_to<T>(to_f32(xr[i]) * inv) * to_f32(w[i]));
}

template <typename T>
__global__ void add_rms_norm_kernel(Rows residual, Rows x, const T* __restrict__ w, float eps, Rows out) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  T* res = residual.row<T>(r);
  const T* xr = x.row<T>(r);
  T* orow = out.row<T>(r);
  const int64_t d = residual.width;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = round_to<T>(to_f32(res[i]) + to_f32(xr[i]));
    res[i] = from_f32<T>(v);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / float(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    orow[i] = from_f32<T>(round_to<T>(to_f32(res[i]) * inv) * to_f32(w[i]));
}

// Threads per row: enough for one pass over a hidden row of a few thousand, fewer for head rows.
int threads_for(int64_t width) {
  return width >= 1024 ? 256 : width >= 256 ? 128 : 32;
}

void check_norm(const Rows& x, const Tensor& w, const Rows& out, const char* op) {
  ASTRAI_GPU_CHECK(
      w.numel() == x.width && w.is_contiguous(),
      std::string(op) + ": weight size " + w.shape_str() + " for rows of " + std::to_string(x.width));
  ASTRAI_GPU_CHECK(out.n_rows == x.n_rows && out.width == x.width,
                   std::string(op) + ": out shape differs from x");
}

}  // namespace

void rms_norm(cudaStream_t stream, const Tensor& x, const Tensor& w, float eps, Tensor out) {
  check_tensor(x, "rms_norm", "x", DType::bf16, DType::f32);
  check_tensor(w, "rms_norm", "w", x.dtype);
  check_tensor(out, "rms_norm", "out", x.dtype);
  const Rows xv = rows_of(x, "rms_norm"), ov = rows_of(out, "rms_norm");
  check_norm(xv, w, ov, "rms_norm");
  if (xv.n_rows == 0 || xv.width == 0) return;
  ASTRAI_GPU_CHECK(xv.n_rows < (int64_t(1) << 31), "rms_norm: too many rows");
  const int threads = threads_for(xv.width);
  if (x.dtype == DType::bf16)
    rms_norm_kernel<bf16><<<unsigned(xv.n_rows), threads, 0, stream>>>(xv, w.ptr<bf16>(), eps, ov);
  else
    rms_norm_kernel<float><<<unsigned(xv.n_rows), threads, 0, stream>>>(xv, w.ptr<float>(), eps, ov);
  ASTRAI_CUDA_LAUNCH_CHECK(rms_norm_kernel);
}

void add_rms_norm(cudaStream_t stream, Tensor residual, const Tensor& x, const Tensor& w, float eps,
                  Tensor out) {
  check_tensor(residual, "add_rms_norm", "residual", DType::bf16, DType::f32);
  check_tensor(x, "add_rms_norm", "x", residual.dtype);
  check_tensor(w, "add_rms_norm", "w", residual.dtype);
  check_tensor(out, "add_rms_norm", "out", residual.dtype);
  const Rows rv = rows_of(residual, "add_rms_norm"), xv = rows_of(x, "add_rms_norm"),
             ov = rows_of(out, "add_rms_norm");
  check_norm(rv, w, ov, "add_rms_norm");
  ASTRAI_GPU_CHECK(xv.n_rows == rv.n_rows && xv.width == rv.width,
                   "add_rms_norm: x shape differs from residual");
  if (rv.n_rows == 0 || rv.width == 0) return;
  ASTRAI_GPU_CHECK(rv.n_rows < (int64_t(1) << 31), "add_rms_norm: too many rows");
  const int threads = threads_for(rv.width);
  if (residual.dtype == DType::bf16)
    add_rms_norm_kernel<bf16><<<unsigned(rv.n_rows), threads, 0, stream>>>(rv, xv, w.ptr<bf16>(), eps, ov);
  else
    add_rms_norm_kernel<float><<<unsigned(rv.n_rows), threads, 0, stream>>>(rv, xv, w.ptr<float>(), eps, ov);
  ASTRAI_CUDA_LAUNCH_CHECK(add_rms_norm_kernel);
}

}  // namespace astrai::gpu
