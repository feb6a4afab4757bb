// In-place rotary embedding, Hugging Face rotate-half pairing, one thread per (token, head, i < D/2),
// and its backward (training's rope_backward: the same kernel rotating by -theta).
// The table is f32; like HF (cos.to(x.dtype), then q * cos + rotate_half(q) * sin in x's dtype)
// cos and sin are rounded to the storage dtype T and each product and the sum round to T.
//
// rope_kv_store: the attention prologue of a decoder layer in one kernel (Backend::rope_kv_store),
// a group of lanes per (token, head) over the q, k and v heads: the k and q heads are RMS-normed (when the
// model has q/k norms), rotated and written back, the k heads also into their cache slot, and the v
// heads copied into theirs. Each step rounds to T where the unfused rms_norm, rope and kv_store
// kernels round, so the two paths differ only where the norm's sum of squares adds in another
// order (an ulp of the f32 scale, rarely a bf16 rounding step).
#include <algorithm>
#include <cstdint>
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rope_head.cuh"
#include "gpu/rows.h"
#include "gpu/rows_map.cuh"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

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
        rotate<T>(x1, x2, cs[i], cs[half + i]);
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
  Rows q, k, v;  // [T, heads or kv_heads, D]: head h of token t at t * s_outer + h * s_inner
  int heads, kv_heads, head_dim;
  int lanes_log2;  // log2 of the lanes that share one head (a power of two, at most 32)
  int64_t tokens;
  RopeStep step;
};

// Head h of token t of x.
template <typename T>
__device__ __forceinline__ T* head_ptr(const Rows& x, int64_t t, int h) {
  return reinterpret_cast<T*>(x.base + (t * x.s_outer + int64_t(h) * x.s_inner) * x.esize);
}

// blockIdx.y walks tokens; the threads of blockIdx.x walk the token's heads (q, then k, then v), a
// group of 2^lanes_log2 lanes per head, each lane N elements at a time (N > 1: 16-byte vectors): no
// division anywhere, and rows of 64 or 128 dims take one 16-byte load per lane and half.
// kNorm: the q and k heads are RMS-normed first (q_norm and k_norm not null); kOnePass: each lane
// holds one chunk pair of a head (rope_head).
template <typename T, int N, bool kNorm, bool kOnePass>
__global__ void rope_kv_store_kernel(RopeKvParams p, const T* __restrict__ q_norm,
                                     const T* __restrict__ k_norm, T* __restrict__ k_cache,
                                     T* __restrict__ v_cache) {
  pdl_launch_dependents();  // the decode attention kernel may start loading K/V (gpu/attention.cu)
  const int lanes = 1 << p.lanes_log2, lane = threadIdx.x & (lanes - 1);
  const int j = int(blockIdx.x) * (int(blockDim.x) >> p.lanes_log2) + (int(threadIdx.x) >> p.lanes_log2);
  if (j >= p.heads + 2 * p.kv_heads) return;  // the whole lane group: its shuffles stay within it
  const unsigned group_mask =
      lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u) << ((threadIdx.x % 32) & ~unsigned(lanes - 1));
  const int D = p.head_dim, step = lanes * N;
  const bool is_v = j >= p.heads + p.kv_heads, is_q = j < p.heads;
  const int h = is_q ? j : is_v ? j - p.heads - p.kv_heads : j - p.heads;
  const T* w = is_q ? q_norm : k_norm;
  for (int64_t t = blockIdx.y; t < p.tokens; t += gridDim.y) {
    const int32_t slot = p.step.slots[t];
    const bool slot_ok = p.step.slot_ok(slot);
    const int64_t cache_row = (int64_t(slot) * p.kv_heads + h) * D;
    if (is_v) {  // copy into the cache
      if (!slot_ok) continue;
      const T* src = head_ptr<T>(p.v, t, h);
      float x[N];
      for (int i = lane * N; i < D; i += step) {
        load_vec<T, N>(src + i, x);
        store_vec<T, N>(v_cache + cache_row + i, x);
      }
      continue;
    }
    T* a = is_q ? head_ptr<T>(p.q, t, h) : head_ptr<T>(p.k, t, h);
    rope_head<T, N, kNorm, kOnePass>(a, a, !is_q && slot_ok ? k_cache + cache_row : nullptr, w, p.step.eps,
                                     p.step.table_row(p.step.positions[t], D), D, lane, lanes, group_mask);
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

bool check_rope_kv_store(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* q_norm,
                         const Tensor* k_norm, const Tensor& positions, const Tensor& cos_sin,
                         const Tensor& slots, const Tensor& k_cache, const Tensor& v_cache) {
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
  ASTRAI_GPU_CHECK((H + 2 * KVH) * D < (int64_t(1) << 30), "rope_kv_store: too many heads");
  // 16 bytes per lane when every row, table row and weight allows it.
  const int64_t vec = 16 / int64_t(dtype_size(q.dtype));
  auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  bool use_vec = (D / 2) % vec == 0 && rows_aligned16(rows_of(q, "rope_kv_store")) &&
                 rows_aligned16(rows_of(k, "rope_kv_store")) && rows_aligned16(rows_of(v, "rope_kv_store")) &&
                 aligned16(cos_sin.data) && aligned16(k_cache.data) && aligned16(v_cache.data);
  for (const Tensor* w : {q_norm, k_norm}) use_vec = use_vec && (!w || aligned16(w->data));
  return use_vec;
}

void launch_rope_kv_store(cudaStream_t stream, Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm,
                          const Tensor* k_norm, float eps, const Tensor& positions, const Tensor& cos_sin,
                          const Tensor& slots, Tensor k_cache, Tensor v_cache, bool use_vec) {
  const int64_t T = q.shape[0], H = q.shape[1], KVH = k.shape[1], D = q.shape[2];
  if (T == 0) return;
  RopeKvParams p{rows_of(q, "rope_kv_store"),
                 rows_of(k, "rope_kv_store"),
                 rows_of(v, "rope_kv_store"),
                 int(H),
                 int(KVH),
                 int(D),
                 0,
                 T,
                 rope_step(positions, cos_sin, slots, k_cache, eps)};
  const int64_t vec = 16 / int64_t(dtype_size(q.dtype));
  // Lanes per head: the power of two (at most a warp) nearest below the vectors in half a row.
  const int64_t chunks = (D / 2) / (use_vec ? vec : 1);
  while (p.lanes_log2 < 5 && (int64_t(2) << p.lanes_log2) <= chunks) ++p.lanes_log2;
  // A token's heads split evenly over the fewest blocks of at most 128 threads (llama-1b's 48 heads
  // of 64 dims, 4 lanes each: two blocks of 96; qwen3-8b's of 128, 8 lanes: three of 128), so no lane
  // group idles.
  const int64_t heads = H + 2 * KVH, fit = std::max<int64_t>(1, 128 >> p.lanes_log2);
  const int64_t blocks = (heads + fit - 1) / fit, per_block = (heads + blocks - 1) / blocks;
  const int threads = int(((per_block << p.lanes_log2) + 31) / 32 * 32);
  const dim3 grid(unsigned(blocks), unsigned(std::min<int64_t>(T, 65535)));
  auto launch = [&]<typename E, int N>() {
    const E* qn = q_norm ? q_norm->ptr<E>() : nullptr;
    const E* kn = k_norm ? k_norm->ptr<E>() : nullptr;
    if (!qn)
      rope_kv_store_kernel<E, N, false, false>
          <<<grid, threads, 0, stream>>>(p, qn, kn, k_cache.ptr<E>(), v_cache.ptr<E>());
    else if ((int64_t(2) * N << p.lanes_log2) == D)  // a chunk pair a lane: rope_head's one pass
      rope_kv_store_kernel<E, N, true, true>
          <<<grid, threads, 0, stream>>>(p, qn, kn, k_cache.ptr<E>(), v_cache.ptr<E>());
    else
      rope_kv_store_kernel<E, N, true, false>
          <<<grid, threads, 0, stream>>>(p, qn, kn, k_cache.ptr<E>(), v_cache.ptr<E>());
  };
  if (q.dtype == DType::bf16) {
    if (use_vec)
      launch.template operator()<bf16, 8>();
    else
      launch.template operator()<bf16, 1>();
  } else {
    if (use_vec)
      launch.template operator()<float, 4>();
    else
      launch.template operator()<float, 1>();
  }
  ASTRAI_CUDA_LAUNCH_CHECK(rope_kv_store_kernel);
}

void rope_kv_store(cudaStream_t stream, Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm,
                   const Tensor* k_norm, float eps, const Tensor& positions, const Tensor& cos_sin,
                   const Tensor& slots, Tensor k_cache, Tensor v_cache) {
  const bool use_vec =
      check_rope_kv_store(q, k, v, q_norm, k_norm, positions, cos_sin, slots, k_cache, v_cache);
  launch_rope_kv_store(stream, q, k, v, q_norm, k_norm, eps, positions, cos_sin, slots, k_cache, v_cache,
                       use_vec);
}

void rope(cudaStream_t stream, Tensor x, const Tensor& positions, const Tensor& cos_sin) {
  launch_rope<false>(stream, x, positions, cos_sin, "rope");
}

void rope_backward(cudaStream_t stream, Tensor dx, const Tensor& positions, const Tensor& cos_sin) {
  launch_rope<true>(stream, dx, positions, cos_sin, "rope_backward");
}

}  // namespace astrai::gpu
