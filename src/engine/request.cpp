#include "src/engine/request.h"

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
