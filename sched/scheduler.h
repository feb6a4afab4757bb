// Scheduler: decides what one step computes and keeps the KV pages to do it.
//
// Each step (plan()):
//   1. running sequences, oldest admission first: decode rows (1 token) always; sequences still
//      prefilling get a chunk of at most the remaining prefill budget (max_prefill_tokens per step,
//      decode rows not counted), so a long prompt never stalls the running decodes;
//   2. then waiting sequences, front first (FCFS, no overtaking), while the batch has room, budget
//      is left and the pool can hold the whole of the sequence plus one token, keeping `watermark`
//      pages spare for the running decodes (the watermark is waived when nothing runs, so a
//      request that fits the pool is always admitted eventually). On admission, the radix cache
//      supplies the longest cached prefix in whole pages (at most tokens - 1: the last token is
//      always computed to get logits), except to a prompt whose logprobs are asked for
//      (Request::prompt_logprobs: its chunks take every row's logits, Chunk::all_logits).
// A sequence that sits out (Sequence::sits_out: the overlapped loop has its draw in flight) gets
// nothing, and while it waits at the front of the queue nobody is admitted.
// Pages come from the pool's free list, then from evicting unlocked cached pages (LRU). When a
// running sequence still cannot get a page, the most recently admitted running sequence is
// preempted: its pages are released (its computed full pages go into the cache first) and it is
// requeued at the front of the waiting queue to be recomputed later. A sequence that cannot get a
// page while it is the only one running can never continue: it is reported in `out_of_memory`
// and finishes with `length`.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "sched/kv_pool.h"
#include "sched/metrics.h"
#include "sched/radix_cache.h"
#include "sched/sequence.h"

namespace astrai {

struct SchedulerConfig {
  int page_size = 16;
  int max_prefill_tokens = 0;  // 0: unlimited
  int max_batch_size = 256;
  int watermark_pages = 0;
};

struct Chunk {
  Sequence* seq;
  int start;  // first token index of the chunk (== seq->num_computed when planned)
  int len;
  bool wants_logits;  // the chunk ends at the last token: sample from its last row
  // Logits of every row (Request::prompt_logprobs while the prompt is computed); the rows of a
  // step's chunks then stay within max_batch_size, the logit rows the model reserves.
  bool all_logits = false;
};

struct StepPlan {
  std::vector<Chunk> chunks;
  std::vector<Sequence*> out_of_memory;
  int num_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KvPool& pool, RadixCache* cache, Metrics& metrics);

  void enqueue(Sequence* s);      // a new sequence, at the back of the waiting queue
  void add_running(Sequence* s);  // a forked choice that already holds its shared pages
  // A new choice forked from `from` right after its prompt was computed: shares (references and
  // locks) the full computed pages; the partial last page is recomputed into a page of its own.
  void share_prefix(const Sequence* from, Sequence* to);
  void remove(Sequence* s);  // finished or cancelled: releases its pages
  StepPlan plan();
  // After the forward: advances num_computed and offers newly completed pages to the cache
  // (skipping sequences that finished since the plan).
  void commit(const StepPlan& plan);

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  bool idle() const { return running_.empty() && waiting_.empty(); }

  // Every running/waiting sequence (for shutdown / checks).
  std::vector<Sequence*> all() const;
  // Pool and cache consistency, and every page's refcount equals the number of its holders
  // (cache nodes + sequences' page lists): no leak, no double free.
  Status check() const;

 private:
  bool ensure_pages(Sequence* s, int num_tokens, StepPlan& plan);
  std::optional<int32_t> alloc_page();
  void preempt(Sequence* s);
  void release_pages(Sequence* s);
  void cache_computed_pages(Sequence* s);
  void erase_running(Sequence* s);
  int pages_for(int tokens) const { return (tokens + cfg_.page_size - 1) / cfg_.page_size; }

  SchedulerConfig cfg_;
  KvPool& pool_;
  RadixCache* cache_;
  Metrics& metrics_;
  std::vector<Sequence*> running_;  // admission order, oldest first
  std::deque<Sequence*> waiting_;
  uint64_t admit_counter_ = 0;
};

}  // namespace astrai
