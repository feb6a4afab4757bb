// astrai bench decode: decode throughput of Model::forward on one device (or --tp N of them).
//   astrai bench decode --device cpu --preset tiny|qwen3-0.6b|... (or --model DIR)
//                       [--batch 1,8,32] [--prompt-len 128] [--tokens 64] [--no-cuda-graphs]
//                       [--max-model-len N] [--temperature T] [--top-p P] [--host-sampling] [--tp N]
//                       [--profile-step N] [--overlap | --no-overlap]
// For each batch size B: B random prompts prefilled (chunks of up to 512 tokens per step), then
// --tokens decode steps of B sequences in lockstep (greedy next token by the backend's sample op,
// or drawn at --temperature (and --top-p), as the step loop does: only the ids come back;
// --host-sampling downloads the logits and takes the argmax on the host instead, the path before
// the op), timed. Prints a table and one JSON line. As in the engine, the step buffers are reserved
// for B sequences of the whole length (or --max-model-len, as the engine's context would) up front
// and, on a GPU, decode steps replay a CUDA graph per batch bucket (captured before the prefill;
// --no-cuda-graphs runs them eagerly). The steps run as the engine's step loop runs them: on a GPU
// overlapped (--overlap elsewhere): step N + 1 is launched, its tokens taken from step N's draws on
// the device, before the host reads N's draws, so the host's work between steps hides behind the
// device; on the CPU (--no-overlap on a GPU, and always with --host-sampling or tensor parallelism)
// each step's draws are read before the next is built, the device idle meanwhile.
//
// Bandwidth reference: a decode step reads every weight once and each sequence's K and V rows, so
// it cannot beat (weight bytes + K/V bytes) / memory bandwidth. The bandwidth is measured in the
// same run: on the CPU a plain parallel read of all weight bytes (a sum of their 32-bit words), on a
// GPU a device-to-device copy (bytes read + written). Each batch's step time is reported against
// that floor ("x floor"; the K/V term takes the mean keys of the timed steps, prompt + (tokens + 1)
// / 2). Not measured for a tensor-parallel group.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
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
  // Launch step N + 1 before reading step N's draws (the engine's overlapped loop): 1 yes, 0 no, -1 as
  // the engine does (on a GPU, where the model takes drawn tokens; never with --host-sampling).
  int overlap = -1;
};

// Best of 3 timed reads of every weight byte (a wrapping sum of their 32-bit words, whatever the
// dtype: f32, or the bf16 matrices a bf16 checkpoint keeps on the CPU; OpenMP over each tensor), in
// seconds.
double time_weight_read(const Model& model) {
  std::vector<Tensor> weights;
  model.for_each_weight([&](const Tensor& t) { weights.push_back(t); });
  double best = 1e30;
  volatile uint32_t sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = BenchClock::now();
    uint32_t total = 0;
    for (const Tensor& t : weights) {
      const uint32_t* p = static_cast<const uint32_t*>(t.data);
      const int64_t n = int64_t(t.nbytes() / sizeof(uint32_t));
      uint32_t s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) s += p[i];
      total += s;
    }
    sink = sink + total;
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// Best of 5 timed device-to-device copies (a same-dtype convert: cudaMemcpyAsync on a GPU) of up
// to 2 GiB, as GB/s of bytes read + written; 0 where the device has too little free memory.
double time_device_copy_gbps(Backend& be) {
  const int64_t avail = be.memory_available();
  const int64_t bytes = std::min<int64_t>(int64_t(2) << 30, avail > 0 ? avail / 8 : 0) / 64 * 64;
  if (bytes < (int64_t(256) << 20)) return 0;
  const Buffer a = be.alloc(size_t(bytes)), b = be.alloc(size_t(bytes));
  const Tensor src(a.data(), DType::bf16, {bytes / 2}, be.device());
  const Tensor dst(b.data(), DType::bf16, {bytes / 2}, be.device());
  be.convert(src, dst);
  be.synchronize();
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = BenchClock::now();
    be.convert(src, dst);
    be.synchronize();
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * double(bytes) / best / 1e9;
}

// The K/V bytes a decode step of B sequences reads, on average over the timed steps.
double kv_read_bytes(const ModelConfig& cfg, const DecodeBenchOptions& o, int B, DType dt) {
  const double keys = o.prompt_len + (o.tokens + 1) / 2.0;
  return double(B) * keys * double(cfg.num_layers) * 2.0 * double(cfg.kv_dim()) * double(dtype_size(dt));
}

struct BatchResult {
  int batch = 0;
  double prefill_s = 0, decode_s = 0;
  double decode_forward_s = 0;  // of decode_s: forward + synchronize (the rest: logits to the host, argmax);
                                // not measured overlapped
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double floor_ms = 0;       // (weight + K/V bytes) / the measured bandwidth; 0: not measured
  uint64_t tokens_hash = 0;  // FNV-1a over every sequence's generated ids: equal runs drew equal tokens
};

BatchResult run_batch(Model& model, int B, const DecodeBenchOptions& o) {
  const int prompt_len = o.prompt_len, steps = o.tokens, max_model_len = o.max_model_len;
  const uint64_t seed = o.seed;
  const bool graphs = !o.no_cuda_graphs, host_sampling = o.host_sampling;
  const ModelConfig& cfg = model.config();
  const int page_size = 16;
  const int total_len = prompt_len + steps;
  if (total_len > cfg.max_context())
    throw Error(invalid_argument("--prompt-len + --tokens exceeds the model's context of " +
                                 std::to_string(cfg.max_context())));
  if (max_model_len > cfg.max_context())
    throw Error(invalid_argument("--max-model-len exceeds the model's context of " +
                                 std::to_string(cfg.max_context())));
  const int pages_per_seq = (total_len + page_size - 1) / page_size;
  const int budget = 512;  // prefill tokens per step
  StepLimits limits;
  limits.max_seqs = B;
  limits.max_tokens = std::max(budget, prompt_len);
  limits.max_model_len = std::max(total_len, max_model_len);
  limits.page_size = page_size;
  if (o.overlap && !model.takes_drawn_tokens())
    throw Error(
        invalid_argument("--overlap: this model cannot take a step's tokens from the previous "
                         "step's draws on the device (tensor parallel)"));
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
  // Each step's rows go up from page-locked memory, one buffer a slot: overlapped, a step's copy may
  // not have run yet when the host packs the next step's rows (slot i % 2 is rewritten only after
  // the download of step i - 2, which follows its upload).
  Buffer rows_buf = be.alloc(rows.size() * sizeof(SampleRowParams));
  Buffer host_rows[2] = {be.alloc_host_pinned(rows.size() * sizeof(SampleRowParams)),
                         be.alloc_host_pinned(rows.size() * sizeof(SampleRowParams))};
  // Two output slots: overlapped, step N + 1 takes its tokens from step N's slot on the device while
  // N's ids are copied back from it.
  const size_t out_words = size_t(B) * size_t(sample_out_words(0));
  Buffer out_buf[2] = {be.alloc(out_words * sizeof(int32_t)), be.alloc(out_words * sizeof(int32_t))};
  Buffer host_out[2] = {be.alloc_host_pinned(out_words * sizeof(int32_t)),
                        be.alloc_host_pinned(out_words * sizeof(int32_t))};
  const size_t ws_bytes = be.sample_workspace_bytes(B, int(cfg.vocab_size));
  Buffer ws_buf = ws_bytes ? be.alloc(ws_bytes) : Buffer();
  // Launches the sample op on the step's logits `lt` (R rows) into slot `slot`, and the copy of its
  // ids back to the host; returns the copy's ticket.
  auto launch_sample = [&](const Tensor& lt, int64_t R, int slot) {
    SampleBatch sb;
    sb.logits = lt;
    sb.rows = rows_buf.as(DType::i32, {R, kSampleRowWords});
    for (SampleRowParams& p : rows) ++p.index;  // the next token's draw
    std::memcpy(host_rows[slot].data(), rows.data(), size_t(R) * sizeof(SampleRowParams));
    be.upload(sb.rows, host_rows[slot].data());  // per step, as the step runner does
    sb.out = out_buf[slot].as(DType::i32, {R, sample_out_words(0)});
    if (ws_bytes) sb.workspace = ws_buf.as(DType::i32, {int64_t(ws_bytes / 4)});
    be.sample(sb);
    return be.download_async(host_out[slot].data(), sb.out);
  };
  // Row r's drawn id in slot `slot` (after its copy is waited for).
  auto drawn = [&](int slot, size_t r) {
    return static_cast<const int32_t*>(host_out[slot].data())[r * size_t(sample_out_words(0))];
  };
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
    be.wait_download(launch_sample(lt, R, 0));
    for (size_t r = 0; r < which.size(); ++r) seqs[size_t(which[r])].push_back(drawn(0, r));
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
  if (!o.overlap) {
    for (int i = 0; i < steps; ++i) {
      batch.clear();
      for (int s = 0; s < B; ++s) add(s, prompt_len + i, prompt_len + i + 1);
      if (i == o.profile_step) be.profile_range(true);
      step(all);
      if (i == o.profile_step) be.profile_range(false);
    }
  } else {
    // Step i's rows (i > 0) take their tokens from step i - 1's draws on the device: each sequence
    // holds a placeholder for that token until the host reads it, after step i is launched.
    uint64_t ticket = 0;
    for (int i = 0; i < steps; ++i) {
      const int slot = i % 2;
      batch.clear();
      for (int s = 0; s < B; ++s) {
        add(s, prompt_len + i, prompt_len + i + 1);
        if (i > 0) batch.take_last_row_from(s, out_buf[1 - slot].as(DType::i32, {B, sample_out_words(0)}));
      }
      if (i == o.profile_step) be.profile_range(true);
      const uint64_t launched = launch_sample(model.forward(batch.finish(), kv).value(), B, slot);
      if (i == o.profile_step) be.profile_range(false);
      for (int s = 0; s < B; ++s) seqs[size_t(s)].push_back(-1);  // step i's draw: a placeholder
      if (i > 0) {
        be.wait_download(ticket);
        for (int s = 0; s < B; ++s)
          seqs[size_t(s)][size_t(prompt_len) + size_t(i)] = drawn(1 - slot, size_t(s));
      }
      ticket = launched;
    }
    be.wait_download(ticket);
    const int last = (steps - 1) % 2;
    for (int s = 0; s < B; ++s) seqs[size_t(s)][size_t(prompt_len) + size_t(steps)] = drawn(last, size_t(s));
  }
  res.decode_s = seconds_since(t0);
  res.decode_forward_s = forward_s;
  res.decode_tokens = int64_t(B) * steps;
  uint64_t h = 14695981039346656037ull;
  for (const auto& sq : seqs)
    for (size_t i = size_t(prompt_len); i < sq.size(); ++i) h = (h ^ uint32_t(sq[i])) * 1099511628211ull;
  res.tokens_hash = h;
  return res;
}

void run(const DecodeBenchOptions& options) {
  DecodeBenchOptions o = options;
  apply_common_options(o.common);
  if (o.prompt_len < 1 || o.tokens < 1)
    throw Error(invalid_argument("--prompt-len and --tokens must be positive"));
  const std::vector<int> batches = parse_int_list(o.batches, "--batch");
  const std::string name = o.model.empty() ? o.preset : o.model;
  LoadedModel lm = load_bench_model(o.common, o.model, o.preset, o.seed, o.tp);
  const std::unique_ptr<Backend>& backend = lm.backend;
  const std::unique_ptr<Model>& model = lm.model;
  const ModelConfig& cfg = model->config();
  if (o.overlap < 0)
    o.overlap = backend->device() != Device::cpu && !o.host_sampling && model->takes_drawn_tokens() ? 1 : 0;

  const double wbytes = double(model->weight_bytes());
  double read_s = 0, copy_gbps = 0;
  // The bandwidth of one device: not measured for a tensor-parallel group (CPU ranks share the
  // host's; GPU ranks each read a share of the weights).
  if (backend->device() == Device::cpu && backend->compute_dtype() == DType::f32 && o.tp == 1)
    read_s = time_weight_read(*model);
  else if (backend->device() != Device::cpu && o.tp == 1)
    copy_gbps = time_device_copy_gbps(*backend);
  const double gbps = read_s > 0 ? wbytes / read_s / 1e9 : copy_gbps;

  std::printf("model %s (%s, %lld layers, %.1fM params, %.3f GB weights%s) on %s%s\n", name.c_str(),
              cfg.architecture.c_str(), (long long)cfg.num_layers, double(cfg.num_parameters()) / 1e6,
              wbytes / 1e9, o.tp > 1 ? " on rank 0" : "", backend->name().c_str(),
              o.tp > 1 ? (" and " + std::to_string(o.tp - 1) + " more ranks (tensor parallel)").c_str() : "");
  if (read_s > 0)
    std::printf("weight read: %.1f ms (%.1f GB/s) = decode floor of %.1f ms/step at batch 1 (+ K/V)\n",
                read_s * 1e3, gbps, read_s * 1e3);
  if (copy_gbps > 0)
    std::printf("device copy: %.0f GB/s (read + written) = decode floor of %.2f ms/step at batch 1 (+ K/V)\n",
                copy_gbps, wbytes / (copy_gbps * 1e9) * 1e3);
  std::string draw = o.temperature > 0 ? "temperature " + std::to_string(o.temperature) : "greedy";
  if (o.temperature > 0 && o.top_p < 1.0f) draw += " top_p " + std::to_string(o.top_p);
  std::printf("prompt %d tokens, %d decode steps%s, CUDA graphs %s, %s %s\n\n", o.prompt_len, o.tokens,
              o.overlap ? " overlapped" : "", !o.no_cuda_graphs && backend->supports_graphs() ? "on" : "off",
              draw.c_str(),
              o.host_sampling ? "on the host (logits downloaded)" : "by the backend's sample op");
  // fwd ms/step: the forward alone (to the logits on the device), without the sampling and the copy
  // of its result to the host; "-" overlapped (nothing waits for the forward alone).
  std::printf("%6s %14s %14s %10s %12s %9s\n", "batch", "prefill tok/s", "decode tok/s", "ms/step",
              "fwd ms/step", "x floor");
  std::vector<BatchResult> results;
  for (int B : batches) {
    BatchResult r = run_batch(*model, B, o);
    const double ms = r.decode_s * 1e3 / o.tokens;
    // Without a measured bandwidth (tensor parallel) the column says so rather than print 0.
    r.floor_ms =
        gbps > 0 ? (wbytes + kv_read_bytes(cfg, o, B, backend->compute_dtype())) / (gbps * 1e9) * 1e3 : 0;
    char floor_col[32] = "-", fwd_col[32] = "-";
    if (r.floor_ms > 0) std::snprintf(floor_col, sizeof floor_col, "%.2f", ms / r.floor_ms);
    if (!o.overlap) std::snprintf(fwd_col, sizeof fwd_col, "%.3f", r.decode_forward_s * 1e3 / o.tokens);
    std::printf("%6d %14.1f %14.1f %10.2f %12s %9s\n", B, double(r.prefill_tokens) / r.prefill_s,
                double(r.decode_tokens) / r.decode_s, ms, fwd_col, floor_col);
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
      .key("overlap")
      .value(o.overlap == 1)
      .key("temperature")
      .value(double(o.temperature))
      .key("top_p")
      .value(double(o.top_p))
      .key("weight_bytes")
      .value(int64_t(wbytes))
      .key("weight_read_ms")
      .value(read_s * 1e3)
      .key("read_gb_per_s")
      .value(read_s > 0 ? gbps : 0.0)
      .key("copy_gb_per_s")
      .value(copy_gbps)
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
        .key("floor_ms_per_step")
        .value(r.floor_ms)
        .key("tokens_hash")
        .value(std::to_string(r.tokens_hash))
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
  CLI::Option* overlap =
      add_flag_pair(*sub, "overlap", o->overlap,
                    "Launch each decode step before reading the previous step's tokens, its tokens taken "
                    "from the previous draws on the device (the default on a GPU, as the engine's step loop)",
                    "Read each step's tokens before building the next (the default on the CPU)");
  sub->add_flag("--host-sampling", o->host_sampling,
                "Download the logits and take the argmax on the host (the path before the sample op)")
      ->excludes(temperature)
      ->excludes(top_p)
      ->excludes(overlap);
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
