#include "sched/batch_builder.h"

#include <algorithm>
#include <array>
#include <cassert>

#include "sched/sequence.h"

namespace astrai {

namespace {

// A prompt logprob's draw: greedy over the one token its mask allows, with the raw logprob and k
// alternatives.
const SamplingParams& prompt_draw_params(int k) {
  static const auto table = [] {
    std::array<SamplingParams, kMaxTopLogprobs + 1> t;
    for (int i = 0; i <= kMaxTopLogprobs; ++i) {
      t[size_t(i)].temperature = 0;
      t[size_t(i)].logprobs = true;
      t[size_t(i)].top_logprobs = i;
    }
    return t;
  }();
  return table[size_t(k)];
}

}  // namespace

const ForwardBatch& BatchBuilder::build(const StepPlan& plan, const Tensor& draws) {
  forward_.clear();
  samples_.clear();
  prompt_rows_.clear();
  int logit_row = 0;  // the first logits row of the chunk
  for (const Chunk& c : plan.chunks) {
    Sequence& s = *c.seq;
    forward_.add_sequence(s.tokens, c.start, c.len, s.pages,
                          c.all_logits     ? LogitRows::all
                          : c.wants_logits ? LogitRows::last
                                           : LogitRows::none);
    if (c.all_logits) {
      // Row p's logits give the logprob of prompt token p + 1; the prompt's last row is the
      // generation's (below). Tokens already reported (a recomputed chunk) are not drawn again.
      const int k = s.task->req.prompt_logprobs;
      const int first = std::max(c.start, s.prompt_logprob_next - 1),
                end = std::min(c.start + c.len, s.num_prompt - 1);
      for (int p = first; p < end; ++p) {
        SampleRow r;
        r.logit_row = logit_row + (p - c.start);
        r.params = &prompt_draw_params(k);
        r.prompt_of = &s;
        r.forced = s.tokens[size_t(p) + 1];
        prompt_rows_.push_back(r);
      }
      s.prompt_logprob_next = std::max(s.prompt_logprob_next, end + 1);
    }
    const int rows = c.all_logits ? c.len : int(c.wants_logits);
    logit_row += rows;
    // A drawn token is always the sequence's last, so only a chunk that wants logits holds it.
    const bool drawn = s.drawn >= 0 && c.wants_logits;
    if (drawn) forward_.take_last_row_from(s.drawn, draws);
    if (!c.wants_logits) continue;
    const Task& t = *s.task;
    SampleRow r;
    r.logit_row = logit_row - 1;
    r.params = &t.req.sampling;
    r.penalties = s.penalties.get();
    r.seed = t.seed;
    r.choice = s.choice;
    r.index = s.generated + (drawn ? 1 : 0);  // the drawn token is not counted until it is read
    // Before its first token a request is choice 0 alone (the others fork from this row).
    assert(t.forked || (s.choice == 0 && s.generated == 0));
    r.num_choices = t.forked ? 1 : t.req.n;
    if (s.matcher.active()) {
      r.matcher = &s.matcher;
      r.stop_ids = &t.mask_stop_ids;
    } else if (r.index < t.req.sampling.min_tokens) {
      r.banned = &t.mask_stop_ids;
    }
    samples_.push_back(r);
  }
  samples_.insert(samples_.end(), prompt_rows_.begin(), prompt_rows_.end());
  return forward_.finish();
}

}  // namespace astrai
