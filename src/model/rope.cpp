#include "src/model/rope.h"

#include <algorithm>
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
    case RopeScaling::Type::yarn: {
      // In float32 as transformers forms it: pos = theta^(2i / D), extrapolated 1 / pos,
      // interpolated 1 / (factor pos), blended by a ramp over the dims the original context turns
      // between beta_fast and beta_slow times.
      const double orig = double(c.yarn_original_context());
      auto dim_at = [&](double rotations) {  // the dim whose wavelength fits `rotations` into orig
        return double(D) * std::log(orig / (rotations * 2.0 * M_PI)) / (2.0 * std::log(c.rope_theta));
      };
      double low = dim_at(rs.beta_fast), high = dim_at(rs.beta_slow);
      if (rs.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, double(D - 1));
      if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
      const float factor = float(rs.factor), span = float(high - low), lowf = float(low);
      for (int64_t i = 0; i < half; ++i) {
        const float pos = std::pow(float(c.rope_theta), float(2 * i) / float(D));
        const float extrapolated = 1.0f / pos, interpolated = 1.0f / (factor * pos);
        const float ramp = std::clamp((float(i) - lowf) / span, 0.0f, 1.0f);
        const float keep = 1.0f - ramp;  // the extrapolated share
        inv[i] = interpolated * (1.0f - keep) + extrapolated * keep;
      }
      break;
    }
  }
  return inv;
}

double rope_attention_factor(const ModelConfig& c) {
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type != RopeScaling::Type::yarn) return 1.0;
  if (rs.attention_factor > 0) return rs.attention_factor;
  auto mscale = [&](double m) { return rs.factor <= 1.0 ? 1.0 : 0.1 * m * std::log(rs.factor) + 1.0; };
  if (rs.mscale > 0 && rs.mscale_all_dim > 0) return mscale(rs.mscale) / mscale(rs.mscale_all_dim);
  return mscale(1.0);
}

std::vector<float> rope_cos_sin_table(const ModelConfig& c, int64_t max_pos) {
  const int64_t D = c.head_dim, half = D / 2;
  const std::vector<float> inv = rope_inv_freq(c);
  const float scale = float(rope_attention_factor(c));
  std::vector<float> table(static_cast<size_t>(max_pos * D));
  for (int64_t p = 0; p < max_pos; ++p) {
    float* row = &table[size_t(p * D)];
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(p) * inv[i];  // one float32 product, as HF's matmul forms it
      row[i] = float(std::cos(double(angle))) * scale;
      row[half + i] = float(std::sin(double(angle))) * scale;
    }
  }
  return table;
}

}  // namespace astrai
