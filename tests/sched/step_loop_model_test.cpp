// The engine over the real decoder (tiny preset and a Qwen3-style tiny config) on the CPU.
#include <catch2/catch.hpp>
#include <random>
#include <tuple>

#include "step_loop_fixture.h"
#include "tools/model_dirs.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

std::vector<std::vector<int32_t>> random_prompts(std::mt19937_64& rng, int count, int vocab_used) {
  // Half share a 24-token prefix (prefix-cache hits), lengths mixed.
  std::vector<int32_t> prefix;
  for (int i = 0; i < 24; ++i) prefix.push_back(int32_t(rng() % vocab_used));
  std::vector<std::vector<int32_t>> v;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> p;
    if (i % 2 == 0) p = prefix;
    for (int j = 0, n = 1 + int(rng() % 40); j < n; ++j) p.push_back(int32_t(rng() % vocab_used));
    v.push_back(std::move(p));
  }
  return v;
}

Request greedy_request(const std::vector<int32_t>& prompt, int max_tokens) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

struct Cfg {
  bool cache;
  int budget;
};

// Every request's greedy output, alone and batched with 31 others under each configuration, equals
// the argmax of repeated full forwards (no KV-cache reuse): batch composition, chunking and prefix
// reuse change nothing.
void check_greedy_matrix(const std::string& which, const std::vector<Cfg>& cfgs, uint64_t seed, int overlap) {
  INFO("model " << which << ", seed " << seed);
  std::mt19937_64 rng(seed);
  const auto dir = model_dir(which);
  auto ref = load_model(dir);
  auto prompts = random_prompts(rng, 32, 256);
  const int max_tokens = 8;
  std::vector<std::vector<int32_t>> expect;
  for (auto& p : prompts) expect.push_back(full_forward_greedy(*ref.model, p, max_tokens));
  for (Cfg cfg : cfgs) {
    INFO("prefix cache " << cfg.cache << ", max_prefill_tokens " << cfg.budget);
    EngineOptions o;
    o.page_size = 16;
    o.max_pages = 512;
    o.prefix_cache = cfg.cache;
    o.max_prefill_tokens = cfg.budget;
    o.overlap = overlap;
    auto loop = make_loop(dir, o);
    // Alone.
    CHECK(collect(loop->submit(greedy_request(prompts[0], max_tokens)).value()).tokens[0] == expect[0]);
    // Batched with the 31 others.
    std::vector<Stream> streams;
    for (auto& p : prompts) streams.push_back(loop->submit(greedy_request(p, max_tokens)).value());
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("request " << i);
      CHECK(collect(streams[i]).tokens[0] == expect[i]);
    }
    REQUIRE(loop->check_invariants().ok());
    if (cfg.cache) CHECK(loop->stats().prefix_hit_rate > 0);
  }
}

}  // namespace

TEST_CASE("greedy output is the argmax of repeated full forwards, alone or batched, cache on or off",
          "[integration]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  check_greedy_matrix("tiny", {{true, 7}, {false, 0}}, seed, overlap);
  check_greedy_matrix("qwen3-tiny", {{true, 64}, {false, 7}}, seed, overlap);
}

TEST_CASE("greedy output is identical for chunk budgets 1, 7, 64 and unlimited, cache on and off", "[slow]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  std::vector<Cfg> all;
  for (bool cache : {true, false})
    for (int budget : {1, 7, 64, 0}) all.push_back({cache, budget});
  check_greedy_matrix("tiny", all, seed, overlap);
  check_greedy_matrix("qwen3-tiny", all, seed, overlap);
}

TEST_CASE("seeded sampling on the real model is the same alone and batched", "[integration]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const auto dir = model_dir("qwen3-tiny");
  auto prompts = random_prompts(rng, 16, 256);
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 16;
  o.max_pages = 512;
  o.max_prefill_tokens = 32;
  auto loop = make_loop(dir, o);
  auto req = [&](const std::vector<int32_t>& p, uint64_t s) {
    Request r;
    r.prompt = p;
    r.max_tokens = 12;
    r.ignore_eos = true;
    r.n = 2;
    r.sampling.temperature = 1.5f;  // a near-uniform random model: keep the draws diverse
    r.sampling.top_p = 0.95f;
    r.sampling.seed = s;
    return r;
  };
  const uint64_t s0 = rng();
  auto alone = collect(loop->submit(req(prompts[0], s0)).value(), 2);
  std::vector<Stream> streams;
  for (size_t i = 0; i < prompts.size(); ++i)
    streams.push_back(loop->submit(req(prompts[i], i ? rng() : s0)).value());
  auto batched = collect(streams[0], 2);
  for (size_t i = 1; i < streams.size(); ++i) collect(streams[i], 2);
  CHECK(batched.tokens == alone.tokens);
  CHECK(alone.tokens[0] != alone.tokens[1]);  // the choices draw differently
  // A different seed gives a different text (12 draws at temperature 1.5 over 320 tokens).
  auto other = collect(loop->submit(req(prompts[0], s0 + 1)).value(), 2);
  CHECK(other.tokens != alone.tokens);
}

// The promise behind seeded sampling on the CPU (docs/architecture.md, "Sampling"): a request's
// logits, and so its draws and logprobs, have the same bits whatever else happens in the engine.
// One seeded request is run alone on a fresh engine (the reference), then again on engines that
// batch it differently on purpose: a prefix-cache hit (only the prompt's tail is computed), other
// requests in the same steps (pause() queues them all before the first step, so the batching does
// not depend on thread timing), prefill chunks of 7 tokens, and 2 threads. Tokens and the sampled
// tokens' logprobs must be equal bit for bit: a last-bit difference in the logits shows in the
// logprob even where the draw survives it.
TEST_CASE(
    "a seeded request's tokens and logprobs are bit-identical alone, batched, on a cache hit, "
    "in any chunking and at any thread count",
    "[integration][threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const auto dir = model_dir("qwen3-tiny");
  auto prompts = random_prompts(rng, 8, 256);
  std::vector<int32_t> mine;
  for (int i = 0; i < 45; ++i) mine.push_back(int32_t(rng() % 256));  // 2 full pages and a tail
  auto req = [&](const std::vector<int32_t>& p, uint64_t s) {
    Request r;
    r.prompt = p;
    r.max_tokens = 12;
    r.ignore_eos = true;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = s;
    r.sampling.logprobs = true;
    return r;
  };
  const uint64_t my_seed = rng();
  auto loop_with = [&](bool cache, int budget, int threads, int overlap = 0) {
    EngineOptions o;
    o.overlap = overlap;
    o.page_size = 16;
    o.max_pages = 512;
    o.prefix_cache = cache;
    o.max_prefill_tokens = budget;
    BackendOptions bo;
    bo.threads = threads;
    auto be = make_backend(bo).value();
    auto model = Model::load(dir, *be).value();
    return make_step_loop(std::move(be), std::move(model), o).value();
  };
  const Outcome ref = collect(loop_with(false, 0, 1)->submit(req(mine, my_seed)).value());
  REQUIRE(ref.tokens[0].size() == 12);
  auto same_as_ref = [&](const Outcome& got) {
    CHECK(got.tokens == ref.tokens);
    CHECK(got.logprobs == ref.logprobs);  // float ==: equal bits for these finite values
  };

  SECTION("a prefix-cache hit computes only the tail") {
    auto loop = loop_with(true, 0, 1);
    same_as_ref(collect(loop->submit(req(mine, my_seed)).value()));
    same_as_ref(collect(loop->submit(req(mine, my_seed)).value()));
    CHECK(loop->stats().prefix_hit_rate > 0);
  }
  SECTION("beside other requests, prefill chunked by 7 and by 16, one and two threads, overlapped or not") {
    for (auto [budget, threads, overlap] : {std::tuple{7, 1, 0}, std::tuple{16, 2, 0}, std::tuple{7, 1, 1}}) {
      INFO("max_prefill_tokens " << budget << ", threads " << threads << ", overlap " << overlap);
      auto loop = loop_with(true, budget, threads, overlap);
      loop->pause();
      std::vector<Stream> others;
      for (size_t i = 0; i < prompts.size(); ++i) {
        others.push_back(loop->submit(req(prompts[i], rng())).value());
        if (i == 2) others.push_back(loop->submit(req(mine, my_seed)).value());  // mid-queue
      }
      loop->resume();
      for (size_t i = 0; i < others.size(); ++i) {
        const Outcome o = collect(others[i]);
        if (i == 3) same_as_ref(o);
      }
    }
  }
}
