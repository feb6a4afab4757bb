#include "train/trainer.h"

#include <simdjson.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "src/backend/backend.h"
#include "src/core/json_writer.h"
#include "src/dist/bootstrap.h"
#include "src/model/model_source.h"
#include "src/model/safetensors.h"
#include "src/tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/data_parallel.h"
#include "train/flops.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace astrai::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One line on stderr, redrawn in place on a terminal (every 10 s to a file or pipe).
class Progress {
 public:
  Progress(bool on, int64_t first, int64_t total)
      : on_(on), tty_(::isatty(2)), first_(first), total_(total), start_(Clock::now()) {}
  void update(int64_t step, double loss, double lr, double tokens_per_s, bool final = false) {
    if (!on_) return;
    const auto now = Clock::now();
    if (!final && std::chrono::duration<double>(now - last_).count() < (tty_ ? 0.2 : 10.0)) return;
    last_ = now;
    const double el = std::chrono::duration<double>(now - start_).count();
    const int64_t done = step - first_;
    const double eta = done > 0 ? el / double(done) * double(total_ - step) : 0;
    std::fprintf(stderr, "%s[step %lld/%lld] loss %.4f  lr %.2e  %.0f tok/s  ETA %dm%02ds%s",
                 tty_ ? "\r" : "", static_cast<long long>(step), static_cast<long long>(total_), loss, lr,
                 tokens_per_s, int(eta) / 60, int(eta) % 60, tty_ && !final ? "   " : "\n");
    std::fflush(stderr);
  }

 private:
  bool on_, tty_;
  int64_t first_, total_;
  Clock::time_point start_, last_{};
};

// The moments of optimizer.safetensors in the flat layout of `params` (their order, each tensor's
// elements consecutive), as DataParallelGroup::write_moments takes them.
Status load_moments(const fs::path& file, const std::vector<Param>& params, std::vector<float>& exp_avg,
                    std::vector<float>& exp_avg_sq) {
  ASTRAI_ASSIGN_OR_RETURN(const SafeTensorsFile f, SafeTensorsFile::open(file));
  exp_avg.clear();
  exp_avg_sq.clear();
  for (const Param& p : params) {
    for (auto [prefix, dst] : {std::pair{"exp_avg.", &exp_avg}, std::pair{"exp_avg_sq.", &exp_avg_sq}}) {
      const std::string name = prefix + p.name;
      const SafeTensor* t = f.find(name);
      if (!t) return corrupt(file.string() + ": missing tensor '" + name + "'");
      if (t->dtype != DType::f32 || t->shape != p.shape)
        return corrupt(file.string() + ": tensor '" + name + "' has shape " + t->shape_str() +
                       ", expected the parameter's");
      const float* data = static_cast<const float*>(t->data);
      dst->insert(dst->end(), data, data + p.value.numel());
    }
  }
  return {};
}

// Keeps the lines of metrics.jsonl whose "step" is at most `step` (and drops a partial last line).
Status truncate_metrics(const fs::path& file, int64_t step) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return {};
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::string kept;
  simdjson::dom::parser parser;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a line cut short by a kill
    const std::string_view line(text.data() + start, end - start);
    simdjson::dom::element doc;
    int64_t s = 0;
    if (!parser.parse(simdjson::padded_string(line)).get(doc) && !doc["step"].get(s) && s <= step) {
      kept += line;
      kept += '\n';
    }
    start = end + 1;
  }
  const fs::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kept;
    if (!out) return io_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, file, ec);
  if (ec) return io_error("cannot replace " + file.string() + ": " + ec.message());
  return {};
}

// Mean loss over every target of the valid split's first `max_batches` batches (0: all), in file order.
Result<double> evaluate(DataParallelGroup& group, const WindowLoader& valid, int64_t max_batches,
                        const LossOptions& lo) {
  TrainBatch b = valid.make_batch();
  double sum = 0;
  int64_t targets = 0, batches = 0;
  for (int64_t w = 0; w < valid.num_windows() && (max_batches == 0 || batches < max_batches); ++batches) {
    for (int r = 0; r < b.batch; ++r) {
      if (w < valid.num_windows())
        valid.fill_row(w++, b, r);
      else
        valid.fill_empty_row(b, r);
    }
    ASTRAI_ASSIGN_OR_RETURN(const auto batch_sum, group.loss_sum(b, lo));
    sum += batch_sum.first;
    targets += batch_sum.second;
  }
  return targets ? sum / double(targets) : 0.0;
}

// What every node of a run must share (the bootstrap compares it): the keys that shape the run (not
// those naming this node or its paths), the model's shape and tokenizer, the tokenized data, and the
// step a resume starts from. FNV-1a 64 in hex.
std::string run_fingerprint(const TrainConfig& c, const ModelConfig& m, const std::string& tokenizer_key,
                            const TokenizedData& train, const TokenizedData& valid, int64_t resume_step) {
  TrainConfig shared = c;
  shared.node_rank = 0;
  shared.out = shared.data_train = shared.data_valid = shared.model = shared.device = shared.master_addr = "";
  shared.node_timeout = 0;
  uint64_t h = 0xcbf29ce484222325ull;
  auto bytes = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001b3ull;
  };
  auto text = [&](const std::string& t) { bytes(t.data(), t.size() + 1); };
  text(shared.to_json());
  text(m.architecture);
  for (int64_t x : {m.vocab_size, m.num_parameters(), resume_step}) bytes(&x, sizeof x);
  text(tokenizer_key);
  for (const TokenizedData* d : {&train, &valid}) {
    bytes(d->tokens.data(), d->tokens.size() * sizeof(uint32_t));
    bytes(d->loss_mask.data(), d->loss_mask.size());
    bytes(d->doc_starts.data(), d->doc_starts.size() * sizeof(uint64_t));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace

Result<TrainSummary> run_training(const TrainRunOptions& o) {
  const TrainConfig& c = o.config;
  const auto t_start = Clock::now();
  const fs::path out = c.out;
  std::error_code ec;

  // Where the weights come from: the newest checkpoint on --resume, else the model or preset.
  std::optional<fs::path> resume_from;
  if (o.resume) {
    resume_from = latest_checkpoint(out);
    if (!resume_from)
      std::fprintf(stderr, "train: no checkpoint under %s yet; starting from the beginning\n", c.out.c_str());
  } else if (latest_checkpoint(out)) {
    return invalid_argument(
        "out: " + c.out +
        " already holds checkpoints; pass --resume to continue that run, or choose another out");
  }
  fs::path model_dir;
  if (resume_from) {
    model_dir = *resume_from;
  } else if (!c.model.empty()) {
    model_dir = c.model;
    if (!fs::is_directory(model_dir, ec)) return not_found("model: " + c.model + " is not a directory");
  } else {
    ASTRAI_ASSIGN_OR_RETURN(model_dir, resolve_model_dir(c.preset, c.seed));
  }
  ASTRAI_ASSIGN_OR_RETURN(const ModelConfig mconfig, ModelConfig::load(model_dir));
  if (c.seq_len > mconfig.max_context())
    return invalid_argument("seq_len: " + std::to_string(c.seq_len) +
                            " is longer than the model's context of " +
                            std::to_string(mconfig.max_context()) + " (max_position_embeddings)");
  ASTRAI_ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tok, Tokenizer::load(model_dir));
  ASTRAI_ASSIGN_OR_RETURN(const WeightStore weights, WeightStore::open(model_dir));
  // Data.
  const fs::path cache = o.data_cache.empty() ? data_cache_dir() : o.data_cache;
  const std::string tok_key = tokenizer_fingerprint(model_dir);
  auto load_split = [&](const std::string& file, const std::string& what) -> Result<TokenizedData> {
    auto d = load_or_tokenize(file, *tok, tok_key, cache);
    if (!d.ok()) return Status(d.status().code(), what + ": " + d.status().message());
    for (uint32_t id : d->tokens)
      if (int64_t(id) >= mconfig.vocab_size)
        return invalid_argument(what + ": token id " + std::to_string(id) +
                                " is outside the model's vocabulary of " +
                                std::to_string(mconfig.vocab_size));
    return d;
  };
  ASTRAI_ASSIGN_OR_RETURN(const TokenizedData train_data, load_split(c.data_train, "data.train"));
  ASTRAI_ASSIGN_OR_RETURN(WindowLoader train, WindowLoader::create(&train_data, c.seq_len, c.batch_size,
                                                                   c.seed, true, "data.train"));
  TokenizedData valid_data;
  std::optional<WindowLoader> valid;
  if (!c.data_valid.empty()) {
    ASTRAI_ASSIGN_OR_RETURN(valid_data, load_split(c.data_valid, "data.valid"));
    ASTRAI_ASSIGN_OR_RETURN(
        valid, WindowLoader::create(&valid_data, c.seq_len, c.batch_size, c.seed, false, "data.valid"));
  }

  // The state a checkpoint restores (read before the group exists: the nodes check they agree on it).
  std::optional<TrainerState> resumed;
  if (resume_from) {
    ASTRAI_ASSIGN_OR_RETURN(resumed, read_trainer_state(*resume_from));
  }

  DataParallelOptions dpo;
  dpo.dp = int(c.dp);
  dpo.device = c.device;
  dpo.adamw = AdamWOptions{0.9, 0.95, 1e-8, c.weight_decay};
  dpo.zero = c.zero != 0;
  dpo.bucket_bytes = c.bucket_mb << 20;
  dpo.nodes.nnodes = int(c.nnodes);
  dpo.nodes.node_rank = int(c.node_rank);
  dpo.nodes.master_addr = c.master_addr;
  dpo.nodes.master_port = int(c.master_port);
  dpo.nodes.timeout_s = c.node_timeout;
  // A node stuck on its device after another node died still ends, with the error.
  dpo.nodes.exit_after_loss_s = 30;
  if (c.nnodes > 1 && c.node_rank == 0)
    std::fprintf(stderr,
                 "train: node 0 of %lld: waiting on master_port %lld for the other nodes (up to %g s)\n",
                 static_cast<long long>(c.nnodes), static_cast<long long>(c.master_port), c.node_timeout);
  if (c.nnodes > 1 && c.node_rank > 0)
    std::fprintf(stderr, "train: node %lld of %lld: joining node 0 at %s:%lld (up to %g s)\n",
                 static_cast<long long>(c.node_rank), static_cast<long long>(c.nnodes), c.master_addr.c_str(),
                 static_cast<long long>(c.master_port), c.node_timeout);
  if (c.nnodes > 1)
    dpo.fingerprint =
        run_fingerprint(c, mconfig, tok_key, train_data, valid_data, resumed ? resumed->step : 0);
  ASTRAI_ASSIGN_OR_RETURN(const std::unique_ptr<DataParallelGroup> group,
                          DataParallelGroup::create(mconfig, weights, dpo));
  // Rank 0's replica is the one checkpoints save (every rank holds the same bits). Only node 0
  // writes anything under out: checkpoints, metrics.jsonl, the progress bar.
  std::vector<Param>& params = group->model(0).params();
  Backend& be = group->backend(0);
  AdamW& opt = group->optimizer(0);
  NodeLink* const nodes = group->nodes();
  const bool writer = c.node_rank == 0;
  if (!writer)
    std::fprintf(stderr,
                 "train: node %lld of %lld joined (global ranks %d..%d of %d); node 0 writes the run\n",
                 static_cast<long long>(c.node_rank), static_cast<long long>(c.nnodes), group->first_rank(),
                 group->first_rank() + group->size() - 1, group->world_size());

  std::string ranks = group->world_size() > 1 ? "dp " + std::to_string(group->world_size()) + " x " : "";
  if (c.nnodes > 1)
    ranks = "dp " + std::to_string(group->world_size()) + " (" + std::to_string(c.nnodes) + " nodes x " +
            std::to_string(c.dp) + ") x ";
  if (writer)
    std::fprintf(stderr,
                 "train: %s, %.2fM parameters, on %s%s; data.train %zu tokens (%lld with a loss), %lld "
                 "windows of %lld",
                 mconfig.architecture.c_str(), double(mconfig.num_parameters()) / 1e6, ranks.c_str(),
                 be.name().c_str(), train_data.tokens.size(),
                 static_cast<long long>(train_data.num_loss_tokens()),
                 static_cast<long long>(train.num_windows()), static_cast<long long>(c.seq_len));
  if (writer && valid)
    std::fprintf(stderr, "; data.valid %lld windows", static_cast<long long>(valid->num_windows()));
  if (writer) std::fprintf(stderr, "\n");

  // The state a checkpoint restores.
  int64_t step = 0;
  if (resume_from) {
    const TrainerState& st = *resumed;
    if (st.cursor.index > train.num_windows())
      return invalid_argument(
          "--resume: " + resume_from->string() + " was made with other training data (data cursor " +
          std::to_string(st.cursor.index) + " past " + std::to_string(train.num_windows()) + " windows)");
    if (st.seed != c.seed)
      return invalid_argument(
          "seed: " + std::to_string(c.seed) + " differs from the checkpoint's " + std::to_string(st.seed) +
          " (the data order depends on it); resume with --seed " + std::to_string(st.seed));
    {
      std::vector<float> m, v;
      ASTRAI_RETURN_IF_ERROR(load_moments(*resume_from / "optimizer.safetensors", params, m, v));
      ASTRAI_RETURN_IF_ERROR(group->write_moments(m, v, st.adam_t));
    }
    train.set_cursor(st.cursor);
    step = st.step;
    std::fprintf(stderr, "train: resuming from %s (step %lld)\n", resume_from->c_str(),
                 static_cast<long long>(step));
  }

  const fs::path metrics_path = out / "metrics.jsonl";
  std::ofstream metrics;
  if (writer) {
    fs::create_directories(out, ec);
    if (ec) return io_error("out: cannot create " + c.out + ": " + ec.message());
    // Temp directories of checkpoints whose writing was killed: never complete, never read.
    for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec))
      if (std::error_code ignored; it->path().filename().string().rfind(".step_", 0) == 0)
        fs::remove_all(it->path(), ignored);
    if (resume_from) {
      ASTRAI_RETURN_IF_ERROR(truncate_metrics(metrics_path, step));
    } else {
      fs::remove(metrics_path, ec);
    }
    metrics.open(metrics_path, std::ios::binary | std::ios::app);
    if (!metrics) return io_error("cannot write " + metrics_path.string());
  }

  const fs::path tokenizer_dir = model_dir;
  auto save = [&]() -> Result<fs::path> {
    CheckpointContents ck;
    ck.config = mconfig;
    ck.tokenizer_dir = tokenizer_dir;
    // The f32 master weights (rank 0's) and the moments (from every rank's shard with zero), copied
    // to the host (from the devices on GPUs): the same files whatever dp and zero.
    std::vector<float> values(size_t(group->model(0).flat_values().numel())), m, v;
    be.download(values.data(), group->model(0).flat_values());
    ASTRAI_RETURN_IF_ERROR(group->read_moments(m, v));
    int64_t at = 0;
    for (const Param& p : params) {
      ck.weights.push_back({p.name, DType::f32, p.shape, values.data() + at});
      ck.moments.push_back({"exp_avg." + p.name, DType::f32, p.shape, m.data() + at});
      ck.moments.push_back({"exp_avg_sq." + p.name, DType::f32, p.shape, v.data() + at});
      at += p.value.numel();
    }
    ck.state.step = step;
    ck.state.cursor = train.cursor();
    ck.state.seed = c.seed;
    ck.state.adam_t = opt.steps_taken();
    ck.state.beta1 = opt.options().beta1;
    ck.state.beta2 = opt.options().beta2;
    ck.state.eps = opt.options().eps;
    ck.state.config_json = c.to_json();
    return write_checkpoint(out, ck);
  };

  // MFU on a GPU: model FLOPs per second over the bf16 GEMM peak measured here once (train/flops.h),
  // times the ranks' GPUs.
  const double peak_tflops = be.device() == Device::cpu || !writer
                                 ? 0.0
                                 : measure_bf16_peak_tflops(be) * double(group->world_size());
  if (peak_tflops > 0)
    std::fprintf(stderr, "train: bf16 GEMM peak %.0f TFLOP/s%s (for mfu)\n", peak_tflops,
                 group->world_size() > 1 ? " over the group's GPUs" : "");
  const double flops_per_tok = flops_per_token(mconfig, c.seq_len);

  TrainSummary sum;
  sum.first_step = step;
  LossOptions lo;
  lo.label_smoothing = float(c.label_smoothing);
  Progress progress(o.progress && writer, step, c.steps);
  std::vector<TrainBatch> micro(size_t(c.grad_accum), train.make_batch());
  const double tokens_per_step = double(c.batch_size * c.seq_len * c.grad_accum);
  int64_t run_steps = 0;
  while (step < c.steps) {
    const auto t0 = Clock::now();
    for (TrainBatch& b : micro) train.next(b);
    const double lr = learning_rate(c, step);
    // A step without a single target (possible with sparse SFT masks) changes nothing.
    ASTRAI_ASSIGN_OR_RETURN(const StepResult r, group->step(micro, lr, c.grad_clip, lo));
    const int64_t total = r.targets;
    const double loss_sum = r.loss_sum, norm = r.grad_norm;
    ++step;
    ++run_steps;
    const double tps = tokens_per_step / std::max(1e-9, seconds_since(t0));
    const double loss = total > 0 ? loss_sum / double(total) : 0.0;
    sum.last_loss = loss;

    JsonWriter w;
    w.begin_object().key("step").value(step);
    if (total > 0)
      w.key("loss").value(loss);
    else
      w.key("loss").null();
    w.key("lr").value(lr).key("grad_norm").value(norm).key("tokens_per_s").value(tps);
    if (peak_tflops > 0) w.key("mfu").value(tps * flops_per_tok / (peak_tflops * 1e12));
    if (valid && c.eval_every > 0 && step % c.eval_every == 0) {
      ASTRAI_ASSIGN_OR_RETURN(const double vl, evaluate(*group, *valid, c.eval_batches, lo));
      w.key("val_loss").value(vl);
      sum.last_val_loss = vl;
    }
    w.end_object();
    if (writer) {
      metrics << w.str() << '\n';
      metrics.flush();
    }
    progress.update(step, loss, lr, tps, step == c.steps);

    bool stop =
        (o.stop_requested && o.stop_requested->load()) || (o.stop_after > 0 && run_steps >= o.stop_after);
    // A stop request on any node stops every node after the same step (node 0 checkpoints it).
    if (nodes) {
      ASTRAI_ASSIGN_OR_RETURN(stop, nodes->any(stop));
    }
    if (writer && (step == c.steps || stop || (c.save_every > 0 && step % c.save_every == 0))) {
      ASTRAI_ASSIGN_OR_RETURN(sum.checkpoint, save());
    }
    if (stop && step < c.steps) {
      sum.stopped = true;
      break;
    }
  }
  if (writer && !metrics) return io_error("cannot write " + metrics_path.string());
  // The other nodes leave once node 0 has written its last checkpoint.
  if (nodes) ASTRAI_RETURN_IF_ERROR(nodes->close());
  sum.last_step = step;
  sum.seconds = seconds_since(t_start);
  return sum;
}

}  // namespace astrai::train
