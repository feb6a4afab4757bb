// attention_train and its backward on tensor cores (WMMA bf16 16x16x16 tiles, f32 accumulate), the
// fast path of train_attention.cu for bf16 tensors with head_dim 64 or 128 and 16-byte aligned
// rows (every model config we train; the CUDA-core kernels there take the rest). Same algorithm:
// tiles of 64 queries x 64 keys, 4 warps of 16 rows each; the forward keeps an online softmax
// with its output accumulator in shared memory (f32) and saves lse; the backward recomputes
// p = exp(s - lse) per tile: one kernel for dq (per query tile and head, also writing delta =
// dO . out), one for dk/dv (per key tile and KV head, over the group's heads and the query tiles
// that see the keys). P and dS are rounded to bf16 for their GEMMs (as FlashAttention does); every
// sum has a fixed order, so results are deterministic.
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/rows.h"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

using namespace nvcuda;

constexpr int kB = 64;         // queries and keys per tile
constexpr int kThreads = 128;  // 4 warps x 16 rows
constexpr int kSP = kB + 4;    // f32 score tile pitch
constexpr int kPP = kB + 8;    // bf16 probability tile pitch

template <int kD>
constexpr int kHP = kD + 8;  // bf16 q/k/v/dO tile pitch
template <int kD>
constexpr int kOP = kD + 4;  // f32 accumulator pitch

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

struct Geo {
  int64_t n = 0;
  int heads = 0, kv_heads = 0, group = 1;
  float scale = 1.0f;
};

// Rows [t0, t0 + 64) of head `head` of x into dst[64][kD + 8] (16-byte vectors; zeros past n).
template <int kD>
__device__ void load_tile(const Rows& x, int64_t t0, int head, int heads, int64_t n, bf16* dst) {
  constexpr int kVec = kD / 8;
  for (int e = threadIdx.x; e < kB * kVec; e += blockDim.x) {
    const int r = e / kVec, c = (e % kVec) * 8;
    const int64_t t = t0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (t < n) v = *reinterpret_cast<const uint4*>(x.row<bf16>(t * heads + head) + c);
    *reinterpret_cast<uint4*>(dst + r * kHP<kD> + c) = v;
  }
}

// c[16][64] = a[16][kD] b[64][kD]^T  (one warp; a, b bf16 with pitch kD + 8, c f32 with pitch kSP)
template <int kD>
__device__ void mm_abt(const bf16* a, const bf16* b, float* c) {
#pragma unroll
  for (int j = 0; j < kB / 16; ++j) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < kD / 16; ++k) {
      FragA fa;
      FragBCol fb;
      wmma::load_matrix_sync(fa, a + k * 16, kHP<kD>);
      wmma::load_matrix_sync(fb, b + j * 16 * kHP<kD> + k * 16, kHP<kD>);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + j * 16, acc, kSP, wmma::mem_row_major);
  }
}

// c[16][kD] += p[16][64] v[64][kD]  (one warp; p bf16 pitch kPP, v bf16 pitch kD + 8, c f32 pitch kD + 4)
template <int kD>
__device__ void mm_ab_acc(const bf16* p, const bf16* v, float* c) {
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    FragC acc;
    wmma::load_matrix_sync(acc, c + n * 16, kOP<kD>, wmma::mem_row_major);
#pragma unroll
    for (int k = 0; k < kB / 16; ++k) {
      FragA fa;
      FragBRow fb;
      wmma::load_matrix_sync(fa, p + k * 16, kPP);
      wmma::load_matrix_sync(fb, v + k * 16 * kHP<kD> + n * 16, kHP<kD>);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + n * 16, acc, kOP<kD>, wmma::mem_row_major);
  }
}

template <int kD>
__device__ void zero_acc(float* c) {
  for (int e = threadIdx.x; e < kB * kOP<kD>; e += blockDim.x) c[e] = 0.0f;
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Rows q, Rows k, Rows v, const int32_t* __restrict__ kv_begin, Geo g, Rows out,
                   float* __restrict__ lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + kB * kHP<kD>;
  bf16* vs = ks + kB * kHP<kD>;
  float* ss = reinterpret_cast<float*>(vs + kB * kHP<kD>);
  bf16* ps = reinterpret_cast<bf16*>(ss + kB * kSP);
  float* os = reinterpret_cast<float*>(ps + kB * kPP);
  __shared__ int kvb[kB];
  __shared__ float m_s[kB], l_s[kB];
  __shared__ int tile_begin;
  const int h = blockIdx.y, kvh = h / g.group, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q0 = int64_t(blockIdx.x) * kB;
  load_tile<kD>(q, q0, h, g.heads, g.n, qs);
  zero_acc<kD>(os);
  if (threadIdx.x < kB) {
    kvb[threadIdx.x] = q0 + threadIdx.x < g.n ? kv_begin[q0 + threadIdx.x] : INT32_MAX;
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int b = INT32_MAX;
    for (int r = 0; r < kB; ++r) b = min(b, kvb[r]);
    tile_begin = b;
  }
  __syncthreads();
  const int r = warp * 16 + lane / 2, c0 = (lane % 2) * (kB / 2), d0 = (lane % 2) * (kD / 2);
  const int64_t t = q0 + r;
  const int64_t j_last = min(q0 + kB - 1, g.n - 1);
  for (int64_t j0 = tile_begin; j0 <= j_last; j0 += kB) {
    __syncthreads();
    load_tile<kD>(k, j0, kvh, g.kv_heads, g.n, ks);
    load_tile<kD>(v, j0, kvh, g.kv_heads, g.n, vs);
    __syncthreads();
    mm_abt<kD>(qs + warp * 16 * kHP<kD>, ks, ss + warp * 16 * kSP);
    __syncwarp();
    float* srow = ss + r * kSP;
    float mx = -INFINITY;
    for (int c = c0; c < c0 + kB / 2; ++c) {
      const int64_t j = j0 + c;
      const bool valid = t < g.n && j <= t && j >= kvb[r];
      const float s = valid ? srow[c] * g.scale : -INFINITY;
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_old = m_s[r], m_new = fmaxf(m_old, mx);
    float sum = 0.0f;
    for (int c = c0; c < c0 + kB / 2; ++c) {
      const bf16 p = __float2bfloat16_rn(srow[c] == -INFINITY ? 0.0f : expf(srow[c] - m_new));
      ps[r * kPP + c] = p;
      sum += __bfloat162float(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
    for (int d = d0; d < d0 + kD / 2; ++d) os[r * kOP<kD> + d] *= alpha;
    __syncwarp();
    if (lane % 2 == 0) {
      m_s[r] = m_new;
      l_s[r] = l_s[r] * alpha + sum;
    }
    __syncwarp();
    mm_ab_acc<kD>(ps + warp * 16 * kPP, vs, os + warp * 16 * kOP<kD>);
  }
  __syncwarp();
  if (t >= g.n) return;
  const float l = l_s[r], inv = 1.0f / l;
  bf16* orow = out.row<bf16>(t * g.heads + h);
  for (int d = d0; d < d0 + kD / 2; ++d) orow[d] = __float2bfloat16_rn(os[r * kOP<kD> + d] * inv);
  if (lane % 2 == 0) lse[t * g.heads + h] = m_s[r] + logf(l);
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(Rows dout, Rows q, Rows k, Rows v, const int32_t* __restrict__ kv_begin, Rows out,
              const float* __restrict__ lse, Geo g, Rows dq, float* __restrict__ delta) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + kB * kHP<kD>;
  bf16* ks = dos + kB * kHP<kD>;
  bf16* vs = ks + kB * kHP<kD>;
  float* ss = reinterpret_cast<float*>(vs + kB * kHP<kD>);
  float* dps = ss + kB * kSP;
  bf16* dss = reinterpret_cast<bf16*>(dps + kB * kSP);
  float* dqs = reinterpret_cast<float*>(dss + kB * kPP);
  __shared__ int kvb[kB];
  __shared__ float lse_s[kB], delta_s[kB];
  __shared__ int tile_begin;
  const int h = blockIdx.y, kvh = h / g.group, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q0 = int64_t(blockIdx.x) * kB;
  load_tile<kD>(q, q0, h, g.heads, g.n, qs);
  load_tile<kD>(dout, q0, h, g.heads, g.n, dos);
  zero_acc<kD>(dqs);
  if (threadIdx.x < kB) {
    const int64_t tr = q0 + threadIdx.x;
    kvb[threadIdx.x] = tr < g.n ? kv_begin[tr] : INT32_MAX;
    lse_s[threadIdx.x] = tr < g.n ? lse[tr * g.heads + h] : 0.0f;
  }
  __syncthreads();
  const int r = warp * 16 + lane / 2, c0 = (lane % 2) * (kB / 2), d0 = (lane % 2) * (kD / 2);
  const int64_t t = q0 + r;
  {  // delta = dO . out of row r (the lane pair splits the dims)
    float dl = 0.0f;
    if (t < g.n) {
      const bf16* orow = out.row<bf16>(t * g.heads + h);
      for (int d = d0; d < d0 + kD / 2; ++d)
        dl += __bfloat162float(dos[r * kHP<kD> + d]) * __bfloat162float(orow[d]);
    }
    dl += __shfl_xor_sync(0xffffffffu, dl, 1);
    if (lane % 2 == 0) {
      delta_s[r] = dl;
      if (t < g.n) delta[t * g.heads + h] = dl;
    }
  }
  if (threadIdx.x == 0) {
    int b = INT32_MAX;
    for (int i = 0; i < kB; ++i) b = min(b, kvb[i]);
    tile_begin = b;
  }
  __syncthreads();
  const int64_t j_last = min(q0 + kB - 1, g.n - 1);
  for (int64_t j0 = tile_begin; j0 <= j_last; j0 += kB) {
    __syncthreads();
    load_tile<kD>(k, j0, kvh, g.kv_heads, g.n, ks);
    load_tile<kD>(v, j0, kvh, g.kv_heads, g.n, vs);
    __syncthreads();
    mm_abt<kD>(qs + warp * 16 * kHP<kD>, ks, ss + warp * 16 * kSP);
    mm_abt<kD>(dos + warp * 16 * kHP<kD>, vs, dps + warp * 16 * kSP);
    __syncwarp();
    for (int c = c0; c < c0 + kB / 2; ++c) {
      const int64_t j = j0 + c;
      float ds = 0.0f;
      if (t < g.n && j <= t && j >= kvb[r]) {
        const float p = expf(ss[r * kSP + c] * g.scale - lse_s[r]);
        ds = p * (dps[r * kSP + c] - delta_s[r]);
      }
      dss[r * kPP + c] = __float2bfloat16_rn(ds);
    }
    __syncwarp();
    mm_ab_acc<kD>(dss + warp * 16 * kPP, ks, dqs + warp * 16 * kOP<kD>);
  }
  __syncwarp();
  if (t >= g.n) return;
  bf16* drow = dq.row<bf16>(t * g.heads + h);
  for (int d = d0; d < d0 + kD / 2; ++d) drow[d] = __float2bfloat16_rn(dqs[r * kOP<kD> + d] * g.scale);
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(Rows dout, Rows q, Rows k, Rows v, const int32_t* __restrict__ kv_begin,
                const float* __restrict__ lse, const float* __restrict__ delta, Geo g, Rows dk, Rows dv) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + kB * kHP<kD>;
  bf16* qs = vs + kB * kHP<kD>;
  bf16* dos = qs + kB * kHP<kD>;
  float* sts = reinterpret_cast<float*>(dos + kB * kHP<kD>);  // [key][query]
  float* dpts = sts + kB * kSP;
  bf16* pts = reinterpret_cast<bf16*>(dpts + kB * kSP);
  bf16* dsts = pts + kB * kPP;
  float* dks = reinterpret_cast<float*>(dsts + kB * kPP);
  float* dvs = dks + kB * kOP<kD>;
  __shared__ int kvb[kB];
  __shared__ float lse_s[kB], delta_s[kB];
  const int kvh = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j0 = int64_t(blockIdx.x) * kB;
  const int64_t j_last = min(j0 + kB - 1, g.n - 1);
  load_tile<kD>(k, j0, kvh, g.kv_heads, g.n, ks);
  load_tile<kD>(v, j0, kvh, g.kv_heads, g.n, vs);
  zero_acc<kD>(dks);
  zero_acc<kD>(dvs);
  const int r = warp * 16 + lane / 2, c0 = (lane % 2) * (kB / 2), d0 = (lane % 2) * (kD / 2);
  const int64_t j = j0 + r;
  for (int hg = 0; hg < g.group; ++hg) {
    const int h = kvh * g.group + hg;
    for (int64_t q0 = j0; q0 < g.n; q0 += kB) {
      __syncthreads();
      bool sees = false;
      if (threadIdx.x < kB) {
        const int64_t tr = q0 + threadIdx.x;
        kvb[threadIdx.x] = tr < g.n ? kv_begin[tr] : INT32_MAX;
        lse_s[threadIdx.x] = tr < g.n ? lse[tr * g.heads + h] : 0.0f;
        delta_s[threadIdx.x] = tr < g.n ? delta[tr * g.heads + h] : 0.0f;
        sees = tr < g.n && kvb[threadIdx.x] <= j_last;
      }
      if (!__syncthreads_or(sees)) continue;  // no query of this tile sees these keys
      load_tile<kD>(q, q0, h, g.heads, g.n, qs);
      load_tile<kD>(dout, q0, h, g.heads, g.n, dos);
      __syncthreads();
      mm_abt<kD>(ks + warp * 16 * kHP<kD>, qs, sts + warp * 16 * kSP);
      mm_abt<kD>(vs + warp * 16 * kHP<kD>, dos, dpts + warp * 16 * kSP);
      __syncwarp();
      for (int c = c0; c < c0 + kB / 2; ++c) {
        const int64_t t = q0 + c;
        float p = 0.0f, ds = 0.0f;
        if (j < g.n && t < g.n && j <= t && j >= kvb[c]) {
          p = expf(sts[r * kSP + c] * g.scale - lse_s[c]);
          ds = p * (dpts[r * kSP + c] - delta_s[c]);
        }
        pts[r * kPP + c] = __float2bfloat16_rn(p);
        dsts[r * kPP + c] = __float2bfloat16_rn(ds);
      }
      __syncwarp();
      mm_ab_acc<kD>(pts + warp * 16 * kPP, dos, dvs + warp * 16 * kOP<kD>);
      mm_ab_acc<kD>(dsts + warp * 16 * kPP, qs, dks + warp * 16 * kOP<kD>);
    }
  }
  __syncwarp();
  if (j >= g.n) return;
  bf16* dkrow = dk.row<bf16>(j * g.kv_heads + kvh);
  bf16* dvrow = dv.row<bf16>(j * g.kv_heads + kvh);
  for (int d = d0; d < d0 + kD / 2; ++d) {
    dkrow[d] = __float2bfloat16_rn(dks[r * kOP<kD> + d] * g.scale);
    dvrow[d] = __float2bfloat16_rn(dvs[r * kOP<kD> + d]);
  }
}

template <int kD>
constexpr size_t forward_smem() {
  return size_t(3 * kB * kHP<kD>) * 2 + size_t(kB * kSP) * 4 + size_t(kB * kPP) * 2 +
         size_t(kB * kOP<kD>) * 4;
}
template <int kD>
constexpr size_t dq_smem() {
  return size_t(4 * kB * kHP<kD>) * 2 + size_t(2 * kB * kSP) * 4 + size_t(kB * kPP) * 2 +
         size_t(kB * kOP<kD>) * 4;
}
template <int kD>
constexpr size_t dkdv_smem() {
  return size_t(4 * kB * kHP<kD>) * 2 + size_t(2 * kB * kSP) * 4 + size_t(2 * kB * kPP) * 2 +
         size_t(2 * kB * kOP<kD>) * 4;
}

template <typename K>
void allow_smem(K kernel, size_t bytes) {
  ASTRAI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

bool aligned16(const Rows& r) {
  return reinterpret_cast<uintptr_t>(r.base) % 16 == 0 && (r.s_outer * r.esize) % 16 == 0 &&
         (r.s_inner * r.esize) % 16 == 0;
}

Geo geo(const Tensor& q, const Tensor& k, float scale) {
  Geo g;
  g.n = q.shape[0];
  g.heads = int(q.shape[1]);
  g.kv_heads = int(k.shape[1]);
  g.group = g.heads / g.kv_heads;
  g.scale = scale;
  return g;
}

template <int kD>
void forward(cudaStream_t stream, const Rows& q, const Rows& k, const Rows& v, const int32_t* kvb,
             const Geo& g, const Rows& out, float* lse) {
  allow_smem(forward_kernel<kD>, forward_smem<kD>());
  const dim3 grid(unsigned((g.n + kB - 1) / kB), unsigned(g.heads));
  forward_kernel<kD><<<grid, kThreads, forward_smem<kD>(), stream>>>(q, k, v, kvb, g, out, lse);
  ASTRAI_CUDA_LAUNCH_CHECK(forward_kernel);
}

template <int kD>
void backward(cudaStream_t stream, const Rows& dout, const Rows& q, const Rows& k, const Rows& v,
              const int32_t* kvb, const Rows& out, const float* lse, const Geo& g, const Rows& dq,
              const Rows& dk, const Rows& dv, float* delta) {
  allow_smem(dq_kernel<kD>, dq_smem<kD>());
  const dim3 grid_q(unsigned((g.n + kB - 1) / kB), unsigned(g.heads));
  dq_kernel<kD><<<grid_q, kThreads, dq_smem<kD>(), stream>>>(dout, q, k, v, kvb, out, lse, g, dq, delta);
  ASTRAI_CUDA_LAUNCH_CHECK(dq_kernel);
  allow_smem(dkdv_kernel<kD>, dkdv_smem<kD>());
  const dim3 grid_k(unsigned((g.n + kB - 1) / kB), unsigned(g.kv_heads));
  dkdv_kernel<kD><<<grid_k, kThreads, dkdv_smem<kD>(), stream>>>(dout, q, k, v, kvb, lse, delta, g, dk, dv);
  ASTRAI_CUDA_LAUNCH_CHECK(dkdv_kernel);
}

}  // namespace

bool attention_train_mma(cudaStream_t stream, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& kv_begin, float scale, Tensor out, Tensor lse) {
  const int64_t D = q.shape[2];
  if (q.dtype != DType::bf16 || (D != 64 && D != 128)) return false;
  const Rows qv = rows_of(q, "attention_train"), kv = rows_of(k, "attention_train"),
             vv = rows_of(v, "attention_train"), ov = rows_of(out, "attention_train");
  if (!aligned16(qv) || !aligned16(kv) || !aligned16(vv)) return false;
  const Geo g = geo(q, k, scale);
  if (D == 64)
    forward<64>(stream, qv, kv, vv, kv_begin.ptr<int32_t>(), g, ov, lse.ptr<float>());
  else
    forward<128>(stream, qv, kv, vv, kv_begin.ptr<int32_t>(), g, ov, lse.ptr<float>());
  return true;
}

bool attention_train_backward_mma(cudaStream_t stream, const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& kv_begin, const Tensor& out,
                                  const Tensor& lse, float scale, Tensor dq, Tensor dk, Tensor dv,
                                  float* delta) {
  const int64_t D = q.shape[2];
  if (q.dtype != DType::bf16 || (D != 64 && D != 128)) return false;
  const char* op = "attention_train_backward";
  const Rows qv = rows_of(q, op), kv = rows_of(k, op), vv = rows_of(v, op), dov = rows_of(dout, op),
             ov = rows_of(out, op), dqv = rows_of(dq, op), dkv = rows_of(dk, op), dvv = rows_of(dv, op);
  if (!aligned16(qv) || !aligned16(kv) || !aligned16(vv) || !aligned16(dov)) return false;
  const Geo g = geo(q, k, scale);
  if (D == 64)
    backward<64>(stream, dov, qv, kv, vv, kv_begin.ptr<int32_t>(), ov, lse.ptr<float>(), g, dqv, dkv, dvv,
                 delta);
  else
    backward<128>(stream, dov, qv, kv, vv, kv_begin.ptr<int32_t>(), ov, lse.ptr<float>(), g, dqv, dkv, dvv,
                  delta);
  return true;
}

}  // namespace astrai::gpu
