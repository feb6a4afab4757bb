// The peer-memory all-reduce of tensor-parallel decode (gpu/peer_all_reduce.*) on two or more GPUs of
// one process: first checked (every call's result on every rank equals the rank-ordered f32 sum
// rounded to the dtype, bit for bit, over calls of changing sizes, in eager launches and in CUDA
// graphs), then its abort tried (one rank launches, its peer never does: abort() must release it),
// then timed against NCCL's all-reduce, both as 100 calls replayed from a CUDA graph per rank, the
// way decode steps run them. CUDA-only apart from a few small project files:
//
//   nvcc -O3 -std=c++20 -I. -gencode=arch=compute_90a,code=sm_90a bench/peer_all_reduce_bench.cu \
//     gpu/peer_all_reduce.cu gpu/rows.cpp src/core/tensor.cpp src/core/dtype.cpp -lnccl -o par_bench
//   ./par_bench
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gpu/peer_all_reduce.h"
#include "src/core/dtype.h"

using astrai::bf16_to_f32;
using astrai::Device;
using astrai::DType;
using astrai::f32_to_bf16;
using astrai::Tensor;
using astrai::gpu::PeerAllReduce;

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::fflush(stdout);                                                           \
      std::_Exit(1);                                                                 \
    }                                                                                \
  } while (0)
#define NK(x)                                                                        \
  do {                                                                               \
    ncclResult_t r_ = (x);                                                           \
    if (r_ != ncclSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      std::fflush(stdout);                                                           \
      std::_Exit(1);                                                                 \
    }                                                                                \
  } while (0)

namespace {

// Runs fn(rank) on one thread per rank (each sets its device) and joins them.
void on_ranks(int W, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  for (int r = 0; r < W; ++r)
    ts.emplace_back([&, r] {
      CK(cudaSetDevice(r));
      fn(r);
    });
  for (auto& t : ts) t.join();
}

struct RankBufs {
  cudaStream_t stream = nullptr;
  char* x = nullptr;    // the tensor reduced in place
  char* src = nullptr;  // the inputs of every call of a check, back to back
  char* dst = nullptr;  // the outputs of every call
};

// calls[i]: bytes of call i (bf16 or f32 per `f32`), inputs random per rank and call.
bool check(PeerAllReduce& g, std::vector<RankBufs>& rb, int W, const std::vector<int64_t>& calls, bool f32,
           bool graph, uint32_t seed) {
  int64_t total = 0;
  for (int64_t b : calls) total += b;
  std::vector<std::vector<uint8_t>> in(static_cast<size_t>(W),
                                       std::vector<uint8_t>(static_cast<size_t>(total)));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int r = 0; r < W; ++r) {
    if (f32) {
      auto* p = reinterpret_cast<float*>(in[size_t(r)].data());
      for (int64_t i = 0; i < total / 4; ++i) p[i] = nd(rng);
    } else {
      auto* p = reinterpret_cast<uint16_t*>(in[size_t(r)].data());
      for (int64_t i = 0; i < total / 2; ++i) p[i] = f32_to_bf16(nd(rng));
    }
  }
  on_ranks(W, [&](int r) {
    RankBufs& b = rb[size_t(r)];
    CK(cudaMemcpy(b.src, in[size_t(r)].data(), size_t(total), cudaMemcpyHostToDevice));
    CK(cudaMemset(b.dst, 0xff, size_t(total)));
    auto body = [&] {
      int64_t off = 0;
      for (int64_t bytes : calls) {
        CK(cudaMemcpyAsync(b.x, b.src + off, size_t(bytes), cudaMemcpyDeviceToDevice, b.stream));
        const Tensor t(b.x, f32 ? DType::f32 : DType::bf16, {bytes / (f32 ? 4 : 2)}, Device::cuda);
        g.all_reduce_sum(r, t, b.stream);
        CK(cudaMemcpyAsync(b.dst + off, b.x, size_t(bytes), cudaMemcpyDeviceToDevice, b.stream));
        off += bytes;
      }
    };
    if (graph) {
      cudaGraph_t gr;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal));
      body();
      CK(cudaStreamEndCapture(b.stream, &gr));
      CK(cudaGraphInstantiate(&ge, gr, 0));
      CK(cudaGraphLaunch(ge, b.stream));
      CK(cudaStreamSynchronize(b.stream));
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(gr));
    } else {
      body();
      CK(cudaStreamSynchronize(b.stream));
    }
  });
  int64_t bad = 0;
  for (int r = 0; r < W; ++r) {
    std::vector<uint8_t> out(static_cast<size_t>(total));
    CK(cudaSetDevice(r));
    CK(cudaMemcpy(out.data(), rb[size_t(r)].dst, size_t(total), cudaMemcpyDeviceToHost));
    if (f32) {
      for (int64_t i = 0; i < total / 4; ++i) {
        float s = 0;
        for (int q = 0; q < W; ++q) s += reinterpret_cast<const float*>(in[size_t(q)].data())[i];
        if (std::memcmp(&s, out.data() + 4 * i, 4) != 0) ++bad;
      }
    } else {
      for (int64_t i = 0; i < total / 2; ++i) {
        float s = 0;
        for (int q = 0; q < W; ++q)
          s += bf16_to_f32(reinterpret_cast<const uint16_t*>(in[size_t(q)].data())[i]);
        if (f32_to_bf16(s) != reinterpret_cast<const uint16_t*>(out.data())[i]) ++bad;
      }
    }
  }
  std::printf("check %s %s, %zu calls, %lld bytes: %s (%lld wrong values)\n", f32 ? "f32 " : "bf16",
              graph ? "graph" : "eager", calls.size(), (long long)total, bad ? "FAIL" : "ok", (long long)bad);
  return bad == 0;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int W = 0;
  CK(cudaGetDeviceCount(&W));
  if (W < 2) {
    std::printf("needs two GPUs, found %d\n", W);
    return 1;
  }
  W = std::min(W, 8);
  std::vector<int> devs(static_cast<size_t>(W));
  for (int r = 0; r < W; ++r) devs[size_t(r)] = r;
  // NCCL first, as make_nccl_communicators does (it then enables peer access itself).
  ncclComm_t comms[8];
  NK(ncclCommInitAll(comms, W, devs.data()));
  const int64_t kMax = 1 << 20;
  auto g = PeerAllReduce::create(devs, kMax);
  if (!g) {
    std::printf("no peer access between the GPUs\n");
    return 1;
  }
  std::vector<RankBufs> rb(static_cast<size_t>(W));
  const int64_t kSrc = 64 << 20;
  on_ranks(W, [&](int r) {
    CK(cudaStreamCreateWithFlags(&rb[size_t(r)].stream, cudaStreamNonBlocking));
    CK(cudaMalloc(&rb[size_t(r)].x, size_t(kMax)));
    CK(cudaMalloc(&rb[size_t(r)].src, size_t(kSrc)));
    CK(cudaMalloc(&rb[size_t(r)].dst, size_t(kSrc)));
  });

  // Correctness at two chunk sizes: sizes that change from call to call (block counts and
  // parities), both dtypes, eager and captured; then 300 calls of one decode size back to back.
  bool ok = true;
  std::mt19937 pick(7);
  for (int64_t chunk : {2048LL, 8192LL}) {
    g->set_chunk_bytes(chunk);
    std::printf("-- chunk %lld\n", (long long)chunk);
    for (int round = 0; round < 4; ++round) {
      const bool f32 = round % 2 == 1, graph = round >= 2;
      std::vector<int64_t> calls;
      int64_t total = 0;
      for (int i = 0; i < 200; ++i) {
        const int64_t sizes[] = {16, 48, 8192, 8208, 16384, 65536, 24576, 262144, 1 << 20, 4096};
        const int64_t b = sizes[pick() % 10];
        if (total + b > kSrc) break;
        calls.push_back(b);
        total += b;
      }
      ok &= check(*g, rb, W, calls, f32, graph, 100 + uint32_t(round) + 10 * uint32_t(chunk));
    }
    ok &= check(*g, rb, W, std::vector<int64_t>(300, 8192), false, true, 200);
  }

  // Timing, 100 calls per graph replay, medians of 20 replays; NCCL, then each chunk size.
  const std::vector<int64_t> sizes = {2048, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576};
  auto time_calls = [&](int64_t bytes, bool nccl) {
    std::vector<cudaGraphExec_t> ex(static_cast<size_t>(W));
    on_ranks(W, [&](int r) {
      RankBufs& b = rb[size_t(r)];
      CK(cudaMemset(b.x, 0, size_t(bytes)));
      if (nccl) {  // NCCL connects its peers at the first call, which must not be inside a capture
        NK(ncclAllReduce(b.x, b.x, size_t(bytes / 2), ncclBfloat16, ncclSum, comms[r], b.stream));
        CK(cudaStreamSynchronize(b.stream));
      }
      cudaGraph_t gr;
      CK(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < 100; ++i) {
        if (!nccl)
          g->all_reduce_sum(r, Tensor(b.x, DType::bf16, {bytes / 2}, Device::cuda), b.stream);
        else
          NK(ncclAllReduce(b.x, b.x, size_t(bytes / 2), ncclBfloat16, ncclSum, comms[r], b.stream));
      }
      CK(cudaStreamEndCapture(b.stream, &gr));
      CK(cudaGraphInstantiate(&ex[size_t(r)], gr, 0));
      CK(cudaGraphDestroy(gr));
    });
    std::vector<double> t;
    for (int rep = 0; rep < 23; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      on_ranks(W, [&](int r) {
        CK(cudaGraphLaunch(ex[size_t(r)], rb[size_t(r)].stream));
        CK(cudaStreamSynchronize(rb[size_t(r)].stream));
      });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep >= 3) t.push_back(s);
    }
    std::sort(t.begin(), t.end());
    on_ranks(W, [&](int r) { CK(cudaGraphExecDestroy(ex[size_t(r)])); });
    return t[t.size() / 2] / 100 * 1e6;
  };
  std::printf(
      "\nall-reduce latency, us per call (bf16; 100 calls replayed from one graph per rank; %d GPUs)\n", W);
  std::printf("%-16s", "bytes");
  for (int64_t b : sizes) std::printf(" %8lld", (long long)b);
  std::printf("\n%-16s", "nccl");
  for (int64_t b : sizes) std::printf(" %8.2f", time_calls(b, true));
  std::printf("\n");
  for (int64_t chunk : {2048LL, 8192LL, 32768LL}) {
    g->set_chunk_bytes(chunk);
    std::printf("peer chunk %5lld", (long long)chunk);
    for (int64_t b : sizes) std::printf(" %8.2f", time_calls(b, false));
    std::printf("\n");
  }

  g->set_chunk_bytes(8192);
  // Abort: rank 0 calls, its peers never do; abort() must let rank 0's kernel finish.
  {
    CK(cudaSetDevice(0));
    g->all_reduce_sum(0, Tensor(rb[0].x, DType::bf16, {4096}, Device::cuda), rb[0].stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const bool waiting = cudaStreamQuery(rb[0].stream) == cudaErrorNotReady;
    g->abort();
    const auto t0 = std::chrono::steady_clock::now();
    CK(cudaStreamSynchronize(rb[0].stream));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("\nabort: rank 0 %s waiting after 200 ms; released %.2f ms after abort(): %s\n",
                waiting ? "was" : "was NOT", ms, waiting && ms < 1000 ? "ok" : "FAIL");
    ok &= waiting && ms < 1000;
  }
  for (int r = 0; r < W; ++r) ncclCommDestroy(comms[r]);
  std::printf("\n%s\n", ok ? "ALL OK" : "SOME CHECKS FAILED");
  return ok ? 0 : 1;
}
