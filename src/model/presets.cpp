// The presets of the contract. Shapes follow the published models so parameter counts match
// (Llama-3.2-1B: 1.236B, Qwen3-0.6B: 0.596B with tied embeddings, Qwen3-8B: 8.19B).
#include <string>

#include "src/model/config.h"

namespace astrai {
namespace {

// The built-in byte tokenizer: 256 bytes, <|endoftext|> 256, <|im_start|> 257, <|im_end|> 258.
constexpr int32_t kBuiltinImEnd = 258;

ModelConfig tiny() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 320;  // 259 tokens, rounded up to a multiple of 64
  c.hidden_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 256;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 4096;
  c.eos_token_ids = {kBuiltinImEnd};
  c.torch_dtype = "float32";
  return c;
}

// The model scripts/train-brown trains on the Brown corpus and scripts/serve serves (models/brown):
// tiny's byte tokenizer and widths, one more layer and a wider MLP (0.63M parameters). On 2 CPU
// cores it trains at about half tiny's tokens/s; docs/training.md says why this size.
ModelConfig brown() {
  ModelConfig c = tiny();
  c.num_layers = 3;
  c.intermediate_size = 384;
  return c;
}

ModelConfig llama_1b() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 128256;
  c.hidden_size = 2048;
  c.num_layers = 16;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.intermediate_size = 8192;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScaling::Type::llama3;
  c.rope_scaling.factor = 32.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 131072;
  c.eos_token_ids = {kBuiltinImEnd};
  c.torch_dtype = "bfloat16";
  return c;
}

ModelConfig qwen3(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn, bool tied) {
  ModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.model_type = "qwen3";
  c.vocab_size = 151936;
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = ffn;
  c.qk_norm = true;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = tied;
  c.max_position_embeddings = 40960;
  c.eos_token_ids = {kBuiltinImEnd};
  c.torch_dtype = "bfloat16";
  return c;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny", "llama-1b", "qwen3-0.6b", "qwen3-8b", "brown"};
}

std::string preset_list() {
  std::string s;
  for (const std::string& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

Result<ModelConfig> preset_config(std::string_view name) {
  if (name == "tiny") return tiny();
  if (name == "llama-1b") return llama_1b();
  if (name == "brown") return brown();
  if (name == "qwen3-0.6b") return qwen3(28, 1024, 16, 3072, true);
  if (name == "qwen3-8b") return qwen3(36, 4096, 32, 12288, false);
  std::string list;
  for (const std::string& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
  return not_found("unknown preset '" + std::string(name) + "' (presets: " + list + ")");
}

}  // namespace astrai
