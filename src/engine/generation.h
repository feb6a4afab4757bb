// One generation pump, shared by the server (SSE, WebSocket) and `astrai generate`: submits a
// request, then turns its Stream's TokenEvents into per-choice text deltas (incremental UTF-8-safe
// detokenization + stop strings). A matched stop string is trimmed and ends its choice; once every
// choice is over on our side the request is cancelled in the engine so its pages are freed at the
// next step. No I/O and no Asio: the owner calls pump() whenever the request's notify hook fires.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/core/status.h"
#include "src/engine/request.h"
#include "src/engine/stop_strings.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {

class Engine;

struct GenerationSpec {
  std::vector<int32_t> prompt;
  // Further prompts with the same parameters (a completions request with a list of prompts): each
  // is its own engine request, and prompt p's choice j is the generation's choice p * n + j.
  std::vector<std::vector<int32_t>> more_prompts;
  SamplingParams sampling;
  int max_tokens = 0;  // 0: what is left of the context window; larger values are capped to it
  int n = 1;
  std::vector<std::string> stop;  // stop strings, matched on the detokenized text
  std::vector<int32_t> stop_ids;  // in addition to the model's eos / stop ids
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;  // a matched stop string stays in the text (vLLM)
  bool skip_special_tokens = true;          // special tokens' text is left out (vLLM's default)
  ConstraintSpec constraint;                // structured output; compiled (cached) against `tok` by start()
  int prompt_logprobs = -1;  // Request::prompt_logprobs: Generation::prompt_logprobs() gathers them
};

struct TokenInfo {
  int32_t id = -1;
  float logprob = 0;
  std::vector<TopLogprob> top;
};

struct ChoiceDelta {
  int choice = 0;
  std::string text;                          // new text, stop strings trimmed
  std::vector<TokenInfo> tokens;             // tokens behind this delta (for logprobs / token frames)
  FinishReason finish = FinishReason::none;  // set on the choice's last delta
  std::string stop_string;                   // the stop string that ended the choice, if any
  std::string error;                         // when finish == error
};

// What a generation reports as it goes (the server's latency histograms and gauges). Called on the
// pump's owner's thread. on_start / on_end pair up: on_end comes exactly once for each on_start, and
// neither comes when the request was never submitted.
class GenerationObserver {
 public:
  virtual ~GenerationObserver() = default;
  virtual void on_start() {}
  // A token arrived, `since` seconds after the submit (first token) or after the previous token.
  virtual void on_token(bool first, double since) { (void)first, (void)since; }
  // complete: every choice finished (false: abandoned, e.g. the client went away).
  virtual void on_end(bool complete, double seconds) { (void)complete, (void)seconds; }
};

// The engine as a generation sees it. engine_port(Engine&) is the real one; tests pass fakes.
struct EnginePort {
  std::function<Result<Stream>(Request)> submit;
  std::function<void(RequestId)> cancel;
  int64_t context_window = 0;  // max_tokens is capped so that prompt + output fit in it
};
EnginePort engine_port(Engine& engine);

class Generation {
 public:
  // `tok` must outlive the generation (its detokenizers read it). Fails, with nothing submitted and
  // nothing reported to the observer, with invalid_argument (bad prompt / params) or
  // resource_exhausted (queue full), or whatever else submit fails with.
  static Result<std::unique_ptr<Generation>> start(EnginePort engine, const Tokenizer& tok,
                                                   GenerationSpec spec, const std::function<void()>& notify,
                                                   GenerationObserver* observer = nullptr);
  static Result<std::unique_ptr<Generation>> start(Engine& engine, const Tokenizer& tok, GenerationSpec spec,
                                                   const std::function<void()>& notify,
                                                   GenerationObserver* observer = nullptr);
  ~Generation();  // cancels in the engine if still running (the consumer is gone)
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Pops every ready event; appends deltas (possibly none). Returns true once all choices finished.
  bool pump(std::vector<ChoiceDelta>& out);
  void cancel();
  bool finished() const { return finished_count_ == int(choices_.size()); }

  int n() const { return int(choices_.size()); }  // all prompts' choices
  int prompts() const { return int(streams_.size()); }
  int prompt_of(int choice) const { return choice / per_prompt_; }
  int prompt_tokens() const;  // all prompts
  // Request::prompt_logprobs of prompt p: one per prompt token after the first, in order, as they
  // arrived (all of them before the first delta of any of p's choices).
  const std::vector<TokenInfo>& prompt_logprobs(int p = 0) const {
    return streams_[size_t(p)].prompt_logprobs;
  }
  int completion_tokens() const;  // all choices
  int completion_tokens(int choice) const { return choices_[size_t(choice)].tokens; }
  RequestId id() const { return streams_.front().stream.id(); }

 private:
  using Clock = std::chrono::steady_clock;
  explicit Generation(EnginePort engine) : engine_(std::move(engine)) {}
  // One choice's text state.
  struct ChoiceText {
    std::unique_ptr<IncrementalDetokenizer> detok;
    StopMatcher stop;
    int tokens = 0;
    bool done = false;
  };
  // One prompt's engine request.
  struct PromptStream {
    Stream stream;
    int prompt_tokens = 0;
    std::vector<TokenInfo> prompt_logprobs;
    int open_choices = 0;  // not yet finished on our side
    bool cancelled = false;
  };
  void finish_choice(int c, FinishReason reason, std::vector<ChoiceDelta>& out, std::string error = {});
  void cancel_stream(PromptStream& s);

  EnginePort engine_;
  std::vector<PromptStream> streams_;
  int per_prompt_ = 1;  // choices per prompt (n)
  int min_tokens_ = 0;  // SamplingParams::min_tokens: no stop string ends before a choice has these
  std::vector<ChoiceText> choices_;
  int finished_count_ = 0;
  GenerationObserver* observer_ = nullptr;
  Clock::time_point start_, last_token_;
  bool first_token_seen_ = false;
};

}  // namespace astrai
