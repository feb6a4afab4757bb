// The Hugging Face tensor names of the Llama / Mistral / Qwen2 / Qwen3 decoders, and the loader
// check that finds every one of them in a WeightStore with the shape the config implies.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/core/status.h"
#include "src/model/config.h"
#include "src/model/safetensors.h"

namespace astrai {

// Pointers into the WeightStore (valid while it lives). Optional tensors are nullptr when the
// architecture has none: q/k/v_bias without attention_bias, o_bias without o_proj_bias,
// q/k_norm without qk_norm.
struct LayerWeightRefs {
  const SafeTensor *input_norm = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  const SafeTensor *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr, *o_bias = nullptr;
  const SafeTensor *q_norm = nullptr, *k_norm = nullptr;
  const SafeTensor *post_norm = nullptr, *gate = nullptr, *up = nullptr, *down = nullptr;
};

struct WeightRefs {
  const SafeTensor *embed = nullptr, *final_norm = nullptr;
  const SafeTensor* lm_head = nullptr;  // == embed when tie_word_embeddings
  std::vector<LayerWeightRefs> layers;
};

// Every tensor the config needs, in file order (embedding, layers, final norm, lm_head unless
// tied), with its HF name and shape [out, in] for linear layers.
std::vector<std::pair<std::string, std::vector<int64_t>>> weight_shapes(const ModelConfig& config);

// Finds and shape-checks every tensor; dtypes must be F32, BF16 or F16. With tied embeddings an
// lm_head.weight in the file is ignored. Errors name the file and tensor.
Result<WeightRefs> resolve_weights(const ModelConfig& config, const WeightStore& store);

}  // namespace astrai
