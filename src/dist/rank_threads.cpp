#include "src/dist/rank_threads.h"

#include <exception>
#include <string>

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

Status run_on_ranks(RankThreads& threads, std::span<const std::unique_ptr<Communicator>> comms,
                    std::string_view group, Status* dead,
                    const std::function<void(int, const Status&)>& on_throw,
                    const std::function<Status(int)>& fn) {
  std::vector<Status> st(static_cast<size_t>(threads.size()));
  bool aborted = false;
  std::mutex mu;
  threads.run([&](int r) {
    bool threw = true;
    try {
      st[size_t(r)] = fn(r);
      threw = false;
    } catch (const Error& e) {
      st[size_t(r)] = e.status();
    } catch (const std::exception& e) {
      st[size_t(r)] = internal_error("rank " + std::to_string(r) + ": " + e.what());
    } catch (...) {
      st[size_t(r)] = internal_error("rank " + std::to_string(r) + ": unknown exception");
    }
    const Status& mine = st[size_t(r)];
    if (mine.ok() || mine.code() == ErrorCode::cancelled || comms.empty()) return;
    std::lock_guard lock(mu);
    aborted = true;
    comms[size_t(r)]->abort();
    if (!threw) return;
    if (on_throw) on_throw(r, mine);
    bool unusable = false;
    for (const auto& c : comms) unusable |= c->abort_device();
    if (unusable && dead)
      *dead = Status(mine.code(), "the " + std::string(group) + " group was aborted after rank " +
                                      std::to_string(r) + " failed in the middle of a step (" +
                                      mine.message() + ")");
  });
  if (aborted) comms[0]->reset();
  for (const Status& s : st)
    if (!s.ok() && s.code() != ErrorCode::cancelled) return s;
  for (const Status& s : st)
    if (!s.ok()) return s;
  return {};
}

}  // namespace astrai
