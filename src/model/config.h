// ModelConfig: the shape of a decoder-only model, read from a Hugging Face config.json
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) or built from a preset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/dtype.h"
#include "src/core/status.h"

namespace astrai {

struct RopeScaling {
  enum class Type { none, linear, llama3, yarn } type = Type::none;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  // llama3; yarn (0 there: the config's max_position_embeddings)
  int64_t original_max_position_embeddings = 8192;
  // yarn: the ramp between interpolated and kept frequencies runs from beta_fast to beta_slow
  // rotations over the original context (bounds rounded outwards unless truncate is false); cos and
  // sin are scaled by attention_factor (0: 0.1 ln(factor) + 1, or with mscale and mscale_all_dim
  // the ratio of two such terms, as transformers derives it).
  double beta_fast = 32.0, beta_slow = 1.0;
  double attention_factor = 0.0, mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;
};

// An fp8 checkpoint's weight format (config.json's quantization_config), which the loader widens
// to the compute dtype (src/model/weights.h): its matrices are e4m3 with a scale tensor each.
//   method "fp8" (transformers' and DeepSeek's fine-grained format: 128 x 128 blocks,
//     `weight_scale_inv`; or AutoFP8's one `weight_scale` per matrix) or "compressed-tensors"
//     (llm-compressor's float-quantized weights: `weight_scale` per matrix, row or block);
//   block_rows / block_cols: the scale blocks where the config names them (weight_block_size,
//     block_structure), else 0; a scale of one value or one per row needs none.
// Activations stay in the compute dtype (the quantization_config's activation scheme is not
// applied), so outputs are those of the widened weights. Empty method: not quantized.
struct WeightQuantization {
  std::string method;
  int64_t block_rows = 0, block_cols = 0;
};
// What loading does with such weights, for the logs: "fp8 weights (quant_method fp8) widened to
// bf16 at load; activations in bf16" ("" when not quantized); kept: the projections stay fp8
// (LoadOptions::keep_fp8 on a backend that takes them).
std::string quantization_note(const WeightQuantization& q, DType compute, bool kept = false);

struct ModelConfig {
  std::string architecture;  // e.g. "Qwen3ForCausalLM"
  std::string model_type;    // e.g. "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // explicit key when present, else hidden / heads
  int64_t intermediate_size = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections have bias (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  // o_proj has a bias too: transformers' Llama and Qwen3 put `attention_bias` on all four
  // projections, Qwen2 only on q/k/v.
  bool o_proj_bias = false;
  // Mistral-style sliding-window attention span (0: full attention). Recorded, not applied yet:
  // it only matters beyond `sliding_window` tokens.
  int64_t sliding_window = 0;
  int64_t max_position_embeddings = 2048;
  std::vector<int32_t> bos_token_ids, eos_token_ids;
  std::string torch_dtype = "float32";
  // Not written back by to_json: a model this runtime saves holds widened weights.
  WeightQuantization quantization;

  static Result<ModelConfig> from_json(std::string_view json_text,
                                       std::string_view source_name = "config.json");
  static Result<ModelConfig> load(const std::filesystem::path& model_dir);
  // The config.json text Hugging Face transformers loads back to the same model.
  std::string to_json() const;
  Status validate() const;

  // The longest sequence the model takes: max_position_embeddings, or with YaRN the original
  // context times the factor where that is longer (as vLLM derives it: Qwen3's 32,768 x 4).
  int64_t max_context() const;
  // YaRN's original context, the one its ramp is measured over: rope_scaling's
  // original_max_position_embeddings, else max_position_embeddings.
  int64_t yarn_original_context() const;
  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t num_parameters() const;
};

// Presets of the contract (tiny, llama-1b, qwen3-0.6b, qwen3-8b) and brown (models/brown's shape).
Result<ModelConfig> preset_config(std::string_view name);
std::vector<std::string> preset_names();
std::string preset_list();  // "tiny, llama-1b, ...": the names for help texts and errors

}  // namespace astrai
