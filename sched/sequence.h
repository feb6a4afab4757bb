// The step loop's view of a request (Task) and of each of its choices (Sequence).
//
// A Sequence is the unit of scheduling: its `tokens` are the prompt followed by what it generated,
// and the first `num_computed` of them have their K/V in the pages of `pages` (page i holds tokens
// [i * page_size, (i + 1) * page_size)). Each step forwards the next chunk of uncomputed tokens;
// when a chunk reaches the end of `tokens`, its last row's logits give the next token. Prefill,
// chunked prefill, prefix-hit extend, decode, recompute after preemption and the tail of a forked
// choice are all this one rule.
//
// In the overlapped step loop (step_loop.h) a token drawn by the step still on the device is
// already in `tokens`, as kDrawnToken, so that the next step can plan the sequence's row before the
// host has read it: `drawn` is its draw in that step's output, where the next step's forward takes
// it from (ForwardBatch::moves). Output processing puts the real token in its place.
#pragma once

#include <cassert>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sched/radix_cache.h"
#include "sched/sampler.h"
#include "src/engine/request.h"
#include "src/engine/request_state.h"
#include "src/structured/token_grammar.h"

namespace astrai {

struct Task;

constexpr int32_t kDrawnToken = -1;  // a token drawn on the device, not read by the host yet

struct Sequence {
  Task* task = nullptr;
  int choice = 0;
  std::vector<int32_t> tokens;
  int num_prompt = 0;
  int num_computed = 0;
  int generated = 0;
  // Request::prompt_logprobs: the prompt position whose token's logprob is drawn next (the first
  // has none); advanced as the draws are planned, so a recomputed chunk draws none twice.
  int prompt_logprob_next = 1;
  // tokens.back() is kDrawnToken, draw `drawn` of the step in flight (-1: none).
  int drawn = -1;
  // Its draw in the step in flight waits for the host, without a placeholder: the scheduler plans
  // nothing for it until that draw is processed (not even a recompute after preemption).
  bool sits_out = false;
  std::vector<int32_t> pages;            // one pool reference each
  std::vector<RadixCache::Node*> chain;  // cache nodes of pages[0, chain.size()), locked by us
  bool chain_closed = false;             // a page of ours was cached by someone else first
  uint64_t admit_order = 0;              // larger: admitted more recently (preempted first)
  bool running = false, waiting = false, finished = false;
  std::unique_ptr<PenaltyState> penalties;  // only when the request uses penalties
  structured::Matcher matcher;              // active when the request has a constraint
  std::chrono::steady_clock::time_point last_token_time;
};

// The step in flight is done with s (its draws read, or dropped): the placeholder of its draw, if
// it had one, leaves the tokens, and s may be planned again.
inline void forget_draw(Sequence& s) {
  if (s.drawn >= 0) {
    assert(s.tokens.back() == kDrawnToken);
    s.tokens.pop_back();
    s.drawn = -1;
  }
  s.sits_out = false;
}

struct Task {
  RequestId id = 0;
  Request req;
  uint64_t seed = 0;
  // Constrained requests and those with min_tokens: the ids that end a choice (the model's stop ids
  // unless ignore_eos, and the request's), which a constrained mask allows where the text is
  // complete and which no draw takes before min_tokens.
  std::vector<int32_t> mask_stop_ids;
  std::shared_ptr<RequestState> state;
  std::vector<std::unique_ptr<Sequence>> seqs;  // seqs[c] is choice c (created at fork for c > 0)
  int finished_choices = 0;
  int completion_tokens = 0;
  bool forked = false;
  bool cancelled = false;
  bool counted_waiting = true;  // still counted against max_queue (never admitted yet)
  bool admitted_once = false;
  bool got_first_token = false;
  bool touched = false;  // pushed events this step: notify once at the end of it
  int in_flight = 0;     // chunks of its sequences in a launched step not processed yet (kept alive)
  std::chrono::steady_clock::time_point submitted, first_token;

  // True the first time only: the request stops counting against max_queue (admitted or ended).
  bool leave_queue() { return std::exchange(counted_waiting, false); }
};

// The requests in flight, by id (the step loop's).
using TaskMap = std::unordered_map<RequestId, std::unique_ptr<Task>>;

}  // namespace astrai
