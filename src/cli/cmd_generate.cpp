// astrai generate: offline batch generation on the continuous-batching engine.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <sstream>

#include "src/cli/commands.h"
#include "src/engine/loader.h"
#include "src/engine/offline.h"

namespace astrai::cli {
namespace {

struct GenerateArgs {
  CommonOptions common;
  std::string model, input, output;
  int max_tokens = 256;
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0;
  int64_t seed = -1;
  std::string stop_token_ids;
  bool ignore_eos = false, resume = false, no_progress = false;
  std::string kv_memory;
  int max_prefill_tokens = 2048, page_size = 16, max_batch = 0, max_queue = 1024;
  bool no_prefix_cache = false;
  bool no_cuda_graphs = false;
  bool no_overlap = false;
  int tp = 1;
  std::string generation_config = "auto";
  std::string chat_template;
};

Result<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    try {
      size_t used = 0;
      const long v = std::stol(part, &used);
      if (used != part.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(part);
      ids.push_back(int32_t(v));
    } catch (...) {
      return invalid_argument("--stop-token-ids: '" + part + "' is not a token id");
    }
  }
  return ids;
}

void run(const GenerateArgs& a, const CLI::App& sub) {
  apply_common_options(a.common);
  EngineOptions eo;
  eo.page_size = a.page_size;
  eo.max_prefill_tokens = a.max_prefill_tokens;
  eo.max_batch_size = a.max_batch;
  eo.max_queue = a.max_queue;
  eo.prefix_cache = !a.no_prefix_cache;
  eo.cuda_graphs = !a.no_cuda_graphs;
  if (a.no_overlap) eo.overlap = 0;
  if (!a.kv_memory.empty()) eo.kv_memory_bytes = parse_byte_size(a.kv_memory).value();
  OfflineOptions oo;
  oo.stop_ids = parse_ids(a.stop_token_ids).value();
  oo.ignore_eos = a.ignore_eos;
  oo.resume = a.resume;
  oo.progress = !a.no_progress;
  const std::optional<ChatTemplateText> chat_template = chat_template_option(a.chat_template).value();
  auto le = load_engine(a.model, a.common.device, eo, a.tp, chat_template, load_options(a.common)).value();
  if (chat_template && !le.tokenizer->chat_template()) throw Error(le.tokenizer->chat_template_status());
  // A line's fields win over the flags, the flags over the model's generation_config.json, and that
  // over the built-in defaults.
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  oo.max_tokens = a.max_tokens;
  if (a.generation_config == "auto") {
    const SamplingDefaults d = load_sampling_defaults(le.dir, "flags and lines override them").value();
    d.apply(oo.sampling);
    if (d.max_tokens) oo.max_tokens = *d.max_tokens;
  }
  if (given("--max-tokens")) oo.max_tokens = a.max_tokens;
  if (given("--temperature")) oo.sampling.temperature = a.temperature;
  if (given("--top-p")) oo.sampling.top_p = a.top_p;
  if (given("--top-k")) oo.sampling.top_k = a.top_k;
  if (given("--min-p")) oo.sampling.min_p = a.min_p;
  if (a.seed >= 0) oo.sampling.seed = uint64_t(a.seed);
  const auto sum = run_offline_generate(*le.engine, *le.tokenizer, a.input, a.output, oo).value();
  le.engine->shutdown();
  std::fprintf(stderr,
               "generate: %d lines (%d done, %d errors, %d skipped) in %.2f s: %llu prompt + %llu completion "
               "tokens, %.1f tok/s\n",
               sum.lines, sum.completed, sum.errors, sum.skipped, sum.seconds,
               (unsigned long long)sum.prompt_tokens, (unsigned long long)sum.completion_tokens,
               sum.tokens_per_s);
  set_exit_code(0);
}

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub =
      app.add_subcommand("generate", "Offline batch generation: JSONL prompts in, JSONL completions out");
  sub->add_option("--model", a->model, "Model directory or preset name (tiny, qwen3-0.6b, ...)")->required();
  sub->add_option("--input", a->input,
                  "Input JSONL: {\"id\"?, \"prompt\"} or {\"id\"?, \"messages\"} per line")
      ->required();
  sub->add_option("--output", a->output, "Output JSONL, one line per input line, in input order")->required();
  sub->add_option("--max-tokens", a->max_tokens, "Default tokens to generate per choice")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--temperature", a->temperature, "Default temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--top-p", a->top_p, "Default top-p")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  sub->add_option("--top-k", a->top_k, "Default top-k (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--min-p", a->min_p, "Default min-p")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  sub->add_option("--seed", a->seed, "Default sampling seed (per line 'seed' overrides; unset: random)");
  sub->add_option("--stop-token-ids", a->stop_token_ids, "Extra stop token ids, comma-separated");
  sub->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the model's end-of-sequence tokens");
  sub->add_flag("--resume", a->resume, "Skip ids already present in the output file and append to it");
  sub->add_flag("--no-progress", a->no_progress, "No progress bar on stderr");
  sub->add_option(
      "--kv-memory", a->kv_memory,
      "KV cache budget, e.g. 2GiB (default: 0.9 of the free GPU memory, half the free host memory)");
  sub->add_option("--max-prefill-tokens", a->max_prefill_tokens,
                  "Prompt tokens per engine step (0: unlimited)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--page-size", a->page_size, "KV cache page size in tokens")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  sub->add_flag("--no-prefix-cache", a->no_prefix_cache, "Disable the radix prefix cache");
  sub->add_flag("--no-cuda-graphs", a->no_cuda_graphs, "Run decode steps eagerly (no CUDA graphs)");
  sub->add_flag("--no-overlap", a->no_overlap,
                "Read each step's tokens before launching the next (no overlapped steps)");
  sub->add_option("--tp", a->tp, "Tensor-parallel ranks: the model is split over GPUs 0..tp-1")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--max-batch", a->max_batch, "Sequences per engine step (0: 512 on a GPU, 256 on the CPU)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--max-queue", a->max_queue, "Requests waiting in the engine at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_common_options(*sub, a->common);
  sub->add_option(
         "--generation-config", a->generation_config,
         "auto: defaults the flags and lines leave out come from the model's generation_config.json "
         "(temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens); none: built-in ones")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  sub->add_option(
      "--chat-template", a->chat_template,
      "Chat template for messages lines, in place of the model's: a file (e.g. template.jinja) or "
      "the template text itself");
  sub->callback([a, sub] { run(*a, *sub); });
}

}  // namespace

ASTRAI_REGISTER_COMMAND("generate", register_generate);

}  // namespace astrai::cli
