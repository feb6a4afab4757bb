// Collectives between the ranks of one tensor-parallel group (one process, one rank per device).
// A Communicator is one rank's handle; every rank of the group calls each collective in the same
// order with tensors of the same shape and dtype. Implementations: the in-process CPU group below
// (threads sharing memory; what CI runs) and NCCL on CUDA devices (gpu/nccl_communicator.*).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "src/backend/backend.h"
#include "src/core/status.h"
#include "src/core/tensor.h"

namespace astrai {

class HostGroup;

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // t = the elementwise sum of every rank's t, in place on every rank. Ordered like a backend op on
  // this rank's backend: on a GPU it is enqueued on the backend's stream (so a graph capture records
  // it); on the CPU it returns with the sum in place. t must be contiguous. Every rank gets the same
  // bits (the CPU group sums in rank order; NCCL's all-reduce is deterministic for a fixed group).
  virtual void all_reduce_sum(Tensor t) = 0;

  // The collectives of ZeRO data parallelism (train/data_parallel.h), ordered like all_reduce_sum
  // and with the same per-element sum (so a reduce-scatter and a reduce of some elements give the
  // bits an all-reduce of them would). Contiguous f32 tensors.
  //   reduce_scatter_sum: `in` is size() blocks of out.numel() elements; out = the sum over the
  //     ranks of block rank(). out may be in's own block rank() (in place).
  //   all_gather: out is size() blocks of in.numel() elements; block r = rank r's in. in may be
  //     out's own block rank() (in place).
  //   reduce_sum: t = the sum over the ranks of t on rank `root`; the other ranks' t is unchanged.
  virtual void reduce_scatter_sum(const Tensor& in, Tensor out) = 0;
  virtual void all_gather(const Tensor& in, Tensor out) = 0;
  virtual void reduce_sum(Tensor t, int root) = 0;

  // Overlapping collectives with the backend's work (the gradient buckets of data parallelism):
  // after fork_side(), collectives run on a side stream, after the work queued on the backend's
  // stream before that fork_side() (call it again before collectives that need later work), so the
  // backend goes on computing while they run; join_side() makes the backend's stream wait for every
  // side collective and sends later collectives to the backend's stream again. Every rank forks and joins at
  // the same points of its sequence of collectives. No-ops where collectives run synchronously on the calling
  // thread (the CPU group).
  virtual void fork_side() {}
  virtual void join_side() {}

  // Host-side collectives (every implementation here is one process, so these meet in host memory).
  // Returns once every rank has called it. Throws when the group was aborted.
  void barrier();
  // Every rank passes its own status; all get the same answer: ok when every rank is ok, else the
  // lowest failing rank's status. What keeps a step all-or-nothing: a rank that cannot run a step
  // (a bad batch, out of memory) must not leave the others waiting in an all-reduce.
  Status agree(const Status& mine);
  // Every rank passes one value; all get every rank's, in rank order.
  std::vector<double> gather_values(double mine);
  // Wakes every rank waiting in (and fails every later) collective: a rank failed in the middle of
  // a step. reset() makes the group usable again once every rank has left the failed step.
  void abort();
  void reset();
  // Stops the device collectives in flight and to come (NCCL: ncclCommAbort), after a rank failed
  // between them: a peer's kernels would otherwise wait for it forever. Callable from any thread.
  // Returns true when the group can never be used again (the CPU group has nothing on a device).
  virtual bool abort_device() { return false; }

 protected:
  // Ranks of one group share `group` (make_host_group).
  Communicator(std::shared_ptr<HostGroup> group, int rank);
  HostGroup& group() const { return *group_; }

 private:
  std::shared_ptr<HostGroup> group_;
  int rank_ = 0, size_ = 1;
};

// The in-process group of n ranks over host memory (CPU backends; f32 tensors).
std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(int n);

// One communicator per backend (all on the same device type): the CPU group for CPU backends, the
// registered factory (NCCL) for CUDA backends; an error when that device has none.
Result<std::vector<std::unique_ptr<Communicator>>> make_communicators(std::span<Backend* const> backends);

using CommunicatorFactory =
    std::function<Result<std::vector<std::unique_ptr<Communicator>>>(std::span<Backend* const>)>;
void register_communicator_factory(Device device, CommunicatorFactory factory);

// ---- for implementations ----------------------------------------------------------------------
// Yields while !done() for up to ~50 microseconds; returns whether done() became true. For waits
// that are usually that short (ranks meeting in a step), before sleeping on a condition variable.
template <typename F>
bool spin_until(F done) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!done()) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(50)) return false;
    std::this_thread::yield();
  }
  return true;
}

// The rendezvous the ranks of one process share: a reusable barrier that can be aborted, and a
// slot per rank for exchanging a pointer, a count and a status between two barriers.
class HostGroup {
 public:
  explicit HostGroup(int n);
  int size() const { return n_; }
  void barrier();  // throws Error(cancelled) once aborted
  void abort();
  void reset();
  std::vector<void*>& slots() { return slots_; }
  std::vector<int64_t>& counts() { return counts_; }
  std::vector<Status>& statuses() { return statuses_; }
  std::vector<double>& values() { return values_; }

 private:
  struct State;
  std::shared_ptr<State> state_;
  int n_;
  std::vector<void*> slots_;
  std::vector<int64_t> counts_;
  std::vector<Status> statuses_;
  std::vector<double> values_;
};

}  // namespace astrai
