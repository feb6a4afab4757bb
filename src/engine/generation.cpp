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
                                                      GenerationSpec spec,
                                                      const std::function<void()>& notify,
                                                      GenerationObserver* observer) {
  return start(engine_port(engine), tok, std::move(spec), notify, observer);
}

Result<std::unique_ptr<Generation>> Generation::start(EnginePort engine, const Tokenizer& tok,
                                                      GenerationSpec spec,
                                                      const std::function<void()>& notify,
                                                      GenerationObserver* observer) {
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(1 + spec.more_prompts.size());
  prompts.push_back(std::move(spec.prompt));
  for (auto& p : spec.more_prompts) prompts.push_back(std::move(p));
  const int64_t ctx = engine.context_window;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::string which = prompts.size() > 1 ? "prompt " + std::to_string(p) : "the prompt";
    if (prompts[p].empty()) return invalid_argument(which + " is empty");
    if (ctx - int64_t(prompts[p].size()) < 1)
      return invalid_argument(which + " has " + std::to_string(prompts[p].size()) +
                              " tokens, the model's context window is " + std::to_string(ctx));
  }
  Constraint constraint;
  if (spec.constraint.kind != ConstraintKind::none) {
    auto g = structured::compile_constraint(spec.constraint.kind, spec.constraint.source, tok,
                                            spec.constraint.grammar);
    if (!g.ok()) return g.status();
    constraint = {spec.constraint.kind, std::move(g).value()};
  }

  std::unique_ptr<Generation> g(new Generation(std::move(engine)));
  g->per_prompt_ = std::max(1, spec.n);
  for (auto& prompt : prompts) {
    Request req;
    const int64_t room = ctx - int64_t(prompt.size());
    req.prompt = std::move(prompt);
    req.sampling = spec.sampling;
    // Ask for no more than the context window can hold (a client's max_tokens is an upper bound).
    req.max_tokens = int(spec.max_tokens > 0 ? std::min<int64_t>(spec.max_tokens, room) : room);
    req.n = spec.n;
    req.stop_ids = spec.stop_ids;
    req.ignore_eos = spec.ignore_eos;
    req.prompt_logprobs = spec.prompt_logprobs;
    req.constraint = constraint;
    req.notify = notify;  // one hook for all the prompts
    const int prompt_tokens = int(req.prompt.size());
    auto stream = g->engine_.submit(std::move(req));
    if (!stream.ok()) {
      // Nothing of this request runs: the prompts already submitted are taken back, and nothing
      // is reported to the observer.
      for (auto& s : g->streams_) g->cancel_stream(s);
      g->streams_.clear();
      return stream.status();
    }
    PromptStream s;
    s.stream = std::move(stream).value();
    s.prompt_tokens = prompt_tokens;
    s.open_choices = g->per_prompt_;
    g->streams_.push_back(std::move(s));
  }
  g->start_ = Clock::now();
  g->choices_.resize(g->streams_.size() * size_t(g->per_prompt_));
  for (auto& c : g->choices_) {
    c.detok = std::make_unique<IncrementalDetokenizer>(tok, spec.skip_special_tokens);
    c.stop = StopMatcher(spec.stop, spec.include_stop_str_in_output);
  }
  g->min_tokens_ = spec.sampling.min_tokens;
  g->observer_ = observer;
  if (observer) observer->on_start();
  return g;
}

Generation::~Generation() {
  for (auto& s : streams_)
    if (s.open_choices > 0 || !s.stream.done()) cancel_stream(s);
  if (observer_)  // set only once every prompt was submitted
    observer_->on_end(finished(), std::chrono::duration<double>(Clock::now() - start_).count());
}

void Generation::cancel_stream(PromptStream& s) {
  if (s.cancelled) return;
  s.cancelled = true;
  engine_.cancel(s.stream.id());
}

void Generation::cancel() {
  for (auto& s : streams_) cancel_stream(s);
}

int Generation::prompt_tokens() const {
  int t = 0;
  for (const auto& s : streams_) t += s.prompt_tokens;
  return t;
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
  // Every choice of this prompt has ended on our side (stop strings): the engine can stop computing.
  PromptStream& s = streams_[size_t(prompt_of(c))];
  if (--s.open_choices == 0 && !s.stream.done()) cancel_stream(s);
}

bool Generation::pump(std::vector<ChoiceDelta>& out) {
  TokenEvent ev;
  for (size_t p = 0; p < streams_.size(); ++p) {
    PromptStream& s = streams_[p];
    const int base = int(p) * per_prompt_;
    while (s.open_choices > 0 && s.stream.poll(ev)) {
      if (ev.prompt) {
        s.prompt_logprobs.push_back(TokenInfo{ev.token, ev.logprob, std::move(ev.top)});
        continue;
      }
      if (ev.choice < 0 || ev.choice >= per_prompt_) continue;
      const int c = base + ev.choice;
      ChoiceText& ch = choices_[size_t(c)];
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
        d.choice = c;
        d.text = ch.stop.push(ch.detok->push(ev.token), /*may_match=*/ch.tokens >= min_tokens_);
        d.tokens.push_back(TokenInfo{ev.token, ev.logprob, std::move(ev.top)});
        const bool stopped = ch.stop.matched();
        out.push_back(std::move(d));
        if (stopped) {
          finish_choice(c, FinishReason::stop, out);
          continue;
        }
      }
      if (ev.finish != FinishReason::none) finish_choice(c, ev.finish, out, ev.error);
    }
  }
  return finished();
}

}  // namespace astrai
