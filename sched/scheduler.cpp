#include "sched/scheduler.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <span>

namespace astrai {

Scheduler::Scheduler(const SchedulerConfig& cfg, KvPool& pool, RadixCache* cache, Metrics& metrics)
    : cfg_(cfg), pool_(pool), cache_(cache), metrics_(metrics) {}

void Scheduler::enqueue(Sequence* s) {
  s->waiting = true;
  waiting_.push_back(s);
}

void Scheduler::add_running(Sequence* s) {
  s->running = true;
  s->admit_order = ++admit_counter_;
  running_.push_back(s);
}

std::vector<Sequence*> Scheduler::all() const {
  std::vector<Sequence*> v(running_.begin(), running_.end());
  v.insert(v.end(), waiting_.begin(), waiting_.end());
  return v;
}

void Scheduler::erase_running(Sequence* s) {
  auto it = std::find(running_.begin(), running_.end(), s);
  if (it != running_.end()) running_.erase(it);
  s->running = false;
}

void Scheduler::remove(Sequence* s) {
  if (s->running) erase_running(s);
  if (s->waiting) {
    auto it = std::find(waiting_.begin(), waiting_.end(), s);
    if (it != waiting_.end()) waiting_.erase(it);
    s->waiting = false;
  }
  release_pages(s);
}

void Scheduler::cache_computed_pages(Sequence* s) {
  if (!cache_) return;
  const int ps = cfg_.page_size;
  while (!s->chain_closed && int(s->chain.size() + 1) * ps <= s->num_computed) {
    const size_t i = s->chain.size();
    RadixCache::Node* parent = s->chain.empty() ? nullptr : s->chain.back();
    std::span<const int32_t> toks(s->tokens.data() + i * size_t(ps), size_t(ps));
    RadixCache::Node* n = cache_->insert(parent, toks, s->pages[i]);
    if (!n) {
      s->chain_closed = true;
      break;
    }
    s->chain.push_back(n);
  }
}

void Scheduler::release_pages(Sequence* s) {
  cache_computed_pages(s);
  for (RadixCache::Node* n : s->chain) cache_->unlock(n);
  for (int32_t p : s->pages) pool_.release(p);
  s->chain.clear();
  s->pages.clear();
  s->chain_closed = false;
  s->num_computed = 0;
}

std::optional<int32_t> Scheduler::alloc_page() {
  if (auto p = pool_.alloc()) return p;
  if (cache_ && cache_->evict(1) > 0) return pool_.alloc();
  return std::nullopt;
}

void Scheduler::preempt(Sequence* s) {
  erase_running(s);
  release_pages(s);
  s->waiting = true;
  waiting_.push_front(s);
  metrics_.record_preemption();
}

bool Scheduler::ensure_pages(Sequence* s, int num_tokens, StepPlan& plan) {
  while (int(s->pages.size()) < pages_for(num_tokens)) {
    if (auto p = alloc_page()) {
      s->pages.push_back(*p);
      continue;
    }
    Sequence* victim = running_.back();
    if (victim != s) {
      preempt(victim);
      continue;
    }
    if (running_.size() == 1) {
      // Alone and still out of pages: the pool cannot hold this sequence any longer.
      erase_running(s);
      release_pages(s);
      plan.out_of_memory.push_back(s);
    } else {
      preempt(s);
    }
    return false;
  }
  return true;
}

namespace {

// A sequence of a Request::prompt_logprobs request whose prompt logprobs are not all drawn yet.
bool wants_prompt_logprobs(const Sequence& s) {
  return s.task && s.task->req.prompt_logprobs >= 0 && s.prompt_logprob_next < s.num_prompt;
}

}  // namespace

StepPlan Scheduler::plan() {
  StepPlan plan;
  int budget = cfg_.max_prefill_tokens > 0 ? cfg_.max_prefill_tokens : INT_MAX;
  auto chunk_len = [&](const Sequence* s) {
    const int remaining = int(s->tokens.size()) - s->num_computed;
    return remaining == 1 ? 1 : std::min(remaining, budget);
  };
  auto add_chunk = [&](Sequence* s, int len) {
    const int remaining = int(s->tokens.size()) - s->num_computed;
    const bool all = wants_prompt_logprobs(*s) && s->num_computed < s->num_prompt - 1;
    plan.chunks.push_back({s, s->num_computed, len, len == remaining, all});
    plan.num_tokens += len;
    if (remaining > 1) budget -= len;
  };

  // 1. Running sequences, oldest first. Victims of preemption come from the back, i.e. always
  //    after the current index, so nothing already planned is ever preempted.
  // NOLINTNEXTLINE(modernize-loop-convert): preemption shrinks running_ while this loop runs
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* s = running_[i];
    const int len = chunk_len(s);
    if (len <= 0 || s->sits_out) continue;
    if (!ensure_pages(s, s->num_computed + len, plan)) break;  // s itself was the last one
    add_chunk(s, len);
  }

  // 2. Admission.
  while (!waiting_.empty() && int(running_.size()) < cfg_.max_batch_size && budget > 0) {
    Sequence* s = waiting_.front();
    if (s->sits_out) break;  // preempted while its draw is in flight: next step (FCFS holds)
    std::vector<RadixCache::Node*> hit;
    if (cache_ && !wants_prompt_logprobs(*s)) {  // those need the logits of every prompt row
      hit = cache_->match(s->tokens, (int(s->tokens.size()) - 1) / cfg_.page_size);
      for (RadixCache::Node* n : hit) {
        cache_->lock(n);
        pool_.retain(RadixCache::page_of(n));
      }
    }
    const int need = pages_for(int(s->tokens.size()) + 1) - int(hit.size());
    const int avail = pool_.num_free() + (cache_ ? cache_->evictable_pages() : 0);
    const int spare = running_.empty() ? 0 : cfg_.watermark_pages;
    if (avail - spare < need) {
      for (RadixCache::Node* n : hit) {
        pool_.release(RadixCache::page_of(n));
        cache_->unlock(n);
      }
      if (running_.empty()) {
        // Nothing runs and nothing is locked, yet it does not fit: a preempted sequence that grew
        // past the whole pool. It can never continue.
        waiting_.pop_front();
        s->waiting = false;
        plan.out_of_memory.push_back(s);
        continue;
      }
      break;
    }
    waiting_.pop_front();
    s->waiting = false;
    for (RadixCache::Node* n : hit) {
      s->chain.push_back(n);
      s->pages.push_back(RadixCache::page_of(n));
    }
    s->num_computed = int(hit.size()) * cfg_.page_size;
    if (cache_) metrics_.record_prefix_lookup(uint64_t(s->tokens.size()), uint64_t(s->num_computed));
    add_running(s);
    const int len = chunk_len(s);
    if (!ensure_pages(s, s->num_computed + len, plan)) break;
    add_chunk(s, len);
  }

  // Chunks that want every row's logits keep the step within the logit rows the model reserves
  // (max_batch_size): trimmed, the latest first, down to one row each if need be (every other chunk
  // has at most one logit row, and a step at most max_batch_size chunks).
  int rows = 0;
  for (const Chunk& c : plan.chunks) rows += c.all_logits ? c.len : int(c.wants_logits);
  for (size_t i = plan.chunks.size(); i-- > 0 && rows > cfg_.max_batch_size;) {
    Chunk& c = plan.chunks[i];
    if (!c.all_logits || c.len == 1) continue;
    const int cut = std::min(c.len - 1, rows - cfg_.max_batch_size);
    c.len -= cut;
    c.wants_logits = c.start + c.len == int(c.seq->tokens.size());
    plan.num_tokens -= cut;
    rows -= cut;
  }
  return plan;
}

void Scheduler::share_prefix(const Sequence* from, Sequence* to) {
  const size_t full = size_t(from->num_computed / cfg_.page_size);
  for (size_t i = 0; i < full; ++i) {
    pool_.retain(from->pages[i]);
    to->pages.push_back(from->pages[i]);
    if (i < from->chain.size()) {
      cache_->lock(from->chain[i]);
      to->chain.push_back(from->chain[i]);
    }
  }
  to->chain_closed = from->chain_closed;
  to->num_computed = int(full) * cfg_.page_size;
}

Status Scheduler::check() const {
  ASTRAI_RETURN_IF_ERROR(pool_.check());
  std::vector<int> holders(size_t(pool_.num_pages()), 0);
  if (cache_) {
    ASTRAI_RETURN_IF_ERROR(cache_->check());
    for (int32_t p : cache_->pages()) ++holders[size_t(p)];
  }
  for (const Sequence* s : all())
    for (int32_t p : s->pages) ++holders[size_t(p)];
  for (int p = 0; p < pool_.num_pages(); ++p)
    if (holders[size_t(p)] != pool_.refcount(p))
      return internal_error("page " + std::to_string(p) + " has refcount " +
                            std::to_string(pool_.refcount(p)) + " but " + std::to_string(holders[size_t(p)]) +
                            " holders");
  return {};
}

void Scheduler::commit(const StepPlan& plan) {
  for (const Chunk& c : plan.chunks) {
    // Finished (or cancelled) since it was planned, in the overlapped loop: its pages are gone.
    if (c.seq->finished) continue;
    assert(c.seq->num_computed == c.start);
    c.seq->num_computed += c.len;
    cache_computed_pages(c.seq);
  }
}

}  // namespace astrai
