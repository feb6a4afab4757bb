// astrai serve: the HTTP server (net/) on one model. Settings come from serve.yaml (--config) and
// are overridden by flags; every serve.yaml key is also a flag (net/config.h lists them).
#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "net/config.h"
#include "net/server.h"
#include "src/cli/commands.h"
#include "src/engine/engine.h"
#include "src/engine/loader.h"
#include "src/model/model_source.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::cli {
namespace {

struct ServeArgs {
  std::string config_path;
  CommonOptions common;
  std::map<std::string, std::string> values;  // flag values, by serve.yaml key
  bool no_cuda_graphs = false;
  bool no_overlap = false;
};

// The common flags' values serve runs with (serve.yaml's, overridden by the flags).
CommonOptions common_options(const net::ServeConfig& c) {
  return CommonOptions{c.device, c.dtype, c.threads, c.log_level, c.fp8_weights};
}

Status load_model(net::ServerState& st) {
  const auto& c = st.config;
  const std::string source = !c.model.empty() ? c.model : c.preset;
  ASTRAI_ASSIGN_OR_RETURN(std::filesystem::path dir, resolve_model_dir(source));
  ASTRAI_ASSIGN_OR_RETURN(const std::optional<ChatTemplateText> chat_template,
                          chat_template_option(c.chat_template));
  ASTRAI_ASSIGN_OR_RETURN(auto tok, Tokenizer::load(dir, c.template_limits, chat_template));
  // A template the user names must work; the model's own may fail (chat routes then say why).
  if (chat_template && !tok->chat_template()) return tok->chat_template_status();
  const LoadOptions lo = load_options(common_options(c));
  ASTRAI_ASSIGN_OR_RETURN(LoadedModel lm, astrai::load_model(dir, c.device, c.tp, c.threads, lo));
  const WeightQuantization& quant = lm.model->config().quantization;
  spdlog::info("model {} on {}{}{}", dir.string(), lm.backend->name(),
               c.tp > 1 ? " (tensor parallel over " + std::to_string(c.tp) + " devices)" : std::string(),
               quant.method.empty() ? std::string()
                                    : ", " + quantization_note(quant, lm.backend->compute_dtype(),
                                                               keeps_fp8(*lm.backend, lo)));
  ASTRAI_ASSIGN_OR_RETURN(auto engine, Engine::create(std::move(lm.backend), std::move(lm.model), c.engine));
  st.reasoning = c.reasoning_parser == "auto" ? net::detect_reasoning_parser(*tok)
                                              : *net::reasoning_parser_from_name(c.reasoning_parser);
  spdlog::info("reasoning parser: {}{}", net::reasoning_parser_name(st.reasoning),
               c.reasoning_parser == "auto" ? " (auto)" : "");
  if (c.generation_config == "auto") {
    ASTRAI_ASSIGN_OR_RETURN(st.sampling_defaults,
                            load_sampling_defaults(dir,
                                                   "a request's own fields win; --generation-config none: "
                                                   "the built-in defaults"));
  }
  st.tokenizer = std::move(tok);
  st.engine = std::move(engine);
  if (st.model_name.empty()) st.model_name = source;
  return {};
}

void run(CLI::App& sub, ServeArgs& a) {
  apply_common_options(a.common);
  net::ServeConfig cfg;
  if (!a.config_path.empty()) check(net::load_serve_yaml(a.config_path, cfg));
  // Flags win over the file.
  for (const auto& [key, value] : a.values)
    if (sub.count(net::flag_name(key)) > 0) check(net::apply_serve_key(cfg, key, value));
  if (sub.count("--device")) cfg.device = a.common.device;
  if (sub.count("--dtype")) cfg.dtype = a.common.dtype;
  if (sub.count("--threads")) cfg.threads = a.common.threads;
  if (sub.count("--log-level")) cfg.log_level = a.common.log_level;
  if (sub.count("--fp8-weights")) cfg.fp8_weights = a.common.fp8_weights;
  if (a.no_cuda_graphs) cfg.engine.cuda_graphs = false;
  if (a.no_overlap) cfg.engine.overlap = 0;
  // The file may have set these: apply them the same way the flags would have been.
  apply_common_options(common_options(cfg));
  if (cfg.model.empty() && cfg.preset.empty())
    check(invalid_argument("serve: give --model DIR or --preset NAME"));
  if (!cfg.model.empty() && !cfg.preset.empty())
    check(invalid_argument("serve: give --model or --preset, not both"));

  net::ServerState state;
  state.config = cfg;
  state.model_name =
      cfg.served_model_name.empty()
          ? (!cfg.model.empty() ? std::filesystem::path(cfg.model).filename().string() : cfg.preset)
          : cfg.served_model_name;
  if (state.model_name.empty()) state.model_name = cfg.model;
  check(net::run_server(state, load_model));
  set_exit_code(0);
}

void register_serve(CLI::App& app) {
  auto* sub =
      app.add_subcommand("serve", "Serve a model over HTTP (OpenAI + Anthropic APIs, SSE, WebSocket)");
  auto args = std::make_shared<ServeArgs>();
  sub->add_option("--config", args->config_path,
                  "serve.yaml with any of the settings below (flags override it)")
      ->check(CLI::ExistingFile);
  add_common_options(*sub, args->common);
  sub->add_flag("--no-cuda-graphs", args->no_cuda_graphs, "Run decode steps eagerly (no CUDA graphs)");
  sub->add_flag("--no-overlap", args->no_overlap,
                "Read each step's tokens before launching the next (no overlapped steps)");
  for (const auto& k : net::serve_config_keys()) {
    if (!k.is_flag) continue;
    sub->add_option(net::flag_name(k.name), args->values[k.name], k.help);
  }
  sub->callback([sub, args] { run(*sub, *args); });
}

}  // namespace

ASTRAI_REGISTER_COMMAND("serve", register_serve);

}  // namespace astrai::cli
