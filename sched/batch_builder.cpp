#include "sched/batch_builder.h"

#include <cassert>

#include "sched/sequence.h"

namespace astrai {

const ForwardBatch& BatchBuilder::build(const StepPlan& plan, const Tensor& draws) {
  forward_.clear();
  samples_.clear();
  for (const Chunk& c : plan.chunks) {
    const Sequence& s = *c.seq;
    forward_.add_sequence(s.tokens, c.start, c.len, s.pages,
                          c.wants_logits ? LogitRows::last : LogitRows::none);
    // A drawn token is always the sequence's last, so only a chunk that wants logits holds it.
    const bool drawn = s.drawn >= 0 && c.wants_logits;
    if (drawn) forward_.take_last_row_from(s.drawn, draws);
    if (!c.wants_logits) continue;
    const Task& t = *s.task;
    SampleRow r;
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
    }
    samples_.push_back(r);
  }
  return forward_.finish();
}

}  // namespace astrai
