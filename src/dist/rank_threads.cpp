#include "src/dist/rank_threads.h"

#include "src/dist/communicator.h"

namespace astrai {

RankThreads::RankThreads(int n) : n_(n) {
  for (int r = 1; r < n; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run(const std::function<void(int)>& fn) {
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    pending_ = n_ - 1;
    ++generation_;
  }
  cv_.notify_all();
  fn(0);
  spin_until([&] { return pending_.load() == 0; });  // re-locked below: orders the ranks' writes
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

void RankThreads::loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    spin_until([&] { return stop_.load() || generation_.load() != seen; });  // steps come back to back
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(rank);
    std::lock_guard lock(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace astrai
