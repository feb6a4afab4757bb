// Rotary position embedding tables, computed the way Hugging Face transformers computes them for
// Llama / Mistral / Qwen2 / Qwen3 so that HF checkpoints give HF's logits:
//   inv_freq[i] = 1 / theta^(2i / D)                       (default)
//   inv_freq[i] /= factor                                  (rope_scaling "linear": positions / factor)
//   llama3: wavelen = 2*pi / inv_freq; wavelen > old_ctx / low_freq_factor -> inv_freq / factor;
//           wavelen < old_ctx / high_freq_factor -> unchanged; in between a linear blend with
//           s = (old_ctx / wavelen - low) / (high - low): (1 - s) * inv_freq / factor + s * inv_freq.
//   yarn: inv_freq = interpolated (1 / (factor theta^(2i/D))) blended into extrapolated (1 / theta^(2i/D))
//         by a ramp over dims [low, high], the dims whose wavelength turns beta_fast and beta_slow
//         times over the original context; cos and sin are scaled by rope_attention_factor.
// transformers keeps inv_freq in float32 and forms the angle as one float32 product
// position * inv_freq (even for a float64 model); we round the same way, then take cos and sin of
// that float32 angle, so long positions carry HF's own rounding and not a different one.
#pragma once

#include <cstdint>
#include <vector>

#include "src/model/config.h"

namespace astrai {

// inv_freq [head_dim / 2] (float32 values, as HF holds them), scaling applied.
std::vector<float> rope_inv_freq(const ModelConfig& config);

// The factor cos and sin are scaled by (YaRN's attention factor; 1 for the other types).
double rope_attention_factor(const ModelConfig& config);

// The table the Backend's rope op reads: [max_pos, head_dim] f32, row p = cos(p * inv_freq) in
// the first half, sin(p * inv_freq) in the second, each times rope_attention_factor (rotate-half pairing of
// dims i and i + D/2).
std::vector<float> rope_cos_sin_table(const ModelConfig& config, int64_t max_pos);

}  // namespace astrai
