// The CPU's attention of a block of query rows over their causal keys in register tiles, shared by
// paged_attention (attention.cpp: keys through a page table) and the training forward
// (attention_train.cpp: contiguous keys, one page). See attention.cpp's header for the arithmetic
// and why a row's bits do not depend on its block.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "src/backend/cpu/lanes.h"
#include "src/backend/cpu/vec.h"

namespace astrai::cpu::tiles {

// Query rows a task takes at most (paged_attention's prefill blocks, the training forward's).
constexpr int64_t kQueryBlock = 16;

// One task's operands: rows q_i = q + i * ldq (i < nr) see keys [0, pos0 + i]; the keys of the
// block are [0, n_keys) with n_keys = pos0 + nr, key j at k + slot(j) * ld_k and v + slot(j) * ld_v; out_i =
// out + i * ldo.
struct Task {
  const float* q;
  int64_t ldq, nr, pos0, n_keys, D;
  const int32_t* pages;
  int64_t page_size;
  const float* k;
  const float* v;
  int64_t ld_k, ld_v;  // row strides of k and v
  float* out;
  int64_t ldo;
  float scale;
  float* scores;         // [nr, n_keys]
  float* lse = nullptr;  // when set: row i's log-sum-exp of its scaled scores at lse[i * ld_lse]
  int64_t ld_lse = 0;
};

// Output elements [d0, d0 + DC * kLanes) of rows [i0, i0 + RM): sum over the keys in order of
// p_ij * v_j, in DC vectors per row.
template <int64_t RM, int64_t DC>
[[gnu::always_inline]] inline void pv_tile(const Task& t, int64_t i0, int64_t d0) {
  using lanes::Lanes;
  Lanes acc[RM][DC] = {};
  const int64_t keys = t.pos0 + i0 + RM;  // the last row's prefix; later keys have p = 0 for all
  for (int64_t j0 = 0; j0 < keys; j0 += t.page_size) {
    const float* vp = t.v + int64_t(t.pages[j0 / t.page_size]) * t.page_size * t.ld_v + d0;
    const int64_t n = std::min(t.page_size, keys - j0);
    for (int64_t jj = 0; jj < n; ++jj) {
      Lanes vv[DC];
      for (int64_t c = 0; c < DC; ++c) vv[c] = lanes::load(vp + jj * t.ld_v + c * lanes::kLanes);
      for (int64_t i = 0; i < RM; ++i) {
        const float p = t.scores[(i0 + i) * t.n_keys + j0 + jj];
        for (int64_t c = 0; c < DC; ++c) acc[i][c] += vv[c] * p;
      }
    }
  }
  for (int64_t i = 0; i < RM; ++i)
    for (int64_t c = 0; c < DC; ++c)
      lanes::store(t.out + (i0 + i) * t.ldo + d0 + c * lanes::kLanes, acc[i][c]);
}

template <int64_t RM, int64_t DC>
[[gnu::always_inline]] inline void pv_rows(const Task& t, int64_t i0, int64_t rm, int64_t d0) {
  if constexpr (RM > 1) {
    if (rm < RM) return pv_rows<RM - 1, DC>(t, i0, rm, d0);
  }
  pv_tile<RM, DC>(t, i0, d0);
}

// One task (see Task) with score tiles of MR rows x NR keys and V tiles of RM rows x DC vectors.
template <int64_t MR, int64_t NR, int64_t RM, int64_t DC>
[[gnu::always_inline]] inline void attend(const Task& t) {
  const int64_t D = t.D, nk = t.n_keys;
  // Scores: every block row against every key of the block, page by page.
  for (int64_t j0 = 0; j0 < nk; j0 += t.page_size) {
    const float* kp = t.k + int64_t(t.pages[j0 / t.page_size]) * t.page_size * t.ld_k;
    const int64_t n = std::min(t.page_size, nk - j0);
    for (int64_t jj = 0; jj < n; jj += NR)
      for (int64_t i = 0; i < t.nr; i += MR)
        lanes::edge_tile<MR, NR>(std::min(MR, t.nr - i), std::min(NR, n - jj), D, t.q + i * t.ldq, t.ldq,
                                 kp + jj * t.ld_k, t.ld_k, nullptr, t.scores + i * nk + j0 + jj, nk);
  }
  // Softmax per row over its causal prefix; the keys past it get probability 0.
  for (int64_t i = 0; i < t.nr; ++i) {
    float* row = t.scores + i * nk;
    const int64_t n = t.pos0 + i + 1;
    for (int64_t j = 0; j < n; ++j) row[j] *= t.scale;
    const ExpSum e = exp_shifted(row, n);
    const float inv = 1.0f / e.sum;
    if (t.lse) t.lse[i * t.ld_lse] = e.max + std::log(e.sum);
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    std::fill(row + n, row + nk, 0.0f);
  }
  // Weighted sum of V: whole vectors of D in tiles, the tail element by element (the same
  // multiply and add per element, in key order).
  const int64_t D_vec = D / (DC * lanes::kLanes) * (DC * lanes::kLanes);
  for (int64_t i = 0; i < t.nr; i += RM) {
    const int64_t rm = std::min(RM, t.nr - i);
    for (int64_t d0 = 0; d0 < D_vec; d0 += DC * lanes::kLanes) pv_rows<RM, DC>(t, i, rm, d0);
    for (int64_t d0 = D_vec; d0 + lanes::kLanes <= D; d0 += lanes::kLanes) pv_rows<RM, 1>(t, i, rm, d0);
    for (int64_t d = D / lanes::kLanes * lanes::kLanes; d < D; ++d)
      for (int64_t r = i; r < i + rm; ++r) {
        const int64_t keys = t.pos0 + i + rm;
        float acc = 0.0f;
        for (int64_t j = 0; j < keys; ++j) {
          const int64_t slot = int64_t(t.pages[j / t.page_size]) * t.page_size + j % t.page_size;
          acc += t.v[slot * t.ld_v + d] * t.scores[r * nk + j];
        }
        t.out[r * t.ldo + d] = acc;
      }
  }
}

// The paths (lanes.h); every one computes the same bits.
ASTRAI_NO_FP_CONTRACT inline void attend_baseline(const Task& t) {
  attend<4, 3, 2, 2>(t);
}
#if defined(__x86_64__)
ASTRAI_ISA_AVX2 inline void attend_avx2(const Task& t) {
  attend<3, 3, 3, 3>(t);
}
ASTRAI_ISA_AVX512 inline void attend_avx512(const Task& t) {
  attend<6, 4, 6, 4>(t);
}
#endif

}  // namespace astrai::cpu::tiles
