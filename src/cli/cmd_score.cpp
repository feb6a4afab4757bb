// astrai score --model DIR --input IN.jsonl --output OUT.jsonl
//   input line:  {"id"?: any, "text": str}  or  {"id"?: any, "ids": [int, ...]}
//   output line: {"id", "tokens": [ids], "logprobs": [log p(token i | tokens < i) for i >= 1],
//                 "nll": mean negative logprob, "ppl": exp(nll)}     in input order
// Text is tokenized with the model's tokenizer (special tokens added, as HF's encode() does).
// A bad line (bad JSON, fewer than 2 tokens, ids outside the vocabulary, longer than the context)
// is written as {"id", "error": "line N: ..."} and the run goes on; the exit code is 1 at the end
// if any line failed. Without an "id" the output's id is the line number.
//
// Lines are scored several at a time: each sequence gets its own pages of one paged KV cache
// (from sched's KvPool) and is fed in prefill chunks of at most --chunk tokens, several sequences
// per forward up to --batch-tokens; a chunk's logits give the log-probabilities of the tokens that
// follow each of its positions.
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "sched/kv_pool.h"
#include "src/backend/backend.h"
#include "src/cli/commands.h"
#include "src/core/json_writer.h"
#include "src/model/model.h"
#include "src/model/model_source.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::cli {
namespace {

struct ScoreOptions {
  CommonOptions common;
  std::string model, input, output;
  int64_t batch_tokens = 512;
  int64_t chunk = 512;
  int64_t max_seqs = 32;
  uint64_t seed = 0;
  bool progress = false;
};

// One input line and, once scored, its result.
struct Item {
  size_t line_no = 0;
  std::string id_json;  // the "id" value as JSON text
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string error;  // non-empty: an error line
  int64_t fed = 0;    // tokens already run through the model
  std::vector<int32_t> pages;
  bool done = false;
};

Device pick_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  return has_backend_factory(Device::cuda) ? Device::cuda : Device::cpu;
}

// Parses one line into item (tokens or error).
void parse_line(simdjson::dom::parser& parser, const std::string& line, const Tokenizer& tok,
                const ModelConfig& cfg, Item& item) {
  auto fail = [&](const std::string& m) { item.error = "line " + std::to_string(item.line_no) + ": " + m; };
  item.id_json = std::to_string(item.line_no);
  const simdjson::padded_string padded(utf8_sanitize(line));
  simdjson::dom::element doc;
  if (auto err = parser.parse(padded).get(doc); err != simdjson::SUCCESS)
    return fail(std::string("not valid JSON: ") + simdjson::error_message(err));
  if (!doc.is_object()) return fail("expected a JSON object with \"text\" or \"ids\"");
  simdjson::dom::element id;
  if (doc["id"].get(id) == simdjson::SUCCESS) item.id_json = simdjson::minify(id);
  std::string_view text;
  simdjson::dom::array ids;
  if (doc["text"].get_string().get(text) == simdjson::SUCCESS) {
    item.tokens = tok.encode(text, /*add_special_tokens=*/true);
  } else if (doc["ids"].get_array().get(ids) == simdjson::SUCCESS) {
    for (simdjson::dom::element e : ids) {
      int64_t v = 0;
      if (e.get_int64().get(v) != simdjson::SUCCESS) return fail("\"ids\" must be an array of integers");
      if (v < 0 || v >= cfg.vocab_size)
        return fail("token id " + std::to_string(v) + " is outside the vocabulary (vocab_size " +
                    std::to_string(cfg.vocab_size) + ")");
      item.tokens.push_back(int32_t(v));
    }
  } else {
    return fail("expected a string field \"text\" or an integer array \"ids\"");
  }
  if (item.tokens.size() < 2)
    return fail("needs at least 2 tokens to score, got " + std::to_string(item.tokens.size()));
  if (int64_t(item.tokens.size()) > cfg.max_context())
    return fail(std::to_string(item.tokens.size()) + " tokens is longer than the model's context of " +
                std::to_string(cfg.max_context()));
}

std::string result_line(const Item& it) {
  JsonWriter w;
  w.begin_object().key("id").raw(it.id_json);
  if (!it.error.empty()) {
    w.key("error").value(it.error).end_object();
    return w.take();
  }
  w.key("tokens").begin_array();
  for (int32_t t : it.tokens) w.value(int64_t(t));
  w.end_array().key("logprobs").begin_array();
  double sum = 0;
  for (float lp : it.logprobs) {
    w.value(double(lp));
    sum += lp;
  }
  const double nll = -sum / double(it.logprobs.size());
  w.end_array().key("nll").value(nll).key("ppl").value(std::exp(nll)).end_object();
  return w.take();
}

// "done/total  tok/s  ETA" on one stderr line, redrawn at most 5 times a second.
class Progress {
 public:
  Progress(bool enabled, size_t total) : on_(enabled), total_(total), t0_(clock::now()) {}
  void update(size_t done, int64_t tokens, bool final = false) {
    if (!on_) return;
    const auto now = clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - t0_).count();
    const double tps = s > 0 ? double(tokens) / s : 0;
    const double eta = done > 0 ? s / double(done) * double(total_ - done) : 0;
    std::fprintf(stderr, "\rscore: %zu/%zu lines  %.0f tok/s  ETA %.0fs   ", done, total_, tps, eta);
    if (final) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  using clock = std::chrono::steady_clock;
  bool on_;
  size_t total_;
  clock::time_point t0_, last_{};
};

void run(const ScoreOptions& o) {
  apply_common_options(o.common);
  if (o.batch_tokens < 1 || o.chunk < 1 || o.max_seqs < 1)
    throw Error(invalid_argument("--batch-tokens, --chunk and --max-seqs must be positive"));
  const std::filesystem::path dir = resolve_model_dir(o.model, o.seed).value();
  BackendOptions bo;
  bo.device = pick_device(o.common.device);
  bo.threads = o.common.threads;
  if (bo.device == Device::cpu && o.common.dtype == "bf16")
    throw Error(unsupported("--dtype bf16 is not supported on the CPU backend (it computes in f32)"));
  auto backend = make_backend(bo).value();
  auto model = Model::load(dir, *backend, load_options(o.common, o.common.log_level == "debug")).value();
  auto tok = Tokenizer::load(dir).value();
  const ModelConfig& cfg = model->config();

  std::ifstream in(o.input, std::ios::binary);
  if (!in) throw Error(not_found("cannot open --input " + o.input));
  std::vector<Item> items;
  {
    simdjson::dom::parser parser;
    std::string line;
    size_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      Item it;
      it.line_no = line_no;
      parse_line(parser, line, *tok, cfg, it);
      it.done = !it.error.empty();
      items.push_back(std::move(it));
    }
  }
  std::FILE* out = std::fopen(o.output.c_str(), "wb");
  if (!out) throw Error(io_error("cannot write --output " + o.output));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out_guard(out, &std::fclose);

  // KV cache: room for the longest sequence, and for a few full batches of shorter ones.
  const int page_size = 16;
  int64_t longest = 0;
  for (const Item& it : items) longest = std::max<int64_t>(longest, int64_t(it.tokens.size()));
  const int64_t cache_tokens = std::max<int64_t>(longest, 4 * o.batch_tokens);
  const int num_pages = int((cache_tokens + page_size - 1) / page_size);
  KvCache kv = model->allocate_kv(num_pages, page_size);
  KvPool pool(num_pages);

  // The logits of a step are [rows, vocab] f32 on the host too: cap the rows at ~256 MB.
  const int64_t max_rows =
      std::max<int64_t>(1, std::min<int64_t>(o.batch_tokens, (int64_t(256) << 20) / (4 * cfg.vocab_size)));

  const bool show = o.progress || ::isatty(2);
  Progress progress(show, items.size());
  size_t next_admit = 0, next_write = 0, n_done = 0;
  int64_t tokens_scored = 0;
  bool any_error = false;
  std::vector<size_t> active;
  std::vector<float> logits;
  ForwardBatchBuilder batch(page_size);

  auto write_ready = [&] {
    while (next_write < items.size() && items[next_write].done) {
      Item& it = items[next_write];
      const std::string line = result_line(it);
      std::fwrite(line.data(), 1, line.size(), out);
      std::fputc('\n', out);
      any_error |= !it.error.empty();
      ++n_done;
      it = Item{};     // free its tokens and logprobs
      it.done = true;  // written: admission, which may not have reached it yet, must skip it
      ++next_write;
    }
    std::fflush(out);
  };

  while (true) {
    write_ready();
    progress.update(n_done, tokens_scored);
    // Admit sequences while their pages fit (skipping finished error lines).
    while (next_admit < items.size() && int64_t(active.size()) < o.max_seqs) {
      Item& it = items[next_admit];
      if (it.done) {
        ++next_admit;
        continue;
      }
      const int need = int((it.tokens.size() + page_size - 1) / page_size);
      if (need > pool.num_free()) break;
      for (int p = 0; p < need; ++p) it.pages.push_back(*pool.alloc());
      it.logprobs.reserve(it.tokens.size() - 1);
      active.push_back(next_admit++);
    }
    if (active.empty()) break;

    // One step: the next chunk of each active sequence, in order, within the token budget.
    batch.clear();
    struct Span {
      size_t item;
      int64_t p0, p1;
      size_t first_row;
    };
    std::vector<Span> spans;
    int64_t budget = std::min(o.batch_tokens, max_rows);
    for (size_t i : active) {
      if (budget <= 0) break;
      Item& it = items[i];
      const int64_t n = int64_t(it.tokens.size());
      const int64_t p0 = it.fed, p1 = std::min({n, p0 + o.chunk, p0 + budget});
      spans.push_back({i, p0, p1, size_t(batch.num_logit_rows())});
      batch.add_sequence(it.tokens, int(p0), int(p1 - p0), it.pages, LogitRows::scored);
      budget -= p1 - p0;
    }
    const ForwardBatch& b = batch.finish();
    Tensor lt = model->forward(b, kv).value();
    logits.resize(size_t(lt.numel()));
    backend->synchronize();
    if (lt.numel()) backend->download(logits.data(), lt);

    const int64_t V = cfg.vocab_size;
    for (const Span& sp : spans) {
      Item& it = items[sp.item];
      const int64_t n = int64_t(it.tokens.size());
      size_t r = sp.first_row;
      for (int64_t p = sp.p0; p < sp.p1 && p + 1 < n; ++p, ++r) {
        // log_softmax(row)[next] = row[next] - max - log(sum exp(row - max)), in double.
        const float* row = logits.data() + r * size_t(V);
        const float m = *std::max_element(row, row + V);
        double s = 0;
        for (int64_t j = 0; j < V; ++j) s += std::exp(double(row[j]) - double(m));
        it.logprobs.push_back(float(double(row[it.tokens[size_t(p) + 1]]) - double(m) - std::log(s)));
      }
      it.fed = sp.p1;
      tokens_scored += sp.p1 - sp.p0;
      if (it.fed == n) {
        it.done = true;
        for (int32_t p : it.pages) pool.release(p);
        it.pages.clear();
      }
    }
    active.erase(std::remove_if(active.begin(), active.end(), [&](size_t i) { return items[i].done; }),
                 active.end());
  }
  write_ready();
  progress.update(n_done, tokens_scored, true);
  set_exit_code(any_error ? 1 : 0);
}

void register_score(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  CLI::App* sub = app.add_subcommand("score",
                                     "Per-token log-probabilities of texts (JSONL {\"text\"} or {\"ids\"} -> "
                                     "{\"tokens\",\"logprobs\",...})");
  sub->add_option("--model", o->model, "Model directory (Hugging Face layout) or a preset name")->required();
  sub->add_option("--input", o->input, "Input JSONL: {\"id\"?, \"text\"} or {\"id\"?, \"ids\"} per line")
      ->required();
  sub->add_option("--output", o->output, "Output JSONL, one result per input line, in input order")
      ->required();
  sub->add_option("--batch-tokens", o->batch_tokens, "Most tokens per forward step")->capture_default_str();
  sub->add_option("--chunk", o->chunk, "Most tokens of one sequence per step (prefill chunk)")
      ->capture_default_str();
  sub->add_option("--max-seqs", o->max_seqs, "Most sequences in flight at once")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of a preset's random weights")->capture_default_str();
  sub->add_flag("--progress", o->progress, "Show the progress bar even when stderr is not a terminal");
  add_common_options(*sub, o->common);
  sub->callback([o] { run(*o); });
}

}  // namespace
}  // namespace astrai::cli

ASTRAI_REGISTER_COMMAND("score", astrai::cli::register_score);
