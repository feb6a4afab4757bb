// Element-wise maps over rows (swiglu, add, swiglu_backward): out_k[r, c] = f(in_0[r, c], ...).
// One launch shape for all of them: blockIdx.y walks rows, the threads of blockIdx.x walk the
// columns of a row, so a thread finds its row pointer once per row rather than dividing a flat
// element index by the width (two 64-bit divisions per element, which made these kernels
// ALU-bound). Rows whose every operand is 16-byte aligned take 16 bytes per thread (8 bf16 or 4
// f32) through one vector load per operand; others one element per thread. The math per element
// is the op's own (`Op`), so the two paths give the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/rows.h"

namespace astrai::gpu {

// Row r of x. Rows whose leading dims collapse (a 2-D tensor, or [T, heads, D] with heads * D
// per token) sit at a fixed stride: one multiply; only other views pay Rows::row's division.
template <typename T>
__device__ __forceinline__ T* row_ptr(const Rows& x, int64_t r) {
  if (x.inner >= x.n_rows || x.s_outer == x.inner * x.s_inner)
    return reinterpret_cast<T*>(x.base + r * x.s_inner * x.esize);
  return x.row<T>(r);
}

// N consecutive elements of p widened to f32 (N > 1: one 16-byte load; p 16-byte aligned).
template <typename T, int N>
__device__ __forceinline__ void load_vec(const T* p, float* f) {
  if constexpr (N == 1) {
    f[0] = to_f32(*p);
  } else if constexpr (sizeof(T) == 2) {
    static_assert(N == 8, "16 bytes of bf16");
    unpack8(*reinterpret_cast<const uint4*>(p), f);
  } else {
    static_assert(N == 4, "16 bytes of f32");
    const float4 v = *reinterpret_cast<const float4*>(p);
    f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const float* f) {
  if constexpr (N == 1) {
    *p = from_f32<T>(f[0]);
  } else if constexpr (sizeof(T) == 2) {
    *reinterpret_cast<uint4*>(p) = pack8(f);
  } else {
    *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
  }
}

template <int kIn, int kOut>
struct RowsMapArgs {
  Rows in[kIn], out[kOut];
};

// Op: __device__ void operator()(const float (&in)[kIn], float (&out)[kOut]) const, per element.
// An output may alias an input (each element is read before it is written, by the same thread).
template <typename T, int N, int kIn, int kOut, typename Op>
__global__ void rows_map_kernel(RowsMapArgs<kIn, kOut> a, int64_t n_rows, int64_t width, Op op) {
  const int64_t vecs = width / N;
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    const T* in[kIn];
    T* out[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) in[k] = row_ptr<T>(a.in[k], r);
#pragma unroll
    for (int k = 0; k < kOut; ++k) out[k] = row_ptr<T>(a.out[k], r);
    for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < vecs;
         v += int64_t(gridDim.x) * blockDim.x) {
      float x[kIn][N], y[kOut][N];
#pragma unroll
      for (int k = 0; k < kIn; ++k) load_vec<T, N>(in[k] + v * N, x[k]);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        float xi[kIn], yi[kOut];
#pragma unroll
        for (int k = 0; k < kIn; ++k) xi[k] = x[k][i];
        op(xi, yi);
#pragma unroll
        for (int k = 0; k < kOut; ++k) y[k][i] = yi[k];
      }
#pragma unroll
      for (int k = 0; k < kOut; ++k) store_vec<T, N>(out[k] + v * N, y[k]);
    }
  }
}

template <typename T, int N, int kIn, int kOut, typename Op>
void launch_rows_map(cudaStream_t stream, const RowsMapArgs<kIn, kOut>& a, int64_t n_rows, int64_t width,
                     Op op) {
  const int64_t vecs = width / N;
  const int threads = int(std::clamp<int64_t>((vecs + 31) / 32 * 32, 32, 256));
  const dim3 grid(unsigned(std::min<int64_t>((vecs + threads - 1) / threads, 1024)),
                  unsigned(std::min<int64_t>(n_rows, 65535)));
  rows_map_kernel<T, N, kIn, kOut><<<grid, threads, 0, stream>>>(a, n_rows, width, op);
  ASTRAI_CUDA_LAUNCH_CHECK(rows_map_kernel);
}

// Runs op over the rows of every operand (same n_rows and width, the caller checked; dtype T), 16
// bytes per thread when every row of every operand allows it.
template <typename T, int kIn, int kOut, typename Op>
void rows_map(cudaStream_t stream, const RowsMapArgs<kIn, kOut>& a, Op op) {
  const Rows& first = a.in[0];
  const int64_t n_rows = first.n_rows, width = first.width;
  if (n_rows == 0 || width == 0) return;
  constexpr int kVec = 16 / int(sizeof(T));
  bool vec = width % kVec == 0;
  for (const Rows& r : a.in) vec = vec && rows_aligned16(r);
  for (const Rows& r : a.out) vec = vec && rows_aligned16(r);
  if (vec)
    launch_rows_map<T, kVec>(stream, a, n_rows, width, op);
  else
    launch_rows_map<T, 1>(stream, a, n_rows, width, op);
}

}  // namespace astrai::gpu
