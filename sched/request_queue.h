// The way into the step loop: a lock-free MPSC queue of commands (boost::lockfree::queue of
// pointers; any thread pushes, only the step loop pops) plus a wake-up. The step loop sleeps on a
// condition variable when it has nothing to do and is woken by every push, so a submit reaches an
// idle loop within microseconds and an idle loop burns no CPU. The mutex only orders the sleep
// against the wake-up (no lost wake-ups); commands themselves never wait for it.
#pragma once

#include <boost/lockfree/queue.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>

#include "src/core/status.h"
#include "src/engine/request.h"

namespace astrai {

struct Task;

struct Command {
  // pause / resume: hold the loop before its next step, and let it go (tests).
  // flush_cache: evict every prefix-cache page no sequence uses.
  enum class Kind { submit, cancel, check, pause, resume, flush_cache } kind = Kind::submit;
  RequestId id = 0;
  std::unique_ptr<Task> task;    // submit
  std::promise<Status> checked;  // check: the invariant check's result
  std::promise<int> flushed;     // flush_cache: pages freed
};

class CommandQueue {
 public:
  CommandQueue();
  ~CommandQueue();  // deletes commands never popped
  void push(std::unique_ptr<Command> c);
  std::unique_ptr<Command> pop();  // nullptr when empty; step loop only
  void wake();
  // Sleeps until woken (a push or wake()) or until `timeout`; returns at once when a wake-up
  // arrived since the previous wait.
  void wait(std::chrono::microseconds timeout);

 private:
  boost::lockfree::queue<Command*> queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool signaled_ = false;
};

}  // namespace astrai
