// One generation request on the net side, without any Asio: submits token ids to the Engine,
// then turns the Stream's TokenEvents into per-choice text deltas (incremental UTF-8-safe
// detokenization + stop strings). A matched stop string is trimmed and, once every choice is over,
// cancels the request in the engine so its pages are freed at the next step.
//
// The owner (a connection coroutine) calls pump() each time the engine's notify hook wakes it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/core/status.h"
#include "src/engine/engine.h"
#include "src/engine/stop_strings.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::net {

class ServerMetrics;

struct GenerationSpec {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 0;  // 0: what is left of the context window
  int n = 1;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

struct TokenInfo {
  int32_t id = -1;
  float logprob = 0;
  std::vector<TopLogprob> top;
};

struct ChoiceDelta {
  int choice = 0;
  std::string text;               // new text, stop strings trimmed
  std::vector<TokenInfo> tokens;  // tokens behind this delta (for logprobs / token frames)
  std::string finish;             // "" while running; "stop" | "length" | "cancelled" | "error"
  std::string stop_string;        // the stop string that ended the choice, if any
  std::string error;              // when finish == "error"
};

class Generation {
 public:
  // Fails with invalid_argument (bad prompt / params) or resource_exhausted (queue full).
  static Result<std::unique_ptr<Generation>> start(Engine& engine, const Tokenizer& tok, GenerationSpec spec,
                                                   std::function<void()> notify, ServerMetrics* metrics);
  ~Generation();  // cancels in the engine if still running (client gone)
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Pops every ready event; appends deltas (possibly none). Returns true once all choices finished.
  bool pump(std::vector<ChoiceDelta>& out);
  void cancel();
  bool finished() const { return finished_count_ == int(choices_.size()); }

  int n() const { return int(choices_.size()); }
  int prompt_tokens() const { return prompt_tokens_; }
  int completion_tokens() const;  // all choices
  int completion_tokens(int choice) const { return choices_[choice].tokens; }
  RequestId id() const { return stream_.id(); }

 private:
  Generation(Engine& engine, const Tokenizer& tok) : engine_(engine), tok_(tok) {}
  struct Choice {
    std::unique_ptr<IncrementalDetokenizer> detok;
    StopMatcher stop;
    int tokens = 0;
    bool done = false;
  };
  void finish_choice(int c, std::string reason, std::vector<ChoiceDelta>& out, std::string error = {});

  Engine& engine_;
  const Tokenizer& tok_;
  Stream stream_;
  std::vector<Choice> choices_;
  int finished_count_ = 0;
  int prompt_tokens_ = 0;
  bool cancelled_ = false;
  ServerMetrics* metrics_ = nullptr;
  std::chrono::steady_clock::time_point start_, last_token_;
  bool first_token_seen_ = false;
};

}  // namespace astrai::net
