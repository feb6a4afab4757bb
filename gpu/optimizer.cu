// The optimizer ops on the GPU: adamw (backend.h's AdamWStep, element-wise in f32, as the CPU
// op) and sum_squares (the global grad norm): per tensor, one block per kSumSquaresChunk elements
// writes an f64 partial; one block adds the partials in order. Fixed partition and fixed reduction
// trees, so the result is the same bits on every run.
#include <cmath>
#include <string>
#include <vector>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/reduce.cuh"
#include "gpu/rows.h"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, float b1, float b2, float eps, float scale,
                             float step_size, float decay, float bc2_sqrt) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * scale;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

__global__ void square_partials_kernel(const float* __restrict__ x, int64_t n, int64_t chunk,
                                       double* __restrict__ out) {
  __shared__ double scratch[32];
  const int64_t begin = blockIdx.x * chunk, end = min(n, begin + chunk);
  double s = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += double(x[i]) * double(x[i]);
  s = block_sum_f64(s, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(const double* __restrict__ partial, int64_t n, double* __restrict__ out) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = block_sum_f64(s, scratch);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

void adamw(cudaStream_t stream, Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWStep& s) {
  for (const Tensor* t :
       {static_cast<const Tensor*>(&p), &g, static_cast<const Tensor*>(&m), static_cast<const Tensor*>(&v)}) {
    check_tensor(*t, "adamw", "p, g, m and v", DType::f32);
    ASTRAI_GPU_CHECK(
        t->is_contiguous() && t->numel() == p.numel(),
        "adamw: p, g, m and v must be contiguous with " + std::to_string(p.numel()) + " elements");
  }
  const int64_t n = p.numel();
  if (n == 0) return;
  // The scalars exactly as the CPU op computes them (host f32 math).
  const float bc1 = 1.0f - std::pow(s.beta1, float(s.t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(s.beta2, float(s.t)));
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
      p.ptr<float>(), g.ptr<float>(), m.ptr<float>(), v.ptr<float>(), n, s.beta1, s.beta2, s.eps,
      s.grad_scale, s.lr / bc1, 1.0f - s.lr * s.weight_decay, bc2_sqrt);
  ASTRAI_CUDA_LAUNCH_CHECK(adamw_kernel);
}

double sum_squares(cudaStream_t stream, const std::vector<Tensor>& xs, Scratch& scratch) {
  constexpr int64_t kChunk = Backend::kSumSquaresChunk;
  int64_t chunks = 0;
  for (const Tensor& x : xs) {
    check_tensor(x, "sum_squares", "x", DType::f32);
    ASTRAI_GPU_CHECK(x.is_contiguous(), "sum_squares: tensors must be contiguous");
    chunks += (x.numel() + kChunk - 1) / kChunk;
  }
  double* partial = static_cast<double*>(scratch.ensure(size_t(chunks + 1) * sizeof(double)));
  int64_t at = 0;
  for (const Tensor& x : xs) {
    const int64_t n = x.numel(), c = (n + kChunk - 1) / kChunk;
    if (c == 0) continue;
    square_partials_kernel<<<unsigned(c), kThreads, 0, stream>>>(x.ptr<float>(), n, kChunk, partial + 1 + at);
    ASTRAI_CUDA_LAUNCH_CHECK(square_partials_kernel);
    at += c;
  }
  sum_partials_kernel<<<1, 1024, 0, stream>>>(partial + 1, chunks, partial);
  ASTRAI_CUDA_LAUNCH_CHECK(sum_partials_kernel);
  double result = 0;
  ASTRAI_CUDA_CHECK(cudaMemcpyAsync(&result, partial, sizeof(double), cudaMemcpyDeviceToHost, stream));
  ASTRAI_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace astrai::gpu
