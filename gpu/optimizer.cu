// The optimizer ops on the GPU: adamw (backend.h's AdamWStep, element-wise in f32, as the CPU
// op; 16 bytes per access where the tensors allow) and sum_squares (the global grad norm): per tensor, one
// block per kSumSquaresChunk elements writes an f64 partial; one block adds the partials in order. Fixed
// partition and fixed reduction trees, so the result is the same bits on every run.
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

struct AdamWScalars {
  float b1, b2, eps, scale, step_size, decay, bc2_sqrt;
  __device__ void update(float& p, float g, float& m, float& v) const {
    const float gi = g * scale;
    m = b1 * m + (1.0f - b1) * gi;
    v = b2 * v + (1.0f - b2) * gi * gi;
    p = p * decay - step_size * m / (sqrtf(v) / bc2_sqrt + eps);
  }
};

// kVec: p, g, m, v 16-byte aligned; 4 elements per step through float4, the last n % 4 one by one.
// The same update per element either way (the same bits).
template <bool kVec>
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, AdamWScalars s) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
                stride = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if constexpr (kVec) {
    done = n / 4 * 4;
    for (int64_t i = first; i < n / 4; i += stride) {
      float4 pv = reinterpret_cast<float4*>(p)[i], mv = reinterpret_cast<float4*>(m)[i],
             vv = reinterpret_cast<float4*>(v)[i];
      const float4 gv = reinterpret_cast<const float4*>(g)[i];
      s.update(pv.x, gv.x, mv.x, vv.x);
      s.update(pv.y, gv.y, mv.y, vv.y);
      s.update(pv.z, gv.z, mv.z, vv.z);
      s.update(pv.w, gv.w, mv.w, vv.w);
      reinterpret_cast<float4*>(p)[i] = pv;
      reinterpret_cast<float4*>(m)[i] = mv;
      reinterpret_cast<float4*>(v)[i] = vv;
    }
  }
  for (int64_t i = done + first; i < n; i += stride) s.update(p[i], g[i], m[i], v[i]);
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
  const AdamWScalars k{s.beta1, s.beta2, s.eps, s.grad_scale, s.lr / bc1, 1.0f - s.lr * s.weight_decay,
                       bc2_sqrt};
  bool vec = true;
  for (const void* ptr : {p.data, g.data, m.data, v.data})
    vec = vec && reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
  if (vec)
    adamw_kernel<true><<<grid_for((n + 3) / 4, kThreads), kThreads, 0, stream>>>(
        p.ptr<float>(), g.ptr<float>(), m.ptr<float>(), v.ptr<float>(), n, k);
  else
    adamw_kernel<false><<<grid_for(n, kThreads), kThreads, 0, stream>>>(p.ptr<float>(), g.ptr<float>(),
                                                                        m.ptr<float>(), v.ptr<float>(), n, k);
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
