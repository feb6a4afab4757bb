// Wakes a connection coroutine from the engine's step-loop thread without blocking it or polling:
// the notify hook posts (at most one pending post: an atomic flag coalesces them) to the
// coroutine's strand, where the post cancels the timer the coroutine is suspended on.
//
// No lost wake-ups: the post sets `signaled_` (strand-only state) before cancelling the timer, and
// wait() returns at once when it is set. So a post that runs before the coroutine reaches its
// async_wait (e.g. while it writes, or before a parallel `||` group has started the wait) is not
// lost; at worst the coroutine drains the Stream once more and finds nothing.
// Asio header: include only from the few .cpp files that run coroutines.
#pragma once

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <memory>

namespace astrai::net {

class Waker : public std::enable_shared_from_this<Waker> {
 public:
  explicit Waker(const boost::asio::any_io_executor& ex) : timer_(ex) {}

  // The Request::notify hook; safe from any thread, never blocks.
  std::function<void()> hook() {
    return [self = shared_from_this()] { self->wake(); };
  }

  void wake() {
    if (pending_.exchange(true, std::memory_order_acq_rel)) return;  // a post is already on its way
    boost::asio::post(timer_.get_executor(), [self = shared_from_this()] {
      self->pending_.store(false, std::memory_order_release);
      self->signaled_ = true;
      self->timer_.cancel();
    });
  }

  // Suspends until wake() (or the wait is cancelled for another reason). Must run on the strand.
  boost::asio::awaitable<void> wait() {
    if (!signaled_) {
      timer_.expires_at(boost::asio::steady_timer::time_point::max());
      co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    signaled_ = false;
  }

 private:
  boost::asio::steady_timer timer_;
  std::atomic<bool> pending_{false};
  bool signaled_ = false;  // a wake-up arrived since the last wait(); touched only on the strand
};

}  // namespace astrai::net
