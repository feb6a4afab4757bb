// astrai bench train: training throughput of TrainModel + AdamW, on one device or data-parallel.
//   astrai bench train --preset llama-1b|tiny|... (or --model DIR) [--batch 8] [--seq-len 2048]
//                      [--steps 10] [--warmup 2] [--device cuda|cpu] [--no-peak] [--dp N]
// Each step is what `astrai train` does per optimizer step with grad_accum 1: zero the gradients,
// forward + backward of B random sequences of seq_len tokens (one document each, a fresh batch per
// step), global grad norm, AdamW on every tensor. After --warmup untimed steps, --steps steps are
// timed (the device synchronised at both ends); tokens/s = B * seq_len * steps / time.
//
// --dp N (N > 1): the same steps (the same global batch of B sequences, the same batches in the same
// order) first at dp 1 on GPU 0, then at dp N on GPUs 0..N-1 (train/data_parallel.h: B / N
// sequences per rank; --zero and --bucket-mb as train.yaml's zero and bucket_mb); prints both
// tokens/s, their ratio (the scaling) and the loss of every step of both runs (equal within bf16
// noise: the same data).
//
// MFU = model FLOPs per second (train/flops.h: 6 N per token for the matmul weights plus causal
// attention) / the bf16 GEMM peak measured in the same run (an 8192^3 GEMM through the backend's
// gemm op, cuBLASLt; times the ranks' GPUs with dp). Per-op device times: run with
// ASTRAI_CUDA_OP_TIMES=1 (printed at exit).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "src/backend/backend.h"
#include "src/cli/commands.h"
#include "src/core/json_writer.h"
#include "src/model/config.h"
#include "src/model/model_source.h"
#include "src/model/safetensors.h"
#include "train/data_parallel.h"
#include "train/flops.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace astrai::cli {
namespace {

struct TrainBenchOptions {
  CommonOptions common;
  std::string model, preset;
  int batch = 8;
  int seq_len = 2048;
  int steps = 10;
  int warmup = 2;
  int dp = 1;
  int zero = 1;        // dp > 1: ZeRO-1 sharded moments (train/data_parallel.h)
  int bucket_mb = 32;  // dp > 1: gradient buckets reduced during the backward; 0: after it
  uint64_t seed = 0;
  bool no_peak = false;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One batch of B random sequences, a document each.
train::TrainBatch random_batch(std::mt19937_64& rng, int batch, int seq_len, int64_t vocab) {
  train::TrainBatch b;
  b.batch = batch;
  b.seq_len = seq_len;
  std::uniform_int_distribution<int32_t> tok(0, int32_t(vocab) - 1);
  for (int r = 0; r < batch; ++r) {
    int32_t prev = tok(rng);
    for (int t = 0; t < seq_len; ++t) {
      const int32_t next = tok(rng);
      b.tokens.push_back(prev);
      b.targets.push_back(next);
      b.positions.push_back(t);
      b.doc_start.push_back(0);
      prev = next;
    }
  }
  return b;
}

struct RunResult {
  std::string device;
  double seconds = 0;          // of the timed steps
  std::vector<double> losses;  // every step's, warmup included
  double norm = 0;             // the last step's grad norm
  double peak = 0;             // bf16 GEMM peak over the group's devices (0: not measured)
};

RunResult run_group(const TrainBenchOptions& o, int dp, const ModelConfig& cfg, const WeightStore& store,
                    const std::vector<train::TrainBatch>& batches) {
  train::DataParallelOptions dpo;
  dpo.dp = dp;
  dpo.device = o.common.device;
  dpo.cpu_threads = o.common.threads;
  dpo.adamw = train::AdamWOptions{0.9, 0.95, 1e-8, 0.1};
  dpo.zero = o.zero != 0;
  dpo.bucket_bytes = int64_t(o.bucket_mb) << 20;
  auto group = train::DataParallelGroup::create(cfg, store, dpo).value();
  RunResult r;
  r.device = (dp > 1 ? "dp " + std::to_string(dp) + " x " : "") + group->backend().name();
  r.peak = !o.no_peak && group->device() == Device::cuda
               ? train::measure_bf16_peak_tflops(group->backend()) * double(dp)
               : 0.0;
  auto step = [&](const train::TrainBatch& b) {
    const train::StepResult s = group->step(std::span(&b, 1), 1e-4, 1.0).value();
    r.losses.push_back(s.loss_sum / double(s.targets));
    r.norm = s.grad_norm;
  };
  for (int i = 0; i < o.warmup; ++i) step(batches[size_t(i)]);
  check(group->synchronize());
  const auto t0 = Clock::now();
  for (int i = o.warmup; i < o.warmup + o.steps; ++i) step(batches[size_t(i)]);
  check(group->synchronize());
  r.seconds = seconds_since(t0);
  return r;
}

void run(const TrainBenchOptions& o) {
  apply_common_options(o.common);
  if (o.model.empty() == o.preset.empty())
    throw Error(invalid_argument("give exactly one of --model or --preset"));
  if (o.batch < 1 || o.seq_len < 1 || o.steps < 1 || o.warmup < 0 || o.dp < 1)
    throw Error(
        invalid_argument("--batch, --seq-len, --steps and --dp must be positive, --warmup not negative"));
  if (o.batch % o.dp != 0)
    throw Error(invalid_argument("--batch " + std::to_string(o.batch) +
                                 " (the global batch) does not split evenly over --dp " +
                                 std::to_string(o.dp) + " ranks"));
  const std::string name = o.model.empty() ? o.preset : o.model;
  const std::filesystem::path dir = resolve_model_dir(name, o.seed).value();
  const ModelConfig cfg = ModelConfig::load(dir).value();
  if (o.seq_len > cfg.max_context()) throw Error(invalid_argument("--seq-len beyond the model's context"));
  const WeightStore store = WeightStore::open(dir).value();
  std::vector<train::TrainBatch> batches;
  std::mt19937_64 rng(o.seed + 1);
  for (int i = 0; i < o.warmup + o.steps; ++i)
    batches.push_back(random_batch(rng, o.batch, o.seq_len, cfg.vocab_size));

  const double tokens = double(o.batch) * o.seq_len * o.steps;
  const double flops_per_tok = train::flops_per_token(cfg, o.seq_len);
  auto report = [&](const RunResult& r) {
    const double tps = tokens / r.seconds, tflops = tps * flops_per_tok / 1e12;
    std::printf("%s: %.1f ms/step, %.0f tokens/s, %.1f model TFLOP/s", r.device.c_str(),
                r.seconds * 1e3 / o.steps, tps, tflops);
    if (r.peak > 0)
      std::printf(", MFU %.1f%% of the measured peak (%.1f TFLOP/s)", 100 * tflops / r.peak, r.peak);
    std::printf(" (last loss %.4f, grad norm %.3g)\n", r.losses.back(), r.norm);
    std::fflush(stdout);
    return tps;
  };
  std::printf("model %s (%s, %lld layers, %.1fM params); global batch %d x %d tokens\n", name.c_str(),
              cfg.architecture.c_str(), (long long)cfg.num_layers, double(cfg.num_parameters()) / 1e6,
              o.batch, o.seq_len);
  std::fflush(stdout);
  std::optional<RunResult> base;
  if (o.dp > 1) {
    base = run_group(o, 1, cfg, store, batches);
    report(*base);
  }
  const RunResult r = run_group(o, o.dp, cfg, store, batches);
  const double tps = report(r);
  const double tflops = tps * flops_per_tok / 1e12;
  const double mfu = r.peak > 0 ? tflops / r.peak : 0.0;
  JsonWriter w;
  w.begin_object()
      .key("bench")
      .value("train")
      .key("model")
      .value(name)
      .key("device")
      .value(r.device)
      .key("threads")
      .value(int64_t(omp_get_max_threads()))
      .key("dp")
      .value(int64_t(o.dp))
      .key("zero")
      .value(int64_t(o.zero))
      .key("bucket_mb")
      .value(int64_t(o.bucket_mb))
      .key("batch")
      .value(int64_t(o.batch))
      .key("seq_len")
      .value(int64_t(o.seq_len))
      .key("steps")
      .value(int64_t(o.steps))
      .key("ms_per_step")
      .value(r.seconds * 1e3 / o.steps)
      .key("tokens_per_s")
      .value(tps)
      .key("model_tflops")
      .value(tflops)
      .key("flops_per_token")
      .value(flops_per_tok)
      .key("peak_tflops")
      .value(r.peak)
      .key("mfu")
      .value(mfu);
  auto losses = [&](const RunResult& x) {
    w.begin_array();
    for (double l : x.losses) w.value(l);
    w.end_array();
  };
  if (base) {
    const double base_tps = tokens / base->seconds;
    double max_rel = 0;
    std::printf("step  loss dp 1    loss dp %d   relative difference\n", o.dp);
    for (size_t i = 0; i < r.losses.size(); ++i) {
      const double rel = std::abs(r.losses[i] - base->losses[i]) / std::abs(base->losses[i]);
      max_rel = std::max(max_rel, rel);
      std::printf("%4zu  %10.6f  %10.6f   %.2e%s\n", i + 1, base->losses[i], r.losses[i], rel,
                  int(i) < o.warmup ? "  (warmup)" : "");
    }
    std::printf("dp %d / dp 1 tokens/s: %.3fx (%.0f / %.0f); largest relative loss difference %.2e\n", o.dp,
                tps / base_tps, tps, base_tps, max_rel);
    w.key("tokens_per_s_dp1").value(base_tps).key("scaling").value(tps / base_tps);
    w.key("max_rel_loss_diff").value(max_rel);
    w.key("losses_dp1");
    losses(*base);
  }
  w.key("losses");
  losses(r);
  w.end_object();
  std::printf("%s\n", w.str().c_str());
}

void register_bench_train(CLI::App& app) {
  auto o = std::make_shared<TrainBenchOptions>();
  CLI::App* sub = bench_command(app)->add_subcommand(
      "train", "Training tokens/s and MFU of TrainModel + AdamW (against the measured bf16 GEMM peak)");
  sub->add_option("--model", o->model, "Model directory (Hugging Face layout)");
  sub->add_option("--preset", o->preset, "Preset name (" + preset_list() + ")");
  sub->add_option("--batch", o->batch, "Sequences per step (the global batch with --dp)")
      ->capture_default_str();
  sub->add_option("--seq-len", o->seq_len, "Tokens per sequence")->capture_default_str();
  sub->add_option("--steps", o->steps, "Steps to time")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Untimed steps first")->capture_default_str();
  sub->add_option(
         "--dp", o->dp,
         "Data-parallel ranks; above 1: the same steps at dp 1 and at dp N, their tokens/s ratio and "
         "losses")
      ->capture_default_str();
  sub->add_option("--zero", o->zero,
                  "With --dp: 1 shards AdamW's moments over the ranks (ZeRO-1), 0 replicates")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  sub->add_option("--bucket-mb", o->bucket_mb,
                  "With --dp: MB per gradient bucket reduced during the backward; 0: all after it")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the tokens and of a preset's weights")->capture_default_str();
  sub->add_flag("--no-peak", o->no_peak, "Skip the GEMM peak measurement");
  add_common_options(*sub, o->common);
  sub->callback([o] { run(*o); });
}

}  // namespace
}  // namespace astrai::cli

ASTRAI_REGISTER_COMMAND("bench train", astrai::cli::register_bench_train);
