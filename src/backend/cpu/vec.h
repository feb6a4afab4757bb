// Short vector kernels and the softmax pass the CPU attention ops share (written so that GCC vectorises
// them).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace astrai::cpu {

// The first pass of a softmax over n > 0 scores: row[j] = exp(row[j] - max), summed in order.
struct ExpSum {
  float max, sum;
};
inline ExpSum exp_shifted(float* row, int64_t n) {
  float m = row[0];
  for (int64_t j = 1; j < n; ++j) m = std::max(m, row[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    row[j] = std::exp(row[j] - m);
    sum += row[j];
  }
  return {m, sum};
}

// out[i] = in[i] for i < n, bf16 bits widened to f32 (exact: they become the high half). One loop for
// every widening of bf16 on the CPU (weights as they load, the embedding's rows, linear's panels);
// always inlined so that it vectorises under the caller's instruction set.
[[gnu::always_inline]] inline void widen_bf16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t(in[i]) << 16);
}

// y += alpha * x
inline void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace astrai::cpu
