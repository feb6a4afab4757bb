// astrai init --preset NAME --out DIR [--seed N] [--tokenizer DIR] [--dtype f32|bf16]
// Writes a complete Hugging Face model directory with deterministic random weights.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "src/cli/commands.h"
#include "src/model/config.h"
#include "src/model/model_init.h"

namespace astrai::cli {
namespace {

struct InitArgs {
  CommonOptions common;
  std::string preset, out, tokenizer;
  uint64_t seed = 0;
};

void run(const InitArgs& a) {
  apply_common_options(a.common);
  const ModelConfig c = preset_config(a.preset).value();
  InitOptions o;
  o.seed = a.seed;
  o.tokenizer_dir = a.tokenizer;
  if (a.common.dtype == "f32") o.torch_dtype = "float32";
  if (a.common.dtype == "bf16") o.torch_dtype = "bfloat16";
  const auto t0 = std::chrono::steady_clock::now();
  check(init_model_dir(a.preset, a.out, o));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelConfig written = ModelConfig::load(a.out).value();
  std::printf("wrote %s: preset %s (%s), %.3fM parameters, %s weights, seed %llu, in %.1f s\n", a.out.c_str(),
              a.preset.c_str(), c.architecture.c_str(), double(written.num_parameters()) / 1e6,
              written.torch_dtype.c_str(), static_cast<unsigned long long>(a.seed), s);
  set_exit_code(0);
}

void register_init(CLI::App& app) {
  auto a = std::make_shared<InitArgs>();
  std::string presets;
  for (const std::string& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  CLI::App* sub =
      app.add_subcommand("init", "Write a random-init Hugging Face model directory from a preset");
  sub->add_option("--preset", a->preset, "Preset: " + presets)
      ->required()
      ->check(CLI::IsMember(preset_names()));
  sub->add_option("--out", a->out, "Output directory (must not exist, or be empty)")->required();
  sub->add_option("--seed", a->seed, "Random seed; the weights are a pure function of it")
      ->capture_default_str();
  sub->add_option("--tokenizer", a->tokenizer,
                  "Copy tokenizer files from this model directory (default: the built-in byte tokenizer)")
      ->check(CLI::ExistingDirectory);
  add_common_options(*sub, a->common);
  sub->callback([a] { run(*a); });
}

}  // namespace
}  // namespace astrai::cli

ASTRAI_REGISTER_COMMAND("init", astrai::cli::register_init);
