// Subcommand registry. Each src/cli/cmd_<name>.cpp defines a function that adds its subcommand
// to the CLI11 app and registers it with ASTRAI_REGISTER_COMMAND; main() calls register_all().
// A command's callback runs the command and calls set_exit_code(); errors it cannot handle are
// thrown as astrai::Error and printed by main() as one line with exit code 1.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

#include "src/core/status.h"
#include "src/engine/sampling_defaults.h"
#include "src/model/model.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::cli {

using RegisterFn = void (*)(CLI::App&);

void register_all(CLI::App& app);
bool add_registration(const char* name, RegisterFn fn);

// `astrai bench` groups benchmarks: each bench file adds its own subcommand under it, e.g.
//   CLI::App* b = bench_command(app)->add_subcommand("decode", "...");
CLI::App* bench_command(CLI::App& app);

int exit_code();
void set_exit_code(int code);

// --NAME and --no-NAME for a setting whose default is decided later (from the device, say): `value`
// becomes 1 after --NAME and 0 after --no-NAME, and keeps what it held (-1: decide later) after
// neither; the two exclude each other. Returns --NAME's option. (CLI11's "--no-NAME{0}" flag, with
// its default-value syntax, left 0 when absent and -1 when given: the reverse of a tri-state.)
inline CLI::Option* add_flag_pair(CLI::App& sub, const std::string& name, int& value,
                                  const std::string& on_help, const std::string& off_help) {
  CLI::Option* on = sub.add_flag_callback(
      "--" + name, [&value] { value = 1; }, on_help);
  sub.add_flag_callback(
         "--no-" + name, [&value] { value = 0; }, off_help)
      ->excludes(on);
  return on;
}

// Flags every model-using subcommand accepts (contract: --device, --dtype, --threads, --log-level).
struct CommonOptions {
  std::string device = "auto";  // cpu | cuda | auto
  std::string dtype = "auto";   // f32 | bf16 | auto (cpu: f32, cuda: bf16)
  int threads = 0;              // 0: all cores
  std::string log_level = "info";
  std::string fp8_weights = "widen";  // widen | keep (LoadOptions::keep_fp8)
};
void add_common_options(CLI::App& sub, CommonOptions& opts);
// Applies --log-level and --threads; call first thing in a callback.
void apply_common_options(const CommonOptions& opts);
// The model loader's options from the common flags (--fp8-weights); verbose: log the load.
LoadOptions load_options(const CommonOptions& opts, bool verbose = false);

// `serve` and `generate` with --generation-config auto: the model directory's sampling defaults
// (src/engine/sampling_defaults.h), each value left out logged as a warning and those in force at
// info level, with `what_wins` (what overrides them) in the line.
Result<SamplingDefaults> load_sampling_defaults(const std::filesystem::path& model_dir,
                                                const char* what_wins);

// `--chat-template VALUE` (serve.yaml chat_template), as vLLM takes it: a file holding the template,
// or the template itself (text with "{{" or "{%"); "" is none (the model's). Anything else is an
// error naming the file that is not there.
Result<std::optional<ChatTemplateText>> chat_template_option(const std::string& value);

}  // namespace astrai::cli

#define ASTRAI_REGISTER_COMMAND(name, fn)                             \
  static const bool ASTRAI_CONCAT(astrai_cmd_registered_, __LINE__) = \
      ::astrai::cli::add_registration(name, fn)
