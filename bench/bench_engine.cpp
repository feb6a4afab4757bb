// Engine benchmarks:
//   astrai bench prefix   TTFT of prompts sharing a long prefix, radix prefix cache on vs off
//   astrai bench offline  offline throughput: run_offline_generate (what `astrai generate` runs)
//                         on N prompts, tokens/s
// Each prints a small table and one JSON line.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "src/cli/commands.h"
#include "src/core/json_writer.h"
#include "src/engine/loader.h"
#include "src/engine/offline.h"

namespace astrai::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct PrefixArgs {
  CommonOptions common;
  std::string model = "tiny";
  int prefix_tokens = 1000, suffix_tokens = 16, requests = 8;
  uint64_t seed = 1;
};

// Mean TTFT (ms) of `requests` sequential prompts = shared prefix + own suffix, after one warm-up.
double prefix_ttft_ms(const PrefixArgs& a, bool cache) {
  EngineOptions eo;
  eo.prefix_cache = cache;
  eo.max_prefill_tokens = 0;
  eo.kv_memory_bytes = int64_t(1) << 30;
  auto le = load_engine(a.model, a.common.device, eo, 1, {}, cli::load_options(a.common)).value();
  const int vocab = int(std::min<int64_t>(le.engine->model_config().vocab_size, 256));
  std::mt19937_64 rng(a.seed);
  std::vector<int32_t> prefix;
  for (int i = 0; i < a.prefix_tokens; ++i) prefix.push_back(int32_t(rng() % uint64_t(vocab)));
  double total = 0;
  for (int i = 0; i <= a.requests; ++i) {
    Request r;
    r.prompt = prefix;
    for (int j = 0; j < a.suffix_tokens; ++j) r.prompt.push_back(int32_t(rng() % uint64_t(vocab)));
    r.max_tokens = 1;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    const auto t0 = Clock::now();
    Stream s = le.engine->submit(std::move(r)).value();
    TokenEvent ev;
    while (s.wait(ev) && ev.token < 0 && ev.finish == FinishReason::none) {
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    while (s.wait(ev)) {
    }
    if (i > 0) total += ms;  // request 0 warms up (and, with the cache on, fills it)
  }
  le.engine->shutdown();
  return total / a.requests;
}

void run_prefix(const PrefixArgs& a) {
  apply_common_options(a.common);
  const double on = prefix_ttft_ms(a, true);
  const double off = prefix_ttft_ms(a, false);
  std::printf("%-28s %12s\n", "prefix cache", "mean TTFT ms");
  std::printf("%-28s %12.2f\n", "on", on);
  std::printf("%-28s %12.2f\n", "off", off);
  std::printf("%-28s %12.2fx\n", "speed-up (off / on)", off / on);
  JsonWriter w;
  w.begin_object()
      .key("bench")
      .value("prefix")
      .key("model")
      .value(a.model)
      .key("prefix_tokens")
      .value(a.prefix_tokens)
      .key("suffix_tokens")
      .value(a.suffix_tokens)
      .key("requests")
      .value(a.requests)
      .key("ttft_ms_cache_on")
      .value(on)
      .key("ttft_ms_cache_off")
      .value(off)
      .key("ratio_off_over_on")
      .value(off / on)
      .end_object();
  std::printf("%s\n", w.str().c_str());
  set_exit_code(0);
}

struct OfflineArgs {
  CommonOptions common;
  std::string model = "tiny";
  int prompts = 1000, max_tokens = 32, max_batch = 256;
  uint64_t seed = 1;
};

void run_offline(const OfflineArgs& a) {
  apply_common_options(a.common);
  EngineOptions eo;
  eo.max_batch_size = a.max_batch;
  eo.kv_memory_bytes = int64_t(2) << 30;
  auto le = load_engine(a.model, a.common.device, eo, 1, {}, cli::load_options(a.common)).value();
  const auto dir =
      std::filesystem::temp_directory_path() / ("astrai-bench-offline-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::mt19937_64 rng(a.seed);
    std::FILE* f = std::fopen((dir / "in.jsonl").c_str(), "wb");
    for (int i = 0; i < a.prompts; ++i) {
      std::string p;
      for (int j = 0, n = 20 + int(rng() % 100); j < n; ++j) p += char('a' + rng() % 26);
      std::fprintf(f, "{\"id\": %d, \"prompt\": \"%s\"}\n", i, p.c_str());
    }
    std::fclose(f);
  }
  OfflineOptions oo;
  oo.max_tokens = a.max_tokens;
  oo.ignore_eos = true;
  oo.sampling.temperature = 1.0f;
  oo.sampling.seed = a.seed;
  oo.progress = false;
  const auto sum =
      run_offline_generate(*le.engine, *le.tokenizer, dir / "in.jsonl", dir / "out.jsonl", oo).value();
  const auto st = le.engine->stats();
  le.engine->shutdown();
  std::filesystem::remove_all(dir);
  std::printf("%-28s %12s\n", "offline generate", "");
  std::printf("%-28s %12d\n", "prompts", sum.completed);
  std::printf("%-28s %12llu\n", "prompt tokens", (unsigned long long)sum.prompt_tokens);
  std::printf("%-28s %12llu\n", "completion tokens", (unsigned long long)sum.completion_tokens);
  std::printf("%-28s %12.2f\n", "seconds", sum.seconds);
  std::printf("%-28s %12.1f\n", "completion tok/s", sum.tokens_per_s);
  std::printf("%-28s %12.1f\n", "mean batch size", st.avg_batch_size);
  JsonWriter w;
  w.begin_object()
      .key("bench")
      .value("offline")
      .key("model")
      .value(a.model)
      .key("prompts")
      .value(sum.completed)
      .key("prompt_tokens")
      .value(sum.prompt_tokens)
      .key("completion_tokens")
      .value(sum.completion_tokens)
      .key("seconds")
      .value(sum.seconds)
      .key("tokens_per_s")
      .value(sum.tokens_per_s)
      .key("avg_batch_size")
      .value(st.avg_batch_size)
      .end_object();
  std::printf("%s\n", w.str().c_str());
  set_exit_code(0);
}

void register_engine_benches(CLI::App& app) {
  auto pa = std::make_shared<PrefixArgs>();
  CLI::App* p = bench_command(app)->add_subcommand(
      "prefix", "TTFT with a long shared prefix, radix prefix cache on vs off");
  p->add_option("--model", pa->model, "Model directory or preset")->capture_default_str();
  p->add_option("--prefix-tokens", pa->prefix_tokens, "Shared prefix length")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  p->add_option("--suffix-tokens", pa->suffix_tokens, "Own suffix length")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  p->add_option("--requests", pa->requests, "Timed requests per mode")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  p->add_option("--seed", pa->seed, "Prompt seed")->capture_default_str();
  add_common_options(*p, pa->common);
  p->callback([pa] { run_prefix(*pa); });

  auto oa = std::make_shared<OfflineArgs>();
  CLI::App* o = bench_command(app)->add_subcommand(
      "offline", "Offline throughput: generate on N prompts through the engine, tokens/s");
  o->add_option("--model", oa->model, "Model directory or preset")->capture_default_str();
  o->add_option("--prompts", oa->prompts, "Prompts")->check(CLI::PositiveNumber)->capture_default_str();
  o->add_option("--max-tokens", oa->max_tokens, "Tokens per prompt")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  o->add_option("--max-batch", oa->max_batch, "Sequences per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  o->add_option("--seed", oa->seed, "Prompt and sampling seed")->capture_default_str();
  add_common_options(*o, oa->common);
  o->callback([oa] { run_offline(*oa); });
}

}  // namespace

ASTRAI_REGISTER_COMMAND("bench-engine", register_engine_benches);

}  // namespace astrai::cli
