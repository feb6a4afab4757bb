#include "src/model/config.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "src/core/file_text.h"
#include "src/core/json_writer.h"

namespace astrai {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

constexpr const char* kSupported = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";

// transformers' defaults per architecture for the keys a config.json may leave out.
struct ArchDefaults {
  const char* architecture;
  const char* model_type;
  int64_t max_position_embeddings;
  int64_t head_dim;  // 0: hidden_size / num_attention_heads
};
constexpr ArchDefaults kArchs[] = {
    {"LlamaForCausalLM", "llama", 2048, 0},
    {"MistralForCausalLM", "mistral", 4096 * 32, 0},
    {"Qwen2ForCausalLM", "qwen2", 32768, 0},
    {"Qwen3ForCausalLM", "qwen3", 32768, 128},
};

const ArchDefaults* find_arch(std::string_view architecture) {
  for (const ArchDefaults& a : kArchs)
    if (architecture == a.architecture) return &a;
  return nullptr;
}

// Reads typed keys of one JSON object; a null value counts as absent. Errors name the source.
class Fields {
 public:
  Fields(object obj, std::string src) : obj_(obj), src_(std::move(src)) {}

  // The key is there, possibly null.
  bool present(std::string_view key) const {
    element e;
    return !obj_[key].get(e);
  }
  // The key is there and not null.
  bool has(std::string_view key) const {
    element e;
    return !obj_[key].get(e) && !e.is_null();
  }
  element at(std::string_view key) const {
    element e;
    if (obj_[key].get(e)) return element();
    return e;
  }

  Status get_int(std::string_view key, int64_t& out, bool required = false) const {
    if (!has(key)) return required ? missing(key) : Status{};
    element e = at(key);
    int64_t v;
    double d;
    if (!e.get_int64().get(v)) {
      out = v;
    } else if (!e.get_double().get(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) {
      out = int64_t(d);
    } else {
      return invalid_argument(src_ + ": '" + std::string(key) + "' must be an integer");
    }
    return {};
  }
  Status get_double(std::string_view key, double& out, bool required = false) const {
    if (!has(key)) return required ? missing(key) : Status{};
    double d;
    if (at(key).get_double().get(d))
      return invalid_argument(src_ + ": '" + std::string(key) + "' must be a number");
    out = d;
    return {};
  }
  Status get_bool(std::string_view key, bool& out) const {
    if (!has(key)) return {};
    bool b;
    if (at(key).get_bool().get(b))
      return invalid_argument(src_ + ": '" + std::string(key) + "' must be true or false");
    out = b;
    return {};
  }
  Status get_string(std::string_view key, std::string& out) const {
    if (!has(key)) return {};
    std::string_view s;
    if (at(key).get_string().get(s))
      return invalid_argument(src_ + ": '" + std::string(key) + "' must be a string");
    out = std::string(s);
    return {};
  }
  // An int, a list of ints, or null/absent (empty).
  Status get_ids(std::string_view key, std::vector<int32_t>& out) const {
    out.clear();
    if (!has(key)) return {};
    element e = at(key);
    auto one = [&](element x) -> Status {
      int64_t v;
      if (x.get_int64().get(v) || v < 0 || v > INT32_MAX)
        return invalid_argument(src_ + ": '" + std::string(key) +
                                "' must be a token id or a list of token ids");
      out.push_back(int32_t(v));
      return {};
    };
    simdjson::dom::array arr;
    if (!e.get_array().get(arr)) {
      for (element x : arr) ASTRAI_RETURN_IF_ERROR(one(x));
      return {};
    }
    return one(e);
  }

  Status missing(std::string_view key) const {
    return invalid_argument(src_ + ": missing required key '" + std::string(key) + "'");
  }
  const std::string& src() const { return src_; }

 private:
  object obj_;
  std::string src_;
};

// A [rows, cols] pair of positive block sizes (weight_block_size, block_structure).
Status get_block(const Fields& f, std::string_view key, WeightQuantization& out) {
  simdjson::dom::array arr;
  std::vector<int64_t> v;
  if (f.has(key) && !f.at(key).get_array().get(arr))
    for (element x : arr) {
      int64_t n;
      if (x.get_int64().get(n)) break;
      v.push_back(n);
    }
  if (v.size() != 2 || v[0] <= 0 || v[1] <= 0)
    return invalid_argument(f.src() + ": '" + std::string(key) + "' must be two positive integers");
  out.block_rows = v[0];
  out.block_cols = v[1];
  return {};
}

// quantization_config -> WeightQuantization: fp8 weights are read (and widened at load); other
// methods (AWQ, GPTQ, bitsandbytes, int4 compressed-tensors) store other tensors than the ones read
// here, so they are refused at once, by name, rather than as a missing or mistyped tensor later.
Status parse_quantization(const Fields& f, WeightQuantization& out) {
  auto refuse = [&](const std::string& what) {
    return unsupported(f.src() + ": " + what +
                       ": astrai loads F32, BF16 and F16 weights and fp8 (e4m3) ones with their scales "
                       "(use the model's unquantized or fp8 release)");
  };
  std::string method;
  ASTRAI_RETURN_IF_ERROR(f.get_string("quant_method", method));
  if (method.empty()) return invalid_argument(f.src() + ": missing 'quant_method'");
  out = WeightQuantization{};
  if (method == "fp8") {
    std::string fmt = "e4m3";
    ASTRAI_RETURN_IF_ERROR(f.get_string("fmt", fmt));
    if (fmt != "e4m3") return refuse("fp8 format '" + fmt + "'");
    if (f.has("weight_block_size")) ASTRAI_RETURN_IF_ERROR(get_block(f, "weight_block_size", out));
    out.method = method;
    return {};
  }
  if (method != "compressed-tensors") return refuse("quant_method '" + method + "'");
  // llm-compressor's format: every config group's weights must be 8-bit floats.
  std::string format;
  ASTRAI_RETURN_IF_ERROR(f.get_string("format", format));
  if (format != "float-quantized" && format != "naive-quantized")
    return refuse("compressed-tensors format '" + format + "'");
  if (f.has("sparsity_config")) {
    object sp;
    std::string sformat = "dense";
    if (!f.at("sparsity_config").get_object().get(sp))
      ASTRAI_RETURN_IF_ERROR(Fields(sp, f.src()).get_string("format", sformat));
    if (sformat != "dense") return refuse("compressed-tensors sparsity '" + sformat + "'");
  }
  object groups;
  if (!f.has("config_groups") || f.at("config_groups").get_object().get(groups))
    return invalid_argument(f.src() + ": compressed-tensors needs a 'config_groups' object");
  for (auto [name, group] : groups) {
    const std::string where = f.src() + ".config_groups." + std::string(name);
    object g, w;
    if (group.get_object().get(g) || g["weights"].get_object().get(w))
      return invalid_argument(where + " must be an object with a 'weights' object");
    const Fields wf(w, where + ".weights");
    std::string type, strategy;
    int64_t bits = 0;
    ASTRAI_RETURN_IF_ERROR(wf.get_string("type", type));
    ASTRAI_RETURN_IF_ERROR(wf.get_int("num_bits", bits));
    ASTRAI_RETURN_IF_ERROR(wf.get_string("strategy", strategy));
    if (type != "float" || bits != 8)
      return refuse("compressed-tensors weights of type '" + type + "' with " + std::to_string(bits) +
                    " bits");
    if (strategy != "tensor" && strategy != "channel" && strategy != "block")
      return refuse("compressed-tensors fp8 weights with strategy '" + strategy + "'");
    if (strategy == "block") {
      WeightQuantization b;
      ASTRAI_RETURN_IF_ERROR(get_block(wf, "block_structure", b));
      if (out.block_rows && (b.block_rows != out.block_rows || b.block_cols != out.block_cols))
        return refuse("config groups with different block structures");
      out.block_rows = b.block_rows;
      out.block_cols = b.block_cols;
    }
  }
  out.method = method;
  return {};
}

// rope_scaling (or rope_parameters in newer transformers) -> RopeScaling.
Status parse_rope_scaling(const Fields& rs, RopeScaling& out) {
  std::string type;
  ASTRAI_RETURN_IF_ERROR(rs.get_string("rope_type", type));
  if (type.empty()) ASTRAI_RETURN_IF_ERROR(rs.get_string("type", type));
  if (type.empty()) return invalid_argument(rs.src() + ": rope_scaling has no 'rope_type'");
  out = RopeScaling{};
  if (type == "default") return {};
  if (type == "linear") {
    out.type = RopeScaling::Type::linear;
    return rs.get_double("factor", out.factor, true);
  }
  if (type == "llama3") {
    out.type = RopeScaling::Type::llama3;
    ASTRAI_RETURN_IF_ERROR(rs.get_double("factor", out.factor, true));
    ASTRAI_RETURN_IF_ERROR(rs.get_double("low_freq_factor", out.low_freq_factor, true));
    ASTRAI_RETURN_IF_ERROR(rs.get_double("high_freq_factor", out.high_freq_factor, true));
    return rs.get_int("original_max_position_embeddings", out.original_max_position_embeddings, true);
  }
  if (type == "yarn") {
    out.type = RopeScaling::Type::yarn;
    out.original_max_position_embeddings = 0;
    ASTRAI_RETURN_IF_ERROR(rs.get_double("factor", out.factor, true));
    ASTRAI_RETURN_IF_ERROR(
        rs.get_int("original_max_position_embeddings", out.original_max_position_embeddings));
    ASTRAI_RETURN_IF_ERROR(rs.get_double("beta_fast", out.beta_fast));
    ASTRAI_RETURN_IF_ERROR(rs.get_double("beta_slow", out.beta_slow));
    ASTRAI_RETURN_IF_ERROR(rs.get_double("attention_factor", out.attention_factor));
    ASTRAI_RETURN_IF_ERROR(rs.get_double("mscale", out.mscale));
    ASTRAI_RETURN_IF_ERROR(rs.get_double("mscale_all_dim", out.mscale_all_dim));
    return rs.get_bool("truncate", out.truncate);
  }
  return unsupported(rs.src() + ": rope_scaling type '" + type +
                     "' is not supported (supported: default, linear, llama3, yarn)");
}

}  // namespace

Result<ModelConfig> ModelConfig::from_json(std::string_view json_text, std::string_view source_name) {
  const std::string src(source_name);
  simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.parse(simdjson::padded_string(json_text)).get(doc))
    return invalid_argument(src + ": not valid JSON (" + simdjson::error_message(err) + ")");
  object root;
  if (doc.get_object().get(root)) return invalid_argument(src + ": not a JSON object");
  Fields f(root, src);

  ModelConfig c;
  // Architecture: the first of "architectures", else derived from "model_type".
  ASTRAI_RETURN_IF_ERROR(f.get_string("model_type", c.model_type));
  if (f.has("architectures")) {
    simdjson::dom::array archs;
    std::string_view first;
    if (f.at("architectures").get_array().get(archs) || archs.size() == 0 ||
        archs.at(0).get_string().get(first))
      return invalid_argument(src + ": 'architectures' must be a non-empty list of names");
    c.architecture = std::string(first);
  } else {
    for (const ArchDefaults& a : kArchs)
      if (c.model_type == a.model_type) c.architecture = a.architecture;
    if (c.architecture.empty())
      return invalid_argument(src + ": no 'architectures' and " +
                              (c.model_type.empty() ? std::string("no 'model_type'")
                                                    : "model_type '" + c.model_type + "' is not supported") +
                              " (supported: " + kSupported + ")");
  }
  const ArchDefaults* arch = find_arch(c.architecture);
  if (!arch)
    return unsupported(src + ": architecture '" + c.architecture +
                       "' is not supported (supported: " + kSupported + ")");
  if (c.model_type.empty()) c.model_type = arch->model_type;
  const bool is_qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool is_qwen3 = c.architecture == "Qwen3ForCausalLM";
  const bool is_mistral = c.architecture == "MistralForCausalLM";

  ASTRAI_RETURN_IF_ERROR(f.get_int("vocab_size", c.vocab_size, true));
  ASTRAI_RETURN_IF_ERROR(f.get_int("hidden_size", c.hidden_size, true));
  ASTRAI_RETURN_IF_ERROR(f.get_int("num_hidden_layers", c.num_layers, true));
  ASTRAI_RETURN_IF_ERROR(f.get_int("num_attention_heads", c.num_heads, true));
  ASTRAI_RETURN_IF_ERROR(f.get_int("intermediate_size", c.intermediate_size, true));
  c.num_kv_heads = c.num_heads;
  ASTRAI_RETURN_IF_ERROR(f.get_int("num_key_value_heads", c.num_kv_heads));
  c.head_dim = arch->head_dim;
  ASTRAI_RETURN_IF_ERROR(f.get_int("head_dim", c.head_dim));
  if (c.head_dim == 0 && c.num_heads > 0) c.head_dim = c.hidden_size / c.num_heads;
  c.rms_norm_eps = 1e-6;
  ASTRAI_RETURN_IF_ERROR(f.get_double("rms_norm_eps", c.rms_norm_eps));
  c.max_position_embeddings = arch->max_position_embeddings;
  ASTRAI_RETURN_IF_ERROR(f.get_int("max_position_embeddings", c.max_position_embeddings));
  ASTRAI_RETURN_IF_ERROR(f.get_bool("tie_word_embeddings", c.tie_word_embeddings));

  std::string act = "silu";
  ASTRAI_RETURN_IF_ERROR(f.get_string("hidden_act", act));
  if (act != "silu")
    return unsupported(src + ": hidden_act '" + act +
                       "' is not supported (only silu, the SwiGLU MLP of these models)");
  bool mlp_bias = false;
  ASTRAI_RETURN_IF_ERROR(f.get_bool("mlp_bias", mlp_bias));
  if (mlp_bias) return unsupported(src + ": mlp_bias: true is not supported");

  // Attention biases as each transformers architecture builds them.
  if (is_qwen2) {
    c.attention_bias = true;  // q/k/v always have bias, o_proj never
  } else if (!is_mistral) {
    ASTRAI_RETURN_IF_ERROR(f.get_bool("attention_bias", c.attention_bias));
    c.o_proj_bias = c.attention_bias;
  }
  c.qk_norm = is_qwen3;

  // Sliding window: Mistral applies its sliding_window; Qwen only when use_sliding_window is set.
  if (is_mistral) {
    c.sliding_window = f.present("sliding_window") ? 0 : 4096;  // transformers' default; null: none
    ASTRAI_RETURN_IF_ERROR(f.get_int("sliding_window", c.sliding_window));
  } else if (is_qwen2 || is_qwen3) {
    bool use_sw = false;
    ASTRAI_RETURN_IF_ERROR(f.get_bool("use_sliding_window", use_sw));
    if (use_sw) return unsupported(src + ": use_sliding_window: true is not supported");
  }

  // RoPE: rope_theta at the top level, or inside rope_parameters (transformers >= 4.56 / v5).
  c.rope_theta = 10000.0;
  object rope_params;
  const bool has_params = f.has("rope_parameters") && !f.at("rope_parameters").get_object().get(rope_params);
  if (f.has("rope_parameters") && !has_params)
    return invalid_argument(src + ": 'rope_parameters' must be an object");
  if (has_params) ASTRAI_RETURN_IF_ERROR(Fields(rope_params, src).get_double("rope_theta", c.rope_theta));
  ASTRAI_RETURN_IF_ERROR(f.get_double("rope_theta", c.rope_theta));
  if (f.has("rope_scaling")) {
    object rs;
    if (f.at("rope_scaling").get_object().get(rs))
      return invalid_argument(src + ": 'rope_scaling' must be an object or null");
    ASTRAI_RETURN_IF_ERROR(parse_rope_scaling(Fields(rs, src), c.rope_scaling));
  } else if (has_params) {
    Fields rp(rope_params, src);
    if (rp.has("rope_type") || rp.has("type")) ASTRAI_RETURN_IF_ERROR(parse_rope_scaling(rp, c.rope_scaling));
  }

  if (f.has("quantization_config")) {
    object q;
    if (f.at("quantization_config").get_object().get(q))
      return invalid_argument(src + ": 'quantization_config' must be an object");
    ASTRAI_RETURN_IF_ERROR(parse_quantization(Fields(q, src + ": quantization_config"), c.quantization));
  }

  ASTRAI_RETURN_IF_ERROR(f.get_ids("bos_token_id", c.bos_token_ids));
  ASTRAI_RETURN_IF_ERROR(f.get_ids("eos_token_id", c.eos_token_ids));
  c.torch_dtype = "float32";
  ASTRAI_RETURN_IF_ERROR(f.get_string("torch_dtype", c.torch_dtype));
  if (!f.has("torch_dtype")) ASTRAI_RETURN_IF_ERROR(f.get_string("dtype", c.torch_dtype));

  Status v = c.validate();
  if (!v.ok()) return Status(v.code(), src + ": " + v.message());
  return c;
}

std::string quantization_note(const WeightQuantization& q, DType compute, bool kept) {
  if (q.method.empty()) return {};
  const std::string dt(dtype_name(compute));
  if (kept)
    return "fp8 weights (quant_method " + q.method +
           ") kept in fp8 for the projections (embeddings widened to " + dt + "); activations in " + dt;
  return "fp8 weights (quant_method " + q.method + ") widened to " + dt + " at load; activations in " + dt;
}

Result<ModelConfig> ModelConfig::load(const std::filesystem::path& model_dir) {
  const std::filesystem::path p = model_dir / "config.json";
  ASTRAI_ASSIGN_OR_RETURN(std::string text, read_text_file(p));
  return from_json(text, p.string());
}

Status ModelConfig::validate() const {
  auto positive = [](const char* key, int64_t v) -> Status {
    if (v <= 0)
      return invalid_argument(std::string(key) + " must be positive (got " + std::to_string(v) + ")");
    return {};
  };
  if (!find_arch(architecture))
    return unsupported("architecture '" + architecture + "' is not supported (supported: " + kSupported +
                       ")");
  ASTRAI_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  ASTRAI_RETURN_IF_ERROR(positive("hidden_size", hidden_size));
  ASTRAI_RETURN_IF_ERROR(positive("num_hidden_layers", num_layers));
  ASTRAI_RETURN_IF_ERROR(positive("num_attention_heads", num_heads));
  ASTRAI_RETURN_IF_ERROR(positive("num_key_value_heads", num_kv_heads));
  ASTRAI_RETURN_IF_ERROR(positive("head_dim", head_dim));
  ASTRAI_RETURN_IF_ERROR(positive("intermediate_size", intermediate_size));
  ASTRAI_RETURN_IF_ERROR(positive("max_position_embeddings", max_position_embeddings));
  if (num_heads % num_kv_heads != 0)
    return invalid_argument("num_attention_heads (" + std::to_string(num_heads) +
                            ") must be a multiple of num_key_value_heads (" + std::to_string(num_kv_heads) +
                            ")");
  if (head_dim % 2 != 0)
    return invalid_argument("head_dim must be even for RoPE (got " + std::to_string(head_dim) + ")");
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps))
    return invalid_argument("rms_norm_eps must be positive");
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) return invalid_argument("rope_theta must be positive");
  if (sliding_window < 0) return invalid_argument("sliding_window must not be negative");
  if (rope_scaling.type != RopeScaling::Type::none && !(rope_scaling.factor > 0))
    return invalid_argument("rope_scaling factor must be positive");
  if (rope_scaling.type == RopeScaling::Type::llama3) {
    if (!(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
        !(rope_scaling.low_freq_factor > 0))
      return invalid_argument("rope_scaling: llama3 needs 0 < low_freq_factor < high_freq_factor");
    if (rope_scaling.original_max_position_embeddings <= 0)
      return invalid_argument("rope_scaling: original_max_position_embeddings must be positive");
  }
  if (rope_scaling.type == RopeScaling::Type::yarn) {
    const RopeScaling& rs = rope_scaling;
    if (rs.original_max_position_embeddings < 0)
      return invalid_argument("rope_scaling: original_max_position_embeddings must be positive");
    if (!(rs.beta_fast > 0) || !(rs.beta_slow > 0) || !std::isfinite(rs.beta_fast) ||
        !std::isfinite(rs.beta_slow))
      return invalid_argument("rope_scaling: yarn needs positive beta_fast and beta_slow");
    if (!(rs.attention_factor >= 0) || !(rs.mscale >= 0) || !(rs.mscale_all_dim >= 0) ||
        !std::isfinite(rs.attention_factor + rs.mscale + rs.mscale_all_dim))
      return invalid_argument(
          "rope_scaling: yarn's attention_factor, mscale and mscale_all_dim must not be negative");
    if (double(yarn_original_context()) * rs.factor > double(int64_t(1) << 26))
      return invalid_argument("rope_scaling: yarn extends the context to an implausible length");
  }
  // Guard against sizes whose products overflow the int64 arithmetic of shapes.
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  if (vocab_size > kMaxDim || hidden_size > kMaxDim || intermediate_size > kMaxDim || num_layers > 4096 ||
      num_heads > 4096 || head_dim > 4096)
    return invalid_argument("model sizes are implausibly large");
  for (int32_t id : bos_token_ids)
    if (id >= vocab_size)
      return invalid_argument("bos_token_id " + std::to_string(id) +
                              " is outside the vocabulary (vocab_size " + std::to_string(vocab_size) + ")");
  for (int32_t id : eos_token_ids)
    if (id >= vocab_size)
      return invalid_argument("eos_token_id " + std::to_string(id) +
                              " is outside the vocabulary (vocab_size " + std::to_string(vocab_size) + ")");
  return {};
}

int64_t ModelConfig::num_parameters() const {
  const int64_t H = hidden_size;
  int64_t layer = H * q_dim() + 2 * H * kv_dim() + q_dim() * H  // q, k, v, o
                  + 3 * H * intermediate_size                   // gate, up, down
                  + 2 * H;                                      // input / post-attention norms
  if (attention_bias) layer += q_dim() + 2 * kv_dim();
  if (o_proj_bias) layer += H;
  if (qk_norm) layer += 2 * head_dim;
  int64_t n = vocab_size * H + num_layers * layer + H;
  if (!tie_word_embeddings) n += vocab_size * H;
  return n;
}

int64_t ModelConfig::yarn_original_context() const {
  return rope_scaling.original_max_position_embeddings > 0 ? rope_scaling.original_max_position_embeddings
                                                           : max_position_embeddings;
}

int64_t ModelConfig::max_context() const {
  if (rope_scaling.type != RopeScaling::Type::yarn) return max_position_embeddings;
  // validate() caps it
  const double extended = std::min(double(yarn_original_context()) * rope_scaling.factor, 9.0e15);
  return std::max(max_position_embeddings, int64_t(extended));
}

std::string ModelConfig::to_json() const {
  const bool is_qwen2 = architecture == "Qwen2ForCausalLM";
  const bool is_qwen3 = architecture == "Qwen3ForCausalLM";
  const bool is_mistral = architecture == "MistralForCausalLM";
  auto ids = [](JsonWriter& w, const std::vector<int32_t>& v) {
    if (v.empty())
      w.null();
    else if (v.size() == 1)
      w.value(int64_t(v[0]));
    else {
      w.begin_array();
      for (int32_t x : v) w.value(int64_t(x));
      w.end_array();
    }
  };
  JsonWriter w;
  w.begin_object();
  w.key("architectures").begin_array().value(architecture).end_array();
  w.key("model_type")
      .value(model_type.empty()
                 ? std::string(find_arch(architecture) ? find_arch(architecture)->model_type : "")
                 : model_type);
  w.key("vocab_size").value(vocab_size);
  w.key("hidden_size").value(hidden_size);
  w.key("intermediate_size").value(intermediate_size);
  w.key("num_hidden_layers").value(num_layers);
  w.key("num_attention_heads").value(num_heads);
  w.key("num_key_value_heads").value(num_kv_heads);
  w.key("head_dim").value(head_dim);
  w.key("hidden_act").value("silu");
  w.key("max_position_embeddings").value(max_position_embeddings);
  w.key("initializer_range").value(0.02);
  w.key("rms_norm_eps").value(rms_norm_eps);
  w.key("rope_theta").value(rope_theta);
  w.key("rope_scaling");
  switch (rope_scaling.type) {
    case RopeScaling::Type::none: w.null(); break;
    case RopeScaling::Type::linear:
      w.begin_object().key("rope_type").value("linear").key("factor").value(rope_scaling.factor).end_object();
      break;
    case RopeScaling::Type::llama3:
      w.begin_object()
          .key("rope_type")
          .value("llama3")
          .key("factor")
          .value(rope_scaling.factor)
          .key("low_freq_factor")
          .value(rope_scaling.low_freq_factor)
          .key("high_freq_factor")
          .value(rope_scaling.high_freq_factor)
          .key("original_max_position_embeddings")
          .value(rope_scaling.original_max_position_embeddings)
          .end_object();
      break;
    case RopeScaling::Type::yarn: {
      const RopeScaling& rs = rope_scaling;
      w.begin_object().key("rope_type").value("yarn").key("factor").value(rs.factor);
      if (rs.original_max_position_embeddings > 0)
        w.key("original_max_position_embeddings").value(rs.original_max_position_embeddings);
      w.key("beta_fast").value(rs.beta_fast).key("beta_slow").value(rs.beta_slow);
      if (rs.attention_factor > 0) w.key("attention_factor").value(rs.attention_factor);
      if (rs.mscale > 0) w.key("mscale").value(rs.mscale);
      if (rs.mscale_all_dim > 0) w.key("mscale_all_dim").value(rs.mscale_all_dim);
      if (!rs.truncate) w.key("truncate").value(false);
      w.end_object();
      break;
    }
  }
  w.key("tie_word_embeddings").value(tie_word_embeddings);
  if (!is_qwen2 && !is_mistral) w.key("attention_bias").value(attention_bias);
  if (!is_qwen2 && !is_qwen3 && !is_mistral) w.key("mlp_bias").value(false);
  w.key("attention_dropout").value(0.0);
  if (is_mistral) {
    w.key("sliding_window");
    if (sliding_window > 0)
      w.value(sliding_window);
    else
      w.null();
  }
  if (is_qwen2 || is_qwen3) {
    w.key("use_sliding_window").value(false);
    w.key("sliding_window").null();
    w.key("max_window_layers").value(num_layers);
  }
  w.key("bos_token_id");
  ids(w, bos_token_ids);
  w.key("eos_token_id");
  ids(w, eos_token_ids);
  w.key("torch_dtype").value(torch_dtype);
  w.key("use_cache").value(true);
  w.end_object();
  return w.take();
}

}  // namespace astrai
