#include "src/cli/commands.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "src/core/file_text.h"
#include "src/core/status.h"
#include "src/core/threads.h"

namespace astrai::cli {
namespace {
std::vector<std::pair<const char*, RegisterFn>>& registry() {
  static std::vector<std::pair<const char*, RegisterFn>> r;
  return r;
}
int g_exit_code = 0;
}  // namespace

bool add_registration(const char* name, RegisterFn fn) {
  registry().emplace_back(name, fn);
  return true;
}

void register_all(CLI::App& app) {
  auto& r = registry();
  // Fixed order in --help regardless of link order.
  std::sort(r.begin(), r.end(),
            [](const auto& a, const auto& b) { return std::strcmp(a.first, b.first) < 0; });
  for (auto& [name, fn] : r) fn(app);
}

CLI::App* bench_command(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    if (sub->get_name() == "bench") return sub;
  CLI::App* b = app.add_subcommand("bench", "Benchmarks: print a table and a JSON line");
  b->require_subcommand(1);
  return b;
}

int exit_code() {
  return g_exit_code;
}
void set_exit_code(int code) {
  g_exit_code = code;
}

void add_common_options(CLI::App& sub, CommonOptions& o) {
  sub.add_option("--device", o.device, "cpu | cuda | auto (cuda when present)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  sub.add_option("--dtype", o.dtype, "f32 | bf16 | auto (cpu: f32, cuda: bf16)")
      ->check(CLI::IsMember({"f32", "bf16", "auto"}))
      ->capture_default_str();
  sub.add_option("--threads", o.threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  sub.add_option("--log-level", o.log_level, "trace | debug | info | warn | error | off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  sub.add_option(
         "--fp8-weights", o.fp8_weights,
         "An fp8 checkpoint's projections: widen (to the compute dtype at load) | keep (fp8 on a GPU: "
         "half the memory, faster decode up to 8 sequences, slower prefill and larger batches)")
      ->check(CLI::IsMember({"widen", "keep"}))
      ->capture_default_str();
}

LoadOptions load_options(const CommonOptions& o, bool verbose) {
  LoadOptions lo;
  lo.verbose = verbose;
  lo.keep_fp8 = o.fp8_weights == "keep";
  return lo;
}

void apply_common_options(const CommonOptions& o) {
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  if (o.threads > 0) set_num_threads(o.threads);
}

Result<std::optional<ChatTemplateText>> chat_template_option(const std::string& value) {
  if (value.empty()) return std::optional<ChatTemplateText>();
  std::error_code ec;
  if (std::filesystem::is_regular_file(value, ec)) {
    auto text = read_text_file(value);
    if (!text.ok()) return io_error("--chat-template " + text.status().message());
    spdlog::info("chat template from {}", value);
    return std::optional<ChatTemplateText>(ChatTemplateText{std::move(text).value(), value});
  }
  if (value.find("{{") != std::string::npos || value.find("{%") != std::string::npos)
    return std::optional<ChatTemplateText>(ChatTemplateText{value, "--chat-template"});
  return not_found("--chat-template " + value + ": no such file (nor a template: it has no '{{' or '{%')");
}

Result<SamplingDefaults> load_sampling_defaults(const std::filesystem::path& model_dir,
                                                const char* what_wins) {
  std::vector<std::string> warnings;
  ASTRAI_ASSIGN_OR_RETURN(SamplingDefaults d, read_sampling_defaults(model_dir, &warnings));
  for (const std::string& w : warnings) spdlog::warn("{}", w);
  if (!d.empty())
    spdlog::info("sampling defaults from generation_config.json: {} ({})", d.describe(), what_wins);
  return d;
}

}  // namespace astrai::cli
