#include "net/config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <set>

#include "src/model/config.h"

namespace astrai::net {
namespace {

Status parse_int(const std::string& key, const std::string& v, int64_t lo, int64_t hi, int64_t& out) {
  const char* b = v.data();
  const char* e = v.data() + v.size();
  auto [p, ec] = std::from_chars(b, e, out);
  if (ec != std::errc() || p != e || out < lo || out > hi)
    return invalid_argument(key + ": expected an integer in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got '" + v + "'");
  return {};
}

Status parse_double(const std::string& key, const std::string& v, double lo, double hi, double& out) {
  char* end = nullptr;
  out = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(out >= lo && out <= hi))
    return invalid_argument(key + ": expected a number in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got '" + v + "'");
  return {};
}

Status parse_bool(const std::string& key, const std::string& v, bool& out) {
  if (v == "true" || v == "1" || v == "yes" || v == "on")
    out = true;
  else if (v == "false" || v == "0" || v == "no" || v == "off")
    out = false;
  else
    return invalid_argument(key + ": expected true or false, got '" + v + "'");
  return {};
}

// Byte sizes: plain integers or with a K/M/G suffix (binary).
Status parse_bytes(const std::string& key, const std::string& v, int64_t& out) {
  std::string num = v;
  int64_t mul = 1;
  if (!num.empty()) {
    const char s = char(std::toupper(static_cast<unsigned char>(num.back())));
    if (s == 'K' || s == 'M' || s == 'G') {
      mul = s == 'K' ? 1024 : s == 'M' ? 1024 * 1024 : int64_t(1024) * 1024 * 1024;
      num.pop_back();
    }
  }
  int64_t n = 0;
  if (!parse_int(key, num, 1, int64_t(1) << 40, n).ok())
    return invalid_argument(key + ": expected a size in bytes (e.g. 1048576, 512K, 8M), got '" + v + "'");
  out = n * mul;
  return {};
}

template <typename T>
std::function<Status(ServeConfig&, const std::string&)> int_key(T ServeConfig::*field, int64_t lo, int64_t hi,
                                                                const char* name) {
  return [=](ServeConfig& c, const std::string& v) {
    int64_t x = 0;
    ASTRAI_RETURN_IF_ERROR(parse_int(name, v, lo, hi, x));
    c.*field = T(x);
    return Status{};
  };
}

template <typename T>
std::function<Status(ServeConfig&, const std::string&)> engine_int(T EngineOptions::*field, int64_t lo,
                                                                   int64_t hi, const char* name) {
  return [=](ServeConfig& c, const std::string& v) {
    int64_t x = 0;
    ASTRAI_RETURN_IF_ERROR(parse_int(name, v, lo, hi, x));
    c.engine.*field = T(x);
    return Status{};
  };
}

// A ChatTemplateLimits field: an integer in [lo, hi], given as a byte size (K/M/G) when `bytes`.
template <typename T>
std::function<Status(ServeConfig&, const std::string&)> template_key(T ChatTemplateLimits::*field, int64_t lo,
                                                                     int64_t hi, bool bytes,
                                                                     const char* name) {
  return [=](ServeConfig& c, const std::string& v) {
    int64_t x = 0;
    ASTRAI_RETURN_IF_ERROR(bytes ? parse_bytes(name, v, x) : parse_int(name, v, lo, hi, x));
    if (x < lo || x > hi)
      return invalid_argument(std::string(name) + ": expected a size in [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "] bytes, got '" + v + "'");
    c.template_limits.*field = T(x);
    return Status{};
  };
}

std::function<Status(ServeConfig&, const std::string&)> dbl_key(double ServeConfig::*field, double lo,
                                                                double hi, const char* name) {
  return [=](ServeConfig& c, const std::string& v) { return parse_double(name, v, lo, hi, c.*field); };
}

std::function<Status(ServeConfig&, const std::string&)> str_key(std::string ServeConfig::*field,
                                                                const std::set<std::string>& allowed,
                                                                const char* name) {
  return [=](ServeConfig& c, const std::string& v) {
    if (!allowed.empty() && !allowed.count(v)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return invalid_argument(std::string(name) + ": expected one of " + list + ", got '" + v + "'");
    }
    c.*field = v;
    return Status{};
  };
}

std::vector<ConfigKey> make_keys() {
  std::vector<ConfigKey> k;
  auto add = [&](const char* name, const std::string& help, bool flag, auto fn) {
    k.push_back({name, help, flag, fn});
  };
  add("model", "Hugging Face model directory (or a preset name)", true,
      str_key(&ServeConfig::model, {}, "model"));
  add("preset", "Random-init preset: " + preset_list(), true, str_key(&ServeConfig::preset, {}, "preset"));
  add("host", "Address to listen on", true, str_key(&ServeConfig::host, {}, "host"));
  add("port", "TCP port (0: any free port, printed at start-up)", true,
      int_key(&ServeConfig::port, 0, 65535, "port"));
  add("device", "cpu | cuda | auto", false, str_key(&ServeConfig::device, {"cpu", "cuda", "auto"}, "device"));
  add("dtype", "f32 | bf16 | auto", false, str_key(&ServeConfig::dtype, {"f32", "bf16", "auto"}, "dtype"));
  add("threads", "CPU compute threads (0: all cores)", false,
      int_key(&ServeConfig::threads, 0, 4096, "threads"));
  add("tp", "Tensor-parallel ranks: the model is split over GPUs 0..tp-1 (1: one device)", true,
      int_key(&ServeConfig::tp, 1, 64, "tp"));
  add("fp8_weights", "widen | keep: an fp8 checkpoint's projections widened at load, or kept in fp8 (GPU)",
      false, str_key(&ServeConfig::fp8_weights, {"widen", "keep"}, "fp8_weights"));
  add("log_level", "trace | debug | info | warn | error | off", false,
      str_key(&ServeConfig::log_level, {"trace", "debug", "info", "warn", "error", "off"}, "log_level"));
  add("net_threads", "Threads running the network event loop", true,
      int_key(&ServeConfig::net_threads, 1, 256, "net_threads"));
  add("worker_threads",
      "Threads for CPU-heavy request work (tokenizing, chat templates, detokenizing), so that the net "
      "threads stay responsive",
      true, int_key(&ServeConfig::worker_threads, 1, 256, "worker_threads"));
  add("api_key", "Require this key (Authorization: Bearer or x-api-key)", true,
      str_key(&ServeConfig::api_key, {}, "api_key"));
  add("cors", "Access-Control-Allow-Origin value (e.g. '*'); empty: CORS off", true,
      str_key(&ServeConfig::cors, {}, "cors"));
  add("max_body", "Largest request body in bytes (K/M/G suffixes); larger: 413", true,
      [](ServeConfig& c, const std::string& v) { return parse_bytes("max_body", v, c.max_body); });
  add("max_concurrent", "Generations in flight; past it requests get 429", true,
      int_key(&ServeConfig::max_concurrent, 1, 1 << 20, "max_concurrent"));
  add("drain_timeout", "Seconds in-flight requests may finish after SIGTERM/SIGINT", true,
      dbl_key(&ServeConfig::drain_timeout, 0, 86400, "drain_timeout"));
  add("header_timeout", "Seconds a client has to send a request's headers", true,
      dbl_key(&ServeConfig::header_timeout, 0.01, 3600, "header_timeout"));
  add("body_timeout", "Seconds a client has to send a request's body", true,
      dbl_key(&ServeConfig::body_timeout, 0.01, 3600, "body_timeout"));
  add("idle_timeout", "Seconds an idle keep-alive connection stays open", true,
      dbl_key(&ServeConfig::idle_timeout, 0.01, 86400, "idle_timeout"));
  add("served_model_name", "Model name in the API (default: the model directory's name)", true,
      str_key(&ServeConfig::served_model_name, {}, "served_model_name"));
  add("reasoning_parser",
      "Split the model's <think>...</think> text off the answer (reasoning_content, thinking blocks): "
      "qwen3 | deepseek_r1 | none | auto (qwen3 when the tokenizer has <think> and </think> tokens)",
      true,
      str_key(&ServeConfig::reasoning_parser, {"auto", "qwen3", "deepseek_r1", "none"}, "reasoning_parser"));
  add("generation_config",
      "auto: sampling fields a request leaves out default to the model's generation_config.json "
      "(temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens) | none: to the built-in ones",
      true, str_key(&ServeConfig::generation_config, {"auto", "none"}, "generation_config"));
  add("chat_template",
      "Chat template in place of the model's: a file (e.g. template.jinja) or the template text itself", true,
      str_key(&ServeConfig::chat_template, {}, "chat_template"));
  add("access_log", "Log one line per request", true,
      [](ServeConfig& c, const std::string& v) { return parse_bool("access_log", v, c.access_log); });
  // Chat-template budgets (chat_template_limits.h): templates come with model files, untrusted.
  add("template_max_steps", "Chat template: steps one render may take (statements, expressions, elements)",
      true,
      template_key(&ChatTemplateLimits::max_steps, 1000, int64_t(1) << 40, false, "template_max_steps"));
  add("template_max_output", "Chat template: largest rendered text or string built, bytes (K/M/G suffixes)",
      true,
      template_key(&ChatTemplateLimits::max_output_bytes, 1024, int64_t(1) << 32, true,
                   "template_max_output"));
  add("template_max_memory",
      "Chat template: strings, lists and dicts one render may hold at once, bytes (K/M/G suffixes)", true,
      template_key(&ChatTemplateLimits::max_memory_bytes, 1 << 20, int64_t(1) << 34, true,
                   "template_max_memory"));
  // Value walks recurse once per level: 1024 levels stay far inside a worker's 8 MiB stack.
  add("template_max_depth", "Chat template: nesting of lists/dicts, in the messages and built at run time",
      true, template_key(&ChatTemplateLimits::max_value_depth, 8, 1024, false, "template_max_depth"));
  add("page_size", "KV cache page size in tokens", true,
      engine_int(&EngineOptions::page_size, 1, 4096, "page_size"));
  add("max_pages", "Exact KV pool size in pages (0: size from memory)", true,
      engine_int(&EngineOptions::max_pages, 0, 1 << 30, "max_pages"));
  add("kv_memory_fraction", "Share of free memory for the KV cache", true,
      [](ServeConfig& c, const std::string& v) {
        return parse_double("kv_memory_fraction", v, 0.001, 1.0, c.engine.kv_memory_fraction);
      });
  add("max_prefill_tokens", "Prompt tokens per engine step (chunked prefill)", true,
      engine_int(&EngineOptions::max_prefill_tokens, 0, 1 << 24, "max_prefill_tokens"));
  add("max_batch_size", "Sequences per engine step (0: 512 on a GPU, 256 on the CPU)", true,
      engine_int(&EngineOptions::max_batch_size, 0, 1 << 16, "max_batch_size"));
  add("max_queue", "Waiting requests; past it requests get 503", true,
      engine_int(&EngineOptions::max_queue, 1, 1 << 24, "max_queue"));
  add("prefix_cache", "Reuse KV pages of shared prompt prefixes", true,
      [](ServeConfig& c, const std::string& v) {
        return parse_bool("prefix_cache", v, c.engine.prefix_cache);
      });
  add("max_model_len", "Context length (0: the model's)", true,
      engine_int(&EngineOptions::max_model_len, 0, 1 << 24, "max_model_len"));
  return k;
}

}  // namespace

const std::vector<ConfigKey>& serve_config_keys() {
  static const std::vector<ConfigKey> keys = make_keys();
  return keys;
}

std::string flag_name(const std::string& key) {
  std::string f = "--" + key;
  for (char& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

Status apply_serve_key(ServeConfig& cfg, const std::string& key, const std::string& value) {
  for (const auto& k : serve_config_keys())
    if (k.name == key) return k.set(cfg, value);
  return invalid_argument("unknown setting '" + key + "'");
}

Status load_serve_yaml(const std::filesystem::path& path, ServeConfig& cfg) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path.string());
  } catch (const YAML::BadFile&) {
    return not_found(path.string() + ": cannot read the file");
  } catch (const YAML::Exception& e) {
    return invalid_argument(path.string() + ": " + e.what());
  }
  if (root.IsNull()) return {};
  if (!root.IsMap()) return invalid_argument(path.string() + ": expected a mapping of settings");
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) return invalid_argument(path.string() + ": setting names must be strings");
    const std::string key = kv.first.Scalar();
    if (key == "engine" && kv.second.IsMap()) {
      for (const auto& ekv : kv.second) {
        if (!ekv.first.IsScalar())
          return invalid_argument(path.string() + ": engine: setting names must be strings");
        const std::string ek = ekv.first.Scalar();
        if (!ekv.second.IsScalar())
          return invalid_argument(path.string() + ": engine." + ek + " must be a scalar");
        Status s = apply_serve_key(cfg, ek, ekv.second.Scalar());
        if (!s.ok()) return invalid_argument(path.string() + ": engine." + s.message());
      }
      continue;
    }
    if (!kv.second.IsScalar() && !kv.second.IsNull())
      return invalid_argument(path.string() + ": '" + key + "' must be a scalar value");
    Status s = apply_serve_key(cfg, key, kv.second.IsNull() ? "" : kv.second.Scalar());
    if (!s.ok()) return invalid_argument(path.string() + ": " + s.message());
  }
  return {};
}

}  // namespace astrai::net
