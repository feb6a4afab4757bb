// StepLoop::flush_prefix_cache (the engine side of POST /flush_cache): every cached page no running
// sequence uses goes back to the pool, what a running sequence uses stays, and the engine keeps
// producing the reference output afterwards.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <random>

#include "step_loop_fixture.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

Request greedy(const std::vector<int32_t>& prompt, int max_tokens) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

std::vector<int32_t> random_prompt(std::mt19937_64& rng, int vocab, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t(rng() % vocab));
  return p;
}

}  // namespace

TEST_CASE("flushing the prefix cache of an idle engine returns every page to the pool", "[integration]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 50;
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 200;
  auto fl = make_fake_loop(o, {vocab, 4096, {}});
  const auto shared = random_prompt(rng, vocab, 17);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    auto p = shared;
    const auto tail = random_prompt(rng, vocab, 1 + int(rng() % 20));
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  for (const auto& p : prompts) collect(fl.loop->submit(greedy(p, 9)).value());
  auto before = fl.loop->stats();
  REQUIRE(before.prefix_cached_pages >= 4);  // at least the shared prefix's 4 full pages
  REQUIRE(before.kv_pages_used == before.prefix_cached_pages);

  CHECK(fl.loop->flush_prefix_cache() == int(before.prefix_cached_pages));
  auto after = fl.loop->stats();  // the gauges are current when the flush returns
  CHECK(after.prefix_cached_pages == 0);
  CHECK(after.kv_pages_used == 0);
  REQUIRE(fl.loop->check_invariants().ok());
  CHECK(fl.loop->flush_prefix_cache() == 0);  // nothing left to flush

  // The engine still decodes as before and fills the cache again.
  for (const auto& p : prompts) {
    auto out = collect(fl.loop->submit(greedy(p, 9)).value());
    CHECK(out.tokens[0] == fake_greedy(p, vocab, 9, {}));
  }
  CHECK(fl.loop->stats().prefix_cached_pages > 0);
  REQUIRE(fl.loop->check_invariants().ok());

  // After shutdown the flush runs on the caller's thread.
  fl.loop->shutdown();
  CHECK(fl.loop->flush_prefix_cache() > 0);
  CHECK(fl.loop->stats().kv_pages_used == 0);
}

TEST_CASE("flushing the prefix cache keeps the pages a running request uses", "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 50;
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 200;
  auto fl = make_fake_loop(o, {vocab, 4096, {}});
  // A finishes and leaves its 3 full prompt pages (and more) cached.
  const auto a = random_prompt(rng, vocab, 12);
  collect(fl.loop->submit(greedy(a, 5)).value());
  const int cached_a = int(fl.loop->stats().prefix_cached_pages);
  REQUIRE(cached_a >= 3);

  // B runs: the loop thread itself holds the loop after the step that gave B its first token
  // (notify runs on it after delivery, and the pause is taken before any further step), so B is
  // running, with its prompt's pages, during the flush whatever the thread timing.
  const auto b = random_prompt(rng, vocab, 10);
  Request rb = greedy(b, 40);
  auto paused = std::make_shared<std::atomic<bool>>(false);
  StepLoop* loop = fl.loop.get();
  rb.notify = [paused, loop] {
    if (!paused->exchange(true)) loop->pause();
  };
  Stream sb = fl.loop->submit(std::move(rb)).value();
  TokenEvent first;
  REQUIRE(sb.wait(first));
  REQUIRE(first.token >= 0);
  const int freed = fl.loop->flush_prefix_cache();
  const auto during = fl.loop->stats();
  // A's pages are free to go (A and B share no full page unless their first 4 tokens agree).
  if (!std::equal(a.begin(), a.begin() + 4, b.begin())) CHECK(freed >= cached_a);
  CHECK(during.kv_pages_used >= 3);  // B's 10 prompt tokens and its first token: 3 pages at least
  REQUIRE(fl.loop->check_invariants().ok());
  fl.loop->resume();

  auto rest = collect(sb);
  std::vector<int32_t> tokens = {first.token};
  tokens.insert(tokens.end(), rest.tokens[0].begin(), rest.tokens[0].end());
  CHECK(tokens == fake_greedy(b, vocab, 40, {}));

  fl.loop->flush_prefix_cache();
  CHECK(fl.loop->stats().kv_pages_used == 0);
  CHECK(fl.loop->stats().prefix_cached_pages == 0);
  REQUIRE(fl.loop->check_invariants().ok());
}
