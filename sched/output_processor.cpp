#include "sched/output_processor.h"

#include <algorithm>
#include <cassert>
#include <iterator>
#include <utility>

#include "src/engine/request_state.h"

namespace astrai {

using Clock = Metrics::Clock;

OutputProcessor::OutputProcessor(Scheduler& scheduler, Metrics& metrics, TaskMap& tasks,
                                 std::atomic<int>& waiting_count, int max_model_len,
                                 std::unordered_set<int32_t> model_stop)
    : scheduler_(scheduler),
      metrics_(metrics),
      tasks_(tasks),
      waiting_count_(waiting_count),
      max_model_len_(max_model_len),
      model_stop_(std::move(model_stop)) {}

void OutputProcessor::process(const StepPlan& plan, std::span<const SampleRow> rows,
                              std::span<const SampleResult> draws) {
  // The prompt logprob draws follow the generation's (BatchBuilder::build); they go out first, as
  // the prompt comes before its continuation.
  size_t generation_draws = 0, first_prompt_row = rows.size();
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].prompt_of) {
      first_prompt_row = std::min(first_prompt_row, r);
      continue;
    }
    generation_draws += size_t(rows[r].num_choices);
  }
  for (size_t r = first_prompt_row, d = generation_draws; r < rows.size(); ++r, ++d) {
    Sequence& s = *rows[r].prompt_of;
    if (s.finished) continue;  // cancelled while the step ran
    TokenEvent ev;
    ev.prompt = true;
    ev.token = rows[r].forced;
    ev.logprob = draws[d].logprob;
    ev.top = draws[d].top;
    emit(*s.task, std::move(ev));
  }
  size_t row = 0, next = 0;
  for (const Chunk& c : plan.chunks) {
    if (!c.wants_logits) continue;
    Sequence& s = *c.seq;
    Task& t = *s.task;
    const auto mine = draws.subspan(next, size_t(rows[row++].num_choices));
    next += mine.size();
    // The overlapped loop put the draw's placeholder in tokens: the token goes in its place below.
    forget_draw(s);
    if (s.finished) continue;  // ended while the step ran (a stop token, a cancel)
    assert(int(mine.size()) == (t.forked ? 1 : t.req.n));
    if (!t.forked) {
      t.forked = true;
      fork(t, s, mine.subspan(1));  // before s appends its token: the choices share the prompt
    }
    handle_token(s, mine[0]);
  }
}

bool OutputProcessor::is_stop(const Task& t, int32_t token) const {
  for (int32_t s : t.req.stop_ids)
    if (s == token) return true;
  return !t.req.ignore_eos && model_stop_.count(token);
}

void OutputProcessor::emit(Task& t, TokenEvent ev) {
  t.state->push(std::move(ev));
  if (!t.touched) {
    t.touched = true;
    touched_.push_back(&t);
  }
}

void OutputProcessor::finish(Sequence& s, FinishReason reason, TokenEvent ev, const std::string& error) {
  Task& t = *s.task;
  if (s.finished) return;
  scheduler_.remove(&s);
  s.finished = true;
  ev.choice = s.choice;
  ev.finish = reason;
  ev.error = error;
  emit(t, std::move(ev));
  ++t.finished_choices;
  if (!t.forked) {
    // The other choices do not exist yet (they fork when the first token is sampled): they end
    // the same way.
    t.forked = true;
    for (int c = 1; c < t.req.n; ++c) {
      TokenEvent e;
      e.choice = c;
      e.finish = reason;
      e.error = error;
      emit(t, std::move(e));
      ++t.finished_choices;
    }
  }
  if (t.finished_choices < t.req.n) return;
  const auto now = Clock::now();
  FinishReason overall = t.cancelled ? FinishReason::cancelled : reason;
  const double decode_s = t.got_first_token ? std::chrono::duration<double>(now - t.first_token).count() : 0;
  metrics_.record_finish(overall, ms_between(t.submitted, now), t.completion_tokens / std::max(1, t.req.n),
                         decode_s);
  if (t.leave_queue()) waiting_count_.fetch_sub(1);
  completed_.push_back(t.id);
}

void OutputProcessor::cancel(Task& t) {
  for (auto& s : t.seqs)
    if (!s->finished) finish(*s, FinishReason::cancelled);
}

void OutputProcessor::handle_token(Sequence& s, const SampleResult& r) {
  Task& t = *s.task;
  const auto now = Clock::now();
  if (!t.got_first_token) {
    t.got_first_token = true;
    t.first_token = now;
    metrics_.record_ttft(ms_between(t.submitted, now));
  } else if (s.generated > 0) {
    metrics_.record_itl(ms_between(s.last_token_time, now));
  }
  s.last_token_time = now;
  if (is_stop(t, r.token)) {
    finish(s, FinishReason::stop);
    return;
  }
  // The mask allowed only tokens the grammar takes; anything else is a bug upstream of us.
  if (s.matcher.active() && !s.matcher.advance(r.token)) {
    finish(s, FinishReason::error, {},
           "token " + std::to_string(r.token) + " is not allowed by the request's constraint here");
    return;
  }
  s.tokens.push_back(r.token);
  ++s.generated;
  ++t.completion_tokens;
  if (s.penalties) s.penalties->add_output(r.token);
  metrics_.record_generated(1);
  TokenEvent ev;
  ev.token = r.token;
  ev.choice = s.choice;
  ev.logprob = r.logprob;
  ev.top = r.top;
  // A constrained text that nothing may follow is finished, as if a stop id came next.
  const bool complete = s.matcher.active() && s.matcher.complete();
  if (!complete && (s.generated >= t.req.max_tokens || int(s.tokens.size()) >= max_model_len_)) {
    finish(s, FinishReason::length, std::move(ev));
    return;
  }
  emit(t, std::move(ev));
  if (complete) finish(s, FinishReason::stop);
}

void OutputProcessor::fork(Task& t, Sequence& s0, std::span<const SampleResult> draws) {
  for (int c = 1; c < t.req.n; ++c) {
    auto s = std::make_unique<Sequence>();
    s->task = &t;
    s->choice = c;
    s->tokens = s0.tokens;
    s->num_prompt = s0.num_prompt;
    s->prompt_logprob_next = s0.prompt_logprob_next;  // the prompt's logprobs went out once, from s0
    if (s0.penalties) s->penalties = std::make_unique<PenaltyState>(*s0.penalties);
    s->matcher = s0.matcher;  // before s0 takes its token: every choice starts where s0 stood
    scheduler_.share_prefix(&s0, s.get());
    scheduler_.add_running(s.get());
    Sequence& ref = *s;
    t.seqs.push_back(std::move(s));
    handle_token(ref, draws[size_t(c - 1)]);
  }
}

void OutputProcessor::deliver() {
  // One wake-up per touched request per step; backlogged rings are retried every step.
  for (auto it = backlog_.begin(); it != backlog_.end();) {
    Task* t = *it;
    // Nobody holds the Stream any more (a client went away): nobody will read these events.
    if (t->state.use_count() == 1) t->state->overflow.clear();
    if (t->state->flush() && !t->touched) {
      t->touched = true;
      touched_.push_back(t);
    }
    it = t->state->overflow.empty() ? backlog_.erase(it) : std::next(it);
  }
  for (Task* t : touched_) {
    t->touched = false;
    if (!t->state->overflow.empty()) backlog_.insert(t);
    t->state->wake_consumers();
    if (t->req.notify) t->req.notify();
  }
  touched_.clear();
  for (auto it = completed_.begin(); it != completed_.end();) {
    auto tt = tasks_.find(*it);
    if (tt == tasks_.end()) {
      it = completed_.erase(it);
    } else if (tt->second->state->overflow.empty() && tt->second->in_flight == 0) {
      backlog_.erase(tt->second.get());
      tasks_.erase(tt);
      it = completed_.erase(it);
    } else {
      ++it;
    }
  }
}

void OutputProcessor::close_all() {
  for (auto& [id, t] : tasks_) cancel(*t);
  deliver();
  for (auto& [id, t] : tasks_) {
    t->state->closed.store(true, std::memory_order_release);
    t->state->wake_consumers();
    if (t->req.notify) t->req.notify();
  }
  tasks_.clear();
  backlog_.clear();
  completed_.clear();
}

}  // namespace astrai
