// TrainModel against the serving forward (logits, CPU, same weights) and against PyTorch autograd
// (tests/train/grad_reference.py, float64): every parameter's gradient of the tiny preset, a
// Qwen3-style model (q/k norm, GQA, head_dim * heads != hidden; tied and untied) and a Qwen2-style
// one (q/k/v bias), on fresh seeds, with packed documents and ignored targets in the batch.
// Gradient error per parameter: ||g - g_ref||_2 / ||g_ref||_2 <= 1e-4 (Frobenius norm over the
// whole tensor).
#include "train/train_model.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "model/forward_util.h"
#include "src/backend/backend.h"
#include "src/model/config.h"
#include "src/model/model.h"
#include "src/model/safetensors.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

using train::kIgnore;
using train::TrainBatch;
using train::TrainModel;

// A batch of B rows of T tokens, each row packed with 1..max_docs documents (positions restart,
// doc_start marks each document's first token); about a fifth of the targets ignored.
// docs[b] lists each row's document lengths.
TrainBatch packed_batch(std::mt19937_64& rng, int B, int T, int64_t vocab, int max_docs,
                        std::vector<std::vector<int>>* docs = nullptr) {
  TrainBatch b;
  b.batch = B;
  b.seq_len = T;
  std::uniform_int_distribution<int32_t> tok(0, int32_t(vocab) - 1);
  for (int r = 0; r < B; ++r) {
    // Cut points: up to max_docs - 1 distinct positions in (0, T).
    std::vector<int> cuts;
    const int n_cuts = std::uniform_int_distribution<int>(0, std::min(max_docs - 1, T - 1))(rng);
    while (int(cuts.size()) < n_cuts) {
      const int c = std::uniform_int_distribution<int>(1, T - 1)(rng);
      if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.push_back(T);
    if (docs) docs->emplace_back();
    int start = 0;
    for (int c : cuts) {
      if (docs) docs->back().push_back(c - start);
      for (int t = start; t < c; ++t) {
        b.tokens.push_back(tok(rng));
        b.targets.push_back(rng() % 5 == 0 ? kIgnore : tok(rng));
        b.positions.push_back(t - start);
        b.doc_start.push_back(start);
      }
      start = c;
    }
  }
  return b;
}

ModelConfig tiny_config() {
  return preset_config("tiny").value();
}

ModelConfig qwen3_config(bool tied) {
  ModelConfig c = qwen3_style_config();
  c.tie_word_embeddings = tied;
  return c;
}

// Qwen2: bias on q/k/v (not o), untied head, GQA.
ModelConfig qwen2_config() {
  ModelConfig c;
  c.architecture = "Qwen2ForCausalLM";
  c.model_type = "qwen2";
  c.vocab_size = 200;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.attention_bias = true;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 512;
  return c;
}

struct Loaded {
  std::unique_ptr<Backend> backend;
  WeightStore store;
  std::unique_ptr<TrainModel> model;
};

Loaded load(const std::filesystem::path& dir, const ModelConfig& cfg) {
  Loaded l;
  l.backend = make_backend(BackendOptions{}).value();
  l.store = WeightStore::open(dir).value();
  l.model = TrainModel::create(cfg, l.store, *l.backend).value();
  return l;
}

// The serving forward's logits of every document of the batch, each run as its own sequence,
// laid out in the batch's token order.
std::vector<float> serving_logits(const std::filesystem::path& dir, const TrainBatch& b,
                                  const std::vector<std::vector<int>>& docs, std::mt19937_64& rng) {
  auto backend = make_backend(BackendOptions{}).value();
  auto model = Model::load(dir, *backend).value();
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int64_t> lengths;
  size_t off = 0;
  for (const auto& row : docs)
    for (int len : row) {
      seqs.emplace_back(b.tokens.begin() + long(off), b.tokens.begin() + long(off) + len);
      lengths.push_back(len);
      off += size_t(len);
    }
  const int page_size = 16;
  int num_pages = 0;
  for (int64_t len : lengths) num_pages += int((len + page_size - 1) / page_size);
  KvCache kv = model->allocate_kv(num_pages + 2, page_size);
  auto pages = random_pages(lengths, page_size, num_pages + 2, rng);
  std::vector<Chunk> chunks;
  for (size_t s = 0; s < seqs.size(); ++s) chunks.push_back({&seqs[s], &pages[s], 0, lengths[s]});
  return run_forward(*model, make_batch(chunks), kv);
}

void logits_match_serving(const ModelConfig& cfg) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " architecture " << cfg.architecture);
  std::mt19937_64 rng(seed);
  TempDir dir("trainfwd");
  write_random_model(dir.path(), cfg, seed);
  std::vector<std::vector<int>> docs;
  const TrainBatch b =
      packed_batch(rng, 3, std::uniform_int_distribution<int>(20, 70)(rng), cfg.vocab_size, 3, &docs);
  Loaded l = load(dir.path(), cfg);
  const std::vector<float> got = l.model->logits(b).value();
  const std::vector<float> want = serving_logits(dir.path(), b, docs, rng);
  REQUIRE(got.size() == want.size());
  const std::vector<double> want_d(want.begin(), want.end());
  CHECK(max_row_rel_error(got, want_d, cfg.vocab_size) <= 1e-5);
}

// ---- gradients against PyTorch ------------------------------------------------------------------

struct Reference {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // per Param, in params() order
};

std::string json_ints(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

Reference reference_grads(const std::filesystem::path& dir, std::vector<train::Param>& params,
                          const TrainBatch& b, float smoothing, float scale) {
  TempDir tmp("gradref");
  std::string names = "[";
  for (size_t i = 0; i < params.size(); ++i) names += (i ? ",\"" : "\"") + params[i].name + "\"";
  names += "]";
  char num[64];
  std::string json = "{\"batch\":" + std::to_string(b.batch) + ",\"seq_len\":" + std::to_string(b.seq_len) +
                     ",\"tokens\":" + json_ints(b.tokens) + ",\"targets\":" + json_ints(b.targets) +
                     ",\"positions\":" + json_ints(b.positions) + ",\"doc_start\":" + json_ints(b.doc_start);
  std::snprintf(num, sizeof num, "%.9g", double(smoothing));
  json += ",\"label_smoothing\":" + std::string(num);
  std::snprintf(num, sizeof num, "%.9g", double(scale));
  json += ",\"scale\":" + std::string(num) + ",\"names\":" + names + "}";
  write_file(tmp / "batch.json", json);
  const CommandResult r = run_command(
      python3() + " " + (source_dir() / "tests/train/grad_reference.py").string() + " '" + dir.string() +
      "' '" + (tmp / "batch.json").string() + "' '" + (tmp / "grads.bin").string() + "'");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Reference ref;
  const auto pos = r.out.find("\"loss\":");
  REQUIRE(pos != std::string::npos);
  ref.loss = std::stod(r.out.substr(pos + 7));
  const std::string raw = read_file(tmp / "grads.bin");
  size_t off = 0;
  for (const auto& p : params) {
    const size_t n = size_t(p.value.numel());
    REQUIRE(off + n * sizeof(double) <= raw.size());
    std::vector<double> g(n);
    std::memcpy(g.data(), raw.data() + off, n * sizeof(double));
    off += n * sizeof(double);
    ref.grads.push_back(std::move(g));
  }
  REQUIRE(off == raw.size());
  return ref;
}

std::vector<float> host(Backend& be, const Tensor& t) {
  std::vector<float> h(size_t(t.numel()));
  be.synchronize();
  be.download(h.data(), t);
  return h;
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

void gradients_match_pytorch(const ModelConfig& cfg) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const float smoothing = rng() % 2 ? 0.0f : std::uniform_real_distribution<float>(0.01f, 0.3f)(rng);
  const float scale = std::uniform_real_distribution<float>(0.25f, 2.0f)(rng);
  const int64_t chunk_rows = std::uniform_int_distribution<int64_t>(7, 100)(rng);
  INFO("seed " << seed << " architecture " << cfg.architecture << " tied " << cfg.tie_word_embeddings
               << " label_smoothing " << smoothing << " scale " << scale << " chunk_rows " << chunk_rows);
  TempDir dir("traingrad");
  write_random_model(dir.path(), cfg, seed);
  const TrainBatch b =
      packed_batch(rng, 2, std::uniform_int_distribution<int>(24, 48)(rng), cfg.vocab_size, 3);
  Loaded l = load(dir.path(), cfg);
  auto& params = l.model->params();
  const float loss = l.model->forward_backward(b, scale, {smoothing, chunk_rows}).value();
  const Reference ref = reference_grads(dir.path(), params, b, smoothing, scale);
  CHECK(std::abs(double(loss) - ref.loss) <= 1e-5 * std::abs(ref.loss));
  REQUIRE(ref.grads.size() == params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].name);
    CHECK(rel_l2(host(*l.backend, params[i].grad), ref.grads[i]) <= 1e-4);
  }
}

}  // namespace

TEST_CASE("TrainModel logits equal the serving forward's (tiny preset, packed documents)", "[unit]") {
  logits_match_serving(tiny_config());
}
TEST_CASE("TrainModel logits equal the serving forward's (Qwen3-style, untied)", "[unit]") {
  logits_match_serving(qwen3_config(false));
}
TEST_CASE("TrainModel logits equal the serving forward's (Qwen2-style, q/k/v bias)", "[unit]") {
  logits_match_serving(qwen2_config());
}

TEST_CASE("TrainModel gradients match PyTorch autograd (tiny preset)", "[unit]") {
  gradients_match_pytorch(tiny_config());
}
TEST_CASE("TrainModel gradients match PyTorch autograd (Qwen3-style, tied)", "[unit]") {
  gradients_match_pytorch(qwen3_config(true));
}
TEST_CASE("TrainModel gradients match PyTorch autograd (Qwen3-style, untied)", "[unit]") {
  gradients_match_pytorch(qwen3_config(false));
}
TEST_CASE("TrainModel gradients match PyTorch autograd (Qwen2-style, q/k/v bias)", "[unit]") {
  gradients_match_pytorch(qwen2_config());
}

}  // namespace astrai::test
