// astrai bench prefill: prefill throughput of Model::forward for one prompt at a time.
//   astrai bench prefill --device cpu|cuda --preset tiny|llama-1b|... (or --model DIR)
//                        [--prompt-len 1024,8192,32768] [--chunk 0] [--reps 3] [--tp N] [--no-peak]
// For each prompt length L: one random prompt of L tokens forwarded in chunks of --chunk tokens
// (0: the whole prompt in one step; the server's default budget is --max-prefill-tokens 2048), the
// last chunk asking for the last row's logits as generation does. One untimed prefill first (it pays
// for first launches, GEMM plans and page faults), then at least --reps timed ones into the same
// pages, and more (up to kMaxReps) while the timed ones total under kRepsSeconds: the best of a few
// ms-long prefills (a 1k prompt on a GPU) moves with the board's clocks, and 20 of them cost 0.1 s.
//
// Reference: the FLOPs of the prefill over the bf16 GEMM peak measured in the same run (an 8192^3
// GEMM through the backend; --no-peak skips it, and it is not measured off bf16 backends):
//   2 * L * (the layers' matmul weights)            every token through every projection
//   + 2 * vocab * hidden                            the LM head, last row only
//   + 4 * layers * q_dim * L (L + 1) / 2            causal attention: QK^T and PV, token i sees i + 1 keys
// Embedding lookups, norms and element-wise ops are not counted.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "src/backend/backend.h"
#include "src/cli/commands.h"
#include "src/core/json_writer.h"
#include "src/engine/loader.h"
#include "src/model/config.h"
#include "src/model/model.h"
#include "src/model/model_source.h"
#include "train/flops.h"

namespace astrai::cli {
namespace {

struct PrefillBenchOptions {
  CommonOptions common;
  std::string model, preset;
  std::string prompt_lens = "1024,8192";
  int chunk = 0;
  int reps = 3;
  uint64_t seed = 0;
  int tp = 1;
  bool no_peak = false;
};

struct PrefillResult {
  int prompt_len = 0;
  double seconds = 0;  // one prefill, the best of `reps`
  double flops = 0;    // of one prefill
  int reps = 0;        // timed prefills
};

constexpr int kMaxReps = 20;
constexpr double kRepsSeconds = 0.25;

double prefill_flops(const ModelConfig& c, int64_t L) {
  const double H = double(c.hidden_size), F = double(c.intermediate_size);
  const double per_layer = H * double(c.q_dim() + 2 * c.kv_dim()) + double(c.q_dim()) * H + 3.0 * H * F;
  const double layers = double(c.num_layers), l = double(L);
  return 2.0 * l * layers * per_layer + 2.0 * double(c.vocab_size) * H +
         4.0 * layers * double(c.q_dim()) * l * (l + 1.0) / 2.0;
}

PrefillResult run_prompt(Model& model, int L, int chunk, int reps, uint64_t seed) {
  const ModelConfig& cfg = model.config();
  if (L > cfg.max_context())
    throw Error(invalid_argument("--prompt-len " + std::to_string(L) + " exceeds the model's context of " +
                                 std::to_string(cfg.max_context())));
  const int page_size = 16, step_tokens = chunk > 0 ? std::min(chunk, L) : L;
  StepLimits limits;
  limits.max_seqs = 1;
  limits.max_tokens = step_tokens;
  limits.max_model_len = L;
  limits.page_size = page_size;
  check(model.reserve_steps(limits));
  const int n_pages = (L + page_size - 1) / page_size;
  KvCache kv = model.allocate_kv(n_pages, page_size);
  std::vector<int32_t> pages(static_cast<size_t>(n_pages));
  for (int i = 0; i < n_pages; ++i) pages[size_t(i)] = i;
  std::mt19937_64 rng(seed + uint64_t(L));
  std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg.vocab_size) - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(L));
  for (int32_t& t : prompt) t = tok(rng);
  ForwardBatchBuilder batch(page_size);
  Backend& be = model.backend();
  auto prefill = [&] {
    for (int p0 = 0; p0 < L; p0 += step_tokens) {
      const int n = std::min(step_tokens, L - p0);
      batch.clear();
      batch.add_sequence(prompt, p0, n, pages, p0 + n == L ? LogitRows::last : LogitRows::none);
      (void)model.forward(batch.finish(), kv).value();
    }
    be.synchronize();
  };
  prefill();  // untimed: first launches, GEMM plans, page faults
  PrefillResult r;
  r.prompt_len = L;
  r.flops = prefill_flops(cfg, L);
  r.seconds = 1e30;
  for (double total = 0; r.reps < reps || (r.reps < kMaxReps && total < kRepsSeconds); ++r.reps) {
    const auto t0 = BenchClock::now();
    prefill();
    const double s = seconds_since(t0);
    r.seconds = std::min(r.seconds, s);
    total += s;
  }
  return r;
}

void run(const PrefillBenchOptions& o) {
  apply_common_options(o.common);
  if (o.chunk < 0 || o.reps < 1) throw Error(invalid_argument("--chunk must be >= 0 and --reps >= 1"));
  const std::vector<int> lens = parse_int_list(o.prompt_lens, "--prompt-len");
  const std::string name = o.model.empty() ? o.preset : o.model;
  LoadedModel lm = load_bench_model(o.common, o.model, o.preset, o.seed, o.tp);
  Backend& be = *lm.backend;
  Model& model = *lm.model;
  const ModelConfig& cfg = model.config();
  // The peak of one device: with --tp N each rank does 1/N of the matmul FLOPs in parallel, so the
  // group's reference is N times this (assumed equal devices).
  const double peak = o.no_peak ? 0.0 : train::measure_bf16_peak_tflops(be) * double(o.tp);
  std::printf("model %s (%s, %lld layers, %.1fM params) on %s%s\n", name.c_str(), cfg.architecture.c_str(),
              (long long)cfg.num_layers, double(cfg.num_parameters()) / 1e6, be.name().c_str(),
              o.tp > 1 ? (", tensor parallel over " + std::to_string(o.tp) + " ranks").c_str() : "");
  if (peak > 0) std::printf("bf16 GEMM peak (8192^3, measured now): %.1f TFLOP/s\n", peak);
  std::printf("chunk %s, best of at least %d (up to %d while they total under %.2f s)\n\n",
              o.chunk > 0 ? (std::to_string(o.chunk) + " tokens").c_str() : "whole prompt", o.reps, kMaxReps,
              kRepsSeconds);
  std::printf("%8s %12s %12s %10s %9s %7s\n", "prompt", "ms", "tok/s", "TFLOP/s", "of peak", "best of");
  std::vector<PrefillResult> results;
  for (int L : lens) {
    const PrefillResult r = run_prompt(model, L, o.chunk, o.reps, o.seed);
    const double tflops = r.flops / r.seconds / 1e12;
    char share[16] = "-";
    if (peak > 0) std::snprintf(share, sizeof share, "%.1f%%", 100.0 * tflops / peak);
    std::printf("%8d %12.2f %12.1f %10.1f %9s %7d\n", L, r.seconds * 1e3, double(L) / r.seconds, tflops,
                share, r.reps);
    std::fflush(stdout);
    results.push_back(r);
  }
  JsonWriter w;
  w.begin_object()
      .key("bench")
      .value("prefill")
      .key("model")
      .value(name)
      .key("architecture")
      .value(cfg.architecture)
      .key("device")
      .value(be.name())
      .key("tp")
      .value(int64_t(o.tp))
      .key("threads")
      .value(int64_t(omp_get_max_threads()))
      .key("chunk")
      .value(int64_t(o.chunk))
      .key("peak_tflops")
      .value(peak)
      .key("results")
      .begin_array();
  for (const PrefillResult& r : results) {
    const double tflops = r.flops / r.seconds / 1e12;
    w.begin_object()
        .key("prompt_len")
        .value(int64_t(r.prompt_len))
        .key("ms")
        .value(r.seconds * 1e3)
        .key("tok_per_s")
        .value(double(r.prompt_len) / r.seconds)
        .key("tflops")
        .value(tflops)
        .key("share_of_peak")
        .value(peak > 0 ? tflops / peak : 0.0)
        .key("reps")
        .value(int64_t(r.reps))
        .end_object();
  }
  w.end_array().end_object();
  std::printf("\n%s\n", w.str().c_str());
}

void register_bench_prefill(CLI::App& app) {
  auto o = std::make_shared<PrefillBenchOptions>();
  CLI::App* sub = bench_command(app)->add_subcommand(
      "prefill", "Prefill tokens/s of Model::forward, one prompt at a time (+ share of the bf16 GEMM peak)");
  sub->add_option("--model", o->model, "Model directory (Hugging Face layout)");
  sub->add_option("--preset", o->preset, "Preset name (" + preset_list() + ")");
  sub->add_option("--prompt-len", o->prompt_lens, "Comma-separated prompt lengths")->capture_default_str();
  sub->add_option("--chunk", o->chunk, "Tokens per forward step (0: the whole prompt in one step)")
      ->capture_default_str();
  char reps_help[160];
  std::snprintf(
      reps_help, sizeof reps_help,
      "Timed prefills per length, at least (more while they total under %.2f s, up to %d; the best is "
      "reported)",
      kRepsSeconds, kMaxReps);
  sub->add_option("--reps", o->reps, reps_help)->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the prompts and of a preset's weights")->capture_default_str();
  sub->add_option("--tp", o->tp, "Tensor-parallel ranks: the model is split over GPUs 0..tp-1")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_flag("--no-peak", o->no_peak, "Skip the GEMM peak measurement");
  add_common_options(*sub, o->common);
  sub->callback([o] { run(*o); });
}

}  // namespace
}  // namespace astrai::cli

ASTRAI_REGISTER_COMMAND("bench prefill", astrai::cli::register_bench_prefill);
