#include "src/engine/generation.h"

#include <algorithm>

#include "src/engine/engine.h"
#include "src/structured/token_grammar.h"

namespace astrai {

EnginePort engine_port(Engine& engine) {
  return EnginePort{[&engine](Request r) { return engine.submit(std::move(r)); },
                    [&engine](RequestId id) { engine.cancel(id); }, engine.max_model_len()};
}

Result<std::unique_ptr<Generation>> Generation::start(Engine& engine, const Tokenizer& tok,
                                                      GenerationSpec spec, std::function<void()> notify,
                                                      GenerationObserver* observer) {
  return start(engine_port(engine), tok, std::move(spec), std::move(notify), observer);
}

Result<std::unique_ptr<Generation>> Generation::start(EnginePort engine, const Tokenizer& tok,
                                                      GenerationSpec spec, std::function<void()> notify,
                                                      GenerationObserver* observer) {
  if (spec.prompt.empty()) return invalid_argument("the prompt is empty");
  const int64_t ctx = engine.context_window;
  const int64_t room = ctx - int64_t(spec.prompt.size());
  if (room < 1)
    return invalid_argument("the prompt has " + std::to_string(spec.prompt.size()) +
                            " tokens, the model's context window is " + std::to_string(ctx));
  Request req;
  req.prompt = std::move(spec.prompt);
  req.sampling = spec.sampling;
  // Ask for no more than the context window can hold (a client's max_tokens is an upper bound).
  req.max_tokens = int(spec.max_tokens > 0 ? std::min<int64_t>(spec.max_tokens, room) : room);
  req.n = spec.n;
  req.stop_ids = std::move(spec.stop_ids);
  req.ignore_eos = spec.ignore_eos;
  req.prompt_logprobs = spec.prompt_logprobs;
  if (spec.constraint.kind != ConstraintKind::none) {
    auto g = structured::compile_constraint(spec.constraint.kind, spec.constraint.source, tok,
                                            spec.constraint.grammar);
    if (!g.ok()) return g.status();
    req.constraint = {spec.constraint.kind, std::move(g).value()};
  }
  req.notify = std::move(notify);
  const int prompt_tokens = int(req.prompt.size());

  auto stream = engine.submit(std::move(req));
  // Nothing was submitted: nothing to cancel and nothing to report.
  if (!stream.ok()) return stream.status();

  std::unique_ptr<Generation> g(new Generation(std::move(engine)));
  g->stream_ = std::move(stream).value();
  g->prompt_tokens_ = prompt_tokens;
  g->start_ = Clock::now();
  g->choices_.resize(size_t(std::max(1, spec.n)));
  for (auto& c : g->choices_) {
    c.detok = std::make_unique<IncrementalDetokenizer>(tok, /*skip_special_tokens=*/true);
    c.stop = StopMatcher(spec.stop);
  }
  g->observer_ = observer;
  if (observer) observer->on_start();
  return g;
}

Generation::~Generation() {
  if (!finished() || (!stream_.done() && !cancelled_)) cancel();
  if (observer_) observer_->on_end(finished(), std::chrono::duration<double>(Clock::now() - start_).count());
}

void Generation::cancel() {
  if (cancelled_) return;
  cancelled_ = true;
  engine_.cancel(stream_.id());
}

int Generation::completion_tokens() const {
  int t = 0;
  for (const auto& c : choices_) t += c.tokens;
  return t;
}

void Generation::finish_choice(int c, FinishReason reason, std::vector<ChoiceDelta>& out, std::string error) {
  ChoiceText& ch = choices_[size_t(c)];
  ChoiceDelta d;
  d.choice = c;
  if (!ch.stop.matched()) {
    // Flush what the detokenizer and the stop matcher still hold; a stop string may complete here.
    d.text = ch.stop.push(ch.detok->finish());
    if (!ch.stop.matched()) d.text += ch.stop.finish();
  }
  if (ch.stop.matched()) {
    reason = FinishReason::stop;
    d.stop_string = ch.stop.matched_string();
  }
  d.finish = reason;
  d.error = std::move(error);
  out.push_back(std::move(d));
  ch.done = true;
  ++finished_count_;
  // Every choice has ended on our side (stop strings): the engine can stop computing.
  if (finished() && !stream_.done()) cancel();
}

bool Generation::pump(std::vector<ChoiceDelta>& out) {
  TokenEvent ev;
  while (!finished() && stream_.poll(ev)) {
    if (ev.prompt) {
      prompt_logprobs_.push_back(TokenInfo{ev.token, ev.logprob, std::move(ev.top)});
      continue;
    }
    if (ev.choice < 0 || ev.choice >= int(choices_.size())) continue;
    ChoiceText& ch = choices_[size_t(ev.choice)];
    if (ch.done) continue;
    if (ev.token >= 0) {
      const auto now = Clock::now();
      if (observer_)
        observer_->on_token(
            !first_token_seen_,
            std::chrono::duration<double>(now - (first_token_seen_ ? last_token_ : start_)).count());
      first_token_seen_ = true;
      last_token_ = now;
      ++ch.tokens;
      ChoiceDelta d;
      d.choice = ev.choice;
      d.text = ch.stop.push(ch.detok->push(ev.token));
      d.tokens.push_back(TokenInfo{ev.token, ev.logprob, std::move(ev.top)});
      const bool stopped = ch.stop.matched();
      out.push_back(std::move(d));
      if (stopped) {
        finish_choice(ev.choice, FinishReason::stop, out);
        continue;
      }
    }
    if (ev.finish != FinishReason::none) finish_choice(ev.choice, ev.finish, out, ev.error);
  }
  return finished();
}

}  // namespace astrai
