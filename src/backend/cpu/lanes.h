// The dot-product tiles the CPU's batch-invariant kernels share (linear.cpp, attention.cpp,
// attention_train.cpp), and the instruction-set paths they are compiled for (Isa, ops.h).
//
// Each dot product over K runs in kLanes interleaved partial sums (lane l adds k = l, l + kLanes,
// ... in order; a K tail is zero-padded), summed in a fixed tree: a plain multiply and add per
// term, never an FMA (the AVX-512 path's target has FMA; see below), so every path and every tile
// shape gives identical bits. A file that includes this header defines each kernel's entry once
// per path: the same always-inline template under `ASTRAI_ISA_AVX2` / `ASTRAI_ISA_AVX512` (x86-64
// only) and with no target (the baseline), each with the tile that fits that path's registers
// (MR x NR accumulators, NR w vectors and one x vector live at once: AVX-512VL's 32 vector
// registers, AVX2's 16, the baseline's 16 SSE registers holding an 8-lane vector in two), and
// ASTRAI_ISA_PICK (below) picks the entry at run time from the CPU's features (no ifunc, so
// ThreadSanitizer builds run the same paths).
#pragma once

#include <cstdint>
#include <cstring>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/vec.h"

// The helpers below pass 32-byte vectors by value; they are always inlined, so no call crosses an
// ABI boundary and GCC's note that the AVX and SSE ABIs pass them differently does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

// Each term is one multiply and one add, never fused, even in a build for an FMA target: on every
// entry of a path (GCC), and for the whole file that includes this header (clang).
#if defined(__clang__)
#pragma clang fp contract(off)
#define ASTRAI_NO_FP_CONTRACT
#else
#define ASTRAI_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#endif
#if defined(__x86_64__)
#define ASTRAI_ISA_AVX2 __attribute__((target("avx2"))) ASTRAI_NO_FP_CONTRACT
#define ASTRAI_ISA_AVX512 __attribute__((target("avx2,avx512f,avx512vl"))) ASTRAI_NO_FP_CONTRACT
#endif

namespace astrai::cpu::lanes {

constexpr int kLanes = 8;
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));

[[gnu::always_inline]] inline Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Eight bf16 values (raw bits, as dtype.h stores them) widened to f32: exact, so a tile over bf16
// weights gives the bits the same tile gives over f32 copies of them. Written element by element,
// which GCC turns into one vpmovzxwd from memory and a shift on the AVX2 and AVX-512 paths
// (__builtin_convertvector of a 16-byte vector it builds from two 8-byte halves, three more
// instructions).
[[gnu::always_inline]] inline Lanes load(const uint16_t* p) {
  static_assert(kLanes == 8);
  using Words = uint32_t __attribute__((vector_size(kLanes * sizeof(uint32_t))));
  Words w = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
  w <<= 16;
  Lanes v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}

// The first n < kLanes values of p widened to f32 into t (the rest left as they are): a K tail.
[[gnu::always_inline]] inline void load_tail(float* t, const float* p, int64_t n) {
  std::memcpy(t, p, size_t(n) * sizeof(float));
}
[[gnu::always_inline]] inline void load_tail(float* t, const uint16_t* p, int64_t n) {
  widen_bf16(p, t, n);
}

[[gnu::always_inline]] inline void store(float* p, Lanes v) {
  std::memcpy(p, &v, sizeof v);
}

// The fixed reduction of one element's lanes.
[[gnu::always_inline]] inline float sum(Lanes a) {
  static_assert(kLanes == 8);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// out[i * ldc + j] = bias[j] + x_i . w_j (no bias: the dot alone) for the MR x NR tile of rows x_i
// (x + i * lda) and w_j (w + j * ldw), each of K values. TW: the weights' element, float or
// uint16_t (bf16 bits, widened as they load: the same bits as over their f32 copies).
template <int64_t MR, int64_t NR, typename TW = float>
[[gnu::always_inline]] inline void tile(int64_t K, const float* x, int64_t lda, const TW* w, int64_t ldw,
                                        const float* bias, float* out, int64_t ldc) {
  Lanes acc[MR][NR] = {};
  const int64_t K8 = K / kLanes * kLanes;
  for (int64_t k = 0; k < K8; k += kLanes) {
    Lanes wv[NR];
    for (int64_t j = 0; j < NR; ++j) wv[j] = load(w + j * ldw + k);
    for (int64_t i = 0; i < MR; ++i) {
      const Lanes xv = load(x + i * lda + k);
      for (int64_t j = 0; j < NR; ++j) acc[i][j] += xv * wv[j];
    }
  }
  if (K8 < K) {
    float xt[MR][kLanes] = {}, wt[NR][kLanes] = {};
    for (int64_t i = 0; i < MR; ++i) std::memcpy(xt[i], x + i * lda + K8, size_t(K - K8) * sizeof(float));
    for (int64_t j = 0; j < NR; ++j) load_tail(wt[j], w + j * ldw + K8, K - K8);
    for (int64_t i = 0; i < MR; ++i)
      for (int64_t j = 0; j < NR; ++j) acc[i][j] += load(xt[i]) * load(wt[j]);
  }
  for (int64_t i = 0; i < MR; ++i)
    for (int64_t j = 0; j < NR; ++j) {
      const float dot = sum(acc[i][j]);
      out[i * ldc + j] = bias ? bias[j] + dot : dot;
    }
}

// An edge tile of mr <= MR rows and nr <= NR columns: the same per-element code at that shape.
template <int64_t MR, int64_t NR, typename TW = float>
[[gnu::always_inline]] inline void edge_tile(int64_t mr, int64_t nr, int64_t K, const float* x, int64_t lda,
                                             const TW* w, int64_t ldw, const float* bias, float* out,
                                             int64_t ldc) {
  if constexpr (NR > 1) {
    if (nr < NR) return edge_tile<MR, NR - 1, TW>(mr, nr, K, x, lda, w, ldw, bias, out, ldc);
  }
  if constexpr (MR > 1) {
    if (mr < MR) return edge_tile<MR - 1, NR, TW>(mr, nr, K, x, lda, w, ldw, bias, out, ldc);
  }
  tile<MR, NR, TW>(K, x, lda, w, ldw, bias, out, ldc);
}

// x . w over K values: one tile element's arithmetic (the bits any tile gives that element).
[[gnu::always_inline]] inline float dot(const float* x, const float* w, int64_t K) {
  float out;
  tile<1, 1>(K, x, 0, w, 0, nullptr, &out, 0);
  return out;
}

// The entry of a kernel for `isa` (checked_isa: `best` resolved, a path this CPU lacks refused with
// an error naming `op`), among its three: name_baseline, name_avx2 and name_avx512 (x86-64 only).
template <typename Fn>
Fn pick_path(Isa isa, const char* op, Fn baseline, Fn avx2, Fn avx512) {
  switch (checked_isa(isa, op)) {
    case Isa::avx512: return avx512;
    case Isa::avx2: return avx2;
    default: return baseline;
  }
}

}  // namespace astrai::cpu::lanes

#if defined(__x86_64__)
#define ASTRAI_ISA_PICK(isa, op, name) \
  ::astrai::cpu::lanes::pick_path(isa, op, name##_baseline, name##_avx2, name##_avx512)
#else
#define ASTRAI_ISA_PICK(isa, op, name) \
  ::astrai::cpu::lanes::pick_path(isa, op, name##_baseline, name##_baseline, name##_baseline)
#endif
