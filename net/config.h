// serve.yaml: every server and engine setting, each also a command-line flag (`net_threads` in YAML
// is `--net-threads` on the command line). Flags given on the command line override the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "src/core/status.h"
#include "src/engine/engine.h"
#include "src/tokenizer/chat_template_limits.h"

namespace astrai::net {

struct ServeConfig {
  std::string model;   // HF model directory (or preset name)
  std::string preset;  // e.g. tiny
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string device = "auto";
  std::string dtype = "auto";
  int threads = 0;
  int tp = 1;                         // tensor-parallel ranks: GPUs 0..tp-1 (src/model/tp_model.h)
  std::string fp8_weights = "widen";  // widen | keep (LoadOptions::keep_fp8)
  std::string log_level = "info";
  int net_threads = 1;
  int worker_threads = 2;         // CPU-heavy request work (tokenizing, templates), off the net threads
  std::string api_key;            // "" = no authentication
  std::string cors;               // "" = off, else the Access-Control-Allow-Origin value ("*")
  int64_t max_body = 8 << 20;     // bytes
  int max_concurrent = 256;       // generations in flight; past it 429
  double drain_timeout = 30;      // seconds, on SIGTERM/SIGINT
  double header_timeout = 10;     // seconds to receive a request's headers (slowloris)
  double body_timeout = 30;       // seconds to receive a request's body
  double idle_timeout = 60;       // seconds a keep-alive connection may sit idle
  std::string served_model_name;  // "" = the model directory's name (or the preset's)
  bool access_log = true;
  // Splits think-block text off the answer: qwen3 | deepseek_r1 | none | auto (qwen3 when the
  // tokenizer has <think> and </think> as added tokens). See net/reasoning_parser.h.
  std::string reasoning_parser = "auto";
  // auto: a request's sampling fields default to those the model's generation_config.json sets
  // (src/engine/sampling_defaults.h); none: to the built-in ones.
  std::string generation_config = "auto";
  // A chat template in place of the model's: a file, or the template text ("": the model's, from
  // chat_template.jinja or tokenizer_config.json).
  std::string chat_template;
  // The model's chat template runs under these (template_max_steps, ..._output, ..._memory, ..._depth).
  ChatTemplateLimits template_limits;
  EngineOptions engine;
};

struct ConfigKey {
  std::string name;  // YAML key; the flag is "--" + name with '_' -> '-'
  std::string help;
  bool is_flag;  // false for keys whose flag already exists (the common --device, --threads, ...)
  std::function<Status(ServeConfig&, const std::string&)> set;
};

const std::vector<ConfigKey>& serve_config_keys();
std::string flag_name(const std::string& key);

// Sets one key from its text form; the error names the key and the accepted values.
Status apply_serve_key(ServeConfig& cfg, const std::string& key, const std::string& value);
// Reads a YAML mapping of keys (nested `engine:` mapping allowed: engine.page_size == page_size).
Status load_serve_yaml(const std::filesystem::path& path, ServeConfig& cfg);

}  // namespace astrai::net
