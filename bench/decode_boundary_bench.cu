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
//   the stages), a grid barrier (release / acquire counter) after each stage;
//   persistent early: each block arrives at the barrier, loads its first round of the next stage's
//   slice, then waits (the persistent form of "weights before the wait").
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cuda/atomic>
#include <vector>

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

// The persistent form: `stages` stages, a grid barrier after each. The barrier counts arrivals on
// one counter (zeroed before the launch): stage k's barrier is passed once it reads (k + 1) * blocks.
template <bool kEarly>
__global__ void __launch_bounds__(kThreads)
    persistent_kernel(Slices s, int stages, unsigned* counter, uint32_t* sink) {
  cuda::atomic_ref<unsigned, cuda::thread_scope_device> count(*counter);
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x, tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t begin = tid;  // the first vector this thread has not read of the current stage
  for (int st = 0; st < stages; ++st) {
    const uint4* w = s.base + size_t(st % s.count) * s.stride16;
    if (s.slice16 > 0) read_range(w, begin, s.slice16, stride, acc);
    __syncthreads();
    if (threadIdx.x == 0) count.fetch_add(1, cuda::memory_order_release);
    begin = tid;
    uint4 pre[kUnroll] = {};  // kEarly: the next stage's first round, loaded before the wait, used after it
    if (kEarly && st + 1 < stages && s.slice16 > 0) {
      const uint4* wn = s.base + size_t((st + 1) % s.count) * s.stride16;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (tid + u * stride < s.slice16) pre[u] = __ldcs(wn + tid + u * stride);
      begin = tid + kUnroll * stride;
    }
    if (threadIdx.x == 0)
      while (count.load(cuda::memory_order_acquire) < unsigned(st + 1) * gridDim.x) {
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
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  record();
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  const double ms = astrai::bench::median_ms([&] { CK(cudaGraphLaunch(ge, st)); }, reps, st);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return ms * 1000.0 / stages;
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
// launch's own cost is spread over the stages). Not in a graph: one launch either way.
template <bool kEarly>
double persistent_us(cudaStream_t st, int blocks, Slices s, int stages, unsigned* counter, uint32_t* sink,
                     int reps = 20) {
  void* args[] = {&s, &stages, &counter, &sink};
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i <= reps; ++i) {  // the first is a warm-up
    CK(cudaMemsetAsync(counter, 0, sizeof(unsigned), st));
    CK(cudaEventRecord(a, st));
    CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_kernel<kEarly>), dim3(unsigned(blocks)),
                                   dim3(kThreads), args, 0, st));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    if (i > 0) ms.push_back(t);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1000.0 / stages;
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  int per_sm_stage = 0, per_sm_p = 0, per_sm_pe = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_stage, stage_kernel<0>, kThreads, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_p, persistent_kernel<false>, kThreads, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_pe, persistent_kernel<true>, kThreads, 0));
  const int bps = std::min({4, per_sm_stage, per_sm_p, per_sm_pe});  // blocks a multiprocessor, all variants
  const int blocks = bps * sms;
  std::printf("%s, %d SMs, L2 %d MB; %d blocks of %d threads (%d a multiprocessor)\n", prop.name, sms,
              prop.l2CacheSize >> 20, blocks, kThreads, bps);

  const size_t buf_bytes = size_t(1) << 30;  // 1 GiB: many times L2
  uint4* buf = nullptr;
  uint32_t* sink = nullptr;
  unsigned* counter = nullptr;
  CK(cudaMalloc(&buf, buf_bytes));
  CK(cudaMemset(buf, 1, buf_bytes));
  CK(cudaMalloc(&sink, sizeof(uint32_t) * size_t(blocks)));
  CK(cudaMalloc(&counter, sizeof(unsigned)));
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

  const int stages = 64;
  struct Size {
    const char* name;
    double mb;
  };
  const Size sizes[] = {{"empty", 0},
                        {"o 8.4 MB", 8.39},
                        {"qkv 12.6 MB", 12.58},
                        {"down 33.6 MB", 33.55},
                        {"gate_up 67.1 MB", 67.11}};
  std::printf("%-16s %8s %9s %9s %9s %11s %11s   us per stage\n", "stage", "floor", "plain", "pdl start",
              "pdl end", "persistent", "pers. early");
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
    const double pers = persistent_us<false>(st, blocks, s, stages, counter, sink);
    const double pers_early = persistent_us<true>(st, blocks, s, stages, counter, sink);
    std::printf("%-16s %8.2f %9.2f %9.2f %9.2f %11.2f %11.2f\n", sz.name, floor_us, plain, pdl_start, pdl_end,
                pers, pers_early);
  }
  CK(cudaStreamDestroy(st));
  CK(cudaFree(buf));
  CK(cudaFree(sink));
  CK(cudaFree(counter));
  return 0;
}
