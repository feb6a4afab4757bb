// RequestState: what the step loop and a request's consumer (Stream) share.
//
// Events travel through a bounded lock-free SPSC ring: the step-loop thread is the only producer,
// the Stream's owner the only consumer. When the ring is full the step loop keeps the surplus in
// `overflow` (producer-side only) and retries at the next step, so it never blocks on a slow
// consumer. After the step loop has exited it sets `closed`; from then on the producer is gone and
// the consumer may drain `overflow` itself, so no event is ever lost.
#pragma once

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstdint>
#include <deque>

#include "src/engine/request.h"

namespace astrai {

struct RequestState {
  RequestState(RequestId id_, int n_, int prompt_tokens_, size_t ring_capacity)
      : id(id_), n(n_), prompt_tokens(prompt_tokens_), ring(ring_capacity) {}

  const RequestId id;
  const int n;
  const int prompt_tokens;
  boost::lockfree::spsc_queue<TokenEvent> ring;
  // Bumped (release) by the producer after pushing or closing; consumers block on it in wait().
  std::atomic<uint32_t> signal{0};
  std::atomic<bool> closed{false};

  // Producer side (step loop) only, until `closed`.
  std::deque<TokenEvent> overflow;
  // Consumer side only.
  int finished_seen = 0;

  // Producer: moves queued overflow into the ring, then `ev` (or keeps it in overflow).
  // Returns true when at least one event reached the ring.
  bool push(TokenEvent ev);
  bool flush();
  void wake_consumers() {
    signal.fetch_add(1, std::memory_order_release);
    signal.notify_all();
  }
};

}  // namespace astrai
