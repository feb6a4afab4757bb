#include "sched/request_queue.h"

#include "sched/sequence.h"

namespace astrai {

CommandQueue::CommandQueue() : queue_(1024) {}

CommandQueue::~CommandQueue() {
  Command* c = nullptr;
  while (queue_.pop(c)) delete c;
}

void CommandQueue::push(std::unique_ptr<Command> c) {
  queue_.push(c.release());
  wake();
}

std::unique_ptr<Command> CommandQueue::pop() {
  Command* c = nullptr;
  if (!queue_.pop(c)) return nullptr;
  return std::unique_ptr<Command>(c);
}

void CommandQueue::wake() {
  {
    std::lock_guard g(mu_);
    signaled_ = true;
  }
  cv_.notify_one();
}

void CommandQueue::wait(std::chrono::microseconds timeout) {
  std::unique_lock l(mu_);
  cv_.wait_for(l, timeout, [&] { return signaled_; });
  signaled_ = false;
}

}  // namespace astrai
