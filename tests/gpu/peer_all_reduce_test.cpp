// The one-shot peer-memory all-reduce of tensor-parallel decode (gpu/peer_all_reduce.h) on two GPUs:
// every rank's result equals the rank-ordered f32 sum rounded to the dtype, bit for bit, at two
// chunk sizes, over calls of changing sizes (block counts and the parity of the receive slots
// change from call to call), in bf16 and f32. Skips itself with fewer than two GPUs.
// bench/peer_all_reduce_bench.cu checks more calls, graphs and abort(), and times it against NCCL.
#include "gpu/peer_all_reduce.h"

#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gpu/cuda_backend.h"
#include "gpu/device_info.h"
#include "src/core/dtype.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

void require_ok(cudaError_t e) {
  REQUIRE(e == cudaSuccess);
}

TEST_CASE("peer all-reduce equals the rank-ordered sum on every rank", "[gpu]") {
  if (!gpu::register_cuda_backend() || gpu::device_count() < 2) {
    WARN("fewer than two CUDA GPUs visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::vector<int> devices = {0, 1};
  const int64_t max_bytes = 256 << 10;
  auto group = gpu::PeerAllReduce::create(devices, max_bytes);
  if (!group) {
    WARN("no peer access between GPUs 0 and 1: skipped");
    return;
  }
  std::vector<void*> buf(2, nullptr);
  std::vector<cudaStream_t> streams(2, nullptr);
  for (int r = 0; r < 2; ++r) {
    require_ok(cudaSetDevice(r));
    require_ok(cudaMalloc(&buf[size_t(r)], size_t(max_bytes)));
    require_ok(cudaStreamCreateWithFlags(&streams[size_t(r)], cudaStreamNonBlocking));
  }
  std::uniform_int_distribution<int> pick_size(0, 5);
  const int64_t sizes[] = {16, 4096, 8192, 8208, 40960, 262144};
  for (int64_t chunk : {2048, 8192})
    for (int call = 0; call < 12; ++call) {
      const bool f32 = call % 3 == 2;
      const int64_t bytes = sizes[pick_size(rng)], n = bytes / (f32 ? 4 : 2);
      INFO("chunk " << chunk << " call " << call << " bytes " << bytes << (f32 ? " f32" : " bf16"));
      group->set_chunk_bytes(chunk);
      std::vector<std::vector<float>> in(2, std::vector<float>(static_cast<size_t>(n)));
      for (auto& v : in)
        for (float& x : v) x = f32 ? nd(rng) : bf16_to_f32(f32_to_bf16(nd(rng)));
      std::vector<std::vector<char>> out(2, std::vector<char>(static_cast<size_t>(bytes)));
      std::vector<std::thread> ranks;
      for (int r = 0; r < 2; ++r)
        ranks.emplace_back([&, r] {
          (void)cudaSetDevice(r);
          std::vector<char> host(static_cast<size_t>(bytes));
          for (int64_t i = 0; i < n; ++i) {
            const float x = in[size_t(r)][size_t(i)];
            if (f32)
              std::memcpy(host.data() + 4 * i, &x, 4);
            else {
              const uint16_t b = f32_to_bf16(x);
              std::memcpy(host.data() + 2 * i, &b, 2);
            }
          }
          (void)cudaMemcpy(buf[size_t(r)], host.data(), size_t(bytes), cudaMemcpyHostToDevice);
          const Tensor t(buf[size_t(r)], f32 ? DType::f32 : DType::bf16, {n}, Device::cuda);
          group->all_reduce_sum(r, t, streams[size_t(r)]);
          (void)cudaStreamSynchronize(streams[size_t(r)]);
          (void)cudaMemcpy(out[size_t(r)].data(), buf[size_t(r)], size_t(bytes), cudaMemcpyDeviceToHost);
        });
      for (auto& t : ranks) t.join();
      int64_t wrong = 0;
      for (int r = 0; r < 2; ++r)
        for (int64_t i = 0; i < n; ++i) {
          const float sum = in[0][size_t(i)] + in[1][size_t(i)];
          if (f32) {  // the same bits: compared as integers
            uint32_t got, want;
            std::memcpy(&got, out[size_t(r)].data() + 4 * i, 4);
            std::memcpy(&want, &sum, 4);
            wrong += got != want;
          } else {
            uint16_t got;
            std::memcpy(&got, out[size_t(r)].data() + 2 * i, 2);
            wrong += got != f32_to_bf16(sum);
          }
        }
      CHECK(wrong == 0);
    }
  for (int r = 0; r < 2; ++r) {
    (void)cudaSetDevice(r);
    (void)cudaStreamDestroy(streams[size_t(r)]);
    (void)cudaFree(buf[size_t(r)]);
  }
}

}  // namespace
}  // namespace astrai::test
