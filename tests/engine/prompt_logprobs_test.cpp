// Request::prompt_logprobs through the engine: every prompt token's logprob (after the first) and
// its most likely alternatives, checked against log_softmax of one full forward of the prompt
// (float64 on the host), whatever the chunking, the logit rows a step may hold, the prefix cache
// and n; the generation after it is unchanged.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>

#include "src/engine/engine.h"
#include "tools/model_dirs.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

struct PromptRef {
  std::vector<double> logprob;                // [P - 1]: token p + 1 under row p
  std::vector<std::vector<int32_t>> top_ids;  // [P - 1][k]: (logit desc, id asc)
  std::vector<std::vector<double>> top_lp;
};

PromptRef reference(Model& model, const std::vector<int32_t>& prompt, int k) {
  const int ps = 16, L = int(prompt.size());
  const int64_t V = model.config().vocab_size;
  KvCache kv = model.allocate_kv((L + ps - 1) / ps, ps);
  std::vector<int32_t> pages(size_t((L + ps - 1) / ps));
  std::iota(pages.begin(), pages.end(), 0);
  ForwardBatchBuilder b(ps);
  b.add_sequence(prompt, 0, L, pages, LogitRows::all);
  Tensor logits = model.forward(b.finish(), kv).value();
  REQUIRE(logits.device == Device::cpu);
  PromptRef ref;
  for (int p = 0; p + 1 < L; ++p) {
    const float* row = logits.ptr<float>() + size_t(p) * size_t(V);
    double m = -INFINITY, z = 0;
    for (int64_t t = 0; t < V; ++t) m = std::max(m, double(row[t]));
    for (int64_t t = 0; t < V; ++t) z += std::exp(double(row[t]) - m);
    const double lse = m + std::log(z);
    ref.logprob.push_back(double(row[prompt[size_t(p) + 1]]) - lse);
    std::vector<int32_t> ids(static_cast<size_t>(V));
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t c) { return row[a] > row[c]; });
    ids.resize(size_t(k));
    std::vector<double> lps;
    for (int32_t id : ids) lps.push_back(double(row[id]) - lse);
    ref.top_ids.push_back(ids);
    ref.top_lp.push_back(lps);
  }
  return ref;
}

struct Got {
  std::vector<TokenEvent> prompt;               // prompt events, in order
  std::vector<std::vector<int32_t>> generated;  // per choice
  bool prompt_after_generated = false;          // a prompt event came after a generated token
};

Got collect(Stream& s, int n) {
  Got g;
  g.generated.resize(size_t(n));
  bool any_generated = false;
  TokenEvent ev;
  while (s.wait(ev)) {
    if (ev.prompt) {
      g.prompt_after_generated = g.prompt_after_generated || any_generated;
      g.prompt.push_back(ev);
      continue;
    }
    if (ev.token >= 0) {
      any_generated = true;
      g.generated[size_t(ev.choice)].push_back(ev.token);
    }
  }
  return g;
}

void check_prompt(const Got& g, const std::vector<int32_t>& prompt, const PromptRef& ref, int k) {
  REQUIRE(g.prompt.size() == prompt.size() - 1);
  CHECK_FALSE(g.prompt_after_generated);
  for (size_t i = 0; i < g.prompt.size(); ++i) {
    INFO("prompt token " << i + 1);
    const TokenEvent& e = g.prompt[i];
    CHECK(e.token == prompt[i + 1]);
    CHECK(e.choice == 0);
    CHECK(e.finish == FinishReason::none);
    CHECK(std::abs(double(e.logprob) - ref.logprob[i]) < 1e-4);
    REQUIRE(e.top.size() == size_t(k));
    for (int j = 0; j < k; ++j) {
      CHECK(e.top[size_t(j)].token == ref.top_ids[i][size_t(j)]);
      CHECK(std::abs(double(e.top[size_t(j)].logprob) - ref.top_lp[i][size_t(j)]) < 1e-4);
    }
  }
}

Request prompt_request(const std::vector<int32_t>& prompt, int k, int n = 1) {
  Request r;
  r.prompt = prompt;
  r.prompt_logprobs = k;
  r.max_tokens = 4;
  r.n = n;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

}  // namespace

TEST_CASE("prompt logprobs equal log_softmax of a full forward, over chunks and a small logit budget",
          "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const auto dir = model_dir("tiny");
  auto ref_model = load_model(dir);
  const int V = int(ref_model.model->config().vocab_size);
  auto random_prompt = [&](int lo, int hi) {
    std::vector<int32_t> p(size_t(std::uniform_int_distribution<int>(lo, hi)(rng)));
    for (auto& t : p) t = int32_t(rng() % uint64_t(V));
    return p;
  };
  // max_batch_size 8: a step holds 8 logit rows, so the prompts' chunks are trimmed to what the
  // other sequences leave; max_prefill_tokens 16 chunks them anyway.
  // Overlapped steps (1) plan the next step before this one's draws are read; 0 reads them first.
  struct Setting {
    int batch, prefill, overlap;
  };
  for (const Setting& st :
       {Setting{8, 16, 1}, Setting{256, 2048, 0}, Setting{8, 2048, 0}, Setting{256, 16, 1}}) {
    INFO("max_batch_size " << st.batch << ", max_prefill_tokens " << st.prefill << ", overlap "
                           << st.overlap);
    EngineOptions o;
    o.max_pages = 128;
    o.max_batch_size = st.batch;
    o.max_prefill_tokens = st.prefill;
    o.overlap = st.overlap;
    auto lm = load_model(dir);
    auto engine = Engine::create(std::move(lm.backend), std::move(lm.model), o).value();
    const auto a = random_prompt(40, 90), b = random_prompt(20, 60), c = random_prompt(2, 5);
    // Three at once: two with prompt logprobs (3 and 0 alternatives) beside a plain request.
    Stream sa = engine->submit(prompt_request(a, 3)).value();
    Request plain = prompt_request(c, -1);
    Stream sc = engine->submit(plain).value();
    Stream sb = engine->submit(prompt_request(b, 0)).value();
    const Got ga = collect(sa, 1), gb = collect(sb, 1), gc = collect(sc, 1);
    check_prompt(ga, a, reference(*ref_model.model, a, 3), 3);
    check_prompt(gb, b, reference(*ref_model.model, b, 0), 0);
    CHECK(gc.prompt.empty());
    CHECK(ga.generated[0] == full_forward_greedy(*ref_model.model, a, 4));
    CHECK(gb.generated[0] == full_forward_greedy(*ref_model.model, b, 4));
    CHECK(gc.generated[0] == full_forward_greedy(*ref_model.model, c, 4));
    REQUIRE(engine->check_invariants().ok());
  }
}

TEST_CASE("prompt logprobs: a cached prefix is computed again, n choices get them once, bad values fail",
          "[integration]") {
  const auto dir = model_dir("tiny");
  auto ref_model = load_model(dir);
  EngineOptions o;
  o.max_pages = 128;
  auto lm = load_model(dir);
  auto engine = Engine::create(std::move(lm.backend), std::move(lm.model), o).value();
  std::vector<int32_t> prompt(70);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % 250);
  const PromptRef ref = reference(*ref_model.model, prompt, 2);
  // The first request leaves the prompt's pages in the prefix cache; the second must not reuse them.
  Stream warm = engine->submit(prompt_request(prompt, -1)).value();
  CHECK(collect(warm, 1).prompt.empty());
  Stream s = engine->submit(prompt_request(prompt, 2, 3)).value();
  const Got g = collect(s, 3);
  check_prompt(g, prompt, ref, 2);
  const auto greedy = full_forward_greedy(*ref_model.model, prompt, 4);
  for (const auto& choice : g.generated) CHECK(choice == greedy);
  CHECK(engine->stats().prefix_cached_pages > 0);  // the warm-up's pages were there to reuse
  REQUIRE(engine->check_invariants().ok());

  Request bad = prompt_request(prompt, kMaxTopLogprobs + 1);
  CHECK(engine->submit(bad).status().code() == ErrorCode::invalid_argument);
  bad.prompt_logprobs = -2;
  CHECK(engine->submit(bad).status().code() == ErrorCode::invalid_argument);
}
