// Decode steps replayed from CUDA graphs against the same steps launched eagerly, on the CUDA
// backend: bit-for-bit equal logits at several batch sizes (padded into their bucket or not), with
// context lengths that differ between sequences and grow across replays, with eager prefill and
// mixed steps in between; and the engine's greedy generations with graphs on and off. A counting
// backend wrapped around the CUDA one proves the graphed steps launched no op from the host (so
// the comparison is not eager against eager). Skips itself (with a warning) without a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "gpu/cuda_backend.h"
#include "model/forward_util.h"
#include "sched/step_loop.h"
#include "src/backend/backend.h"
#include "src/model/config.h"
#include "src/model/model.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

// Forwards every op to the CUDA backend and counts the ops the host issues.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Backend& inner) : in_(inner) {}
  long ops = 0;

  Device device() const override { return in_.device(); }
  std::string name() const override { return in_.name(); }
  DType compute_dtype() const override { return in_.compute_dtype(); }
  Buffer alloc(size_t bytes) override { return in_.alloc(bytes); }
  void upload(Tensor dst, const void* src) override { in_.upload(dst, src); }
  void download(void* dst, const Tensor& src) override { in_.download(dst, src); }
  void synchronize() override { in_.synchronize(); }
  int64_t memory_available() const override { return in_.memory_available(); }
  void embedding(const Tensor& t, const Tensor& ids, Tensor out) override {
    ++ops;
    in_.embedding(t, ids, out);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    ++ops;
    in_.rms_norm(x, w, eps, out);
  }
  void add_rms_norm(Tensor r, const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    ++ops;
    in_.add_rms_norm(r, x, w, eps, out);
  }
  void linear(const Tensor& x, const Weight& w, const Tensor* b, Tensor out) override {
    ++ops;
    in_.linear(x, w, b, out);
  }
  void rope(Tensor x, const Tensor& pos, const Tensor& cs) override {
    ++ops;
    in_.rope(x, pos, cs);
  }
  void swiglu(const Tensor& g, const Tensor& u, Tensor out) override {
    ++ops;
    in_.swiglu(g, u, out);
  }
  void add(const Tensor& a, const Tensor& b, Tensor out) override {
    ++ops;
    in_.add(a, b, out);
  }
  void kv_store(const Tensor& k, const Tensor& v, const Tensor& s, Tensor kc, Tensor vc) override {
    ++ops;
    in_.kv_store(k, v, s, kc, vc);
  }
  void paged_attention(const Tensor& q, const Tensor& kc, const Tensor& vc, const AttentionBatch& b,
                       float scale, Tensor out) override {
    ++ops;
    in_.paged_attention(q, kc, vc, b, scale, out);
  }
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) override {
    ++ops;
    in_.gather_rows(x, rows, out);
  }
  void convert(const Tensor& src, Tensor dst) override {
    ++ops;
    in_.convert(src, dst);
  }
  void prefetch(std::span<const Tensor* const> next, int64_t rows) override {
    ++ops;
    in_.prefetch(next, rows);  // decode-sized: the graphs fork it off and join it back
  }
  Buffer alloc_host_pinned(size_t bytes) override { return in_.alloc_host_pinned(bytes); }
  void upload_async(Tensor dst, const void* src) override { in_.upload_async(dst, src); }
  void wait_uploads() override { in_.wait_uploads(); }
  bool supports_graphs() const override { return in_.supports_graphs(); }
  std::vector<int> decode_kv_bounds() const override { return in_.decode_kv_bounds(); }
  std::unique_ptr<StepGraph> capture(const std::function<void()>& body) override { return in_.capture(body); }

 private:
  Backend& in_;
};

// A Llama-style model (GQA 4:1, head_dim 64) small enough to decode many steps quickly.
ModelConfig small_llama() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.num_layers = 2;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 512;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 2048;
  return c;
}

std::vector<float> host_logits(Model& m, const ForwardBatch& b, KvCache& kv) {
  Tensor t = m.forward(b, kv).value();
  std::vector<float> out(size_t(t.numel()));
  m.backend().download(out.data(), t);
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr int kPageSize = 16, kMaxSeqs = 12, kMaxLen = 600;

// Two copies of one model on one GPU: `graphed` replays decode graphs, `eager` launches the same
// bucketed steps op by op; `plain` has no step limits (exact shapes, no buckets) as a sanity check
// of the padded steps' values (bf16 tolerance, not bits: its grids differ).
struct Pair {
  std::unique_ptr<Backend> gpu;
  std::unique_ptr<CountingBackend> counted;
  std::unique_ptr<Model> graphed, eager, plain;
  KvCache kv_graphed, kv_eager, kv_plain;
};

Pair make_pair(const std::filesystem::path& dir, int num_pages, int max_len = kMaxLen) {
  Pair p;
  p.gpu = make_backend(BackendOptions{Device::cuda, 0, 0}).value();
  p.counted = std::make_unique<CountingBackend>(*p.gpu);
  p.graphed = Model::load(dir, *p.counted).value();
  p.eager = Model::load(dir, *p.gpu).value();
  p.plain = Model::load(dir, *p.gpu).value();
  StepLimits l;
  l.max_seqs = kMaxSeqs;
  l.max_tokens = 256;
  l.max_model_len = max_len;
  l.page_size = kPageSize;
  REQUIRE(p.graphed->reserve_steps(l).ok());
  REQUIRE(p.eager->reserve_steps(l).ok());
  p.kv_graphed = p.graphed->allocate_kv(num_pages, kPageSize);
  p.kv_eager = p.eager->allocate_kv(num_pages, kPageSize);
  p.kv_plain = p.plain->allocate_kv(num_pages, kPageSize);
  // Buckets up to 12: 1, 2, 4, 8, 12; each per class of context length that the backend's bounds
  // cut below max_len.
  int classes = 1;
  for (int bound : p.gpu->decode_kv_bounds()) classes += bound <= max_len ? 1 : 0;
  CHECK(p.graphed->capture_decode_graphs(p.kv_graphed).value() == 5 * classes);
  return p;
}

struct Seq {
  std::vector<int32_t> ids;
  SeqPages pages;
  int64_t done = 0;  // tokens whose K/V are in the cache
};

// Runs one batch on the three models; the graphed and eager logits must agree bit for bit, and
// both match the plain model's within bf16 tolerance. Returns the greedy next token of each row.
std::vector<int32_t> step_all(Pair& p, const ForwardBatch& b, bool expect_graph, int64_t vocab) {
  const long ops0 = p.counted->ops;
  const std::vector<float> g = host_logits(*p.graphed, b, p.kv_graphed);
  const long ops = p.counted->ops - ops0;
  if (expect_graph)
    CHECK(ops == 0);
  else
    CHECK(ops > 0);
  const std::vector<float> e = host_logits(*p.eager, b, p.kv_eager);
  const std::vector<float> ref = host_logits(*p.plain, b, p.kv_plain);
  CHECK(bitwise_equal(g, e));
  CHECK(max_row_rel_error(g, std::vector<double>(ref.begin(), ref.end()), vocab) <= 1e-2);
  std::vector<int32_t> next;
  for (size_t r = 0; r * size_t(vocab) < g.size(); ++r) {
    const float* row = g.data() + r * size_t(vocab);
    next.push_back(int32_t(std::max_element(row, row + vocab) - row));
  }
  return next;
}

ForwardBatch decode_batch(std::vector<Seq>& seqs, const std::vector<size_t>& which) {
  std::vector<Chunk> chunks;
  for (size_t i : which) chunks.push_back({&seqs[i].ids, &seqs[i].pages, seqs[i].done, seqs[i].done + 1});
  return make_batch(chunks);
}

// One decode step of `which` through step_all (graphs against eager); each sequence's drawn token
// is the one it decodes next.
void decode_step(Pair& p, std::vector<Seq>& seqs, const std::vector<size_t>& which, int64_t V) {
  const std::vector<int32_t> next = step_all(p, decode_batch(seqs, which), true, V);
  for (size_t r = 0; r < which.size(); ++r) {
    seqs[which[r]].ids.push_back(next[r]);
    ++seqs[which[r]].done;
  }
}

}  // namespace

TEST_CASE("decode steps replayed from CUDA graphs equal eager steps bit for bit", "[gpu]") {
  if (!gpu::register_cuda_backend()) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("gpugraph");
  const ModelConfig cfg = small_llama();
  write_random_model(dir.path(), cfg, seed, DType::bf16);
  const int64_t V = cfg.vocab_size;
  const int num_pages = kMaxSeqs * ((kMaxLen + kPageSize - 1) / kPageSize) + 4;
  Pair p = make_pair(dir.path(), num_pages);

  // Twelve sequences with prompts of different lengths, prefilled eagerly in ragged batches.
  std::vector<Seq> seqs(kMaxSeqs);
  std::vector<int64_t> lengths;
  for (Seq& s : seqs) {
    s.ids = random_ids(rng, std::uniform_int_distribution<int64_t>(3, 300)(rng), V);
    lengths.push_back(kMaxLen);
  }
  const std::vector<SeqPages> pages = random_pages(lengths, kPageSize, num_pages, rng);
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i].pages = pages[i];
  auto prefill = [&](const std::vector<size_t>& which) {
    std::vector<Chunk> chunks;
    for (size_t i : which) chunks.push_back({&seqs[i].ids, &seqs[i].pages, 0, int64_t(seqs[i].ids.size())});
    const ForwardBatch b = make_batch(chunks);
    step_all(p, b, false, V);
    for (size_t i : which) seqs[i].done = int64_t(seqs[i].ids.size()) - 1;  // the last token decodes next
  };
  prefill({0, 1, 2});
  prefill({3, 4, 5, 6, 7});
  prefill({8, 9, 10, 11});

  // Decode at batch sizes 1, 3 (bucket 4), 4, 5 (bucket 8), 8 and 12, a few steps each, so each
  // graph replays at several context lengths; a mixed step (a prefill chunk beside decodes) runs
  // eagerly in between.
  const std::vector<std::vector<size_t>> groups = {{0},
                                                   {1, 2, 3},
                                                   {4, 5, 6, 7},
                                                   {8, 9, 10, 11, 0},
                                                   {1, 3, 5, 7, 9, 11, 2, 4},
                                                   {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  for (const auto& group : groups) {
    INFO("batch " << group.size());
    for (int step = 0; step < 3; ++step) decode_step(p, seqs, group, V);
    // Mixed: sequence group[0] takes two tokens at once (an extend chunk) beside the others' decodes.
    Seq& first = seqs[group[0]];
    first.ids.push_back(int32_t(rng() % uint64_t(V)));  // ids: done + 2 tokens, both stored now
    std::vector<Chunk> chunks{{&first.ids, &first.pages, first.done, first.done + 2}};
    for (size_t r = 1; r < group.size(); ++r) {
      Seq& s = seqs[group[r]];
      chunks.push_back({&s.ids, &s.pages, s.done, s.done + 1});
    }
    step_all(p, make_batch(chunks), false, V);
    first.done += 1;  // its last token decodes next (rewriting the same K/V)
    for (size_t r = 1; r < group.size(); ++r) {
      Seq& s = seqs[group[r]];
      s.ids.push_back(int32_t(rng() % uint64_t(V)));
      ++s.done;
    }
  }
}

// Decode graphs per class of context length (Backend::decode_kv_bounds): steps whose longest
// context is below each of the CUDA backend's bounds and from it on replay different graphs, each
// equal to the eager step bit for bit, as contexts grow across the bounds.
TEST_CASE("decode steps past the backend's context bounds replay their own graphs, equal to eager", "[gpu]") {
  if (!gpu::register_cuda_backend()) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("gpugraph_long");
  ModelConfig cfg = small_llama();
  cfg.max_position_embeddings = 4096;
  write_random_model(dir.path(), cfg, seed, DType::bf16);
  const int64_t V = cfg.vocab_size;
  const int max_len = 2600;
  const int num_pages = 6 * ((max_len + kPageSize - 1) / kPageSize) + 4;  // up to 6 sequences of max_len
  Pair p = make_pair(dir.path(), num_pages, max_len);
  const std::vector<int> bounds = p.gpu->decode_kv_bounds();
  REQUIRE(!bounds.empty());
  REQUIRE(bounds.size() <= 4);
  for (int bound : bounds) REQUIRE(bound < max_len - 64);

  // One sequence a bound starts 4 keys below it and crosses it during its decode steps; two more
  // stay short.
  const size_t nb = bounds.size();
  std::vector<Seq> seqs(nb + 2);
  for (size_t b = 0; b < nb; ++b) seqs[b].ids = random_ids(rng, bounds[b] - 4, V);
  seqs[nb].ids = random_ids(rng, std::uniform_int_distribution<int64_t>(3, 300)(rng), V);
  seqs[nb + 1].ids = random_ids(rng, std::uniform_int_distribution<int64_t>(3, 300)(rng), V);
  const std::vector<SeqPages> pages =
      random_pages(std::vector<int64_t>(seqs.size(), max_len), kPageSize, num_pages, rng);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].pages = pages[i];
    const int64_t n = int64_t(seqs[i].ids.size());
    for (int64_t at = 0; at < n; at += 256) {  // chunks within the reserved step of 256 tokens
      std::vector<Chunk> chunks{{&seqs[i].ids, &seqs[i].pages, at, std::min(n, at + 256)}};
      step_all(p, make_batch(chunks), false, V);
    }
    seqs[i].done = n - 1;
  }
  // The short ones alone (the shortest class), then with the sequences of the bounds up to b, the
  // longest first: its steps replay the class below bound b, then, once it reaches b, the next one.
  std::vector<std::vector<size_t>> groups{{nb, nb + 1}};
  for (size_t b = 0; b < nb; ++b) {
    std::vector<size_t> g;
    for (size_t c = b + 1; c-- > 0;) g.push_back(c);
    g.push_back(nb);
    g.push_back(nb + 1);
    groups.push_back(g);
  }
  for (const std::vector<size_t>& group : groups)
    for (int step = 0; step < 8; ++step) {
      INFO("batch " << group.size() << ", step " << step << ", longest context " << seqs[group[0]].done + 1);
      decode_step(p, seqs, group, V);
    }
  for (size_t b = 0; b < nb; ++b) CHECK(seqs[b].done + 1 > bounds[b]);
}

// Overlapped or not, the steps hold the same rows here (no stop ids, every prompt admitted in the
// first step), so the tokens must be the same bits; odd prompts draw with a seed at temperature 0.8.
TEST_CASE("the step loop's generations on cuda are the same with and without graphs, overlapped or not",
          "[gpu]") {
  if (!gpu::register_cuda_backend()) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("gpugraph_engine");
  const ModelConfig cfg = small_llama();
  write_random_model(dir.path(), cfg, seed, DType::bf16);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 7; ++i)
    prompts.push_back(random_ids(rng, std::uniform_int_distribution<int64_t>(2, 120)(rng), cfg.vocab_size));

  auto generate = [&](bool graphs, int overlap) {
    auto gpu = make_backend(BackendOptions{Device::cuda, 0, 0}).value();
    auto model = Model::load(dir.path(), *gpu).value();
    EngineOptions o;
    o.max_pages = 512;
    o.max_batch_size = 16;
    o.max_model_len = 1024;
    o.cuda_graphs = graphs;
    o.overlap = overlap;
    auto loop = make_step_loop(std::move(gpu), std::move(model), o).value();
    loop->pause();  // the first step sees every request: the batches do not depend on thread timing
    std::vector<Stream> streams;
    for (size_t i = 0; i < prompts.size(); ++i) {
      Request r;
      r.prompt = prompts[i];
      r.max_tokens = 48;
      r.ignore_eos = true;
      r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
      r.sampling.seed = seed + i;
      streams.push_back(loop->submit(r).value());
    }
    loop->resume();
    std::vector<std::vector<int32_t>> out;
    for (Stream& s : streams) {
      std::vector<int32_t> got;
      TokenEvent ev;
      while (s.wait(ev))
        if (ev.token >= 0) got.push_back(ev.token);
      CHECK(got.size() == 48);
      out.push_back(got);
    }
    loop->shutdown();
    return out;
  };
  const auto plain = generate(true, 0);
  CHECK(generate(false, 0) == plain);
  CHECK(generate(true, 1) == plain);
  CHECK(generate(false, 1) == plain);
}

}  // namespace astrai::test
