// The scheduler's policy (sched/scheduler.h), step by step on one thread: chunked prefill, the
// watermark, FCFS admission, preemption and out-of-memory, and the order of a step's chunks.
#include "sched/scheduler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <random>
#include <vector>

#include "sched/kv_pool.h"
#include "sched/metrics.h"
#include "sched/radix_cache.h"
#include "sched/sequence.h"
#include "tools/test_util.h"

using namespace astrai;

namespace {

constexpr int kPageSize = 4;

struct Setup {
  KvPool pool;
  Metrics metrics;
  std::unique_ptr<RadixCache> cache;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  int32_t next_token = 0;

  Setup(int pages, int budget, int watermark, bool with_cache)
      : pool(pages),
        cache(with_cache ? std::make_unique<RadixCache>(pool, kPageSize) : nullptr),
        sched(SchedulerConfig{kPageSize, budget, 256, watermark}, pool, cache.get(), metrics) {}

  // A new request of `prompt` tokens at the back of the waiting queue. Every token is distinct, so
  // no two sequences share a cached page.
  Sequence* enqueue(int prompt) {
    auto s = std::make_unique<Sequence>();
    for (int i = 0; i < prompt; ++i) s->tokens.push_back(next_token++);
    s->num_prompt = prompt;
    sched.enqueue(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }

  // What the step loop does after a successful forward: commit, then one new token for every chunk
  // that reached the end of its sequence.
  void complete(const StepPlan& plan) {
    sched.commit(plan);
    for (const Chunk& c : plan.chunks)
      if (c.wants_logits) c.seq->tokens.push_back(next_token++);
  }

  StepPlan step() {
    StepPlan plan = sched.plan();
    complete(plan);
    return plan;
  }
};

struct Expect {
  const Sequence* seq;
  int start, len;
  bool wants_logits;
};

void check_chunks(const StepPlan& plan, const std::vector<Expect>& want) {
  REQUIRE(plan.chunks.size() == want.size());
  int tokens = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("chunk " << i);
    CHECK(plan.chunks[i].seq == want[i].seq);
    CHECK(plan.chunks[i].start == want[i].start);
    CHECK(plan.chunks[i].len == want[i].len);
    CHECK(plan.chunks[i].wants_logits == want[i].wants_logits);
    tokens += want[i].len;
  }
  CHECK(plan.num_tokens == tokens);
}

}  // namespace

TEST_CASE("scheduler chunks a long prompt by the prefill budget and never counts decode rows", "[unit]") {
  Setup t(/*pages=*/100, /*budget=*/8, /*watermark=*/0, /*with_cache=*/false);
  Sequence* a = t.enqueue(3);
  check_chunks(t.step(), {{a, 0, 3, true}});
  Sequence* b = t.enqueue(20);
  Sequence* c = t.enqueue(5);
  // a decodes (1 row) and b takes all 8 budget tokens; c waits for budget.
  check_chunks(t.step(), {{a, 3, 1, true}, {b, 0, 8, false}});
  CHECK(c->waiting);
  // A running prefill is served before admission: b takes the budget again.
  check_chunks(t.step(), {{a, 4, 1, true}, {b, 8, 8, false}});
  CHECK(c->waiting);
  // b's last 4 tokens leave 4 budget tokens: c is admitted with a chunk of 4 of its 5.
  check_chunks(t.step(), {{a, 5, 1, true}, {b, 16, 4, true}, {c, 0, 4, false}});
  // Then three decodes and c's last prompt token.
  check_chunks(t.step(), {{a, 6, 1, true}, {b, 20, 1, true}, {c, 4, 1, true}});
  REQUIRE(t.sched.check().ok());
}

TEST_CASE("scheduler with budget 0 prefills whole prompts in one step", "[unit]") {
  Setup t(100, 0, 0, false);
  Sequence* a = t.enqueue(50);
  Sequence* b = t.enqueue(70);
  check_chunks(t.step(), {{a, 0, 50, true}, {b, 0, 70, true}});
  check_chunks(t.step(), {{a, 50, 1, true}, {b, 70, 1, true}});
}

TEST_CASE("scheduler admission keeps the watermark spare unless nothing runs", "[unit]") {
  SECTION("with a sequence running, a request that would eat into the watermark waits") {
    Setup t(/*pages=*/10, 0, /*watermark=*/2, false);
    Sequence* a = t.enqueue(27);  // needs pages_for(28) = 7 of 10: admitted, holds 7
    Sequence* b = t.enqueue(3);   // needs 1: 3 free - 2 spare = 1: admitted, holds 1
    Sequence* c = t.enqueue(3);   // needs 1: 2 free - 2 spare = 0: waits
    check_chunks(t.step(), {{a, 0, 27, true}, {b, 0, 3, true}});
    CHECK(c->waiting);
    CHECK(t.pool.num_free() == 2);
    // c keeps waiting while a and b run, although a free page is there for it.
    check_chunks(t.step(), {{a, 27, 1, true}, {b, 3, 1, true}});
    CHECK(c->waiting);
    // Once they finish, c is admitted.
    t.sched.remove(a);
    t.sched.remove(b);
    check_chunks(t.step(), {{c, 0, 3, true}});
  }
  SECTION("with nothing running, the watermark is waived") {
    Setup t(/*pages=*/10, 0, /*watermark=*/2, false);
    Sequence* a = t.enqueue(39);  // needs pages_for(40) = 10: the whole pool
    check_chunks(t.step(), {{a, 0, 39, true}});
    CHECK(t.pool.num_free() == 0);
  }
}

TEST_CASE("scheduler admits first come first served and never lets a small request overtake", "[unit]") {
  Setup t(/*pages=*/10, 0, 0, false);
  Sequence* a = t.enqueue(20);  // holds 5 pages
  check_chunks(t.step(), {{a, 0, 20, true}});
  Sequence* b = t.enqueue(20);  // needs pages_for(21) = 6; 4 are free once a took its sixth
  Sequence* c = t.enqueue(2);   // would fit, but b is ahead of it
  check_chunks(t.step(), {{a, 20, 1, true}});
  CHECK(b->waiting);
  CHECK(c->waiting);
  const auto order = t.sched.all();
  REQUIRE(order.size() == 3);
  CHECK(order[1] == b);
  CHECK(order[2] == c);
  t.sched.remove(a);
  check_chunks(t.step(), {{b, 0, 20, true}, {c, 0, 2, true}});
  REQUIRE(t.sched.check().ok());
}

TEST_CASE(
    "scheduler preempts the most recently admitted sequence, requeues it at the front and caches its full "
    "pages",
    "[unit]") {
  Setup t(/*pages=*/10, 0, 0, /*with_cache=*/true);
  Sequence* a = t.enqueue(4);   // holds 1 page (full); needs a second one for its first output token
  Sequence* b = t.enqueue(6);   // holds 2 pages, enough for its first output token too
  Sequence* c = t.enqueue(27);  // holds 7 pages: 6 full, 1 partial
  Sequence* d = t.enqueue(8);   // does not fit: waits
  check_chunks(t.step(), {{a, 0, 4, true}, {b, 0, 6, true}, {c, 0, 27, true}});
  CHECK(t.pool.num_free() == 0);
  CHECK(d->waiting);
  CHECK(t.metrics.snapshot().preemptions == 0);

  // a needs a page and none is free (every cached page is locked by a running sequence): c, the
  // most recently admitted, is preempted; its partial page goes to a, b runs as it was.
  const StepPlan plan = t.step();
  check_chunks(plan, {{a, 4, 1, true}, {b, 6, 1, true}});
  CHECK(t.metrics.snapshot().preemptions == 1);
  CHECK(c->waiting);
  CHECK_FALSE(c->running);
  CHECK(c->pages.empty());
  CHECK(c->num_computed == 0);
  CHECK(c->tokens.size() == 28);  // its prompt and its first output token, to recompute
  const auto order = t.sched.all();
  REQUIRE(order.size() == 4);
  CHECK(order[2] == c);  // the front of the waiting queue, ahead of d
  CHECK(order[3] == d);
  // c's 6 full pages stayed in the cache, unlocked: its readmission will find them.
  CHECK(t.cache->evictable_pages() == 6);
  CHECK(t.cache->match(c->tokens, 7).size() == 6);
  REQUIRE(t.sched.check().ok());

  // When a and b finish, c comes back first, reusing its 6 cached pages, and recomputes the rest.
  t.sched.remove(a);
  t.sched.remove(b);
  check_chunks(t.step(), {{c, 24, 4, true}, {d, 0, 8, true}});
  REQUIRE(t.sched.check().ok());
}

TEST_CASE("scheduler reports out_of_memory when the only running sequence cannot get a page", "[unit]") {
  Setup t(/*pages=*/2, 0, 0, false);
  Sequence* a = t.enqueue(7);  // needs pages_for(8) = 2: the whole pool
  check_chunks(t.step(), {{a, 0, 7, true}});
  check_chunks(t.step(), {{a, 7, 1, true}});  // token 8 fits the second page
  // Token 9 needs a third page: there is none and nobody else to preempt.
  const StepPlan plan = t.sched.plan();
  CHECK(plan.chunks.empty());
  REQUIRE(plan.out_of_memory.size() == 1);
  CHECK(plan.out_of_memory[0] == a);
  CHECK_FALSE(a->running);
  CHECK_FALSE(a->waiting);
  CHECK(a->pages.empty());
  CHECK(t.pool.num_free() == 2);
  CHECK(t.sched.idle());
  CHECK(t.metrics.snapshot().preemptions == 0);
  REQUIRE(t.sched.check().ok());
}

// The CUDA backend runs a step's leading one-query sequences on its decode kernel
// (AttentionBatch::num_decode_seqs): that pays when a running sequence's decode row never follows
// a prefill chunk. Running sequences are planned oldest first and a sequence still prefilling is
// always newer than every decoding one, so random traffic (chunked prefill, preemption) keeps it.
TEST_CASE("scheduler plans the decode rows of running sequences before every prefill chunk", "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int mixed_steps = 0;
  for (int round = 0; round < 20; ++round) {
    const int budget = std::vector<int>{0, 3, 8, 16}[size_t(pick(0, 3))];
    Setup t(/*pages=*/pick(12, 40), budget, /*watermark=*/pick(0, 2), /*with_cache=*/false);
    std::vector<int> stop_after;  // per sequence (t.seqs order): output tokens before it finishes
    int decode_rows_after_chunks = 0;
    for (int step = 0; step < 150; ++step) {
      for (int n = pick(0, 3) == 0 ? pick(1, 2) : 0; n > 0; --n) {
        t.enqueue(pick(2, 30));
        stop_after.push_back(pick(1, 40));
      }
      std::vector<const Sequence*> was_running;
      for (const auto& s : t.seqs)
        if (s->running) was_running.push_back(s.get());
      const StepPlan plan = t.step();
      bool chunk_seen = false, decode_seen = false;
      for (const Chunk& c : plan.chunks) {
        const bool running = std::find(was_running.begin(), was_running.end(), c.seq) != was_running.end();
        if (c.len > 1) chunk_seen = true;
        if (c.len == 1 && running) {
          decode_seen = true;
          decode_rows_after_chunks += chunk_seen;
        }
      }
      mixed_steps += chunk_seen && decode_seen;
      for (size_t i = 0; i < t.seqs.size(); ++i) {
        Sequence* s = t.seqs[i].get();
        if (s->running && int(s->tokens.size()) - s->num_prompt >= stop_after[i]) t.sched.remove(s);
      }
      REQUIRE(t.sched.check().ok());
    }
    INFO("round " << round << " budget " << budget);
    CHECK(decode_rows_after_chunks == 0);
  }
  CHECK(mixed_steps > 100);  // the property was tested: steps with decode rows and prefill chunks
}

// The overlapped step loop: a sequence whose draw is in flight without a placeholder (a first token
// that forks, penalties, structured output) must not be planned again before that draw is read, or
// it would draw the same token twice; not as a running sequence with tokens left to compute, and
// not as a preempted one at the front of the queue (nobody overtakes it meanwhile).
TEST_CASE("scheduler plans nothing for a sequence that sits out, and admits nobody past one", "[unit]") {
  Setup t(/*pages=*/10, 0, 0, /*with_cache=*/true);
  Sequence* a = t.enqueue(5);
  Sequence* b = t.enqueue(5);
  a->sits_out = true;  // as if preempted while its draw was in flight
  const StepPlan none = t.sched.plan();
  CHECK(none.chunks.empty());
  CHECK(a->waiting);
  CHECK(b->waiting);
  a->sits_out = false;
  check_chunks(t.step(), {{a, 0, 5, true}, {b, 0, 5, true}});
  // Running, with a token to compute, but its draw is not read yet: only b gets a row.
  a->sits_out = true;
  check_chunks(t.step(), {{b, 5, 1, true}});
  a->sits_out = false;
  check_chunks(t.step(), {{a, 5, 1, true}, {b, 6, 1, true}});
  REQUIRE(t.sched.check().ok());
}
