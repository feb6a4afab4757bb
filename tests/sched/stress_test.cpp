// 10,000 randomized requests from several threads, 30% cancelled mid-stream, a KV pool small enough
// to force preemption (and five long requests that make sure it does): every request that was not
// cancelled finishes with exactly its tokens, and afterwards every page is free or held by the
// prefix cache.
#include <atomic>
#include <catch2/catch.hpp>
#include <mutex>
#include <random>
#include <thread>

#include "step_loop_fixture.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

struct Live {
  Stream stream;
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  int n = 1;
  int cancel_after = -1;  // cancel once this many events arrived (-1: never)
  std::vector<std::vector<int32_t>> got;
  int finished = 0;
  bool cancel_sent = false;
  int events = 0;
};

void run_stress(int total, int threads, bool prefix_cache, uint64_t seed, int overlap) {
  const int vocab = 40;
  EngineOptions o;
  o.page_size = 4;
  o.max_pages = 48;  // a request needs up to 11 pages; 32 running at once cannot fit
  o.max_batch_size = 32;
  o.max_queue = 4096;
  o.max_prefill_tokens = 24;
  o.prefix_cache = prefix_cache;
  o.overlap = overlap;
  o.stream_capacity = 8;
  auto fl = make_fake_loop(o, {vocab, 4096, {}});
  std::vector<std::vector<int32_t>> prefixes(4);
  std::mt19937_64 prng(seed);
  for (auto& p : prefixes)
    for (int i = 0; i < 8; ++i) p.push_back(int32_t(prng() % vocab));

  std::atomic<int> failures{0}, cancelled_seen{0}, completed{0};
  std::mutex report_mu;
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    std::lock_guard g(report_mu);
    if (failures++ == 0) first_failure = what;
  };
  auto worker = [&](int w) {
    std::mt19937_64 rng(seed + uint64_t(w) * 7919);
    const int mine = total / threads + (w < total % threads ? 1 : 0);
    int submitted = 0;
    std::vector<std::unique_ptr<Live>> live;
    while (submitted < mine || !live.empty()) {
      while (submitted < mine && live.size() < 64) {
        auto l = std::make_unique<Live>();
        if (rng() % 2) l->prompt = prefixes[rng() % prefixes.size()];
        for (int i = 0, k = 1 + int(rng() % 12); i < k; ++i) l->prompt.push_back(int32_t(rng() % vocab));
        l->max_tokens = 1 + int(rng() % 20);
        l->n = rng() % 10 == 0 ? 2 : 1;
        if (rng() % 10 < 3) l->cancel_after = int(rng() % uint64_t(l->max_tokens));
        Request r;
        r.prompt = l->prompt;
        r.max_tokens = l->max_tokens;
        r.n = l->n;
        r.ignore_eos = true;
        r.sampling.temperature = 0;
        auto s = fl.loop->submit(r);
        if (!s.ok()) {
          fail("submit: " + s.status().message());
          ++submitted;
          continue;
        }
        l->stream = s.value();
        l->got.resize(size_t(l->n));
        live.push_back(std::move(l));
        ++submitted;
      }
      for (size_t k = 0; k < live.size();) {
        Live& l = *live[k];
        TokenEvent ev;
        while (l.stream.poll(ev)) {
          ++l.events;
          if (ev.token >= 0) l.got[size_t(ev.choice)].push_back(ev.token);
          if (ev.finish != FinishReason::none) {
            ++l.finished;
            if (ev.finish == FinishReason::cancelled) {
              ++cancelled_seen;
              if (l.cancel_after < 0) fail("a request that was never cancelled finished as cancelled");
            } else if (ev.finish != FinishReason::length) {
              fail(std::string("unexpected finish ") + finish_reason_name(ev.finish));
            } else if (int(l.got[size_t(ev.choice)].size()) != l.max_tokens) {
              fail("finished with " + std::to_string(l.got[size_t(ev.choice)].size()) + " of " +
                   std::to_string(l.max_tokens) + " tokens");
            }
          }
        }
        if (!l.cancel_sent && l.cancel_after >= 0 && l.events >= l.cancel_after) {
          fl.loop->cancel(l.stream.id());
          l.cancel_sent = true;
        }
        if (l.stream.done()) {
          const auto expect = fake_greedy(l.prompt, vocab, l.max_tokens, {});
          for (const auto& g : l.got)
            if (!std::equal(g.begin(), g.end(), expect.begin()))
              fail("tokens differ from the reference decode");
          ++completed;
          live[k] = std::move(live.back());
          live.pop_back();
        } else {
          ++k;
        }
      }
      std::this_thread::yield();
    }
  };
  // Five anchor requests queued before the first step make the run preempt whatever the threads
  // do. Their prompts (8 tokens, distinct first tokens: no shared pages) are first in line, so
  // step 1 computes anchors 0-2 (24 budget tokens) and step 2 anchors 3-4. None finishes before
  // step 40 (40 tokens each), so without preemption each holds >= ceil((8 + 37) / 4) = 12 pages
  // of its own by step 39: 60 pages, but the pool has 48.
  const int anchors = 5, anchor_tokens = 40;
  std::vector<std::vector<int32_t>> anchor_prompts;
  std::vector<Stream> anchor_streams;
  fl.loop->pause();
  for (int a = 0; a < anchors; ++a) {
    Request r;
    r.prompt.push_back(int32_t(a));
    for (int i = 1; i < 8; ++i) r.prompt.push_back(int32_t(prng() % vocab));
    r.max_tokens = anchor_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    anchor_prompts.push_back(r.prompt);
    anchor_streams.push_back(fl.loop->submit(r).value());
  }
  fl.loop->resume();

  std::vector<std::thread> ts;
  for (int w = 0; w < threads; ++w) ts.emplace_back(worker, w);
  for (int a = 0; a < anchors; ++a) {
    INFO("anchor " << a);
    const auto out = collect(anchor_streams[size_t(a)]);
    CHECK(out.tokens[0] == fake_greedy(anchor_prompts[size_t(a)], vocab, anchor_tokens, {}));
    CHECK(out.finish[0] == FinishReason::length);
  }
  for (auto& t : ts) t.join();
  INFO("first failure: " << first_failure);
  CHECK(failures.load() == 0);
  CHECK(completed.load() == total);
  REQUIRE(fl.loop->check_invariants().ok());
  const auto st = fl.loop->stats();
  CHECK(st.finished + st.cancelled == uint64_t(total + anchors));
  CHECK(st.preemptions > 0);
  CHECK(st.kv_pages_used == st.prefix_cached_pages);
  CHECK(st.running == 0);
  CHECK(st.waiting == 0);
  fl.loop->shutdown();
  REQUIRE(fl.loop->check_invariants().ok());
}

}  // namespace

TEST_CASE("stress: 10,000 requests, 30% cancelled, preemption, no page leaks", "[slow]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  run_stress(10000, 4, true, seed, overlap);
  run_stress(2000, 2, false, seed + 1, overlap);
}

TEST_CASE("many threads submitting and cancelling at once keep the engine consistent",
          "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  run_stress(600, 4, true, seed, overlap);
}
