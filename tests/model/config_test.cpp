// ModelConfig: realistic config.json texts of each supported architecture, rope_scaling variants,
// errors, presets, and the to_json round trip (checked by Python's json as well).
#include "src/model/config.h"

#include <catch2/catch.hpp>

#include "tools/test_util.h"

using namespace astrai;
using astrai::test::TempDir;

namespace {

// As published on the Hub (meta-llama/Llama-3.2-1B).
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// mistralai/Mistral-7B-v0.1
const char* kMistral7B = R"({
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// Qwen/Qwen2.5-0.5B
const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 24,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "use_mrope": false,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Qwen/Qwen3-0.6B
const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// A config text with one top-level key replaced (or removed when value is empty).
std::string with_key(std::string json, const std::string& key, const std::string& value) {
  const std::string k = "\"" + key + "\":";
  size_t at = json.find(k);
  if (at == std::string::npos) {
    REQUIRE(!value.empty());
    return "{\"" + key + "\": " + value + "," + json.substr(json.find('{') + 1);
  }
  // The value ends at the comma / brace closing it (values here are flat or one-level objects).
  size_t v = at + k.size(), depth = 0, end = v;
  for (; end < json.size(); ++end) {
    char c = json[end];
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') {
      if (depth == 0) break;
      --depth;
    }
    if (c == ',' && depth == 0) break;
  }
  if (value.empty()) {
    if (json[end] == ',') return json.substr(0, at) + json.substr(end + 1);
    const size_t comma = json.rfind(',', at);  // the last key: drop the comma before it
    return json.substr(0, comma) + json.substr(end);
  }
  return json.substr(0, v) + " " + value + json.substr(end);
}

std::string error_of(const std::string& json) {
  auto r = ModelConfig::from_json(json, "my/config.json");
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

}  // namespace

TEST_CASE("Llama-3.2-1B's config.json parses with llama3 rope scaling", "[unit]") {
  ModelConfig c = ModelConfig::from_json(kLlama32_1B).value();
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK(c.model_type == "llama");
  CHECK(c.vocab_size == 128256);
  CHECK(c.hidden_size == 2048);
  CHECK(c.num_layers == 16);
  CHECK(c.num_heads == 32);
  CHECK(c.num_kv_heads == 8);
  CHECK(c.head_dim == 64);
  CHECK(c.intermediate_size == 8192);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling.type == RopeScaling::Type::llama3);
  CHECK(c.rope_scaling.factor == 32.0);
  CHECK(c.rope_scaling.low_freq_factor == 1.0);
  CHECK(c.rope_scaling.high_freq_factor == 4.0);
  CHECK(c.rope_scaling.original_max_position_embeddings == 8192);
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.max_position_embeddings == 131072);
  CHECK(c.bos_token_ids == std::vector<int32_t>{128000});
  CHECK(c.eos_token_ids == std::vector<int32_t>{128001});
  CHECK(c.torch_dtype == "bfloat16");
  // Published size: 1.24B parameters.
  CHECK(c.num_parameters() == 1235814400);
}

TEST_CASE("Mistral-7B's config.json parses with head_dim derived from hidden / heads", "[unit]") {
  ModelConfig c = ModelConfig::from_json(kMistral7B).value();
  CHECK(c.architecture == "MistralForCausalLM");
  CHECK(c.head_dim == 128);
  CHECK(c.num_kv_heads == 8);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.sliding_window == 4096);
  CHECK(c.rope_scaling.type == RopeScaling::Type::none);
  CHECK(c.num_parameters() == 7241732096);  // Mistral-7B-v0.1: 7.24B
  // v0.3 writes sliding_window: null, meaning full attention.
  CHECK(ModelConfig::from_json(with_key(kMistral7B, "sliding_window", "null")).value().sliding_window == 0);
}

TEST_CASE("Qwen2.5-0.5B's config.json parses with q/k/v bias", "[unit]") {
  ModelConfig c = ModelConfig::from_json(kQwen25_05B).value();
  CHECK(c.architecture == "Qwen2ForCausalLM");
  CHECK(c.attention_bias);
  CHECK_FALSE(c.o_proj_bias);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.head_dim == 64);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.tie_word_embeddings);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.num_parameters() == 494032768);  // Qwen2.5-0.5B: 0.49B
  // sliding_window is only used with use_sliding_window, which we refuse rather than ignore.
  CHECK_THAT(error_of(with_key(kQwen25_05B, "use_sliding_window", "true")),
             Catch::Contains("use_sliding_window"));
}

TEST_CASE("Qwen3-0.6B's config.json parses with qk-norm and an explicit head_dim", "[unit]") {
  ModelConfig c = ModelConfig::from_json(kQwen3_06B).value();
  CHECK(c.architecture == "Qwen3ForCausalLM");
  CHECK(c.qk_norm);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.head_dim == 128);  // not hidden / heads = 64
  CHECK(c.q_dim() == 2048);
  CHECK(c.kv_dim() == 1024);
  CHECK(c.rope_theta == 1000000.0);
  CHECK(c.rope_scaling.type == RopeScaling::Type::none);
  CHECK(c.bos_token_ids == std::vector<int32_t>{151643});
  CHECK(c.eos_token_ids == std::vector<int32_t>{151645});
  CHECK(c.num_parameters() == 596049920);  // Qwen3-0.6B: 0.6B, 0.44B without embeddings
  // attention_bias: true gives biases on q, k, v and o in transformers' Qwen3 (and Llama).
  ModelConfig b = ModelConfig::from_json(with_key(kQwen3_06B, "attention_bias", "true")).value();
  CHECK(b.attention_bias);
  CHECK(b.o_proj_bias);
  CHECK(b.num_parameters() == c.num_parameters() + 28 * (2048 + 1024 + 1024 + 1024));
}

TEST_CASE("optional keys take transformers' defaults", "[unit]") {
  std::string j = kQwen3_06B;
  for (const char* k :
       {"head_dim", "num_key_value_heads", "rope_theta", "tie_word_embeddings", "rms_norm_eps",
        "max_position_embeddings", "bos_token_id", "torch_dtype", "hidden_act", "attention_bias"})
    j = with_key(j, k, "");
  ModelConfig c = ModelConfig::from_json(j).value();
  CHECK(c.head_dim == 128);  // Qwen3Config default
  CHECK(c.num_kv_heads == c.num_heads);
  CHECK(c.rope_theta == 10000.0);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.max_position_embeddings == 32768);
  CHECK(c.bos_token_ids.empty());
  CHECK(c.torch_dtype == "float32");

  std::string l = with_key(with_key(kLlama32_1B, "head_dim", ""), "tie_word_embeddings", "");
  ModelConfig lc = ModelConfig::from_json(l).value();
  CHECK(lc.head_dim == 2048 / 32);
  CHECK_FALSE(lc.tie_word_embeddings);
  // No "architectures": model_type decides.
  CHECK(ModelConfig::from_json(with_key(kQwen25_05B, "architectures", "")).value().architecture ==
        "Qwen2ForCausalLM");
}

TEST_CASE("eos_token_id may be a list and rope_theta may live in rope_parameters", "[unit]") {
  ModelConfig c =
      ModelConfig::from_json(with_key(kLlama32_1B, "eos_token_id", "[128001, 128008, 128009]")).value();
  CHECK(c.eos_token_ids == std::vector<int32_t>{128001, 128008, 128009});
  // transformers v5 style: rope_parameters holds theta and the scaling.
  std::string v5 = with_key(with_key(kLlama32_1B, "rope_theta", ""), "rope_scaling", "");
  v5 = with_key(v5, "rope_parameters",
                R"({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,)"
                R"( "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
  ModelConfig p = ModelConfig::from_json(v5).value();
  CHECK(p.rope_theta == 500000.0);
  CHECK(p.rope_scaling.type == RopeScaling::Type::llama3);
  CHECK(p.rope_scaling.factor == 32.0);
  std::string v5d = with_key(with_key(kQwen3_06B, "rope_theta", ""), "rope_scaling", "");
  v5d = with_key(v5d, "rope_parameters", R"({"rope_type": "default", "rope_theta": 1000000.0})");
  ModelConfig d = ModelConfig::from_json(v5d).value();
  CHECK(d.rope_theta == 1000000.0);
  CHECK(d.rope_scaling.type == RopeScaling::Type::none);
  CHECK(ModelConfig::from_json(with_key(kQwen3_06B, "dtype", "\"float16\"")).value().torch_dtype ==
        "bfloat16");
}

TEST_CASE("rope_scaling variants: linear, default, legacy type key, unknown types", "[unit]") {
  ModelConfig lin =
      ModelConfig::from_json(with_key(kMistral7B, "rope_scaling", R"({"type": "linear", "factor": 4.0})"))
          .value();
  CHECK(lin.rope_scaling.type == RopeScaling::Type::linear);
  CHECK(lin.rope_scaling.factor == 4.0);
  ModelConfig def =
      ModelConfig::from_json(with_key(kMistral7B, "rope_scaling", R"({"rope_type": "default"})")).value();
  CHECK(def.rope_scaling.type == RopeScaling::Type::none);
  for (const char* t : {"dynamic", "longrope", "ntk"}) {
    std::string e = error_of(with_key(kLlama32_1B, "rope_scaling",
                                      std::string(R"({"rope_type": ")") + t + R"(", "factor": 2.0})"));
    CHECK_THAT(e, Catch::Contains("my/config.json") && Catch::Contains(std::string("'") + t + "'") &&
                      Catch::Contains("not supported"));
  }
  CHECK_THAT(error_of(with_key(kLlama32_1B, "rope_scaling", R"({"factor": 2.0})")),
             Catch::Contains("rope_type"));
  CHECK_THAT(error_of(with_key(kLlama32_1B, "rope_scaling", R"({"rope_type": "llama3", "factor": 8.0})")),
             Catch::Contains("low_freq_factor"));
  CHECK_THAT(error_of(with_key(kLlama32_1B, "rope_scaling", R"({"rope_type": "linear"})")),
             Catch::Contains("factor"));
  CHECK_THAT(error_of(with_key(kLlama32_1B, "rope_scaling", "3")), Catch::Contains("rope_scaling"));
}

TEST_CASE(
    "YaRN rope scaling: Qwen3's long-context settings, both config spellings, the context it opens, errors",
    "[unit]") {
  // Qwen3's model card: add this to config.json for 131,072 tokens.
  const char* qwen_yarn =
      R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})";
  ModelConfig y = ModelConfig::from_json(with_key(kQwen3_06B, "rope_scaling", qwen_yarn)).value();
  CHECK(y.rope_scaling.type == RopeScaling::Type::yarn);
  CHECK(y.rope_scaling.factor == 4.0);
  CHECK(y.rope_scaling.original_max_position_embeddings == 32768);
  CHECK(y.rope_scaling.beta_fast == 32.0);
  CHECK(y.rope_scaling.beta_slow == 1.0);
  CHECK(y.rope_scaling.attention_factor == 0.0);
  CHECK(y.rope_scaling.truncate);
  CHECK(y.max_position_embeddings == 40960);
  CHECK(y.max_context() == 131072);
  // transformers v5 puts it, with rope_theta, in rope_parameters.
  ModelConfig v5 =
      ModelConfig::from_json(with_key(with_key(kQwen3_06B, "rope_theta", ""), "rope_parameters",
                                      R"({"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 2.0,)"
                                      R"( "original_max_position_embeddings": 32768, "beta_fast": 16,)"
                                      R"( "mscale": 0.7, "mscale_all_dim": 1.0, "truncate": false})"))
          .value();
  CHECK(v5.rope_theta == 1000000.0);
  CHECK(v5.rope_scaling.type == RopeScaling::Type::yarn);
  CHECK(v5.rope_scaling.beta_fast == 16.0);
  CHECK(v5.rope_scaling.mscale == 0.7);
  CHECK(v5.rope_scaling.mscale_all_dim == 1.0);
  CHECK_FALSE(v5.rope_scaling.truncate);
  CHECK(v5.max_context() == 65536);
  // Without original_max_position_embeddings the ramp is over max_position_embeddings, and the
  // context is that times the factor; a factor below 1 never shortens it.
  ModelConfig bare =
      ModelConfig::from_json(with_key(kQwen3_06B, "rope_scaling", R"({"type": "yarn", "factor": 2.0})"))
          .value();
  CHECK(bare.rope_scaling.original_max_position_embeddings == 0);
  CHECK(bare.max_context() == 81920);
  CHECK(ModelConfig::from_json(with_key(kQwen3_06B, "rope_scaling", R"({"type": "yarn", "factor": 0.5})"))
            .value()
            .max_context() == 40960);
  // Only YaRN opens a longer context: the other types keep max_position_embeddings.
  CHECK(ModelConfig::from_json(kLlama32_1B).value().max_context() == 131072);
  CHECK(ModelConfig::from_json(with_key(kMistral7B, "rope_scaling", R"({"type": "linear", "factor": 4.0})"))
            .value()
            .max_context() == ModelConfig::from_json(kMistral7B).value().max_position_embeddings);

  CHECK_THAT(error_of(with_key(kQwen3_06B, "rope_scaling", R"({"rope_type": "yarn"})")),
             Catch::Contains("factor"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "rope_scaling", R"({"rope_type": "yarn", "factor": -1})")),
             Catch::Contains("factor must be positive"));
  CHECK_THAT(
      error_of(with_key(kQwen3_06B, "rope_scaling", R"({"rope_type": "yarn", "factor": 4, "beta_fast": 0})")),
      Catch::Contains("beta_fast"));
  CHECK_THAT(
      error_of(with_key(kQwen3_06B, "rope_scaling", R"({"rope_type": "yarn", "factor": 4, "mscale": -1})")),
      Catch::Contains("mscale"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "rope_scaling", R"({"rope_type": "yarn", "factor": 1e12})")),
             Catch::Contains("implausible"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "rope_scaling",
                               R"({"rope_type": "yarn", "factor": 4, "truncate": "no"})")),
             Catch::Contains("truncate"));
  CHECK_THAT(
      error_of(with_key(kQwen3_06B, "rope_scaling",
                        R"({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": -5})")),
      Catch::Contains("original_max_position_embeddings"));
}

TEST_CASE("unsupported architectures, activations and MLP biases are errors naming them", "[unit]") {
  std::string e = error_of(with_key(kLlama32_1B, "architectures", R"(["GPT2LMHeadModel"])"));
  CHECK(e ==
        "my/config.json: architecture 'GPT2LMHeadModel' is not supported (supported: LlamaForCausalLM, "
        "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)");
  CHECK_THAT(error_of(with_key(with_key(kLlama32_1B, "architectures", ""), "model_type", "\"gpt2\"")),
             Catch::Contains("'gpt2'"));
  CHECK_THAT(error_of(with_key(kLlama32_1B, "hidden_act", "\"gelu\"")), Catch::Contains("'gelu'"));
  CHECK_THAT(error_of(with_key(kLlama32_1B, "mlp_bias", "true")), Catch::Contains("mlp_bias"));
  // Quantized checkpoints other than fp8 are refused by their config, naming the method or scheme.
  auto quant_error = [](const char* q) { return error_of(with_key(kLlama32_1B, "quantization_config", q)); };
  CHECK_THAT(quant_error(R"({"bits": 4, "quant_method": "awq"})"),
             Catch::Contains("quant_method 'awq'") && Catch::Contains("fp8 (e4m3)"));
  CHECK_THAT(quant_error(R"({"quant_method": "fp8", "fmt": "e5m2"})"), Catch::Contains("fp8 format 'e5m2'"));
  CHECK_THAT(quant_error(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
                                   "config_groups": {}})"),
             Catch::Contains("format 'pack-quantized'"));
  CHECK_THAT(quant_error(R"({"quant_method": "compressed-tensors", "format": "naive-quantized",
                                   "config_groups": {"g": {"weights": {"type": "int", "num_bits": 8,
                                   "strategy": "channel"}}}})"),
             Catch::Contains("type 'int' with 8 bits"));
  CHECK_THAT(quant_error(R"({"quant_method": "fp8", "weight_block_size": [128]})"),
             Catch::Contains("quantization_config: 'weight_block_size' must be two positive integers"));
  CHECK_THAT(quant_error(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
                                   "config_groups": {"g": {"weights": {"type": "float", "num_bits": 8,
                                   "strategy": "block"}}}})"),
             Catch::Contains("'block_structure' must be two positive integers"));
  CHECK_THAT(quant_error(R"({"bits": 4})"), Catch::Contains("missing 'quant_method'"));
  CHECK(ModelConfig::from_json(with_key(kLlama32_1B, "quantization_config", "null"), "my/config.json").ok());
}

TEST_CASE("fp8 quantization configs are read: Qwen3-FP8's blocks, AutoFP8's and llm-compressor's", "[unit]") {
  auto quant = [](const char* q) {
    auto r = ModelConfig::from_json(with_key(kLlama32_1B, "quantization_config", q), "my/config.json");
    INFO(q);
    REQUIRE(r.ok());
    return r.value().quantization;
  };
  WeightQuantization w = quant(R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                   "weight_block_size": [128, 64]})");
  CHECK((w.method == "fp8" && w.block_rows == 128 && w.block_cols == 64));
  w = quant(R"({"activation_scheme": "static", "quant_method": "fp8", "ignored_layers": ["lm_head"]})");
  CHECK((w.method == "fp8" && w.block_rows == 0 && w.block_cols == 0));
  w = quant(R"({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
                "kv_cache_scheme": null, "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"],
                  "input_activations": {"dynamic": true, "num_bits": 8, "strategy": "token", "type": "float"},
                  "weights": {"dynamic": false, "num_bits": 8, "strategy": "channel", "type": "float"}}}})");
  CHECK((w.method == "compressed-tensors" && w.block_rows == 0));
  w = quant(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "strategy": "block", "type": "float",
                                                          "block_structure": [128, 128]}}}})");
  CHECK((w.method == "compressed-tensors" && w.block_rows == 128 && w.block_cols == 128));
  // Not written back: what this runtime saves is widened.
  const ModelConfig c =
      ModelConfig::from_json(with_key(kLlama32_1B, "quantization_config", R"({"quant_method": "fp8"})"))
          .value();
  CHECK(c.to_json().find("quantization") == std::string::npos);
  CHECK(ModelConfig::from_json(kLlama32_1B).value().quantization.method.empty());
}

TEST_CASE("missing keys, wrong types, bad values and bad JSON are errors", "[unit]") {
  for (const char* k :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"}) {
    CHECK_THAT(error_of(with_key(kQwen3_06B, k, "")),
               Catch::Contains("my/config.json") && Catch::Contains(k));
  }
  CHECK_THAT(error_of(with_key(kQwen3_06B, "hidden_size", "\"1024\"")), Catch::Contains("hidden_size"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "num_key_value_heads", "5")),
             Catch::Contains("num_key_value_heads"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "num_hidden_layers", "0")), Catch::Contains("num_hidden_layers"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "head_dim", "-2")), Catch::Contains("head_dim"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "tie_word_embeddings", "1")),
             Catch::Contains("tie_word_embeddings"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "eos_token_id", "999999")), Catch::Contains("eos_token_id"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "eos_token_id", "[1, \"x\"]")), Catch::Contains("eos_token_id"));
  CHECK_THAT(error_of(with_key(kQwen3_06B, "rms_norm_eps", "0")), Catch::Contains("rms_norm_eps"));
  CHECK_THAT(error_of("{\"hidden_size\": 12"), Catch::Contains("my/config.json") && Catch::Contains("JSON"));
  CHECK_THAT(error_of("[1, 2]"), Catch::Contains("object"));
  CHECK_THAT(error_of(""), Catch::Contains("my/config.json"));
}

TEST_CASE("load() reads DIR/config.json and names it in errors", "[unit]") {
  TempDir dir("cfg");
  auto missing = ModelConfig::load(dir.path());
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains((dir / "config.json").string()));
  astrai::test::write_file(dir / "config.json", kQwen25_05B);
  CHECK(ModelConfig::load(dir.path()).value().hidden_size == 896);
  astrai::test::write_file(dir / "config.json", "{");
  CHECK_THAT(ModelConfig::load(dir.path()).status().message(),
             Catch::Contains((dir / "config.json").string()));
}

TEST_CASE("presets have the published shapes and parameter counts", "[unit]") {
  CHECK(preset_names() == std::vector<std::string>{"tiny", "llama-1b", "qwen3-0.6b", "qwen3-8b", "brown"});
  ModelConfig tiny = preset_config("tiny").value();
  CHECK(tiny.vocab_size >= 259);  // the built-in byte tokenizer
  CHECK(tiny.eos_token_ids == std::vector<int32_t>{258});
  CHECK(tiny.num_parameters() > 100000);
  CHECK(tiny.num_parameters() < 1000000);
  // brown (scripts/train-brown): tiny's tokenizer and widths, 3 layers, MLP 384.
  ModelConfig brown = preset_config("brown").value();
  CHECK(brown.vocab_size == tiny.vocab_size);
  CHECK(brown.eos_token_ids == tiny.eos_token_ids);
  CHECK(brown.num_parameters() == 631680);
  // Compare with the published configs parsed above: same shapes, same counts.
  ModelConfig llama = preset_config("llama-1b").value(),
              llama_hub = ModelConfig::from_json(kLlama32_1B).value();
  CHECK(llama.num_parameters() == llama_hub.num_parameters());
  CHECK(llama.rope_scaling.type == RopeScaling::Type::llama3);
  CHECK(llama.rope_theta == llama_hub.rope_theta);
  ModelConfig q06 = preset_config("qwen3-0.6b").value(), q06_hub = ModelConfig::from_json(kQwen3_06B).value();
  CHECK(q06.num_parameters() == q06_hub.num_parameters());
  CHECK(q06.qk_norm);
  CHECK(q06.max_position_embeddings == 40960);
  ModelConfig q8 = preset_config("qwen3-8b").value();
  CHECK(q8.num_parameters() == 8190735360);  // Qwen3-8B: 8.2B
  CHECK_FALSE(q8.tie_word_embeddings);
  for (const std::string& n : preset_names()) CHECK(preset_config(n).value().validate().ok());
  auto bad = preset_config("gpt-5");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("'gpt-5'") && Catch::Contains("qwen3-0.6b"));
}

TEST_CASE("to_json round-trips every field through our parser", "[unit]") {
  std::vector<ModelConfig> configs;
  for (const char* j : {kLlama32_1B, kMistral7B, kQwen25_05B, kQwen3_06B})
    configs.push_back(ModelConfig::from_json(j).value());
  for (const std::string& n : preset_names()) configs.push_back(preset_config(n).value());
  configs.push_back(
      ModelConfig::from_json(with_key(kMistral7B, "rope_scaling", R"({"type": "linear", "factor": 4.0})"))
          .value());
  configs.push_back(ModelConfig::from_json(with_key(kLlama32_1B, "eos_token_id", "[1, 2]")).value());
  for (const char* yarn :
       {R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})",
        R"({"rope_type": "yarn", "factor": 40, "beta_fast": 24, "beta_slow": 2, "mscale": 0.707,)"
        R"( "mscale_all_dim": 1.0, "truncate": false})",
        R"({"rope_type": "yarn", "factor": 2, "attention_factor": 1.5})"})
    configs.push_back(ModelConfig::from_json(with_key(kQwen3_06B, "rope_scaling", yarn)).value());
  configs.push_back(ModelConfig::from_json(with_key(kLlama32_1B, "attention_bias", "true")).value());
  for (const ModelConfig& c : configs) {
    INFO(c.to_json());
    ModelConfig r = ModelConfig::from_json(c.to_json()).value();
    CHECK(r.architecture == c.architecture);
    CHECK(r.model_type == c.model_type);
    CHECK(r.vocab_size == c.vocab_size);
    CHECK(r.hidden_size == c.hidden_size);
    CHECK(r.num_layers == c.num_layers);
    CHECK(r.num_heads == c.num_heads);
    CHECK(r.num_kv_heads == c.num_kv_heads);
    CHECK(r.head_dim == c.head_dim);
    CHECK(r.intermediate_size == c.intermediate_size);
    CHECK(r.rms_norm_eps == c.rms_norm_eps);
    CHECK(r.rope_theta == c.rope_theta);
    CHECK(r.rope_scaling.type == c.rope_scaling.type);
    CHECK(r.rope_scaling.factor == c.rope_scaling.factor);
    CHECK(r.rope_scaling.low_freq_factor == c.rope_scaling.low_freq_factor);
    CHECK(r.rope_scaling.high_freq_factor == c.rope_scaling.high_freq_factor);
    CHECK(r.rope_scaling.original_max_position_embeddings == c.rope_scaling.original_max_position_embeddings);
    CHECK(r.rope_scaling.beta_fast == c.rope_scaling.beta_fast);
    CHECK(r.rope_scaling.beta_slow == c.rope_scaling.beta_slow);
    CHECK(r.rope_scaling.attention_factor == c.rope_scaling.attention_factor);
    CHECK(r.rope_scaling.mscale == c.rope_scaling.mscale);
    CHECK(r.rope_scaling.mscale_all_dim == c.rope_scaling.mscale_all_dim);
    CHECK(r.rope_scaling.truncate == c.rope_scaling.truncate);
    CHECK(r.max_context() == c.max_context());
    CHECK(r.tie_word_embeddings == c.tie_word_embeddings);
    CHECK(r.attention_bias == c.attention_bias);
    CHECK(r.o_proj_bias == c.o_proj_bias);
    CHECK(r.qk_norm == c.qk_norm);
    CHECK(r.sliding_window == c.sliding_window);
    CHECK(r.max_position_embeddings == c.max_position_embeddings);
    CHECK(r.bos_token_ids == c.bos_token_ids);
    CHECK(r.eos_token_ids == c.eos_token_ids);
    CHECK(r.torch_dtype == c.torch_dtype);
    CHECK(r.num_parameters() == c.num_parameters());
  }
}

TEST_CASE("to_json is a config the Python side reads with the keys transformers expects", "[integration]") {
  TempDir dir("cfg");
  ModelConfig c = preset_config("qwen3-0.6b").value();
  astrai::test::write_file(dir / "config.json", c.to_json());
  // The keys transformers' Qwen3Config / LlamaConfig read, checked by an independent JSON parser.
  const std::string py =
      "import json,sys; c=json.load(open(sys.argv[1])); "
      "print(c['architectures'][0], c['model_type'], c['hidden_size'], c['num_hidden_layers'], "
      "c['num_attention_heads'], c['num_key_value_heads'], c['head_dim'], c['intermediate_size'], "
      "c['vocab_size'], c['rope_theta'], c['rms_norm_eps'], c['tie_word_embeddings'], "
      "c['max_position_embeddings'], "
      "c['hidden_act'], c['eos_token_id'])";
  auto r = astrai::test::run_command(astrai::test::python3() + " -c \"" + py + "\" " +
                                     (dir / "config.json").string());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "Qwen3ForCausalLM qwen3 1024 28 16 8 128 3072 151936 1000000.0 1e-06 True 40960 silu 258\n");
}
