// In-place rotary embedding, Hugging Face rotate-half pairing, one thread per (token, head, i < D/2),
// and its backward (training's rope_backward: the same kernel rotating by -theta).
// The table is f32; like HF (cos.to(x.dtype), then q * cos + rotate_half(q) * sin in x's dtype)
// cos and sin are rounded to the storage dtype T and each product and the sum round to T.
//
// rope_kv_store: the attention prologue of a decoder layer in one kernel (Backend::rope_kv_store),
// one warp per (token, head) over the q, k and v heads: the k and q heads are RMS-normed (when the
// model has q/k norms), rotated and written back, the k heads also into their cache slot, and the v
// heads copied into theirs. Each step rounds to T where the unfused rms_norm, rope and kv_store
// kernels round, so the two paths differ only where the norm's sum of squares adds in another
// order (an ulp of the f32 scale, rarely a bf16 rounding step).
#include <algorithm>
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

// x rotated: the pair (x1, x2) of dims (i, i + D/2) at the angle whose (cos, sin) is cs[i], cs[half + i].
template <typename T>
__device__ __forceinline__ void rotate(float& x1, float& x2, const float* cs, int64_t half, int64_t i) {
  const float c = round_to<T>(cs[i]), s = round_to<T>(cs[half + i]);
  const float a = round_to<T>(round_to<T>(x1 * c) - round_to<T>(x2 * s));
  x2 = round_to<T>(round_to<T>(x2 * c) + round_to<T>(x1 * s));
  x1 = a;
}

// Token t's head h of x [T, heads, D] starts at base + t * s_tok + h * s_head elements.
struct HeadRows {
  char* base;
  int64_t s_tok, s_head, tokens;
  int heads, half;
};

HeadRows head_rows(const Tensor& x) {
  return {static_cast<char*>(x.data), x.stride[0], x.stride[1], x.shape[0], int(x.shape[1]),
          int(x.shape[2] / 2)};
}

// rope (kBackward false) and rope_backward, in place. blockIdx.y walks tokens; the threads of
// blockIdx.x walk the (head, i < D/2) pairs of a token. The backward rotates by -theta with the f32
// table values unrounded (the transpose of the rotation; a gradient has no storage rounding to mimic).
template <typename T, bool kBackward>
__global__ void rope_kernel(HeadRows x, const int32_t* __restrict__ positions,
                            const float* __restrict__ cos_sin, int64_t max_pos) {
  const int half = x.half, per_token = x.heads * half;
  for (int64_t t = blockIdx.y; t < x.tokens; t += gridDim.y) {
    const int32_t p = positions[t];
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < per_token; j += gridDim.x * blockDim.x) {
      const int h = j / half, i = j % half;
      T* a = reinterpret_cast<T*>(x.base + (t * x.s_tok + h * x.s_head) * int64_t(sizeof(T)));
      if (p < 0 || p >= max_pos) {  // the model validated positions; never read outside the table
        a[i] = a[half + i] = from_f32<T>(__int_as_float(0x7fc00000));
        continue;
      }
      const float* cs = cos_sin + int64_t(p) * 2 * half;
      float x1 = to_f32(a[i]), x2 = to_f32(a[half + i]);
      if constexpr (kBackward) {
        const float c = cs[i], s = cs[half + i], d1 = x1;
        x1 = d1 * c + x2 * s;
        x2 = x2 * c - d1 * s;
      } else {
        rotate<T>(x1, x2, cs, half, i);
      }
      a[i] = from_f32<T>(x1);
      a[half + i] = from_f32<T>(x2);
    }
  }
}

template <bool kBackward>
void launch_rope(cudaStream_t stream, const Tensor& x, const Tensor& positions, const Tensor& cos_sin,
                 const char* op) {
  check_tensor(x, op, "x", DType::bf16, DType::f32);
  check_index(positions, op, "positions");
  check_tensor(cos_sin, op, "cos_sin", DType::f32);
  ASTRAI_GPU_CHECK(x.ndim == 3, std::string(op) + ": x must be [T, heads, D], got " + x.shape_str());
  const int64_t T = x.shape[0], H = x.shape[1], D = x.shape[2];
  ASTRAI_GPU_CHECK(
      D % 2 == 0 && cos_sin.ndim == 2 && cos_sin.shape[1] == D && cos_sin.is_contiguous(),
      std::string(op) + ": cos_sin " + cos_sin.shape_str() + " for head_dim " + std::to_string(D));
  ASTRAI_GPU_CHECK(positions.numel() == T, std::string(op) + ": positions size differs from T");
  ASTRAI_GPU_CHECK(H * D < (int64_t(1) << 30), std::string(op) + ": too many heads");
  ASTRAI_GPU_CHECK(x.stride[2] == 1, std::string(op) + ": x needs a contiguous last dim");
  const int64_t per_token = H * (D / 2);
  if (T == 0 || per_token == 0) return;
  const int threads = int(std::min<int64_t>((per_token + 31) / 32 * 32, 256));
  const dim3 grid(unsigned((per_token + threads - 1) / threads), unsigned(std::min<int64_t>(T, 65535)));
  const HeadRows hr = head_rows(x);
  if (x.dtype == DType::bf16)
    rope_kernel<bf16, kBackward>
        <<<grid, threads, 0, stream>>>(hr, positions.ptr<int32_t>(), cos_sin.ptr<float>(), cos_sin.shape[0]);
  else
    rope_kernel<float, kBackward>
        <<<grid, threads, 0, stream>>>(hr, positions.ptr<int32_t>(), cos_sin.ptr<float>(), cos_sin.shape[0]);
  ASTRAI_CUDA_LAUNCH_CHECK(rope_kernel);
}

struct RopeKvParams {
  Rows q, k, v;
  int64_t heads, kv_heads, head_dim, n_rows;  // n_rows: T * (heads + 2 * kv_heads) warps of work
  float eps;
  const int32_t* positions;
  const float* cos_sin;
  int64_t max_pos;
  const int32_t* slots;
  int64_t n_slots;
};

template <typename T>
__global__ void rope_kv_store_kernel(RopeKvParams p, const T* __restrict__ q_norm,
                                     const T* __restrict__ k_norm, T* __restrict__ k_cache,
                                     T* __restrict__ v_cache) {
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;  // warp-uniform
  const int lane = threadIdx.x % 32;
  if (r >= p.n_rows) return;
  const int64_t per = p.heads + 2 * p.kv_heads, t = r / per, j = r % per, D = p.head_dim, half = D / 2;
  const int32_t slot = p.slots[t];
  const bool slot_ok = slot >= 0 && slot < p.n_slots;  // validated by the model; never write outside
  if (j >= p.heads + p.kv_heads) {                     // a v head: copy into the cache
    const int64_t h = j - p.heads - p.kv_heads;
    if (!slot_ok) return;
    const T* src = p.v.row<T>(t * p.kv_heads + h);
    T* dst = v_cache + (int64_t(slot) * p.kv_heads + h) * D;
    for (int64_t i = lane; i < D; i += 32) dst[i] = src[i];
    return;
  }
  const bool is_q = j < p.heads;
  const int64_t h = is_q ? j : j - p.heads;
  T* a = is_q ? p.q.row<T>(t * p.heads + h) : p.k.row<T>(t * p.kv_heads + h);
  const T* w = is_q ? q_norm : k_norm;
  float inv = 1.0f;
  if (w) {
    float ss = 0.0f;
    for (int64_t i = lane; i < D; i += 32) {
      const float x = to_f32(a[i]);
      ss += x * x;
    }
    inv = rsqrtf(warp_sum(ss) / float(D) + p.eps);  // every read of a is done before any write
  }
  // The value the unfused rms_norm would have stored.
  auto normed = [&](int64_t i) {
    const float x = to_f32(a[i]);
    return w ? round_to<T>(round_to<T>(x * inv) * to_f32(w[i])) : x;
  };
  const int32_t pos = p.positions[t];
  T* cache = !is_q && slot_ok ? k_cache + (int64_t(slot) * p.kv_heads + h) * D : nullptr;
  for (int64_t i = lane; i < half; i += 32) {
    float x1 = normed(i), x2 = normed(half + i);
    if (pos < 0 || pos >= p.max_pos) {  // the model validated positions; never read outside the table
      x1 = x2 = __int_as_float(0x7fc00000);
    } else {
      rotate<T>(x1, x2, p.cos_sin + int64_t(pos) * D, half, i);
    }
    a[i] = from_f32<T>(x1);
    a[half + i] = from_f32<T>(x2);
    if (cache) {
      cache[i] = from_f32<T>(x1);
      cache[half + i] = from_f32<T>(x2);
    }
  }
}

void check_cache(const Tensor& c, const char* name, DType dt, int64_t kv_heads, int64_t head_dim) {
  check_tensor(c, "rope_kv_store", name, dt);
  ASTRAI_GPU_CHECK(c.ndim == 3 && c.is_contiguous() && c.shape[1] == kv_heads && c.shape[2] == head_dim,
                   std::string("rope_kv_store: ") + name + " must be a contiguous [slots, " +
                       std::to_string(kv_heads) + ", " + std::to_string(head_dim) + "], got " +
                       c.shape_str());
}

}  // namespace

void rope_kv_store(cudaStream_t stream, Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm,
                   const Tensor* k_norm, float eps, const Tensor& positions, const Tensor& cos_sin,
                   const Tensor& slots, Tensor k_cache, Tensor v_cache) {
  check_tensor(q, "rope_kv_store", "q", DType::bf16, DType::f32);
  check_tensor(k, "rope_kv_store", "k", q.dtype);
  check_tensor(v, "rope_kv_store", "v", q.dtype);
  check_index(positions, "rope_kv_store", "positions");
  check_index(slots, "rope_kv_store", "slots");
  check_tensor(cos_sin, "rope_kv_store", "cos_sin", DType::f32);
  ASTRAI_GPU_CHECK(q.ndim == 3 && k.ndim == 3 && v.ndim == 3 && k.shape == v.shape &&
                       q.shape[0] == k.shape[0] && q.shape[2] == k.shape[2],
                   "rope_kv_store: q [T, H, D], k and v [T, KVH, D], got q " + q.shape_str() + " k " +
                       k.shape_str() + " v " + v.shape_str());
  const int64_t T = q.shape[0], H = q.shape[1], KVH = k.shape[1], D = q.shape[2];
  ASTRAI_GPU_CHECK(D % 2 == 0 && cos_sin.ndim == 2 && cos_sin.shape[1] == D && cos_sin.is_contiguous(),
                   "rope_kv_store: cos_sin " + cos_sin.shape_str() + " for head_dim " + std::to_string(D));
  ASTRAI_GPU_CHECK(positions.numel() == T && slots.numel() == T,
                   "rope_kv_store: positions and slots need one entry per token");
  ASTRAI_GPU_CHECK((q_norm == nullptr) == (k_norm == nullptr),
                   "rope_kv_store: q_norm and k_norm go together");
  for (const Tensor* w : {q_norm, k_norm})
    if (w) {
      check_tensor(*w, "rope_kv_store", "q/k norm weight", q.dtype);
      ASTRAI_GPU_CHECK(w->numel() == D && w->is_contiguous(),
                       "rope_kv_store: norm weight " + w->shape_str() + " for head_dim " + std::to_string(D));
    }
  check_cache(k_cache, "k_cache", q.dtype, KVH, D);
  check_cache(v_cache, "v_cache", q.dtype, KVH, D);
  ASTRAI_GPU_CHECK(k_cache.shape[0] == v_cache.shape[0],
                   "rope_kv_store: k_cache and v_cache differ in slots");
  RopeKvParams p{rows_of(q, "rope_kv_store"),
                 rows_of(k, "rope_kv_store"),
                 rows_of(v, "rope_kv_store"),
                 H,
                 KVH,
                 D,
                 T * (H + 2 * KVH),
                 eps,
                 positions.ptr<int32_t>(),
                 cos_sin.ptr<float>(),
                 cos_sin.shape[0],
                 slots.ptr<int32_t>(),
                 k_cache.shape[0]};
  if (p.n_rows == 0) return;
  constexpr int kWarpsPerBlock = 4;
  const unsigned blocks = unsigned((p.n_rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (q.dtype == DType::bf16)
    rope_kv_store_kernel<bf16><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        p, q_norm ? q_norm->ptr<bf16>() : nullptr, k_norm ? k_norm->ptr<bf16>() : nullptr,
        k_cache.ptr<bf16>(), v_cache.ptr<bf16>());
  else
    rope_kv_store_kernel<float><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        p, q_norm ? q_norm->ptr<float>() : nullptr, k_norm ? k_norm->ptr<float>() : nullptr,
        k_cache.ptr<float>(), v_cache.ptr<float>());
  ASTRAI_CUDA_LAUNCH_CHECK(rope_kv_store_kernel);
}

void rope(cudaStream_t stream, Tensor x, const Tensor& positions, const Tensor& cos_sin) {
  launch_rope<false>(stream, x, positions, cos_sin, "rope");
}

void rope_backward(cudaStream_t stream, Tensor dx, const Tensor& positions, const Tensor& cos_sin) {
  launch_rope<true>(stream, dx, positions, cos_sin, "rope_backward");
}

}  // namespace astrai::gpu
