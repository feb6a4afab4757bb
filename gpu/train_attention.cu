// attention_train and its backward (backend.h): causal GQA over contiguous sequences, key range
// [kv_begin[t], t] per query row. Flash-style: tiles of kBQ queries x kBK keys in shared memory
// (f32), an online softmax in the forward that saves lse, and a backward that recomputes the
// scores from lse instead of storing them:
//   dq kernel    (query tile, head):   p = exp(s - lse), ds = p (dO.v - delta), dq = scale sum ds k;
//                                      also writes delta_t = dO_t . out_t for the next kernel.
//   dk/dv kernel (key tile, KV head):  for each head of the group and each query tile,
//                                      dv += p^T dO, dk += scale ds^T q.
// Each output element is summed by one thread in a fixed order (no atomics): deterministic.
// 256 threads; thread (row = tid / 4, sub = tid % 4) owns one query (key, in dk/dv) row of the tile
// and head dims sub, sub + 4, ... (at most kD / 4 of them, in registers). CUDA cores, f32 math:
// the general path; bf16 with head_dim 64 or 128 takes the tensor-core kernels of
// train_attention_mma.cu first.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/rows.h"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

constexpr int kB = 64;  // queries and keys per tile
constexpr int kThreads = 256;
constexpr int kPerThread = kB / 4;  // tile columns each thread scores

struct Geometry {
  int64_t n = 0;  // rows (tokens)
  int heads = 0, kv_heads = 0, group = 1, d = 0;
  float scale = 1.0f;
};

template <int kD>
constexpr int pitch() {
  return kD + 1;  // odd row pitch: rows of a tile fall in different banks
}

// Loads rows [t0, t0 + kB) of head `head` of x (Rows over [N, heads, D]) into dst[kB][pitch] as f32,
// zeros past the end.
template <typename T, int kD>
__device__ void load_tile(const Rows& x, int64_t t0, int head, int heads, const Geometry& g, float* dst) {
  for (int e = threadIdx.x; e < kB * g.d; e += blockDim.x) {
    const int r = e / g.d, c = e % g.d;
    const int64_t t = t0 + r;
    dst[r * pitch<kD>() + c] = t < g.n ? to_f32(x.row<T>(t * heads + head)[c]) : 0.0f;
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Rows q, Rows k, Rows v, const int32_t* __restrict__ kv_begin, Geometry g,
                             Rows out, float* __restrict__ lse) {
  extern __shared__ float smem[];
  constexpr int P = pitch<kD>();
  float* qs = smem;
  float* ks = qs + kB * P;
  float* vs = ks + kB * P;
  float* ps = vs + kB * P;  // [kB][kB + 1]
  __shared__ int kvb[kB];
  __shared__ int tile_begin;
  const int h = blockIdx.y, kvh = h / g.group;
  const int64_t q0 = int64_t(blockIdx.x) * kB;
  const int row = threadIdx.x / 4, sub = threadIdx.x % 4;
  const int64_t t = q0 + row;
  load_tile<T, kD>(q, q0, h, g.heads, g, qs);
  if (threadIdx.x < kB) kvb[threadIdx.x] = q0 + threadIdx.x < g.n ? kv_begin[q0 + threadIdx.x] : INT32_MAX;
  __syncthreads();
  if (threadIdx.x == 0) {
    int b = INT32_MAX;
    for (int r = 0; r < kB; ++r) b = min(b, kvb[r]);
    tile_begin = b;
  }
  __syncthreads();
  const int64_t j_last = min(q0 + kB - 1, g.n - 1);
  float o[kD / 4];
#pragma unroll
  for (int i = 0; i < kD / 4; ++i) o[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = tile_begin; j0 <= j_last; j0 += kB) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<T, kD>(k, j0, kvh, g.kv_heads, g, ks);
    load_tile<T, kD>(v, j0, kvh, g.kv_heads, g, vs);
    __syncthreads();
    float s[kPerThread];
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int c = sub + 4 * i;
      const int64_t j = j0 + c;
      float acc = 0.0f;
      for (int d = 0; d < g.d; ++d) acc += qs[row * P + d] * ks[c * P + d];
      const bool valid = t < g.n && j <= t && j >= kvb[row];
      s[i] = valid ? acc * g.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[i]);
    }
    tile_max = quad_max(tile_max);
    const float m_new = fmaxf(m, tile_max);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const float p = s[i] == -INFINITY ? 0.0f : expf(s[i] - m_new);
      ps[row * (kB + 1) + sub + 4 * i] = p;
      sum += p;
    }
    sum = quad_sum(sum);
    const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
    l = l * alpha + sum;
    m = m_new;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kD / 4; ++i) {
      const int d = sub + 4 * i;
      if (d < g.d) {
        float acc = o[i] * alpha;
        for (int c = 0; c < kB; ++c) acc += ps[row * (kB + 1) + c] * vs[c * P + d];
        o[i] = acc;
      }
    }
  }
  if (t >= g.n) return;
  T* orow = out.row<T>(t * g.heads + h);
  const float inv = 1.0f / l;
#pragma unroll
  for (int i = 0; i < kD / 4; ++i) {
    const int d = sub + 4 * i;
    if (d < g.d) orow[d] = from_f32<T>(o[i] * inv);
  }
  if (sub == 0) lse[t * g.heads + h] = m + logf(l);
}

template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(Rows dout, Rows q, Rows k, Rows v, const int32_t* __restrict__ kv_begin, Rows out,
                        const float* __restrict__ lse, Geometry g, Rows dq, float* __restrict__ delta) {
  extern __shared__ float smem[];
  constexpr int P = pitch<kD>();
  float* qs = smem;
  float* dos = qs + kB * P;
  float* ks = dos + kB * P;
  float* vs = ks + kB * P;
  float* dss = vs + kB * P;  // [kB][kB + 1]
  __shared__ int kvb[kB];
  __shared__ int tile_begin;
  const int h = blockIdx.y, kvh = h / g.group;
  const int64_t q0 = int64_t(blockIdx.x) * kB;
  const int row = threadIdx.x / 4, sub = threadIdx.x % 4;
  const int64_t t = q0 + row;
  load_tile<T, kD>(q, q0, h, g.heads, g, qs);
  load_tile<T, kD>(dout, q0, h, g.heads, g, dos);
  if (threadIdx.x < kB) kvb[threadIdx.x] = q0 + threadIdx.x < g.n ? kv_begin[q0 + threadIdx.x] : INT32_MAX;
  __syncthreads();
  if (threadIdx.x == 0) {
    int b = INT32_MAX;
    for (int r = 0; r < kB; ++r) b = min(b, kvb[r]);
    tile_begin = b;
  }
  // delta = dO . out for this thread's row (the four threads of a row split the dims).
  float dl = 0.0f;
  if (t < g.n) {
    const T* orow = out.row<T>(t * g.heads + h);
    for (int d = sub; d < g.d; d += 4) dl += dos[row * P + d] * to_f32(orow[d]);
  }
  dl = quad_sum(dl);
  if (t < g.n && sub == 0) delta[t * g.heads + h] = dl;
  const float row_lse = t < g.n ? lse[t * g.heads + h] : 0.0f;
  __syncthreads();
  const int64_t j_last = min(q0 + kB - 1, g.n - 1);
  float acc_dq[kD / 4];
#pragma unroll
  for (int i = 0; i < kD / 4; ++i) acc_dq[i] = 0.0f;
  for (int64_t j0 = tile_begin; j0 <= j_last; j0 += kB) {
    __syncthreads();
    load_tile<T, kD>(k, j0, kvh, g.kv_heads, g, ks);
    load_tile<T, kD>(v, j0, kvh, g.kv_heads, g, vs);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int c = sub + 4 * i;
      const int64_t j = j0 + c;
      float ds = 0.0f;
      if (t < g.n && j <= t && j >= kvb[row]) {
        float sc = 0.0f, dp = 0.0f;
        for (int d = 0; d < g.d; ++d) {
          sc += qs[row * P + d] * ks[c * P + d];
          dp += dos[row * P + d] * vs[c * P + d];
        }
        const float p = expf(sc * g.scale - row_lse);
        ds = p * (dp - dl);
      }
      dss[row * (kB + 1) + c] = ds;
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kD / 4; ++i) {
      const int d = sub + 4 * i;
      if (d < g.d) {
        float acc = acc_dq[i];
        for (int c = 0; c < kB; ++c) acc += dss[row * (kB + 1) + c] * ks[c * P + d];
        acc_dq[i] = acc;
      }
    }
  }
  if (t >= g.n) return;
  T* drow = dq.row<T>(t * g.heads + h);
#pragma unroll
  for (int i = 0; i < kD / 4; ++i) {
    const int d = sub + 4 * i;
    if (d < g.d) drow[d] = from_f32<T>(acc_dq[i] * g.scale);
  }
}

template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(Rows dout, Rows q, Rows k, Rows v, const int32_t* __restrict__ kv_begin,
                          const float* __restrict__ lse, const float* __restrict__ delta, Geometry g, Rows dk,
                          Rows dv) {
  extern __shared__ float smem[];
  constexpr int P = pitch<kD>();
  float* ks = smem;
  float* vs = ks + kB * P;
  float* qs = vs + kB * P;
  float* dos = qs + kB * P;
  float* ps = dos + kB * P;  // [key][query], pitch kB + 1
  float* dss = ps + kB * (kB + 1);
  __shared__ int kvb[kB];
  __shared__ float lse_s[kB], delta_s[kB];
  const int kvh = blockIdx.y;
  const int64_t j0 = int64_t(blockIdx.x) * kB;
  const int key = threadIdx.x / 4, sub = threadIdx.x % 4;
  const int64_t j = j0 + key;
  const int64_t j_last = min(j0 + kB - 1, g.n - 1);
  load_tile<T, kD>(k, j0, kvh, g.kv_heads, g, ks);
  load_tile<T, kD>(v, j0, kvh, g.kv_heads, g, vs);
  float acc_dk[kD / 4], acc_dv[kD / 4];
#pragma unroll
  for (int i = 0; i < kD / 4; ++i) acc_dk[i] = acc_dv[i] = 0.0f;
  for (int hg = 0; hg < g.group; ++hg) {
    const int h = kvh * g.group + hg;
    for (int64_t q0 = j0; q0 < g.n; q0 += kB) {
      __syncthreads();  // the previous query tile is no longer read
      const int64_t tr = q0 + threadIdx.x;
      const bool sees = threadIdx.x < kB && tr < g.n && kv_begin[tr] <= j_last;
      if (threadIdx.x < kB) {
        kvb[threadIdx.x] = tr < g.n ? kv_begin[tr] : INT32_MAX;
        lse_s[threadIdx.x] = tr < g.n ? lse[tr * g.heads + h] : 0.0f;
        delta_s[threadIdx.x] = tr < g.n ? delta[tr * g.heads + h] : 0.0f;
      }
      if (!__syncthreads_or(sees)) continue;  // no query of this tile sees these keys
      load_tile<T, kD>(q, q0, h, g.heads, g, qs);
      load_tile<T, kD>(dout, q0, h, g.heads, g, dos);
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int r = sub + 4 * i;
        const int64_t t = q0 + r;
        float p = 0.0f, ds = 0.0f;
        if (j < g.n && t < g.n && j <= t && j >= kvb[r]) {
          float sc = 0.0f, dp = 0.0f;
          for (int d = 0; d < g.d; ++d) {
            sc += qs[r * P + d] * ks[key * P + d];
            dp += dos[r * P + d] * vs[key * P + d];
          }
          p = expf(sc * g.scale - lse_s[r]);
          ds = p * (dp - delta_s[r]);
        }
        ps[key * (kB + 1) + r] = p;
        dss[key * (kB + 1) + r] = ds;
      }
      __syncwarp();
#pragma unroll
      for (int i = 0; i < kD / 4; ++i) {
        const int d = sub + 4 * i;
        if (d < g.d) {
          float a_v = acc_dv[i], a_k = acc_dk[i];
          for (int r = 0; r < kB; ++r) {
            a_v += ps[key * (kB + 1) + r] * dos[r * P + d];
            a_k += dss[key * (kB + 1) + r] * qs[r * P + d];
          }
          acc_dv[i] = a_v;
          acc_dk[i] = a_k;
        }
      }
    }
  }
  if (j >= g.n) return;
  T* dkrow = dk.row<T>(j * g.kv_heads + kvh);
  T* dvrow = dv.row<T>(j * g.kv_heads + kvh);
#pragma unroll
  for (int i = 0; i < kD / 4; ++i) {
    const int d = sub + 4 * i;
    if (d < g.d) {
      dkrow[d] = from_f32<T>(acc_dk[i] * g.scale);
      dvrow[d] = from_f32<T>(acc_dv[i]);
    }
  }
}

template <typename K>
void allow_smem(K kernel, size_t bytes) {
  ASTRAI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// Checks a [N, heads, D] tensor (rows may be strided) and returns its rows.
Rows head_rows(const Tensor& x, const char* op, const char* name, int64_t n, int64_t heads, int64_t d,
               DType dtype) {
  check_tensor(x, op, name, dtype);
  ASTRAI_GPU_CHECK(x.ndim == 3 && x.shape[0] == n && x.shape[1] == heads && x.shape[2] == d,
                   std::string(op) + ": " + name + " " + x.shape_str() + ", expected [" + std::to_string(n) +
                       ", " + std::to_string(heads) + ", " + std::to_string(d) + "]");
  return rows_of(x, op);
}

Geometry geometry(const Tensor& q, const Tensor& k, float scale, const char* op) {
  check_tensor(q, op, "q", DType::bf16, DType::f32);
  ASTRAI_GPU_CHECK(q.ndim == 3 && k.ndim == 3, std::string(op) + ": q and k must be [N, heads, D]");
  Geometry g;
  g.n = q.shape[0];
  g.heads = int(q.shape[1]);
  g.kv_heads = int(k.shape[1]);
  g.d = int(q.shape[2]);
  g.scale = scale;
  ASTRAI_GPU_CHECK(g.kv_heads > 0 && g.heads % g.kv_heads == 0,
                   std::string(op) + ": heads " + std::to_string(g.heads) + " not a multiple of kv heads " +
                       std::to_string(g.kv_heads));
  ASTRAI_GPU_CHECK(g.d > 0 && g.d <= 128, std::string(op) + ": head_dim " + std::to_string(g.d) +
                                              " (the GPU kernels take up to 128)");
  g.group = g.heads / g.kv_heads;
  return g;
}

template <int kD>
constexpr size_t tile_floats() {
  return size_t(kB) * pitch<kD>();
}
constexpr size_t kScoreFloats = size_t(kB) * (kB + 1);

template <typename T, int kD>
void launch_forward(cudaStream_t stream, const Rows& q, const Rows& k, const Rows& v, const int32_t* kvb,
                    const Geometry& g, const Rows& out, float* lse) {
  const size_t smem = (3 * tile_floats<kD>() + kScoreFloats) * sizeof(float);
  allow_smem(attention_forward_kernel<T, kD>, smem);
  const dim3 grid(unsigned((g.n + kB - 1) / kB), unsigned(g.heads));
  attention_forward_kernel<T, kD><<<grid, kThreads, smem, stream>>>(q, k, v, kvb, g, out, lse);
  ASTRAI_CUDA_LAUNCH_CHECK(attention_forward_kernel);
}

template <typename T, int kD>
void launch_backward(cudaStream_t stream, const Rows& dout, const Rows& q, const Rows& k, const Rows& v,
                     const int32_t* kvb, const Rows& out, const float* lse, const Geometry& g, const Rows& dq,
                     const Rows& dk, const Rows& dv, float* delta) {
  const size_t smem_dq = (4 * tile_floats<kD>() + kScoreFloats) * sizeof(float);
  allow_smem(attention_dq_kernel<T, kD>, smem_dq);
  const dim3 grid_q(unsigned((g.n + kB - 1) / kB), unsigned(g.heads));
  attention_dq_kernel<T, kD>
      <<<grid_q, kThreads, smem_dq, stream>>>(dout, q, k, v, kvb, out, lse, g, dq, delta);
  ASTRAI_CUDA_LAUNCH_CHECK(attention_dq_kernel);
  const size_t smem_kv = (4 * tile_floats<kD>() + 2 * kScoreFloats) * sizeof(float);
  allow_smem(attention_dkdv_kernel<T, kD>, smem_kv);
  const dim3 grid_k(unsigned((g.n + kB - 1) / kB), unsigned(g.kv_heads));
  attention_dkdv_kernel<T, kD>
      <<<grid_k, kThreads, smem_kv, stream>>>(dout, q, k, v, kvb, lse, delta, g, dk, dv);
  ASTRAI_CUDA_LAUNCH_CHECK(attention_dkdv_kernel);
}

}  // namespace

void attention_train(cudaStream_t stream, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& kv_begin, float scale, Tensor out, Tensor lse) {
  const char* op = "attention_train";
  const Geometry g = geometry(q, k, scale, op);
  const Rows qv = head_rows(q, op, "q", g.n, g.heads, g.d, q.dtype);
  const Rows kv = head_rows(k, op, "k", g.n, g.kv_heads, g.d, q.dtype);
  const Rows vv = head_rows(v, op, "v", g.n, g.kv_heads, g.d, q.dtype);
  const Rows ov = head_rows(out, op, "out", g.n, g.heads, g.d, q.dtype);
  check_index(kv_begin, op, "kv_begin");
  check_tensor(lse, op, "lse", DType::f32);
  ASTRAI_GPU_CHECK(kv_begin.numel() == g.n && lse.numel() == g.n * g.heads && lse.is_contiguous(),
                   "attention_train: kv_begin " + kv_begin.shape_str() + " lse " + lse.shape_str());
  if (g.n == 0) return;
  if (attention_train_mma(stream, q, k, v, kv_begin, scale, out, lse)) return;
  const int32_t* kvb = kv_begin.ptr<int32_t>();
  if (q.dtype == DType::bf16) {
    if (g.d <= 64)
      launch_forward<bf16, 64>(stream, qv, kv, vv, kvb, g, ov, lse.ptr<float>());
    else
      launch_forward<bf16, 128>(stream, qv, kv, vv, kvb, g, ov, lse.ptr<float>());
  } else {
    if (g.d <= 64)
      launch_forward<float, 64>(stream, qv, kv, vv, kvb, g, ov, lse.ptr<float>());
    else
      launch_forward<float, 128>(stream, qv, kv, vv, kvb, g, ov, lse.ptr<float>());
  }
}

void attention_train_backward(cudaStream_t stream, const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& kv_begin, const Tensor& out, const Tensor& lse,
                              float scale, Tensor dq, Tensor dk, Tensor dv, Scratch& scratch) {
  const char* op = "attention_train_backward";
  const Geometry g = geometry(q, k, scale, op);
  const DType t = q.dtype;
  const Rows qv = head_rows(q, op, "q", g.n, g.heads, g.d, t),
             kv = head_rows(k, op, "k", g.n, g.kv_heads, g.d, t),
             vv = head_rows(v, op, "v", g.n, g.kv_heads, g.d, t),
             ov = head_rows(out, op, "out", g.n, g.heads, g.d, t),
             dov = head_rows(dout, op, "dout", g.n, g.heads, g.d, t),
             dqv = head_rows(dq, op, "dq", g.n, g.heads, g.d, t),
             dkv = head_rows(dk, op, "dk", g.n, g.kv_heads, g.d, t),
             dvv = head_rows(dv, op, "dv", g.n, g.kv_heads, g.d, t);
  check_index(kv_begin, op, "kv_begin");
  check_tensor(lse, op, "lse", DType::f32);
  ASTRAI_GPU_CHECK(kv_begin.numel() == g.n && lse.numel() == g.n * g.heads && lse.is_contiguous(),
                   "attention_train_backward: kv_begin " + kv_begin.shape_str() + " lse " + lse.shape_str());
  if (g.n == 0) return;
  float* delta = static_cast<float*>(scratch.ensure(size_t(g.n * g.heads) * sizeof(float)));
  if (attention_train_backward_mma(stream, dout, q, k, v, kv_begin, out, lse, scale, dq, dk, dv, delta))
    return;
  const int32_t* kvb = kv_begin.ptr<int32_t>();
  if (t == DType::bf16) {
    if (g.d <= 64)
      launch_backward<bf16, 64>(stream, dov, qv, kv, vv, kvb, ov, lse.ptr<float>(), g, dqv, dkv, dvv, delta);
    else
      launch_backward<bf16, 128>(stream, dov, qv, kv, vv, kvb, ov, lse.ptr<float>(), g, dqv, dkv, dvv, delta);
  } else {
    if (g.d <= 64)
      launch_backward<float, 64>(stream, dov, qv, kv, vv, kvb, ov, lse.ptr<float>(), g, dqv, dkv, dvv, delta);
    else
      launch_backward<float, 128>(stream, dov, qv, kv, vv, kvb, ov, lse.ptr<float>(), g, dqv, dkv, dvv,
                                  delta);
  }
}

}  // namespace astrai::gpu
