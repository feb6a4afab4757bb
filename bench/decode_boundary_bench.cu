// What a kernel boundary costs a batch-1 decode step, against a grid barrier inside one persistent
// kernel: the measurement that decides whether a persistent decode kernel is worth building (issue
// 9's batch-1 goal; docs/performance.md puts llama-1b's step at about 1.0 ms against a floor of 0.59,
// with no single kernel slow and seven launch boundaries a layer). CUDA-only, no project code:
//
//   nvcc -O3 -std=c++20 -I. -gencode=arch=compute_90a,code=sm_90a bench/decode_boundary_bench.cu \
//        -o decode_boundary_bench
//   ./decode_boundary_bench
//
// Every figure is microseconds per stage (a kernel, or a stage of the persistent kernel) over a chain
// of stages replayed in a CUDA graph (median of the replays), each stage reading its own slice of a
// buffer larger than L2 (so the reads come from device memory, as a decode step's weights do):
// - empty: no reads, the boundary alone;
// - one slice size per llama-1b batch-1 weight (o 8.4 MB, qkv 12.6, down 33.6, gate_up 67.1 MB) and
//   the device-to-device copy rate of the same run as the floor (bytes read / copy bandwidth).
// Variants:
// - plain: stream-ordered launches;
// - pdl start / pdl end: programmatic dependent launch (each kernel lets the next launch at its
//   start), the dependency wait before the reads or after them (a GEMV can load its weights before
//   the wait: they do not depend on the kernel before it);
// - persistent: one cooperative launch (not in a graph: one launch either way, its cost spread over
//   the stages) whose blocks meet after each stage:
//   barrier: a grid barrier (one release / acquire counter);
//   tiles: the blocks as tiles of kParts, a counter a tile and stage, each block waiting for all;
//   part: the same counters, each block waiting only for the tiles of its part of K (a 1 / kParts
//   share): the dependency a split-K GEMV block has on the GEMV before it, so stages may overlap;
//   early (after each): each block loads its first round of the next stage's slice before it waits
//   (the persistent form of "weights before the wait").
// The columns print in that order: floor, plain, pdl st(art), pdl end, barrier, early, tiles, early,
// part, early.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cuda/atomic>

#include "bench/cuda_bench_util.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // 16-byte loads a thread keeps in flight per round

struct Slices {
  const uint4* base;
  size_t slice16;   // 16-byte vectors a stage reads
  size_t stride16;  // between consecutive stages' slices
  int count;        // slices in the ring (the buffer / stride)
};

// Reads vectors [i0, n) of w with a grid stride, kUnroll at a time; folds them into acc.
__device__ __forceinline__ void read_range(const uint4* __restrict__ w, size_t i0, size_t n, size_t stride,
                                           uint32_t& acc) {
  size_t i = i0;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(w + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(w + i);
    acc ^= v.x + v.y + v.z + v.w;
  }
}

// One stage as a kernel. kPdl: 0 plain, 1 wait at the start, 2 wait after the reads.
template <int kPdl>
__global__ void __launch_bounds__(kThreads) stage_kernel(Slices s, int stage, uint32_t* sink) {
  if constexpr (kPdl == 1) cudaGridDependencySynchronize();
  if constexpr (kPdl != 0) cudaTriggerProgrammaticLaunchCompletion();
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  if (s.slice16 > 0)
    read_range(s.base + size_t(stage % s.count) * s.stride16, size_t(blockIdx.x) * blockDim.x + threadIdx.x,
               s.slice16, stride, acc);
  if constexpr (kPdl == 2) cudaGridDependencySynchronize();
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // keeps the reads; never true in practice
}

// The persistent form: `stages` stages, the blocks meeting after each. kWait picks how:
// - 0: a grid barrier, one counter (zeroed before the launch): stage k's barrier is passed once it
//   reads (k + 1) * blocks;
// - 1 and 2: the blocks as tiles of kParts (a GEMV's output tile split over kParts parts of K), one
//   counter a tile and stage (zeroed before the launch), complete at kParts; 1: each block waits for
//   every tile (the barrier with its arrivals spread over counters); 2: only for the tiles of its own
//   part (a 1 / kParts share), as a GEMV block taking one part of K needs only the outputs of the
//   stage before that make up that part of its x. Stages then overlap where blocks finish unevenly.
// kEarly: each block loads the next stage's first round before it waits (the persistent form of a
// GEMV's weights before pdl_wait).
constexpr int kParts = 8;
template <bool kEarly, int kWait>
__global__ void __launch_bounds__(kThreads)
    persistent_kernel(Slices s, int stages, unsigned* counters, uint32_t* sink) {
  using Ref = cuda::atomic_ref<unsigned, cuda::thread_scope_device>;
  const int tile = int(blockIdx.x) / kParts, part = int(blockIdx.x) % kParts, tiles = int(gridDim.x) / kParts;
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x, tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t begin = tid;  // the first vector this thread has not read of the current stage
  for (int st = 0; st < stages; ++st) {
    const uint4* w = s.base + size_t(st % s.count) * s.stride16;
    if (s.slice16 > 0) read_range(w, begin, s.slice16, stride, acc);
    __syncthreads();
    unsigned* row = counters + size_t(st) * size_t(tiles);  // kWait 1, 2: this stage's tile counters
    if (threadIdx.x == 0) Ref(kWait == 0 ? *counters : row[tile]).fetch_add(1, cuda::memory_order_release);
    begin = tid;
    uint4 pre[kUnroll] = {};  // kEarly: the next stage's first round, loaded before the wait, used after it
    if (kEarly && st + 1 < stages && s.slice16 > 0) {
      const uint4* wn = s.base + size_t((st + 1) % s.count) * s.stride16;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (tid + u * stride < s.slice16) pre[u] = __ldcs(wn + tid + u * stride);
      begin = tid + kUnroll * stride;
    }
    if constexpr (kWait == 0) {
      if (threadIdx.x == 0)
        while (Ref(*counters).load(cuda::memory_order_acquire) < unsigned(st + 1) * gridDim.x) {
        }
    } else {
      for (int c = int(threadIdx.x); c < tiles; c += int(blockDim.x))
        if (kWait == 1 || c % kParts == part)
          while (Ref(row[c]).load(cuda::memory_order_acquire) < unsigned(kParts)) {
          }
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= pre[u].x + pre[u].y + pre[u].z + pre[u].w;
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

// Microseconds per stage of `stages` stages captured into one graph by `record` (median of reps).
template <typename Record>
double per_stage_us(cudaStream_t st, int stages, Record record, int reps = 20) {
  return astrai::bench::graph_median_ms(st, record, reps) * 1000.0 / stages;
}

template <int kPdl>
void launch_stage(cudaStream_t st, int blocks, const Slices& s, int stage, uint32_t* sink) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = kPdl != 0 ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, stage_kernel<kPdl>, s, stage, sink));
}

// Microseconds per stage of one cooperative launch of `stages` stages (median of reps; the one
// launch's own cost is spread over the stages, and so is the zeroing of the counters before it).
// Not in a graph: one launch either way.
template <bool kEarly, int kWait>
double persistent_us(cudaStream_t st, int blocks, Slices s, int stages, unsigned* counters,
                     size_t counter_bytes, uint32_t* sink, int reps = 20) {
  void* args[] = {&s, &stages, &counters, &sink};
  const double ms = astrai::bench::median_ms(
      [&] {
        CK(cudaMemsetAsync(counters, 0, counter_bytes, st));
        CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_kernel<kEarly, kWait>),
                                       dim3(unsigned(blocks)), dim3(kThreads), args, 0, st));
      },
      reps, st);
  return ms * 1000.0 / stages;
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  // Blocks a multiprocessor that every variant holds at once (the persistent ones must), at most 4;
  // the grid a multiple of kParts (tiles of kParts blocks).
  int bps = 4;
  auto fits = [&](auto kernel) {
    int n = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0));
    bps = std::min(bps, n);
  };
  fits(stage_kernel<0>);
  fits(persistent_kernel<false, 0>);
  fits(persistent_kernel<true, 0>);
  fits(persistent_kernel<false, 1>);
  fits(persistent_kernel<true, 1>);
  fits(persistent_kernel<false, 2>);
  fits(persistent_kernel<true, 2>);
  const int blocks = bps * sms / kParts * kParts;
  std::printf("%s, %d SMs, L2 %d MB; %d blocks of %d threads (%d a multiprocessor)\n", prop.name, sms,
              prop.l2CacheSize >> 20, blocks, kThreads, bps);

  const size_t buf_bytes = size_t(1) << 30;  // 1 GiB: many times L2
  uint4* buf = nullptr;
  uint32_t* sink = nullptr;
  unsigned* counters = nullptr;
  const int stages = 64;
  const size_t counter_bytes =
      sizeof(unsigned) * size_t(stages) * size_t(blocks / kParts);  // a tile and stage
  CK(cudaMalloc(&buf, buf_bytes));
  CK(cudaMemset(buf, 1, buf_bytes));
  CK(cudaMalloc(&sink, sizeof(uint32_t) * size_t(blocks)));
  CK(cudaMalloc(&counters, counter_bytes));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  // The floor: a device-to-device copy of 512 MiB (bytes read + written over the time).
  double copy_gbs = 0;
  {
    const size_t half = buf_bytes / 2;
    const double ms = astrai::bench::median_ms(
        [&] { CK(cudaMemcpy(reinterpret_cast<char*>(buf) + half, buf, half, cudaMemcpyDeviceToDevice)); }, 5);
    copy_gbs = 2.0 * double(half) / (ms * 1e-3) / 1e9;
  }
  std::printf("device copy: %.0f GB/s (read + write)\n\n", copy_gbs);

  struct Size {
    const char* name;
    double mb;
  };
  const Size sizes[] = {{"empty", 0},
                        {"o 8.4 MB", 8.39},
                        {"qkv 12.6 MB", 12.58},
                        {"down 33.6 MB", 33.55},
                        {"gate_up 67.1 MB", 67.11}};
  std::printf("%-16s %6s %6s %6s %6s %7s %7s %7s %7s %7s %7s   us per stage\n", "stage", "floor", "plain",
              "pdl st", "pdl end", "barrier", "early", "tiles", "early", "part", "early");
  for (const Size& sz : sizes) {
    Slices s{buf, 0, 0, 1};
    if (sz.mb > 0) {
      s.slice16 = size_t(sz.mb * 1e6) / 16;
      s.stride16 = (s.slice16 + 255) / 256 * 256;  // 4 KiB-aligned slices
      s.count = int(buf_bytes / 16 / s.stride16);
    }
    const double floor_us = sz.mb * 1e6 / (copy_gbs * 1e9) * 1e6;
    const double plain = per_stage_us(st, stages, [&] {
      for (int i = 0; i < stages; ++i) launch_stage<0>(st, blocks, s, i, sink);
    });
    const double pdl_start = per_stage_us(st, stages, [&] {
      for (int i = 0; i < stages; ++i) launch_stage<1>(st, blocks, s, i, sink);
    });
    const double pdl_end = per_stage_us(st, stages, [&] {
      for (int i = 0; i < stages; ++i) launch_stage<2>(st, blocks, s, i, sink);
    });
    // The persistent variants in this order: barrier, tiles, part; each plain, then early.
    const double p[6] = {persistent_us<false, 0>(st, blocks, s, stages, counters, counter_bytes, sink),
                         persistent_us<true, 0>(st, blocks, s, stages, counters, counter_bytes, sink),
                         persistent_us<false, 1>(st, blocks, s, stages, counters, counter_bytes, sink),
                         persistent_us<true, 1>(st, blocks, s, stages, counters, counter_bytes, sink),
                         persistent_us<false, 2>(st, blocks, s, stages, counters, counter_bytes, sink),
                         persistent_us<true, 2>(st, blocks, s, stages, counters, counter_bytes, sink)};
    std::printf("%-16s %6.2f %6.2f %6.2f %6.2f %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f\n", sz.name, floor_us,
                plain, pdl_start, pdl_end, p[0], p[1], p[2], p[3], p[4], p[5]);
  }
  CK(cudaStreamDestroy(st));
  CK(cudaFree(buf));
  CK(cudaFree(sink));
  CK(cudaFree(counters));
  return 0;
}
