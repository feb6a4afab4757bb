// Short vector kernels and the softmax pass the CPU attention ops share (written so that GCC vectorises
// them).
#pragma once

#include <algorithm>
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

// y += alpha * x
inline void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace astrai::cpu
