// Wakes a connection coroutine from the engine's step-loop thread without blocking it or polling:
// the notify hook posts (at most one pending post: an atomic flag coalesces them) to the
// coroutine's strand, where the post cancels the timer the coroutine is suspended on.
//
// No lost wake-ups: the coroutine always drains the Stream after it resumes and before it waits
// again, and the post runs on the same strand, so it can only run while the coroutine is suspended.
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
      self->timer_.cancel();
    });
  }

  // Suspends until wake() (or the timer is cancelled for another reason).
  boost::asio::awaitable<void> wait() {
    timer_.expires_at(boost::asio::steady_timer::time_point::max());
    co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  }

 private:
  boost::asio::steady_timer timer_;
  std::atomic<bool> pending_{false};
};

}  // namespace astrai::net
