#include "src/engine/request.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "src/engine/request_state.h"

namespace astrai {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "none";
}

const char* constraint_kind_name(ConstraintKind k) {
  switch (k) {
    case ConstraintKind::none: return "none";
    case ConstraintKind::json_object: return "json_object";
    case ConstraintKind::json_schema: return "json_schema";
    case ConstraintKind::regex: return "regex";
  }
  return "none";
}

// ---- validation -----------------------------------------------------------------------------------

const char* request_field_name(RequestField f) {
  switch (f) {
    case RequestField::max_tokens: return "max_tokens";
    case RequestField::n: return "n";
    case RequestField::temperature: return "temperature";
    case RequestField::top_p: return "top_p";
    case RequestField::top_k: return "top_k";
    case RequestField::min_p: return "min_p";
    case RequestField::frequency_penalty: return "frequency_penalty";
    case RequestField::presence_penalty: return "presence_penalty";
    case RequestField::repetition_penalty: return "repetition_penalty";
    case RequestField::top_logprobs: return "top_logprobs";
    case RequestField::logit_bias: return "logit_bias";
    case RequestField::min_tokens: return "min_tokens";
  }
  return "?";
}

namespace {

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

ParamError fail(RequestField f, std::string message) {
  return ParamError{f, std::move(message)};
}

}  // namespace

std::optional<ParamError> validate_sampling(const SamplingParams& s, int max_tokens, int n, int vocab_size) {
  using F = RequestField;
  if (max_tokens < 1) return fail(F::max_tokens, "must be at least 1, got " + std::to_string(max_tokens));
  if (n < 1 || n > kMaxChoices)
    return fail(F::n, "must be in [1, " + std::to_string(kMaxChoices) + "], got " + std::to_string(n));
  // Written as !(in range) so that NaN fails too.
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
    return fail(F::temperature, "must be >= 0, got " + num(s.temperature));
  if (!(s.top_p > 0 && s.top_p <= 1)) return fail(F::top_p, "must be in (0, 1], got " + num(s.top_p));
  if (s.top_k < 0) return fail(F::top_k, "must be >= 0 (0: off), got " + std::to_string(s.top_k));
  if (!(s.min_p >= 0 && s.min_p <= 1)) return fail(F::min_p, "must be in [0, 1], got " + num(s.min_p));
  if (!std::isfinite(s.frequency_penalty)) return fail(F::frequency_penalty, "must be finite");
  if (!std::isfinite(s.presence_penalty)) return fail(F::presence_penalty, "must be finite");
  if (!(s.repetition_penalty > 0) || !std::isfinite(s.repetition_penalty))
    return fail(F::repetition_penalty, "must be > 0, got " + num(s.repetition_penalty));
  if (s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs)
    return fail(F::top_logprobs, "must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " +
                                     std::to_string(s.top_logprobs));
  for (const auto& [token, bias] : s.logit_bias) {
    if (token < 0 || (vocab_size > 0 && token >= vocab_size))
      return fail(F::logit_bias, "token " + std::to_string(token) + " is outside the vocabulary");
    if (!std::isfinite(bias)) return fail(F::logit_bias, "values must be finite");
  }
  if (s.min_tokens < 0) return fail(F::min_tokens, "must be >= 0, got " + std::to_string(s.min_tokens));
  return std::nullopt;
}

// ---- RequestState / Stream ------------------------------------------------------------------------

bool RequestState::flush() {
  bool moved = false;
  while (!overflow.empty() && ring.push(overflow.front())) {
    overflow.pop_front();
    moved = true;
  }
  return moved;
}

bool RequestState::push(TokenEvent ev) {
  bool moved = flush();
  if (overflow.empty() && ring.push(ev)) return true;
  overflow.push_back(std::move(ev));
  return moved;
}

// ---- Stream ---------------------------------------------------------------------------------------

Stream::Stream(std::shared_ptr<RequestState> s) : state_(std::move(s)) {}

RequestId Stream::id() const {
  return state_ ? state_->id : 0;
}

int Stream::prompt_tokens() const {
  return state_ ? state_->prompt_tokens : 0;
}

bool Stream::done() const {
  return !state_ || state_->finished_seen >= state_->n;
}

bool Stream::poll(TokenEvent& out) {
  if (!state_) return false;
  RequestState& s = *state_;
  bool got = s.ring.pop(out);
  // Once closed the producer is gone: what it could not push is ours to take.
  if (!got && s.closed.load(std::memory_order_acquire) && !s.overflow.empty()) {
    got = s.ring.pop(out);
    if (!got) {
      out = std::move(s.overflow.front());
      s.overflow.pop_front();
      got = true;
    }
  }
  if (got && out.finish != FinishReason::none) ++s.finished_seen;
  return got;
}

bool Stream::wait(TokenEvent& out) {
  if (!state_) return false;
  RequestState& s = *state_;
  for (;;) {
    if (done()) return false;
    const uint32_t seen = s.signal.load(std::memory_order_acquire);
    if (poll(out)) return true;
    if (s.closed.load(std::memory_order_acquire) && s.ring.read_available() == 0 && s.overflow.empty())
      return false;  // the engine is gone and nothing more will come
    s.signal.wait(seen, std::memory_order_acquire);
  }
}

}  // namespace astrai
