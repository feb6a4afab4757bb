// The engine over the fake model: every output is compared with a reference decode of the same
// logits, so scheduling mistakes (pages, chunks, prefix reuse, preemption, forks) show up.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <random>
#include <thread>

#include "step_loop_fixture.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

struct Spec {
  std::vector<int32_t> prompt;
  int max_tokens;
};

// 32 requests of mixed lengths; half of them share one of two prefixes (prefix-cache hits).
std::vector<Spec> mixed_requests(std::mt19937_64& rng, int vocab, int count = 32) {
  std::vector<std::vector<int32_t>> prefixes(2);
  for (auto& p : prefixes)
    for (int i = 0; i < 21; ++i) p.push_back(int32_t(rng() % vocab));
  std::vector<Spec> v;
  for (int i = 0; i < count; ++i) {
    Spec s;
    if (i % 2 == 0) s.prompt = prefixes[size_t(i / 2 % 2)];
    const int extra = 1 + int(rng() % 70);
    for (int j = 0; j < extra; ++j) s.prompt.push_back(int32_t(rng() % vocab));
    s.max_tokens = 1 + int(rng() % 30);
    v.push_back(std::move(s));
  }
  return v;
}

Request greedy(const Spec& s) {
  Request r;
  r.prompt = s.prompt;
  r.max_tokens = s.max_tokens;
  r.sampling.temperature = 0;
  return r;
}

}  // namespace

TEST_CASE("greedy output equals the reference decode alone, batched, cache on/off, any chunk budget",
          "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 50;
  const std::vector<int32_t> eos = {7};
  auto specs = mixed_requests(rng, vocab);
  std::vector<std::vector<int32_t>> expect;
  for (auto& s : specs) expect.push_back(fake_greedy(s.prompt, vocab, s.max_tokens, eos));

  // Events delivered after each step, and after the next step's launch (a GPU's default).
  for (auto [cache, deliver_after] : {std::pair{true, 0}, {false, 0}, {true, 1}, {false, 1}}) {
    for (int budget : {1, 7, 64, 0}) {
      INFO("prefix cache " << cache << ", max_prefill_tokens " << budget << ", deliver_after_launch "
                           << deliver_after);
      EngineOptions o;
      o.overlap = overlap;
      o.page_size = 4;
      o.max_pages = 2000;
      o.prefix_cache = cache;
      o.max_prefill_tokens = budget;
      o.deliver_after_launch = deliver_after;
      auto fl = make_fake_loop(o, {vocab, 4096, eos});
      // Alone: the first request by itself.
      {
        auto st = fl.loop->submit(greedy(specs[0]));
        REQUIRE(st.ok());
        CHECK(collect(st.value()).tokens[0] == expect[0]);
      }
      // Batched with the 31 others.
      std::vector<Stream> streams;
      for (auto& s : specs) streams.push_back(fl.loop->submit(greedy(s)).value());
      for (size_t i = 0; i < specs.size(); ++i) {
        INFO("request " << i);
        auto out = collect(streams[i]);
        CHECK(out.tokens[0] == expect[i]);
        const bool stopped = int(expect[i].size()) < specs[i].max_tokens;
        CHECK(out.finish[0] == (stopped ? FinishReason::stop : FinishReason::length));
      }
      REQUIRE(fl.loop->check_invariants().ok());
      auto st = fl.loop->stats();
      CHECK(st.finished == specs.size() + 1);
      CHECK(st.kv_pages_used == st.prefix_cached_pages);  // idle: only the cache holds pages
      if (cache) CHECK(st.prefix_hit_rate > 0);
      // Overlapped, decode rows took their tokens on the "device"; otherwise none did.
      CHECK((fl.model->moves_taken.load() > 0) == (overlap == 1));
    }
  }
}

TEST_CASE("a pool too small for the batch forces preemption and outputs stay exact",
          "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 50;
  for (auto [cache, deliver_after] : {std::pair{true, 0}, {false, 0}, {true, 1}, {false, 1}}) {
    INFO("prefix cache " << cache << ", deliver_after_launch " << deliver_after);
    EngineOptions o;
    o.overlap = overlap;
    o.page_size = 4;
    o.max_pages = 30;
    o.prefix_cache = cache;
    o.max_prefill_tokens = 16;
    o.deliver_after_launch = deliver_after;
    auto fl = make_fake_loop(o, {vocab, 4096, {}});
    // 16 requests of 5-14 prompt tokens and 25-34 output tokens; their first tokens differ, so no
    // two share a cached page.
    std::vector<Spec> specs;
    for (int i = 0; i < 16; ++i) {
      Spec s;
      s.prompt.push_back(int32_t(i));
      for (int j = 1, n = 5 + int(rng() % 10); j < n; ++j) s.prompt.push_back(int32_t(rng() % vocab));
      s.max_tokens = 25 + int(rng() % 10);
      specs.push_back(s);
    }
    // The loop waits until all 16 are queued, so every run plans the same steps, and they must
    // preempt. Suppose they did not. No request finishes before step 25 (its first token comes at
    // step >= 1, and it needs 24 more), so no page is freed, and no cached page is evictable (each
    // is locked by the running sequence that computed it). Step 1 prefills request 0 (<= 14 of the
    // 16 budget tokens) and admits request 1 with the rest. Each later step finishes at most one
    // carried-over prompt (<= 13 tokens left), so budget is left and it admits the next request
    // (pages permitting: by step 4 the first four hold <= 4 * 5 pages, leaving >= 10). So request
    // k <= 4 has its prompt computed by step k + 1 and decodes a token per step after it: by step
    // 24 it holds >= ceil((5 + 23 - k) / 4) pages, 7 + 7 + 7 + 7 + 6 = 34 in all, but the pool
    // has 30.
    fl.loop->pause();
    std::vector<Stream> streams;
    for (auto& s : specs) streams.push_back(fl.loop->submit(greedy(s)).value());
    fl.loop->resume();
    for (size_t i = 0; i < specs.size(); ++i) {
      auto out = collect(streams[i]);
      CHECK(out.tokens[0] == fake_greedy(specs[i].prompt, vocab, specs[i].max_tokens, {}));
      CHECK(out.finish[0] == FinishReason::length);
    }
    REQUIRE(fl.loop->check_invariants().ok());
    auto st = fl.loop->stats();
    CHECK(st.preemptions > 0);
    CHECK(st.kv_pages_used == st.prefix_cached_pages);
  }
}

TEST_CASE("seeded sampling is batch-invariant and matches the reference sampler", "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 50;
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 3000;
  o.max_prefill_tokens = 7;
  auto fl = make_fake_loop(o, {vocab, 4096, {}});
  auto specs = mixed_requests(rng, vocab, 24);
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 20;
  sp.top_p = 0.95f;
  auto req = [&](const Spec& s, uint64_t sd, int n) {
    Request r;
    r.prompt = s.prompt;
    r.max_tokens = s.max_tokens;
    r.sampling = sp;
    r.sampling.seed = sd;
    r.n = n;
    return r;
  };
  const uint64_t s0 = rng();
  auto alone = fl.loop->submit(req(specs[0], s0, 3)).value();
  auto out_alone = collect(alone, 3);
  std::vector<Stream> streams;
  std::vector<uint64_t> seeds;
  for (auto& s : specs) {
    seeds.push_back(streams.empty() ? s0 : rng());
    streams.push_back(fl.loop->submit(req(s, seeds.back(), 3)).value());
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    auto out = collect(streams[i], 3);
    for (int c = 0; c < 3; ++c) {
      INFO("request " << i << " choice " << c);
      CHECK(out.tokens[size_t(c)] ==
            fake_sampled(specs[i].prompt, vocab, sp, seeds[i], c, specs[i].max_tokens));
    }
    if (i == 0) CHECK(out.tokens == out_alone.tokens);
  }
  REQUIRE(fl.loop->check_invariants().ok());
}

TEST_CASE("n choices share the prompt's pages and each decodes exactly", "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 50;
  for (bool cache : {true, false}) {
    EngineOptions o;
    o.overlap = overlap;
    o.page_size = 4;
    o.max_pages = 40;
    o.prefix_cache = cache;
    auto fl = make_fake_loop(o, {vocab, 4096, {}});
    Request r;
    for (int i = 0; i < 30; ++i) r.prompt.push_back(int32_t(rng() % vocab));  // 7 full pages + 2
    r.max_tokens = 6;
    r.n = 4;
    r.sampling.temperature = 0;
    // 4 private copies would need 4 * 10 pages; sharing the 7 full prompt pages needs 7 + 4 * 3.
    auto out = collect(fl.loop->submit(r).value(), 4);
    const auto expect = fake_greedy(r.prompt, vocab, 6, {});
    for (int c = 0; c < 4; ++c) CHECK(out.tokens[size_t(c)] == expect);
    CHECK(fl.loop->stats().preemptions == 0);
    REQUIRE(fl.loop->check_invariants().ok());
  }
}

TEST_CASE("stop ids end a choice with stop; ignore_eos skips the model's eos only",
          "[integration][threads]") {
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
  std::vector<int32_t> prompt;
  for (int i = 0; i < 9; ++i) prompt.push_back(int32_t(rng() % vocab));
  const auto free_run = fake_greedy(prompt, vocab, 40, {});
  const int32_t model_eos = free_run[5], req_stop = free_run[12];
  auto fl = make_fake_loop(o, {vocab, 4096, {model_eos}});
  Request r;
  r.prompt = prompt;
  r.max_tokens = 40;
  r.sampling.temperature = 0;
  auto a = collect(fl.loop->submit(r).value());
  CHECK(a.finish[0] == FinishReason::stop);
  CHECK(a.tokens[0] == fake_greedy(prompt, vocab, 40, {model_eos}));
  r.ignore_eos = true;
  r.stop_ids = {req_stop};
  auto b = collect(fl.loop->submit(r).value());
  CHECK(b.finish[0] == FinishReason::stop);
  CHECK(b.tokens[0] == fake_greedy(prompt, vocab, 40, {req_stop}));
  r.stop_ids.clear();
  auto c = collect(fl.loop->submit(r).value());
  CHECK(c.finish[0] == FinishReason::length);
  CHECK(c.tokens[0] == free_run);
}

TEST_CASE("min_tokens: no stop id is drawn before a choice has that many tokens", "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int vocab = 50;
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 400;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 9; ++i) prompt.push_back(int32_t(rng() % vocab));
  const auto free_run = fake_greedy(prompt, vocab, 40, {});
  const int32_t model_eos = free_run[2], req_stop = free_run[5];
  auto fl = make_fake_loop(o, {vocab, 4096, {model_eos}});
  Request r;
  r.prompt = prompt;
  r.max_tokens = 40;
  r.sampling.temperature = 0;
  r.stop_ids = {req_stop};
  for (int m : {0, 3, 7, 40}) {
    INFO("min_tokens " << m);
    r.sampling.min_tokens = m;
    auto out = collect(fl.loop->submit(r).value());
    bool stopped = false;
    CHECK(out.tokens[0] == fake_greedy(prompt, vocab, 40, {model_eos, req_stop}, &stopped, m));
    CHECK(out.finish[0] == (stopped ? FinishReason::stop : FinishReason::length));
    CHECK(int(out.tokens[0].size()) >= m);
  }
  // ignore_eos: the model's eos is an ordinary token, the request's stop id still waits.
  r.ignore_eos = true;
  r.sampling.min_tokens = 6;
  auto ig = collect(fl.loop->submit(r).value());
  CHECK(ig.tokens[0] == fake_greedy(prompt, vocab, 40, {req_stop}, nullptr, 6));

  // Sampled choices (n = 3): with half the vocabulary as stop ids a choice would end within a few
  // tokens; none draws one before its min_tokens.
  Request s;
  s.prompt = prompt;
  s.max_tokens = 30;
  s.n = 3;
  s.sampling.temperature = 1;
  s.sampling.seed = rng();
  for (int32_t t = 0; t < vocab; t += 2) s.stop_ids.push_back(t);
  s.sampling.min_tokens = 10;
  auto samp = collect(fl.loop->submit(s).value(), 3);
  for (int c = 0; c < 3; ++c) {
    INFO("choice " << c);
    CHECK(samp.tokens[size_t(c)].size() >= 10);
  }
}

TEST_CASE("the context length ends generation with length", "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 100;
  o.max_model_len = 20;
  auto fl = make_fake_loop(o, {50, 64, {}});
  Request r;
  r.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  r.max_tokens = 100;
  r.sampling.temperature = 0;
  auto out = collect(fl.loop->submit(r).value());
  CHECK(out.finish[0] == FinishReason::length);
  CHECK(out.tokens[0].size() == 8);  // 12 + 8 = 20 tokens
  CHECK(out.tokens[0] == fake_greedy(r.prompt, 50, 8, {}));
}

TEST_CASE("bad requests fail fast at submit with invalid_argument", "[integration][threads]") {
  EngineOptions o;
  o.page_size = 4;
  o.max_pages = 10;
  o.max_model_len = 64;
  auto fl = make_fake_loop(o, {50, 64, {}});
  auto code = [&](Request r) { return fl.loop->submit(std::move(r)).status().code(); };
  Request ok;
  ok.prompt = {1, 2, 3};
  Request r = ok;
  r.prompt.clear();
  CHECK(code(r) == ErrorCode::invalid_argument);
  r = ok;
  r.prompt.assign(64, 1);  // no room for output in the context
  CHECK(code(r) == ErrorCode::invalid_argument);
  r = ok;
  r.prompt.assign(45, 1);  // fits the context but needs 12 of the 10 pages: can never fit
  auto st = fl.loop->submit(r);
  REQUIRE_FALSE(st.ok());
  CHECK(st.status().code() == ErrorCode::invalid_argument);
  CHECK(st.status().message().find("KV pages") != std::string::npos);
  r = ok;
  r.prompt = {1, 50};
  CHECK(code(r) == ErrorCode::invalid_argument);
  r = ok;
  r.sampling.top_p = 0;
  CHECK(code(r) == ErrorCode::invalid_argument);
  r = ok;
  r.sampling.temperature = -1;
  CHECK(code(r) == ErrorCode::invalid_argument);
  r = ok;
  r.n = 0;
  CHECK(code(r) == ErrorCode::invalid_argument);
  r = ok;
  r.max_tokens = 0;
  CHECK(code(r) == ErrorCode::invalid_argument);
  r = ok;
  r.sampling.top_logprobs = 21;
  CHECK(code(r) == ErrorCode::invalid_argument);
  fl.loop->cancel(987654);  // unknown id: harmless
  r = ok;
  r.max_tokens = 3;
  CHECK(collect(fl.loop->submit(r).value()).tokens[0].size() == 3);
}

TEST_CASE("a full waiting queue rejects submits with resource_exhausted", "[integration][threads]") {
  EngineOptions o;
  o.page_size = 4;
  o.max_pages = 2000;
  o.max_queue = 4;
  o.max_batch_size = 1;  // one runs, the others wait
  auto fl = make_fake_loop(o, {50, 4096, {}});
  fl.model->delay_us = 500;
  Request r;
  r.prompt.assign(20, 3);
  r.max_tokens = 200000;
  r.ignore_eos = true;
  // The first one runs (it leaves the waiting queue once admitted)...
  auto first = fl.loop->submit(r).value();
  TokenEvent ev;
  REQUIRE(first.wait(ev));
  // ...then four may wait, the fifth is refused.
  std::vector<Stream> waiting;
  for (int i = 0; i < 4; ++i) {
    auto s = fl.loop->submit(r);
    REQUIRE(s.ok());
    waiting.push_back(s.value());
  }
  auto refused = fl.loop->submit(r);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::resource_exhausted);
  fl.loop->cancel(first.id());
  for (auto& s : waiting) fl.loop->cancel(s.id());
  CHECK(collect(first).finish[0] == FinishReason::cancelled);
  for (auto& s : waiting) CHECK(collect(s).finish[0] == FinishReason::cancelled);
  REQUIRE(fl.loop->check_invariants().ok());
  CHECK(fl.loop->submit(r).ok());  // room again
}

TEST_CASE("cancel mid-stream frees the request's pages", "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 1024;
  o.prefix_cache = false;
  auto fl = make_fake_loop(o, {50, 4096, {}});
  fl.model->delay_us = 500;
  Request r;
  r.prompt.assign(10, 5);
  r.max_tokens = 100000;
  r.ignore_eos = true;
  auto s = fl.loop->submit(r).value();
  TokenEvent ev;
  for (int i = 0; i < 5; ++i) REQUIRE(s.wait(ev));
  fl.loop->cancel(s.id());
  auto out = collect(s);
  CHECK(out.finish[0] == FinishReason::cancelled);
  REQUIRE(fl.loop->check_invariants().ok());
  auto st = fl.loop->stats();
  CHECK(st.kv_pages_used == 0);
  CHECK(st.cancelled == 1);
}

TEST_CASE("shutdown with requests in flight finishes them as cancelled and joins", "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 1024;
  o.max_batch_size = 4;
  auto fl = make_fake_loop(o, {50, 4096, {}});
  fl.model->delay_us = 500;
  Request r;
  r.prompt.assign(10, 5);
  r.max_tokens = 100000;
  r.ignore_eos = true;
  r.n = 2;
  std::vector<Stream> streams;
  for (int i = 0; i < 12; ++i) streams.push_back(fl.loop->submit(r).value());
  TokenEvent ev;
  REQUIRE(streams[0].wait(ev));
  fl.loop->shutdown();
  for (auto& s : streams) {
    auto out = collect(s, 2);
    for (auto f : out.finish) CHECK(f == FinishReason::cancelled);
  }
  auto after = fl.loop->submit(r);
  REQUIRE_FALSE(after.ok());
  REQUIRE(fl.loop->check_invariants().ok());
  fl.loop->shutdown();  // twice is fine
}

TEST_CASE("a slow consumer loses no events and notify fires at most once per step",
          "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 64;
  o.stream_capacity = 2;
  // Before the loop, so that it outlives the loop's thread: the last delivery's notify may run
  // after the reader has taken the last event.
  std::atomic<int> notified{0};
  auto fl = make_fake_loop(o, {50, 4096, {}});
  Request r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 40;
  r.n = 3;
  r.sampling.temperature = 0;
  r.notify = [&] { ++notified; };
  auto s = fl.loop->submit(r).value();
  // Do not read until the loop has finished the request: its events wait in the overflow.
  for (int i = 0; i < 5000 && fl.loop->stats().finished == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(fl.loop->stats().finished == 1);
  // A check is a command: once it returns, the loop has delivered (and notified) the last step.
  REQUIRE(fl.loop->check_invariants().ok());
  // Every step pushed events (3 choices, one token each; the prefill step forked them) and
  // notified once; retrying the full ring moved nothing and notified nothing.
  const int steps = int(fl.loop->stats().steps);
  CHECK(notified.load() == steps);
  auto out = collect(s, 3);
  const auto expect = fake_greedy(r.prompt, 50, 40, {});
  for (int c = 0; c < 3; ++c) CHECK(out.tokens[size_t(c)] == expect);
  // Reading made room; each retry that then moved events notified once more. All but the first 2
  // events (the ring's capacity) waited in the overflow, so that is at most one per event.
  CHECK(notified.load() > steps);
  CHECK(notified.load() - steps <= out.events - 2);
}

TEST_CASE("stats report tokens, latencies and pages", "[integration][threads]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 64;
  auto fl = make_fake_loop(o, {50, 4096, {}});
  Request r;
  r.prompt.assign(17, 9);
  r.max_tokens = 5;
  r.sampling.temperature = 0;
  for (int i = 0; i < 3; ++i) collect(fl.loop->submit(r).value());
  auto st = fl.loop->stats();
  CHECK(st.finished == 3);
  CHECK(st.prompt_tokens == 51);
  CHECK(st.generated_tokens == 15);
  CHECK(st.ttft.count == 3);
  CHECK(st.itl.count == 12);
  CHECK(st.e2e.count == 3);
  CHECK(st.queue_wait.count == 3);
  CHECK(st.kv_pages_total == 64);
  CHECK(st.page_size == 4);
  CHECK(st.steps > 0);
  CHECK(st.avg_batch_size >= 1.0);
  // Requests 2 and 3 found the 4 full prompt pages of the first (16 of their 17 tokens).
  CHECK(st.prefix_hit_rate == Approx(32.0 / 51.0));
  CHECK(st.running == 0);
  CHECK(st.waiting == 0);
}

TEST_CASE("deliver_after_launch -1 defers delivery on a GPU only; 0 and 1 stand", "[unit]") {
  EngineOptions o;
  CHECK(o.deliver_after_launch == -1);
  CHECK_FALSE(resolved_deliver_after_launch(o, false));
  CHECK(resolved_deliver_after_launch(o, true));
  o.deliver_after_launch = 0;
  CHECK_FALSE(resolved_deliver_after_launch(o, true));
  o.deliver_after_launch = 1;
  CHECK(resolved_deliver_after_launch(o, false));
}

TEST_CASE("max_batch_size 0 takes the device's default; others stand", "[unit]") {
  EngineOptions o;
  CHECK(o.max_batch_size == 0);
  CHECK(resolved_max_batch_size(o, false) == 256);
  CHECK(resolved_max_batch_size(o, true) == 512);
  o.max_batch_size = 7;
  CHECK(resolved_max_batch_size(o, false) == 7);
  CHECK(resolved_max_batch_size(o, true) == 7);
}
