// The CPU backend's thread count holds on whichever thread calls its ops. OpenMP keeps the count
// per thread (nthreads-var), and the engine's step loop and the training ranks call ops on threads
// other than the one that made the backend: `astrai serve --threads 1` used to run teams of every
// core there.
#include <omp.h>

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/op_test_util.h"

namespace astrai::test {
namespace {

// The size of the team a parallel region started on the calling thread gets now.
int team_here() {
  int n = 0;
#pragma omp parallel
  {
#pragma omp single
    n = omp_get_num_threads();
  }
  return n;
}

// The team size on a thread that has never set its own count (OMP_NUM_THREADS, else every core).
int default_team() {
  int n = 0;
  std::thread([&] { n = team_here(); }).join();
  return n;
}

// One op of `be` on shapes large enough that every parallel region in it is enabled.
using Op = std::function<void(Backend&)>;
std::vector<std::pair<std::string, Op>> ops() {
  const int64_t R = 64, D = 8192;  // R * D > 2^18: the elementwise and norm ops' thresholds
  auto rows = [](Backend& be, int64_t r, int64_t d) { return zeros(be, {r, d}); };
  return {
      {"add",
       [=](Backend& be) {
         auto a = rows(be, R, D), b = rows(be, R, D), out = rows(be, R, D);
         be.add(a.t, b.t, out.t);
       }},
      {"swiglu",
       [=](Backend& be) {
         auto g = rows(be, R, D), u = rows(be, R, D), out = rows(be, R, D);
         be.swiglu(g.t, u.t, out.t);
       }},
      {"rms_norm",
       [=](Backend& be) {
         auto x = rows(be, R, D), w = zeros(be, {D}), out = rows(be, R, D);
         be.rms_norm(x.t, w.t, 1e-6f, out.t);
       }},
      {"linear",
       [=](Backend& be) {
         auto x = rows(be, 64, 512), w = rows(be, 512, 512), out = rows(be, 64, 512);
         be.linear(x.t, w.t, nullptr, out.t);
       }},
  };
}

// Makes a backend of `threads` on this thread, runs `op` on a fresh thread and returns the team
// size a parallel region gets there right after the op.
int team_after_op_on_fresh_thread(int threads, const Op& op) {
  auto be = make_backend(BackendOptions{Device::cpu, threads, 0}).value();
  int n = 0;
  std::thread([&] {
    op(*be);
    n = team_here();
  }).join();
  return n;
}

TEST_CASE("a CPU backend of one thread runs teams of one on a thread that did not make it", "[unit]") {
  if (default_team() == 1) WARN("OpenMP's default here is one thread: this case cannot tell the fix apart");
  for (const auto& [name, op] : ops()) {
    INFO(name);
    CHECK(team_after_op_on_fresh_thread(1, op) == 1);
  }
}

TEST_CASE("a CPU backend of more threads than OpenMP's default runs teams of that many on any thread",
          "[unit]") {
  const int threads = default_team() + 1;  // differs from what a fresh thread gets by itself
  for (const auto& [name, op] : ops()) {
    INFO(name);
    CHECK(team_after_op_on_fresh_thread(threads, op) == threads);
  }
}

TEST_CASE("two CPU backends of different thread counts called on one thread each run their own teams",
          "[unit]") {
  auto one = make_backend(BackendOptions{Device::cpu, 1, 0}).value();
  auto three = make_backend(BackendOptions{Device::cpu, 3, 0}).value();
  const Op add = ops().front().second;
  std::vector<int> teams;
  std::thread([&] {
    for (Backend* be : {one.get(), three.get(), one.get()}) {
      add(*be);
      teams.push_back(team_here());
    }
  }).join();
  CHECK(teams == std::vector<int>{1, 3, 1});
}

}  // namespace
}  // namespace astrai::test
