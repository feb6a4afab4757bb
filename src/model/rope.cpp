#include "src/model/rope.h"

#include <cmath>

namespace astrai {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t D = c.head_dim, half = D / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // torch: arange(0, D, 2).float() / D, then base ** that, then 1 / that, all float32.
    const float expo = float(2 * i) / float(D);
    inv[i] = float(1.0 / std::pow(c.rope_theta, double(expo)));
  }
  const RopeScaling& rs = c.rope_scaling;
  switch (rs.type) {
    case RopeScaling::Type::none: break;
    case RopeScaling::Type::linear:
      for (auto& f : inv) f = float(double(f) / rs.factor);
      break;
    case RopeScaling::Type::llama3: {
      const double old_ctx = double(rs.original_max_position_embeddings);
      const double low_wavelen = old_ctx / rs.low_freq_factor, high_wavelen = old_ctx / rs.high_freq_factor;
      for (auto& f : inv) {
        const double wavelen = 2.0 * M_PI / double(f);
        if (wavelen > low_wavelen) {
          f = float(double(f) / rs.factor);
        } else if (wavelen >= high_wavelen) {  // medium band: blend
          const double s =
              (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
          f = float((1.0 - s) * double(f) / rs.factor + s * double(f));
        }
      }
      break;
    }
  }
  return inv;
}

std::vector<float> rope_cos_sin_table(const ModelConfig& c, int64_t max_pos) {
  const int64_t D = c.head_dim, half = D / 2;
  const std::vector<float> inv = rope_inv_freq(c);
  std::vector<float> table(static_cast<size_t>(max_pos * D));
  for (int64_t p = 0; p < max_pos; ++p) {
    float* row = &table[size_t(p * D)];
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(p) * inv[i];  // one float32 product, as HF's matmul forms it
      row[i] = float(std::cos(double(angle)));
      row[half + i] = float(std::sin(double(angle)));
    }
  }
  return table;
}

}  // namespace astrai
