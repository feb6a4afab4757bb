// The one-shot all-reduce kernel for small tensors over peer memory (NVLink) between the GPUs of one
// process: gpu/peer_all_reduce.h drives it; CUDA-only, so bench/peer_all_reduce_bench.cu builds it
// with nothing but nvcc.
//
// Each rank's kernel pushes its block's chunk of x into every peer's receive slot for this rank,
// raises its flag at every peer, waits for every peer's flag in its own memory, then sums the
// chunks in rank order (so every rank gets the same bits) into x. One launch, one trip over NVLink
// (NCCL's ring takes 2(W-1) dependent steps), which is what a decode step's 8 KB all-reduces need.
//
// Calls are told apart by an epoch that each block keeps in device memory (a graph replays the same
// arguments, so it cannot come from the host): block b of call k uses epoch k and the receive slots
// of parity k & 1. A peer can run at most one call ahead (it needs our flag of call k to finish
// call k), so its writes of call k + 1 land in the other parity and its flag only grows: we wait
// for flag >= epoch (compared as a difference, so the counter may wrap). Waits poll a host-mapped abort word
// too, so abort() releases a rank whose peer never arrives (a peer failed before its launch) instead of
// hanging the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/device_util.cuh"

namespace astrai::gpu {

constexpr int kPeerMaxRanks = 8;
constexpr int kPeerThreads = 512;

struct PeerAllReduceArgs {
  void* x = nullptr;  // this rank's tensor, in place
  int64_t bytes = 0;  // its size; a multiple of 16
  int rank = 0, world = 1;
  // recv[p]: rank p's receive buffer, 2 parities x world slots x slot_bytes, slot q for rank q.
  char* recv[kPeerMaxRanks] = {};
  int64_t slot_bytes = 0;
  // flags[p]: rank p's flag words, [block][source rank]; epochs: this rank's per-block call counter.
  uint32_t* flags[kPeerMaxRanks] = {};
  uint32_t* epochs = nullptr;
  const volatile int* abort = nullptr;  // host-mapped; nonzero: stop waiting
  int chunk_bytes = 0;                  // bytes per block, a multiple of 16
};

__device__ __forceinline__ uint32_t peer_load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void peer_store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void peer_add8(float (&acc)[8], uint4 v, bf16) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] += f.x;
    acc[2 * i + 1] += f.y;
  }
}

__device__ __forceinline__ uint4 peer_pack8(const float (&acc)[8], bf16) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return v;
}

// f32: 16 bytes hold 4 values; the 8-wide accumulator's upper half is unused.
__device__ __forceinline__ void peer_add8(float (&acc)[8], uint4 v, float) {
  acc[0] += __uint_as_float(v.x);
  acc[1] += __uint_as_float(v.y);
  acc[2] += __uint_as_float(v.z);
  acc[3] += __uint_as_float(v.w);
}

__device__ __forceinline__ uint4 peer_pack8(const float (&acc)[8], float) {
  return make_uint4(__float_as_uint(acc[0]), __float_as_uint(acc[1]), __float_as_uint(acc[2]),
                    __float_as_uint(acc[3]));
}

template <typename T>
__global__ void __launch_bounds__(kPeerThreads) peer_all_reduce_kernel(PeerAllReduceArgs a) {
  __shared__ uint32_t s_epoch;
  const int b = int(blockIdx.x), r = a.rank, W = a.world;
  if (threadIdx.x == 0) s_epoch = a.epochs[b] + 1;
  __syncthreads();
  const uint32_t epoch = s_epoch;
  const int64_t lo = int64_t(b) * a.chunk_bytes;
  const int64_t hi = lo + a.chunk_bytes < a.bytes ? lo + a.chunk_bytes : a.bytes;
  const int64_t slot0 = int64_t(epoch & 1u) * W * a.slot_bytes;
  const char* x = static_cast<const char*>(a.x);
  const int64_t step = int64_t(blockDim.x) * 16;

  // Push: this rank's chunk into slot r of every peer's receive buffer.
  for (int64_t o = lo + int64_t(threadIdx.x) * 16; o < hi; o += step) {
    const uint4 v = *reinterpret_cast<const uint4*>(x + o);
    for (int p = 0; p < W; ++p)
      if (p != r) *reinterpret_cast<uint4*>(a.recv[p] + slot0 + int64_t(r) * a.slot_bytes + o) = v;
  }
  // The barrier orders every thread's stores before the flag thread's release, which is cumulative
  // (a fence per thread instead was 1-2 us slower per call; pulling the peers' chunks over NVLink
  // after the flags instead of pushing them, 0.5-1 us slower: bench/peer_all_reduce_bench.cu).
  __syncthreads();
  const bool flagger = int(threadIdx.x) < W && int(threadIdx.x) != r;
  if (flagger) peer_store_release(a.flags[threadIdx.x] + b * kPeerMaxRanks + r, epoch);
  // Wait for every peer's flag in this rank's memory; the abort word (host memory, a PCIe read)
  // only every 1024 polls.
  if (flagger) {
    const uint32_t* f = a.flags[r] + b * kPeerMaxRanks + threadIdx.x;
    for (uint32_t i = 1; int32_t(peer_load_acquire(f) - epoch) < 0; ++i)  // flag < epoch, across the wrap
      if ((i & 1023u) == 0 && *a.abort) break;
  }
  __syncthreads();

  // Sum in rank order; the peers' chunks bypass L1 (written over NVLink since it last saw them).
  char* out = static_cast<char*>(a.x);
  for (int64_t o = lo + int64_t(threadIdx.x) * 16; o < hi; o += step) {
    float acc[8] = {};
    const uint4 own = *reinterpret_cast<const uint4*>(x + o);
    for (int q = 0; q < W; ++q) {
      const uint4 v =
          q == r ? own
                 : __ldcg(reinterpret_cast<const uint4*>(a.recv[r] + slot0 + int64_t(q) * a.slot_bytes + o));
      peer_add8(acc, v, T{});
    }
    *reinterpret_cast<uint4*>(out + o) = peer_pack8(acc, T{});
  }
  if (threadIdx.x == 0) a.epochs[b] = epoch;
}

}  // namespace astrai::gpu
