// astrai bench train: training throughput of TrainModel + AdamW on one device.
//   astrai bench train --preset llama-1b|tiny|... (or --model DIR) [--batch 8] [--seq-len 2048]
//                      [--steps 10] [--warmup 2] [--device cuda|cpu] [--no-peak]
// Each step is what `astrai train` does per optimizer step with grad_accum 1: zero the gradients,
// forward + backward of B random sequences of seq_len tokens (one document each), global grad norm,
// AdamW on every tensor. After --warmup untimed steps, --steps steps are timed (the device
// synchronised at both ends); tokens/s = B * seq_len * steps / time.
//
// MFU = model FLOPs per second (train/flops.h: 6 N per token for the matmul weights plus causal
// attention) / the bf16 GEMM peak measured in the same run (an 8192^3 GEMM through the backend's
// gemm op, cuBLASLt). Per-op device times: run with ASTRAI_CUDA_OP_TIMES=1 (printed at exit).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "src/backend/backend.h"
#include "src/cli/commands.h"
#include "src/core/json_writer.h"
#include "src/model/config.h"
#include "src/model/model_source.h"
#include "src/model/safetensors.h"
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
  uint64_t seed = 0;
  bool no_peak = false;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void run(const TrainBenchOptions& o) {
  apply_common_options(o.common);
  if (o.model.empty() == o.preset.empty())
    throw Error(invalid_argument("give exactly one of --model or --preset"));
  if (o.batch < 1 || o.seq_len < 1 || o.steps < 1 || o.warmup < 0)
    throw Error(invalid_argument("--batch, --seq-len and --steps must be positive, --warmup not negative"));
  BackendOptions bo;
  bo.device = o.common.device == "cuda"           ? Device::cuda
              : o.common.device == "cpu"          ? Device::cpu
              : has_backend_factory(Device::cuda) ? Device::cuda
                                                  : Device::cpu;
  bo.threads = o.common.threads;
  auto backend = make_backend(bo).value();
  const std::string name = o.model.empty() ? o.preset : o.model;
  const std::filesystem::path dir = resolve_model_dir(name, o.seed).value();
  const ModelConfig cfg = ModelConfig::load(dir).value();
  if (o.seq_len > cfg.max_position_embeddings)
    throw Error(invalid_argument("--seq-len beyond the model's max_position_embeddings"));
  const WeightStore store = WeightStore::open(dir).value();
  auto model = train::TrainModel::create(cfg, store, *backend).value();
  train::AdamW opt(*backend, train::AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  opt.init(model->params());

  train::TrainBatch b;
  b.batch = o.batch;
  b.seq_len = o.seq_len;
  std::mt19937_64 rng(o.seed + 1);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg.vocab_size) - 1);
  for (int r = 0; r < o.batch; ++r) {
    const int32_t first = tok(rng);
    int32_t prev = first;
    for (int t = 0; t < o.seq_len; ++t) {
      const int32_t next = tok(rng);
      b.tokens.push_back(prev);
      b.targets.push_back(next);
      b.positions.push_back(t);
      b.doc_start.push_back(0);
      prev = next;
    }
  }
  const double peak =
      !o.no_peak && backend->device() == Device::cuda ? train::measure_bf16_peak_tflops(*backend) : 0.0;
  std::printf("model %s (%s, %lld layers, %.1fM params) on %s; batch %d x %d tokens\n", name.c_str(),
              cfg.architecture.c_str(), (long long)cfg.num_layers, double(cfg.num_parameters()) / 1e6,
              backend->name().c_str(), o.batch, o.seq_len);
  if (peak > 0) std::printf("bf16 GEMM peak (cuBLASLt, 8192^3): %.1f TFLOP/s\n", peak);
  std::fflush(stdout);

  double loss = 0, norm = 0;
  auto step = [&] {
    model->zero_grad();
    loss = double(model->forward_backward(b, 1.0f).value());
    norm = opt.step(model->params(), 1e-4, 1.0);
  };
  for (int i = 0; i < o.warmup; ++i) step();
  backend->synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  backend->synchronize();
  const double s = seconds_since(t0);
  const double tokens = double(o.batch) * o.seq_len * o.steps;
  const double tps = tokens / s;
  const double tflops = tps * train::flops_per_token(cfg, o.seq_len) / 1e12;
  const double mfu = peak > 0 ? tflops / peak : 0.0;
  std::printf("%.1f ms/step, %.0f tokens/s, %.1f model TFLOP/s", s * 1e3 / o.steps, tps, tflops);
  if (peak > 0) std::printf(", MFU %.1f%% of the measured peak", 100 * mfu);
  std::printf(" (last loss %.4f, grad norm %.3g)\n", loss, norm);
  JsonWriter w;
  w.begin_object()
      .key("bench")
      .value("train")
      .key("model")
      .value(name)
      .key("device")
      .value(backend->name())
      .key("threads")
      .value(int64_t(omp_get_max_threads()))
      .key("batch")
      .value(int64_t(o.batch))
      .key("seq_len")
      .value(int64_t(o.seq_len))
      .key("steps")
      .value(int64_t(o.steps))
      .key("ms_per_step")
      .value(s * 1e3 / o.steps)
      .key("tokens_per_s")
      .value(tps)
      .key("model_tflops")
      .value(tflops)
      .key("flops_per_token")
      .value(train::flops_per_token(cfg, o.seq_len))
      .key("peak_tflops")
      .value(peak)
      .key("mfu")
      .value(mfu)
      .end_object();
  std::printf("%s\n", w.str().c_str());
}

void register_bench_train(CLI::App& app) {
  auto o = std::make_shared<TrainBenchOptions>();
  CLI::App* sub = bench_command(app)->add_subcommand(
      "train", "Training tokens/s and MFU of TrainModel + AdamW (against the measured bf16 GEMM peak)");
  sub->add_option("--model", o->model, "Model directory (Hugging Face layout)");
  sub->add_option("--preset", o->preset, "Preset name (" + preset_list() + ")");
  sub->add_option("--batch", o->batch, "Sequences per step")->capture_default_str();
  sub->add_option("--seq-len", o->seq_len, "Tokens per sequence")->capture_default_str();
  sub->add_option("--steps", o->steps, "Steps to time")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "Untimed steps first")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the tokens and of a preset's weights")->capture_default_str();
  sub->add_flag("--no-peak", o->no_peak, "Skip the GEMM peak measurement");
  add_common_options(*sub, o->common);
  sub->callback([o] { run(*o); });
}

}  // namespace
}  // namespace astrai::cli

ASTRAI_REGISTER_COMMAND("bench train", astrai::cli::register_bench_train);
