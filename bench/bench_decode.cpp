// astrai bench decode: decode throughput of Model::forward on one device (or --tp N of them).
//   astrai bench decode --device cpu --preset tiny|qwen3-0.6b|... (or --model DIR)
//                       [--batch 1,8,32] [--prompt-len 128] [--tokens 64] [--no-cuda-graphs]
//                       [--max-model-len N] [--temperature T] [--top-p P] [--host-sampling] [--tp N]
//                       [--profile-step N]
// For each batch size B: B random prompts prefilled (chunks of up to 512 tokens per step), then
// --tokens decode steps of B sequences in lockstep (greedy next token by the backend's sample op,
// or drawn at --temperature (and --top-p), as the step loop does: only the ids come back;
// --host-sampling downloads the logits and takes the argmax on the host instead, the path before
// the op), timed. Prints a table and one JSON line. As in the engine, the step buffers are reserved
// for B sequences of the whole length (or --max-model-len, as the engine's context would) up front
// and, on a GPU, decode steps replay a CUDA graph per batch bucket (captured before the prefill;
// --no-cuda-graphs runs them eagerly).
//
// Bandwidth reference: at batch 1 a decode step reads every weight once, so it cannot beat
// weight_bytes / memory bandwidth. We time a plain parallel read of all weight bytes (a sum over
// the f32 weights) in the same run and report each batch's step time against that floor.
#include <omp.h>

#include <algorithm>
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

namespace astrai::cli {
namespace {

struct DecodeBenchOptions {
  CommonOptions common;
  std::string model, preset;
  std::string batches = "1,8,32";
  int prompt_len = 128;
  int tokens = 64;
  uint64_t seed = 0;
  bool no_cuda_graphs = false;
  int max_model_len = 0;  // 0: prompt + tokens
  bool host_sampling = false;
  int profile_step = -1;     // >= 0: that timed decode step of each batch runs inside profile_range
  float temperature = 0.0f;  // > 0: the sample op draws (seeded per sequence and step) instead of argmax
  float top_p = 1.0f;        // of those draws (1: off)
  int tp = 1;
};

// Best of 3 timed reads of every weight byte (f32 sum, OpenMP over each tensor), in seconds.
double time_weight_read(const Model& model) {
  std::vector<Tensor> weights;
  model.for_each_weight([&](const Tensor& t) { weights.push_back(t); });
  double best = 1e30;
  volatile float sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = BenchClock::now();
    float total = 0;
    for (const Tensor& t : weights) {
      const float* p = t.ptr<float>();
      const int64_t n = t.numel();
      float s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) s += p[i];
      total += s;
    }
    sink = sink + total;
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

struct BatchResult {
  int batch = 0;
  double prefill_s = 0, decode_s = 0;
  double decode_forward_s = 0;  // of decode_s: forward + synchronize (the rest: logits to the host, argmax)
  int64_t prefill_tokens = 0, decode_tokens = 0;
};

BatchResult run_batch(Model& model, int B, const DecodeBenchOptions& o) {
  const int prompt_len = o.prompt_len, steps = o.tokens, max_model_len = o.max_model_len;
  const uint64_t seed = o.seed;
  const bool graphs = !o.no_cuda_graphs, host_sampling = o.host_sampling;
  const ModelConfig& cfg = model.config();
  const int page_size = 16;
  const int total_len = prompt_len + steps;
  if (total_len > cfg.max_position_embeddings)
    throw Error(invalid_argument("--prompt-len + --tokens exceeds the model's context of " +
                                 std::to_string(cfg.max_position_embeddings)));
  if (max_model_len > cfg.max_position_embeddings)
    throw Error(invalid_argument("--max-model-len exceeds the model's context of " +
                                 std::to_string(cfg.max_position_embeddings)));
  const int pages_per_seq = (total_len + page_size - 1) / page_size;
  const int budget = 512;  // prefill tokens per step
  StepLimits limits;
  limits.max_seqs = B;
  limits.max_tokens = std::max(budget, prompt_len);
  limits.max_model_len = std::max(total_len, max_model_len);
  limits.page_size = page_size;
  check(model.reserve_steps(limits));
  KvCache kv = model.allocate_kv(B * pages_per_seq, page_size);
  if (graphs) model.capture_decode_graphs(kv).value();
  std::mt19937_64 rng(seed + uint64_t(B));
  std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg.vocab_size) - 1);
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(B));
  for (auto& s : seqs)
    for (int i = 0; i < prompt_len; ++i) s.push_back(tok(rng));
  std::vector<std::vector<int32_t>> pages(static_cast<size_t>(B));  // sequence s: its own pages, in order
  for (int s = 0; s < B; ++s)
    for (int i = 0; i < pages_per_seq; ++i) pages[size_t(s)].push_back(s * pages_per_seq + i);
  ForwardBatchBuilder batch(page_size);
  // Adds tokens [p0, p1) of sequence s to the batch.
  auto add = [&](int s, int p0, int p1) {
    batch.add_sequence(seqs[size_t(s)], p0, p1 - p0, pages[size_t(s)], LogitRows::last);
  };
  // --host-sampling: the logits come back into page-locked memory (a fast copy on a GPU) and each
  // row's argmax runs on its own thread.
  Backend& be = model.backend();
  const Buffer logits =
      host_sampling ? be.alloc_host_pinned(size_t(B) * size_t(cfg.vocab_size) * sizeof(float)) : Buffer();
  std::vector<int32_t> next(static_cast<size_t>(B));
  double forward_s = 0;  // forward + synchronize: the device's share of the decode steps
  // The sample op's buffers, at the largest step (B rows): the rows (greedy, or drawn at
  // --temperature and --top-p with sequence r's own seed), the output, the workspace.
  std::vector<SampleRowParams> rows(static_cast<size_t>(B));
  for (int r = 0; r < B; ++r) {
    rows[size_t(r)].src_row = r;
    rows[size_t(r)].seed = seed * 1000003 + uint64_t(r);
    rows[size_t(r)].temperature = o.temperature;
    rows[size_t(r)].top_p = o.top_p;
  }
  Buffer rows_buf = be.alloc(rows.size() * sizeof(SampleRowParams));
  Buffer out_buf = be.alloc(size_t(B) * sizeof(int32_t) * sample_out_words(0));
  const size_t ws_bytes = be.sample_workspace_bytes(B, int(cfg.vocab_size));
  Buffer ws_buf = ws_bytes ? be.alloc(ws_bytes) : Buffer();
  std::vector<int32_t> out(size_t(B) * sample_out_words(0));
  // Greedy next token of each sequence from the step's logits (one row per sequence).
  auto step = [&](const std::vector<int>& which) {
    const auto f0 = BenchClock::now();
    Tensor lt = model.forward(batch.finish(), kv).value();
    be.synchronize();
    forward_s += seconds_since(f0);
    const int64_t V = cfg.vocab_size, R = int64_t(which.size());
    if (host_sampling) {
      be.download(logits.data(), lt);
      const float* host = static_cast<const float*>(logits.data());
#pragma omp parallel for schedule(static) if (R > 1)
      for (int64_t r = 0; r < R; ++r)
        next[size_t(r)] = int32_t(std::max_element(host + r * V, host + (r + 1) * V) - (host + r * V));
      for (size_t r = 0; r < which.size(); ++r) seqs[size_t(which[r])].push_back(next[r]);
      return;
    }
    SampleBatch sb;
    sb.logits = lt;
    sb.rows = rows_buf.as(DType::i32, {R, kSampleRowWords});
    for (SampleRowParams& p : rows) ++p.index;  // the next token's draw
    be.upload(sb.rows, rows.data());            // per step, as the step runner does
    sb.out = out_buf.as(DType::i32, {R, sample_out_words(0)});
    if (ws_bytes) sb.workspace = ws_buf.as(DType::i32, {int64_t(ws_bytes / 4)});
    be.sample(sb);
    be.download(out.data(), sb.out);
    for (size_t r = 0; r < which.size(); ++r) seqs[size_t(which[r])].push_back(out[r * sample_out_words(0)]);
  };

  BatchResult res;
  res.batch = B;
  auto t0 = BenchClock::now();
  for (int s = 0; s < B;) {  // prefill: whole prompts, packed up to the token budget
    batch.clear();
    std::vector<int> which;
    int used = 0;
    while (s < B && (used == 0 || used + prompt_len <= budget)) {
      add(s, 0, prompt_len);
      which.push_back(s++);
      used += prompt_len;
    }
    step(which);
  }
  res.prefill_s = seconds_since(t0);
  res.prefill_tokens = int64_t(B) * prompt_len;
  std::vector<int> all(static_cast<size_t>(B));
  for (int s = 0; s < B; ++s) all[size_t(s)] = s;
  forward_s = 0;
  t0 = BenchClock::now();
  for (int i = 0; i < steps; ++i) {
    batch.clear();
    for (int s = 0; s < B; ++s) add(s, prompt_len + i, prompt_len + i + 1);
    if (i == o.profile_step) be.profile_range(true);
    step(all);
    if (i == o.profile_step) be.profile_range(false);
  }
  res.decode_s = seconds_since(t0);
  res.decode_forward_s = forward_s;
  res.decode_tokens = int64_t(B) * steps;
  return res;
}

void run(const DecodeBenchOptions& o) {
  apply_common_options(o.common);
  if (o.prompt_len < 1 || o.tokens < 1)
    throw Error(invalid_argument("--prompt-len and --tokens must be positive"));
  const std::vector<int> batches = parse_int_list(o.batches, "--batch");
  const std::string name = o.model.empty() ? o.preset : o.model;
  LoadedModel lm = load_bench_model(o.common, o.model, o.preset, o.seed, o.tp);
  const std::unique_ptr<Backend>& backend = lm.backend;
  const std::unique_ptr<Model>& model = lm.model;
  const ModelConfig& cfg = model->config();

  const double wbytes = double(model->weight_bytes());
  double read_s = 0;
  // The floor of one device reading its weights: not measured for a tensor-parallel group of CPU
  // ranks, which share the host's bandwidth.
  if (backend->device() == Device::cpu && backend->compute_dtype() == DType::f32 && o.tp == 1)
    read_s = time_weight_read(*model);
  const double gbps = read_s > 0 ? wbytes / read_s / 1e9 : 0;

  std::printf("model %s (%s, %lld layers, %.1fM params, %.3f GB weights%s) on %s%s\n", name.c_str(),
              cfg.architecture.c_str(), (long long)cfg.num_layers, double(cfg.num_parameters()) / 1e6,
              wbytes / 1e9, o.tp > 1 ? " on rank 0" : "", backend->name().c_str(),
              o.tp > 1 ? (" and " + std::to_string(o.tp - 1) + " more ranks (tensor parallel)").c_str() : "");
  if (read_s > 0)
    std::printf("weight read: %.1f ms (%.1f GB/s) = decode floor of %.1f ms/step at batch 1\n", read_s * 1e3,
                gbps, read_s * 1e3);
  std::string draw = o.temperature > 0 ? "temperature " + std::to_string(o.temperature) : "greedy";
  if (o.temperature > 0 && o.top_p < 1.0f) draw += " top_p " + std::to_string(o.top_p);
  std::printf("prompt %d tokens, %d decode steps, CUDA graphs %s, %s %s\n\n", o.prompt_len, o.tokens,
              !o.no_cuda_graphs && backend->supports_graphs() ? "on" : "off", draw.c_str(),
              o.host_sampling ? "on the host (logits downloaded)" : "by the backend's sample op");
  // fwd ms/step: the forward alone (to the logits on the device), without the sampling and the copy
  // of its result to the host.
  std::printf("%6s %14s %14s %10s %12s %9s\n", "batch", "prefill tok/s", "decode tok/s", "ms/step",
              "fwd ms/step", "x floor");
  std::vector<BatchResult> results;
  for (int B : batches) {
    BatchResult r = run_batch(*model, B, o);
    const double ms = r.decode_s * 1e3 / o.tokens;
    // The floor is measured only on the CPU backend (a timed read of the f32 weights); elsewhere the
    // column says so rather than print 0 (on a GPU, measure the copy bandwidth:
    // tests/gpu/device_ceilings.py).
    char floor_col[32] = "-";
    if (read_s > 0) std::snprintf(floor_col, sizeof floor_col, "%.2f", ms / (read_s * 1e3));
    std::printf("%6d %14.1f %14.1f %10.2f %12.3f %9s\n", B, double(r.prefill_tokens) / r.prefill_s,
                double(r.decode_tokens) / r.decode_s, ms, r.decode_forward_s * 1e3 / o.tokens, floor_col);
    std::fflush(stdout);
    results.push_back(r);
  }
  JsonWriter w;
  w.begin_object()
      .key("bench")
      .value("decode")
      .key("model")
      .value(name)
      .key("architecture")
      .value(cfg.architecture)
      .key("device")
      .value(backend->name())
      .key("tp")
      .value(int64_t(o.tp))
      .key("threads")
      .value(int64_t(omp_get_max_threads()))
      .key("prompt_len")
      .value(int64_t(o.prompt_len))
      .key("decode_steps")
      .value(int64_t(o.tokens))
      .key("cuda_graphs")
      .value(!o.no_cuda_graphs && backend->supports_graphs())
      .key("sampling")
      .value(o.host_sampling ? "host" : "op")
      .key("temperature")
      .value(double(o.temperature))
      .key("top_p")
      .value(double(o.top_p))
      .key("weight_bytes")
      .value(int64_t(wbytes))
      .key("weight_read_ms")
      .value(read_s * 1e3)
      .key("read_gb_per_s")
      .value(gbps)
      .key("results")
      .begin_array();
  for (const BatchResult& r : results)
    w.begin_object()
        .key("batch")
        .value(int64_t(r.batch))
        .key("prefill_tok_per_s")
        .value(double(r.prefill_tokens) / r.prefill_s)
        .key("decode_tok_per_s")
        .value(double(r.decode_tokens) / r.decode_s)
        .key("ms_per_step")
        .value(r.decode_s * 1e3 / o.tokens)
        .key("forward_ms_per_step")
        .value(r.decode_forward_s * 1e3 / o.tokens)
        .end_object();
  w.end_array().end_object();
  std::printf("\n%s\n", w.str().c_str());
}

void register_bench_decode(CLI::App& app) {
  auto o = std::make_shared<DecodeBenchOptions>();
  CLI::App* sub =
      bench_command(app)->add_subcommand("decode", "Decode tokens/s of Model::forward (+ weight-read floor)");
  sub->add_option("--model", o->model, "Model directory (Hugging Face layout)");
  sub->add_option("--preset", o->preset, "Preset name (" + preset_list() + ")");
  sub->add_option("--batch", o->batches, "Comma-separated batch sizes")->capture_default_str();
  sub->add_option("--prompt-len", o->prompt_len, "Prompt tokens per sequence")->capture_default_str();
  sub->add_option("--tokens", o->tokens, "Decode steps to time")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the prompts and of a preset's weights")->capture_default_str();
  sub->add_flag("--no-cuda-graphs", o->no_cuda_graphs, "Run decode steps eagerly (no CUDA graphs)");
  sub->add_option("--max-model-len", o->max_model_len,
                  "Context the step buffers are sized for (default: prompt + tokens; serve uses the model's)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* temperature =
      sub->add_option("--temperature", o->temperature,
                      "Draw each token at this temperature with the sample op (0: greedy)")
          ->check(CLI::Range(0.0f, 100.0f))
          ->capture_default_str();
  CLI::Option* top_p = sub->add_option("--top-p", o->top_p, "Top-p of the draws at --temperature (1: off)")
                           ->check(CLI::Range(0.0f, 1.0f))
                           ->capture_default_str();
  sub->add_flag("--host-sampling", o->host_sampling,
                "Download the logits and take the argmax on the host (the path before the sample op)")
      ->excludes(temperature)
      ->excludes(top_p);
  sub->add_option("--profile-step", o->profile_step,
                  "Run timed decode step N (from 0) of each batch inside the backend's profiler range "
                  "(ncu/nsys --profile-from-start off record only that step)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--tp", o->tp, "Tensor-parallel ranks: the model is split over GPUs 0..tp-1")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_common_options(*sub, o->common);
  sub->callback([o] { run(*o); });
}

}  // namespace
}  // namespace astrai::cli

ASTRAI_REGISTER_COMMAND("bench decode", astrai::cli::register_bench_decode);
