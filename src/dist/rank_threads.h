// The threads of a group of ranks in one process (tensor-parallel serving, data-parallel training):
// one thread per rank past rank 0, parked between jobs. run(fn) calls fn(r) for every rank at once
// (rank 0 on the calling thread) and returns when all have returned. A rank's collectives block
// until every rank reaches them, so the ranks must run concurrently.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace astrai {

class RankThreads {
 public:
  explicit RankThreads(int n);
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;
  ~RankThreads();

  int size() const { return n_; }
  // fn must not throw (the caller turns its failures into values).
  void run(const std::function<void(int)>& fn);

 private:
  void loop(int rank);

  int n_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;  // under mu_
  // Written under mu_; read without it while spinning.
  std::atomic<uint64_t> generation_ = 0;
  std::atomic<int> pending_ = 0;
  std::atomic<bool> stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace astrai
