// The threads of a group of ranks in one process (tensor-parallel serving, data-parallel training):
// one thread per rank past rank 0, parked between jobs. run(fn) calls fn(r) for every rank at once
// (rank 0 on the calling thread) and returns when all have returned. A rank's collectives block
// until every rank reaches them, so the ranks must run concurrently.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "src/core/status.h"

namespace astrai {

class Communicator;

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

// Runs fn(r) on every rank of `threads` at once and returns the first failure (a real one before
// the cancellations it caused) once every rank has left. A rank that fails aborts the host group of
// `comms` (empty: a group of one, nothing to abort), so that no other rank waits in a host-side
// collective for it; the group is reset once every rank has left. A rank that throws (a failure in
// the middle of a step, after some of its collectives may be missing) also stops the device
// collectives in flight (NCCL: ncclCommAbort), from its own thread at once, since another rank's
// thread may be waiting on its device for them; on_throw (optional) hears of it first. When that
// leaves the group unusable, *dead is set to an error naming the rank and `group` ("tensor-parallel"),
// and the caller fails every later call with it.
Status run_on_ranks(RankThreads& threads, std::span<const std::unique_ptr<Communicator>> comms,
                    std::string_view group, Status* dead,
                    const std::function<void(int, const Status&)>& on_throw,
                    const std::function<Status(int)>& fn);

}  // namespace astrai
