// The in-process CPU group (src/dist/communicator.h): all-reduce sums in rank order on every rank,
// agree returns the lowest failing rank's status, abort wakes a rank waiting in a collective;
// reduce_scatter_sum, all_gather and reduce_sum (data parallelism's ZeRO) against plain loops.
// Every rank runs on its own thread; no verdict depends on which thread gets where first.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <thread>
#include <vector>

#include "src/dist/communicator.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

// Runs fn(rank) on n threads at once and joins them.
template <typename F>
void on_threads(int n, F fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back([&fn, r] { fn(r); });
  for (auto& th : t) th.join();
}

}  // namespace

TEST_CASE("cpu all_reduce_sum leaves the rank-order float sum on every rank", "[threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int n : {1, 2, 3, 4}) {
    for (int64_t numel : {int64_t(1), int64_t(3), int64_t(1000), int64_t(4099)}) {
      INFO("ranks " << n << " elements " << numel);
      auto comms = make_cpu_communicators(n);
      std::vector<std::vector<float>> data(static_cast<size_t>(n));
      std::uniform_real_distribution<float> u(-10.f, 10.f);
      for (auto& d : data)
        for (int64_t i = 0; i < numel; ++i) d.push_back(u(rng));
      std::vector<float> want(static_cast<size_t>(numel));
      for (int64_t i = 0; i < numel; ++i) {
        float s = data[0][size_t(i)];
        for (int r = 1; r < n; ++r) s += data[size_t(r)][size_t(i)];
        want[size_t(i)] = s;
      }
      // Two rounds over the same communicators: the barriers are reusable.
      for (int round = 0; round < 2; ++round) {
        auto work = data;
        on_threads(n, [&](int r) {
          comms[size_t(r)]->all_reduce_sum(Tensor(work[size_t(r)].data(), DType::f32, {numel}));
        });
        for (int r = 0; r < n; ++r) REQUIRE(work[size_t(r)] == want);
      }
    }
  }
}

TEST_CASE("cpu all_reduce_sum rejects tensors it cannot reduce", "[threads]") {
  auto comms = make_cpu_communicators(1);
  std::vector<uint16_t> half(4);
  CHECK_THROWS_WITH(comms[0]->all_reduce_sum(Tensor(half.data(), DType::bf16, {4})), Catch::Contains("f32"));
}

TEST_CASE("agree gives every rank the lowest failing rank's status", "[threads]") {
  auto comms = make_cpu_communicators(3);
  std::vector<Status> got(3);
  on_threads(3, [&](int r) {
    Status mine = r == 0 ? Status() : invalid_argument("rank " + std::to_string(r) + " failed");
    got[size_t(r)] = comms[size_t(r)]->agree(mine);
  });
  for (const Status& s : got) {
    CHECK(s.code() == ErrorCode::invalid_argument);
    CHECK(s.message() == "rank 1 failed");
  }
  on_threads(3, [&](int r) { got[size_t(r)] = comms[size_t(r)]->agree(Status()); });
  for (const Status& s : got) CHECK(s.ok());
}

TEST_CASE("abort wakes a rank waiting in a collective and reset makes the group usable again", "[threads]") {
  auto comms = make_cpu_communicators(2);
  bool threw = false;
  // Rank 0 waits for rank 1, which aborts instead of arriving: whether rank 0 is already waiting or
  // arrives after the abort, it throws.
  std::thread waiter([&] {
    try {
      comms[0]->barrier();
    } catch (const Error& e) {
      threw = e.status().code() == ErrorCode::cancelled;
    }
  });
  comms[1]->abort();
  waiter.join();
  CHECK(threw);
  CHECK_THROWS_AS(comms[1]->barrier(), Error);
  comms[0]->reset();
  std::vector<float> a{1, 2}, b{3, 4};
  on_threads(
      2, [&](int r) { comms[size_t(r)]->all_reduce_sum(Tensor(r ? b.data() : a.data(), DType::f32, {2})); });
  CHECK(a == std::vector<float>{4, 6});
  CHECK(b == std::vector<float>{4, 6});
}

namespace {

std::vector<std::vector<float>> random_ranks(std::mt19937_64& rng, int n, int64_t numel) {
  std::uniform_real_distribution<float> u(-10.f, 10.f);
  std::vector<std::vector<float>> data(static_cast<size_t>(n));
  for (auto& d : data)
    for (int64_t i = 0; i < numel; ++i) d.push_back(u(rng));
  return data;
}

// Element i summed over the ranks in rank order.
float rank_order_sum(const std::vector<std::vector<float>>& data, int64_t i) {
  float s = data[0][size_t(i)];
  for (size_t r = 1; r < data.size(); ++r) s += data[r][size_t(i)];
  return s;
}

}  // namespace

TEST_CASE("cpu reduce_scatter_sum gives each rank the rank-order sum of its block, in place or not",
          "[threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int n : {1, 2, 3}) {
    auto comms = make_cpu_communicators(n);
    for (int64_t block : {int64_t(1), int64_t(5), int64_t(1031)}) {
      INFO("ranks " << n << " block " << block);
      const auto data = random_ranks(rng, n, block * n);
      for (bool in_place : {false, true}) {
        auto work = data;
        std::vector<std::vector<float>> out(static_cast<size_t>(n),
                                            std::vector<float>(static_cast<size_t>(block)));
        on_threads(n, [&](int r) {
          float* o = in_place ? work[size_t(r)].data() + block * r : out[size_t(r)].data();
          comms[size_t(r)]->reduce_scatter_sum(Tensor(work[size_t(r)].data(), DType::f32, {block * n}),
                                               Tensor(o, DType::f32, {block}));
        });
        for (int r = 0; r < n; ++r)
          for (int64_t i = 0; i < block; ++i) {
            const float got = in_place ? work[size_t(r)][size_t(block * r + i)] : out[size_t(r)][size_t(i)];
            REQUIRE(got == rank_order_sum(data, block * r + i));
          }
      }
    }
  }
}

TEST_CASE("cpu all_gather gives every rank every rank's block in rank order, in place or not", "[threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int n : {1, 2, 3}) {
    auto comms = make_cpu_communicators(n);
    for (int64_t block : {int64_t(1), int64_t(7), int64_t(2049)}) {
      INFO("ranks " << n << " block " << block);
      const auto mine = random_ranks(rng, n, block);
      std::vector<float> want;
      for (const auto& m : mine) want.insert(want.end(), m.begin(), m.end());
      for (bool in_place : {false, true}) {
        // In place, rank r's block of its output already holds its input; the rest is garbage.
        std::vector<std::vector<float>> out(size_t(n), std::vector<float>(size_t(block * n), -1.f));
        for (int r = 0; r < n; ++r)
          if (in_place)
            std::copy(mine[size_t(r)].begin(), mine[size_t(r)].end(), out[size_t(r)].begin() + block * r);
        on_threads(n, [&](int r) {
          const float* in = in_place ? out[size_t(r)].data() + block * r : mine[size_t(r)].data();
          comms[size_t(r)]->all_gather(Tensor(const_cast<float*>(in), DType::f32, {block}),
                                       Tensor(out[size_t(r)].data(), DType::f32, {block * n}));
        });
        for (int r = 0; r < n; ++r) REQUIRE(out[size_t(r)] == want);
      }
    }
  }
}

TEST_CASE("cpu reduce_sum leaves the rank-order sum on the root and the others' tensors as they were",
          "[threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int n : {1, 2, 3}) {
    auto comms = make_cpu_communicators(n);
    for (int root = 0; root < n; ++root) {
      INFO("ranks " << n << " root " << root);
      const int64_t numel = 1 + int64_t(rng() % 3000);
      const auto data = random_ranks(rng, n, numel);
      auto work = data;
      on_threads(n, [&](int r) {
        comms[size_t(r)]->reduce_sum(Tensor(work[size_t(r)].data(), DType::f32, {numel}), root);
      });
      for (int r = 0; r < n; ++r) {
        if (r != root) {
          REQUIRE(work[size_t(r)] == data[size_t(r)]);
          continue;
        }
        for (int64_t i = 0; i < numel; ++i) REQUIRE(work[size_t(r)][size_t(i)] == rank_order_sum(data, i));
      }
    }
  }
}

TEST_CASE("cpu reduce_scatter_sum and all_gather reject mismatched block sizes", "[threads]") {
  auto comms = make_cpu_communicators(1);
  std::vector<float> a(6), b(4);
  CHECK_THROWS_WITH(
      comms[0]->reduce_scatter_sum(Tensor(a.data(), DType::f32, {6}), Tensor(b.data(), DType::f32, {4})),
      Catch::Contains("blocks"));
  CHECK_THROWS_WITH(
      comms[0]->all_gather(Tensor(b.data(), DType::f32, {4}), Tensor(a.data(), DType::f32, {6})),
      Catch::Contains("blocks"));
  CHECK_THROWS_WITH(comms[0]->reduce_sum(Tensor(a.data(), DType::f32, {6}), 1), Catch::Contains("root"));
}

TEST_CASE("gather_values gives every rank every rank's value in rank order", "[threads]") {
  auto comms = make_cpu_communicators(3);
  std::vector<std::vector<double>> got(3);
  for (int round = 0; round < 3; ++round) {
    on_threads(3, [&](int r) { got[size_t(r)] = comms[size_t(r)]->gather_values(0.5 + r + 10 * round); });
    for (const auto& g : got)
      CHECK(g == std::vector<double>{0.5 + 10 * round, 1.5 + 10 * round, 2.5 + 10 * round});
  }
}

}  // namespace astrai::test
