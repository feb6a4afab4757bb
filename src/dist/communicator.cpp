#include "src/dist/communicator.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

namespace astrai {

// ---- HostGroup: a generation-counting barrier that can be aborted ------------------------------

struct HostGroup::State {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;                       // under mu
  std::atomic<uint64_t> generation = 0;  // written under mu; read without it while spinning
  std::atomic<bool> aborted = false;     // likewise
};

HostGroup::HostGroup(int n)
    : state_(std::make_shared<State>()),
      n_(n),
      slots_(size_t(n), nullptr),
      counts_(size_t(n), 0),
      statuses_(size_t(n)) {}

void HostGroup::barrier() {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (s.aborted) throw Error(Status(ErrorCode::cancelled, "tensor-parallel group aborted by a failed rank"));
  const uint64_t gen = s.generation;
  if (++s.arrived == n_) {
    s.arrived = 0;
    ++s.generation;
    s.cv.notify_all();
    return;
  }
  // Ranks meet twice or more per step, microseconds apart on a GPU: yield for a short while before
  // sleeping on the condition variable (a wake-up costs tens of microseconds). The lock is taken
  // again either way, which orders every rank's writes before the barrier with the reads after it.
  lock.unlock();
  spin_until([&] { return s.generation != gen || s.aborted; });
  lock.lock();
  s.cv.wait(lock, [&] { return s.generation != gen || s.aborted; });
  if (s.generation == gen)
    throw Error(Status(ErrorCode::cancelled, "tensor-parallel group aborted by a failed rank"));
}

void HostGroup::abort() {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  s.aborted = true;
  s.cv.notify_all();
}

void HostGroup::reset() {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  s.aborted = false;
  s.arrived = 0;
  ++s.generation;  // a rank still counted in an aborted barrier's round starts afresh
}

// ---- Communicator's host-side collectives -------------------------------------------------------

Communicator::Communicator(std::shared_ptr<HostGroup> group, int rank)
    : group_(std::move(group)), rank_(rank), size_(group_->size()) {}

void Communicator::barrier() {
  group_->barrier();
}

Status Communicator::agree(const Status& mine) {
  group_->statuses()[size_t(rank_)] = mine;
  group_->barrier();
  Status out;
  for (const Status& s : group_->statuses())
    if (!s.ok()) {
      out = s;
      break;
    }
  group_->barrier();  // every rank has read the statuses before any rank writes the next round's
  return out;
}

void Communicator::abort() {
  group_->abort();
}
void Communicator::reset() {
  group_->reset();
}

// ---- the CPU group -------------------------------------------------------------------------------

namespace {

// all_reduce_sum over host memory: each rank publishes its tensor's address; after a barrier rank r
// sums the r-th chunk of elements over all ranks (in rank order, so every rank gets the same bits
// whatever the timing) and writes the sum into every rank's tensor; a second barrier ends the
// collective. Chunks are disjoint, so no two ranks touch the same element.
class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<HostGroup> group, int rank) : Communicator(std::move(group), rank) {}

  void all_reduce_sum(Tensor t) override {
    if (t.device != Device::cpu || t.dtype != DType::f32 || !t.is_contiguous())
      throw Error(invalid_argument("all_reduce_sum: the CPU group reduces contiguous f32 host tensors, got " +
                                   std::string(dtype_name(t.dtype)) + " " + t.shape_str()));
    HostGroup& g = group();
    const int n = size();
    g.counts()[size_t(rank())] = t.numel();
    g.slots()[size_t(rank())] = t.data;
    g.barrier();
    for (int r = 0; r < n; ++r)
      if (g.counts()[size_t(r)] != t.numel()) {
        g.barrier();
        throw Error(internal_error("all_reduce_sum: ranks passed tensors of different sizes"));
      }
    const int64_t N = t.numel(), chunk = (N + n - 1) / n;
    const int64_t b = std::min(N, chunk * rank()), e = std::min(N, b + chunk);
    std::vector<float*> p(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) p[size_t(r)] = static_cast<float*>(g.slots()[size_t(r)]);
    for (int64_t i = b; i < e; ++i) {
      float s = p[0][i];
      for (int r = 1; r < n; ++r) s += p[size_t(r)][i];
      for (int r = 0; r < n; ++r) p[size_t(r)][i] = s;
    }
    g.barrier();
  }
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(int n) {
  auto group = std::make_shared<HostGroup>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<CpuCommunicator>(group, r));
  return out;
}

namespace {
std::mutex factories_mu;
std::map<Device, CommunicatorFactory>& factories() {
  static std::map<Device, CommunicatorFactory> f;
  return f;
}
}  // namespace

void register_communicator_factory(Device device, CommunicatorFactory factory) {
  std::lock_guard lock(factories_mu);
  factories()[device] = std::move(factory);
}

Result<std::vector<std::unique_ptr<Communicator>>> make_communicators(std::span<Backend* const> backends) {
  if (backends.empty()) return invalid_argument("a tensor-parallel group needs at least one rank");
  const Device d = backends[0]->device();
  for (Backend* b : backends)
    if (b->device() != d) return invalid_argument("a tensor-parallel group must be on one kind of device");
  if (d == Device::cpu) return make_cpu_communicators(int(backends.size()));
  CommunicatorFactory f;
  {
    std::lock_guard lock(factories_mu);
    auto it = factories().find(d);
    if (it != factories().end()) f = it->second;
  }
  if (!f) return unsupported("tensor parallelism on this device needs NCCL, which this build does not have");
  return f(backends);
}

}  // namespace astrai
