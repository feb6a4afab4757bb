// The NCCL collectives of data parallelism's ZeRO (src/dist/communicator.h) on two GPUs against
// plain host loops on fresh random data: reduce_scatter_sum (in place and not), all_gather (in
// place), reduce_sum to each root, and an all-reduce on the side stream between fork_side() and
// join_side() ordered after the compute stream's work and before its later work. With two ranks
// a sum is one float addition, so every result must equal the host's bit for bit. Skips itself with
// fewer than two GPUs.
#include <catch2/catch.hpp>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "gpu/cuda_backend.h"
#include "gpu/device_info.h"
#include "src/dist/communicator.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

constexpr int kRanks = 2;

struct Ranks {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Communicator>> comms;
};

std::optional<Ranks> two_gpus() {
  if (!gpu::register_cuda_backend() || gpu::device_count() < kRanks) return std::nullopt;
  Ranks r;
  std::vector<Backend*> raw;
  for (int i = 0; i < kRanks; ++i) {
    BackendOptions o;
    o.device = Device::cuda;
    o.gpu_index = i;
    r.backends.push_back(make_backend(o).value());
    raw.push_back(r.backends.back().get());
  }
  r.comms = make_communicators(raw).value();
  return r;
}

// fn(rank) on one thread per rank (NCCL needs every rank's call in flight at once).
template <typename F>
void on_ranks(F fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < kRanks; ++r) t.emplace_back([&fn, r] { fn(r); });
  for (auto& th : t) th.join();
}

std::vector<float> random_floats(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<float> download(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  be.synchronize();
  be.download(out.data(), t);
  return out;
}

}  // namespace

TEST_CASE("nccl reduce_scatter_sum, all_gather and reduce_sum on two GPUs equal host loops", "[gpu]") {
  auto ranks = two_gpus();
  if (!ranks) {
    WARN("fewer than two CUDA GPUs visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int64_t block : {int64_t(1), int64_t(1000), int64_t(3) << 20}) {
    INFO("block " << block);
    const int64_t n = block * kRanks;
    std::vector<std::vector<float>> host;
    for (int r = 0; r < kRanks; ++r) host.push_back(random_floats(rng, n));
    std::vector<float> sum(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) sum[size_t(i)] = host[0][size_t(i)] + host[1][size_t(i)];
    std::vector<Buffer> bufs, outs;
    for (int r = 0; r < kRanks; ++r) {
      bufs.push_back(ranks->backends[size_t(r)]->alloc(size_t(n) * sizeof(float)));
      outs.push_back(ranks->backends[size_t(r)]->alloc(size_t(block) * sizeof(float)));
    }
    auto t = [&](int r) { return bufs[size_t(r)].as(DType::f32, {n}); };
    auto reset = [&] {
      for (int r = 0; r < kRanks; ++r) ranks->backends[size_t(r)]->upload(t(r), host[size_t(r)].data());
    };

    // Out of place, then in place (the output is the rank's own block of the input).
    reset();
    on_ranks([&](int r) {
      ranks->comms[size_t(r)]->reduce_scatter_sum(t(r), outs[size_t(r)].as(DType::f32, {block}));
      ranks->comms[size_t(r)]->reduce_scatter_sum(t(r), t(r).rows(block * r, block * (r + 1)));
    });
    for (int r = 0; r < kRanks; ++r) {
      const auto out = download(*ranks->backends[size_t(r)], outs[size_t(r)].as(DType::f32, {block}));
      const auto in_place = download(*ranks->backends[size_t(r)], t(r).rows(block * r, block * (r + 1)));
      const std::vector<float> want(sum.begin() + block * r, sum.begin() + block * (r + 1));
      CHECK(out == want);
      CHECK(in_place == want);
    }

    // In-place all_gather of each rank's block of `host[rank]`: every rank ends with the blocks of both.
    reset();
    on_ranks(
        [&](int r) { ranks->comms[size_t(r)]->all_gather(t(r).rows(block * r, block * (r + 1)), t(r)); });
    std::vector<float> gathered(host[0].begin(), host[0].begin() + block);
    gathered.insert(gathered.end(), host[1].begin() + block, host[1].end());
    for (int r = 0; r < kRanks; ++r) CHECK(download(*ranks->backends[size_t(r)], t(r)) == gathered);

    for (int root = 0; root < kRanks; ++root) {
      reset();
      on_ranks([&](int r) { ranks->comms[size_t(r)]->reduce_sum(t(r), root); });
      CHECK(download(*ranks->backends[size_t(root)], t(root)) == sum);
    }
  }
}

TEST_CASE(
    "nccl all-reduce on the side stream runs after the compute stream's earlier work and before its later",
    "[gpu]") {
  auto ranks = two_gpus();
  if (!ranks) {
    WARN("fewer than two CUDA GPUs visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t n = int64_t(8) << 20;
  std::vector<std::vector<float>> host;
  for (int r = 0; r < kRanks; ++r) host.push_back(random_floats(rng, n));
  std::vector<Buffer> src, dst;
  for (int r = 0; r < kRanks; ++r) {
    src.push_back(ranks->backends[size_t(r)]->alloc(size_t(n) * sizeof(float)));
    dst.push_back(ranks->backends[size_t(r)]->alloc(size_t(n) * sizeof(float)));
    ranks->backends[size_t(r)]->upload(src[size_t(r)].as(DType::f32, {n}), host[size_t(r)].data());
    ranks->backends[size_t(r)]->synchronize();
  }
  // On the compute stream: dst = src + src, queued before the fork; on the side stream: dst is
  // all-reduced; after the join, on the compute stream again: dst = dst + dst. Without the fork's
  // wait the reduce could sum zeros; without the join's the doubling could come first.
  on_ranks([&](int r) {
    Backend& be = *ranks->backends[size_t(r)];
    Communicator& c = *ranks->comms[size_t(r)];
    const Tensor s = src[size_t(r)].as(DType::f32, {n / 1024, 1024});
    const Tensor d = dst[size_t(r)].as(DType::f32, {n / 1024, 1024});
    be.add(s, s, d);
    c.fork_side();
    c.all_reduce_sum(d);
    c.join_side();
    be.add(d, d, d);
  });
  for (int r = 0; r < kRanks; ++r) {
    const auto got = download(*ranks->backends[size_t(r)], dst[size_t(r)].as(DType::f32, {n}));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i)
      if (got[size_t(i)] != 4.0f * (host[0][size_t(i)] + host[1][size_t(i)])) ++bad;  // exact: powers of 2
    CHECK(bad == 0);
  }
}

}  // namespace astrai::test
