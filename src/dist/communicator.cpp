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
      statuses_(size_t(n)),
      values_(size_t(n), 0.0) {}

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

std::vector<double> Communicator::gather_values(double mine) {
  group_->values()[size_t(rank_)] = mine;
  group_->barrier();
  std::vector<double> out = group_->values();
  group_->barrier();  // every rank has read the values before any rank writes the next round's
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

// Every collective over host memory: each rank publishes its tensor's address; after a barrier the
// ranks split the work into disjoint ranges of elements (rank r the r-th), each element summed over
// the ranks in rank order (so every rank gets the same bits whatever the timing, and a reduce-scatter
// or a reduce of an element gives the bits an all-reduce would); a second barrier ends the
// collective. No two ranks write the same element, and an element is read by the rank that writes
// it (or, in all_gather, by others from a buffer its owner does not write).
class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<HostGroup> group, int rank) : Communicator(std::move(group), rank) {}

  void all_reduce_sum(Tensor t) override {
    check(t, "all_reduce_sum");
    const std::vector<float*> p = publish(t.data, t.numel(), "all_reduce_sum");
    const auto [b, e] = my_range(t.numel());
    for (int64_t i = b; i < e; ++i) {
      const float s = sum_at(p, i);
      for (float* q : p) q[i] = s;
    }
    group().barrier();
  }

  void reduce_scatter_sum(const Tensor& in, Tensor out) override {
    check(in, "reduce_scatter_sum");
    check(out, "reduce_scatter_sum");
    const int64_t n = out.numel();
    if (in.numel() != n * size())
      throw Error(invalid_argument("reduce_scatter_sum: the input has " + std::to_string(in.numel()) +
                                   " elements, not " + std::to_string(size()) + " blocks of the output's " +
                                   std::to_string(n)));
    const std::vector<float*> p = publish(in.data, in.numel(), "reduce_scatter_sum");
    // This rank alone reads block rank() of the inputs, so out may be its own block.
    float* o = out.ptr<float>();
    for (int64_t i = 0, at = n * rank(); i < n; ++i) o[i] = sum_at(p, at + i);
    group().barrier();
  }

  void all_gather(const Tensor& in, Tensor out) override {
    check(in, "all_gather");
    check(out, "all_gather");
    const int64_t n = in.numel();
    if (out.numel() != n * size())
      throw Error(invalid_argument("all_gather: the output has " + std::to_string(out.numel()) +
                                   " elements, not " + std::to_string(size()) + " blocks of the input's " +
                                   std::to_string(n)));
    const std::vector<float*> p = publish(in.data, n, "all_gather");
    float* o = out.ptr<float>();
    for (int r = 0; r < size(); ++r)
      if (o + n * r != p[size_t(r)]) std::copy_n(p[size_t(r)], n, o + n * r);
    group().barrier();
  }

  void reduce_sum(Tensor t, int root) override {
    check(t, "reduce_sum");
    if (root < 0 || root >= size())
      throw Error(invalid_argument("reduce_sum: root " + std::to_string(root) +
                                   " is not a rank of a group of " + std::to_string(size())));
    const std::vector<float*> p = publish(t.data, t.numel(), "reduce_sum");
    const auto [b, e] = my_range(t.numel());
    for (int64_t i = b; i < e; ++i) p[size_t(root)][i] = sum_at(p, i);
    group().barrier();
  }

 private:
  static void check(const Tensor& t, const char* what) {
    if (t.device != Device::cpu || t.dtype != DType::f32 || !t.is_contiguous())
      throw Error(invalid_argument(std::string(what) +
                                   ": the CPU group reduces contiguous f32 host tensors, got " +
                                   std::string(dtype_name(t.dtype)) + " " + t.shape_str()));
  }

  // Publishes this rank's buffer and returns every rank's, once all have arrived with `count`
  // elements each (an error on every rank otherwise).
  std::vector<float*> publish(void* data, int64_t count, const char* what) {
    HostGroup& g = group();
    g.counts()[size_t(rank())] = count;
    g.slots()[size_t(rank())] = data;
    g.barrier();
    for (int r = 0; r < size(); ++r)
      if (g.counts()[size_t(r)] != count) {
        g.barrier();
        throw Error(internal_error(std::string(what) + ": ranks passed tensors of different sizes"));
      }
    std::vector<float*> p(static_cast<size_t>(size()));
    for (int r = 0; r < size(); ++r) p[size_t(r)] = static_cast<float*>(g.slots()[size_t(r)]);
    return p;
  }

  // This rank's share [b, e) of n elements.
  std::pair<int64_t, int64_t> my_range(int64_t n) const {
    const int64_t chunk = (n + size() - 1) / size();
    const int64_t b = std::min(n, chunk * rank());
    return {b, std::min(n, b + chunk)};
  }

  static float sum_at(const std::vector<float*>& p, int64_t i) {
    float s = p[0][i];
    for (size_t r = 1; r < p.size(); ++r) s += p[r][i];
    return s;
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
