// RoPE (and the q/k RMSNorm before it) of one head row, by a group of lanes: the arithmetic of
// rope_kv_store (rope.cu), shared with the decode attention kernel that applies it itself
// (attention.cu, rope_attention), so the two give the same bits.
#pragma once

#include <cstdint>

#include "gpu/device_util.cuh"
#include "gpu/rows_map.cuh"

namespace astrai::gpu {

// A step's RoPE inputs as rope_kv_store_kernel (rope.cu) and the rope_attention decode kernel
// (attention.cu) read them: token t goes to the table row of positions[t] and the cache slot
// slots[t]. Both are validated by the model; the kernels never read or write outside.
struct RopeStep {
  float eps = 0.0f;                    // the q/k RMSNorm's
  const int32_t* positions = nullptr;  // [T]
  const float* cos_sin = nullptr;      // [max_pos, D]: cos in [0, D/2), sin in [D/2, D)
  int64_t max_pos = 0;
  const int32_t* slots = nullptr;  // [T]
  int64_t n_slots = 0;             // the caches' rows
  // pos's table row of D floats; nullptr outside the table (rope_head then writes NaN).
  __device__ __forceinline__ const float* table_row(int32_t pos, int D) const {
    return pos >= 0 && pos < max_pos ? cos_sin + int64_t(pos) * D : nullptr;
  }
  __device__ __forceinline__ bool slot_ok(int32_t slot) const { return slot >= 0 && slot < n_slots; }
};

// The step's RoPE inputs, on arguments check_rope_kv_store (ops.h) has passed.
inline RopeStep rope_step(const Tensor& positions, const Tensor& cos_sin, const Tensor& slots,
                          const Tensor& k_cache, float eps) {
  RopeStep r;
  r.positions = positions.ptr<int32_t>();
  r.cos_sin = cos_sin.ptr<float>();
  r.max_pos = cos_sin.shape[0];
  r.slots = slots.ptr<int32_t>();
  r.n_slots = k_cache.shape[0];
  r.eps = eps;
  return r;
}

// The pair (x1, x2) of dims (i, i + D/2) rotated by the angle whose f32 (cos, sin) is (cos_f, sin_f).
// Like Hugging Face (cos.to(x.dtype), then q * cos + rotate_half(q) * sin in x's dtype), cos and sin
// are rounded to the storage dtype T and each product and the sum round to T.
template <typename T>
__device__ __forceinline__ void rotate(float& x1, float& x2, float cos_f, float sin_f) {
  const float c = round_to<T>(cos_f), s = round_to<T>(sin_f);
  const float a = round_to<T>(round_to<T>(x1 * c) - round_to<T>(x2 * s));
  x2 = round_to<T>(round_to<T>(x2 * c) + round_to<T>(x1 * s));
  x1 = a;
}

// N consecutive f32 (N > 1: 16-byte aligned, loaded 4 at a time).
template <int N>
__device__ __forceinline__ void load_f32(const float* p, float* f) {
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    if constexpr (N == 1) {
      f[0] = *p;
    } else {
      const float4 v = *reinterpret_cast<const float4*>(p + i);
      f[i] = v.x, f[i + 1] = v.y, f[i + 2] = v.z, f[i + 3] = v.w;
    }
  }
}

// One pair of N-element chunks (dims i.. and half + i..) of a head row, loaded with the table's cos
// and sin (c, s; cs_ok false: a position outside the table) and, when normed, the norm's weights (w1,
// w2) and 1 / rms (inv): normed and rotated, then stored at dst (and at cache when not null).
template <typename T, int N>
__device__ __forceinline__ void rope_pair(float (&x1)[N], float (&x2)[N], const float (&c)[N],
                                          const float (&s)[N], const float (&w1)[N], const float (&w2)[N],
                                          bool normed, float inv, bool cs_ok, T* dst, T* cache, int i,
                                          int half) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    if (normed) {  // the value the unfused rms_norm would have stored
      x1[e] = round_to<T>(round_to<T>(x1[e] * inv) * w1[e]);
      x2[e] = round_to<T>(round_to<T>(x2[e] * inv) * w2[e]);
    }
    if (cs_ok) {
      rotate<T>(x1[e], x2[e], c[e], s[e]);
    } else {
      x1[e] = x2[e] = __int_as_float(0x7fc00000);
    }
  }
  store_vec<T, N>(dst + i, x1);
  store_vec<T, N>(dst + half + i, x2);
  if (cache) {
    store_vec<T, N>(cache + i, x1);
    store_vec<T, N>(cache + half + i, x2);
  }
}

// One head row a[0, D) normed (when w: a / sqrt(mean(a^2) + eps) * w, rounded where rms_norm rounds)
// and rotated by the table row cs (cos in [0, D/2), sin in [D/2, D); nullptr: a position outside the
// table, NaN written), into dst (which may be a) and, when cache is not null, into cache too. The
// `lanes` lanes of group_mask (a power of two, lane = this one's index among them) each take N
// elements at a time (N > 1: 16-byte vectors); the norm's sum of squares is a butterfly over them.
// Every read of a is done before any write. kNorm false: w is ignored (and the norm's registers are
// not taken: rope_kv_store's kernel for models without q/k norms).
// kOnePass with kNorm (a caller's promise that w is not null and 2 * lanes * N == D, each lane holding
// one chunk pair: head_dim 64 and 128 at 16 bytes a lane): the row is read once, its table and weights loaded
// with it before the butterfly; the sum of squares adds in the general loop's order, so both give the same
// bits.
template <typename T, int N, bool kNorm = true, bool kOnePass = false>
__device__ __forceinline__ void rope_head(const T* a, T* dst, T* cache, const T* w, float eps,
                                          const float* cs, int D, int lane, int lanes, unsigned group_mask) {
  const int half = D / 2, step = lanes * N;
  if constexpr (!kNorm) w = nullptr;
  auto butterfly_inv = [&](float ss) {
    for (int o = lanes / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(group_mask, ss, o);
    return rsqrtf(ss / float(D) + eps);
  };
  if constexpr (kOnePass && kNorm) {
    const int i = lane * N;
    float x1[N], x2[N], c[N], s[N], w1[N], w2[N];
    load_vec<T, N>(a + i, x1);
    load_vec<T, N>(a + half + i, x2);
    load_vec<T, N>(w + i, w1);
    load_vec<T, N>(w + half + i, w2);
    if (cs) {
      load_f32<N>(cs + i, c);
      load_f32<N>(cs + half + i, s);
    }
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < N; ++e) ss += x1[e] * x1[e];
#pragma unroll
    for (int e = 0; e < N; ++e) ss += x2[e] * x2[e];
    rope_pair<T, N>(x1, x2, c, s, w1, w2, true, butterfly_inv(ss), cs != nullptr, dst, cache, i, half);
    return;
  }
  float inv = 1.0f;  // the general loop (also a row without norm weights)
  if (w) {
    float ss = 0.0f, x[N];
    for (int i = lane * N; i < D; i += step) {
      load_vec<T, N>(a + i, x);
#pragma unroll
      for (int e = 0; e < N; ++e) ss += x[e] * x[e];
    }
    inv = butterfly_inv(ss);
  }
  for (int i = lane * N; i < half; i += step) {
    float x1[N], x2[N], c[N], s[N], w1[N], w2[N];
    load_vec<T, N>(a + i, x1);
    load_vec<T, N>(a + half + i, x2);
    if (cs) {
      load_f32<N>(cs + i, c);
      load_f32<N>(cs + half + i, s);
    }
    if (w) {
      load_vec<T, N>(w + i, w1);
      load_vec<T, N>(w + half + i, w2);
    }
    rope_pair<T, N>(x1, x2, c, s, w1, w2, w != nullptr, inv, cs != nullptr, dst, cache, i, half);
  }
}

}  // namespace astrai::gpu
