#include <algorithm>

#include "gpu/check.h"
#include "gpu/peer_all_reduce.h"
#include "gpu/peer_all_reduce_kernel.cuh"

namespace astrai::gpu {
namespace {

// Blocks per call: enough that no block moves more than a chunk (each block's stores and wait are
// serial), at most kMaxBlocks (the flag and epoch arrays' size).
constexpr int kMaxBlocks = 32;

int blocks_for(int64_t bytes, int64_t chunk) {
  return int(std::clamp<int64_t>((bytes + chunk - 1) / chunk, 1, kMaxBlocks));
}

}  // namespace

std::unique_ptr<PeerAllReduce> PeerAllReduce::create(std::span<const int> devices, int64_t max_bytes) {
  const int W = int(devices.size());
  if (W < 2 || W > kPeerMaxRanks) return nullptr;
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int ok = 0;
      ASTRAI_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, a, b));
      if (!ok) return nullptr;
    }
  std::unique_ptr<PeerAllReduce> g(new PeerAllReduce());
  g->max_bytes_ = (max_bytes + 15) / 16 * 16;
  int prev = 0;
  ASTRAI_CUDA_CHECK(cudaGetDevice(&prev));
  void* host = nullptr;
  ASTRAI_CUDA_CHECK(cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  g->abort_host_ = static_cast<volatile int*>(host);
  *g->abort_host_ = 0;
  void* dev = nullptr;
  ASTRAI_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  g->abort_device_ = static_cast<int*>(dev);
  for (int r = 0; r < W; ++r) {
    Rank k;
    k.device = devices[size_t(r)];
    ASTRAI_CUDA_CHECK(cudaSetDevice(k.device));
    for (int p : devices) {
      if (p == k.device) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();  // enabled by an earlier group: fine
      else
        ASTRAI_CUDA_CHECK(e);
    }
    ASTRAI_CUDA_CHECK(cudaMalloc(&k.recv, size_t(2 * W * g->max_bytes_)));
    ASTRAI_CUDA_CHECK(cudaMalloc(&k.flags, sizeof(uint32_t) * kMaxBlocks * kPeerMaxRanks));
    ASTRAI_CUDA_CHECK(cudaMemset(k.flags, 0, sizeof(uint32_t) * kMaxBlocks * kPeerMaxRanks));
    ASTRAI_CUDA_CHECK(cudaMalloc(&k.epochs, sizeof(uint32_t) * kMaxBlocks));
    ASTRAI_CUDA_CHECK(cudaMemset(k.epochs, 0, sizeof(uint32_t) * kMaxBlocks));
    ASTRAI_CUDA_CHECK(cudaDeviceSynchronize());
    g->ranks_.push_back(k);
  }
  ASTRAI_CUDA_CHECK(cudaSetDevice(prev));
  return g;
}

PeerAllReduce::~PeerAllReduce() {
  int prev = 0;
  (void)cudaGetDevice(&prev);
  for (const Rank& k : ranks_) {
    (void)cudaSetDevice(k.device);
    (void)cudaFree(k.recv);
    (void)cudaFree(k.flags);
    (void)cudaFree(k.epochs);
  }
  (void)cudaSetDevice(prev);
  if (abort_host_) (void)cudaFreeHost(const_cast<int*>(abort_host_));
}

bool PeerAllReduce::fits(const Tensor& t) const {
  const int64_t bytes = t.numel() * int64_t(dtype_size(t.dtype));
  return t.device == Device::cuda && t.is_contiguous() && (t.dtype == DType::bf16 || t.dtype == DType::f32) &&
         bytes > 0 && bytes % 16 == 0 && bytes <= max_bytes_ && reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
}

void PeerAllReduce::all_reduce_sum(int rank, const Tensor& t, cudaStream_t stream) {
  ASTRAI_GPU_CHECK(fits(t), "peer all-reduce: tensor does not fit (" + t.shape_str() + ")");
  PeerAllReduceArgs a;
  a.x = t.data;
  a.bytes = t.numel() * int64_t(dtype_size(t.dtype));
  a.rank = rank;
  a.world = int(ranks_.size());
  for (int p = 0; p < a.world; ++p) {
    a.recv[p] = ranks_[size_t(p)].recv;
    a.flags[p] = ranks_[size_t(p)].flags;
  }
  a.slot_bytes = max_bytes_;
  a.epochs = ranks_[size_t(rank)].epochs;
  a.abort = abort_device_;
  ASTRAI_GPU_CHECK(chunk_bytes_ >= 16, "peer all-reduce: chunk below 16 bytes");
  const int blocks = blocks_for(a.bytes, chunk_bytes_);
  a.chunk_bytes = int((a.bytes / 16 + blocks - 1) / blocks * 16);
  if (t.dtype == DType::bf16)
    peer_all_reduce_kernel<bf16><<<blocks, kPeerThreads, 0, stream>>>(a);
  else
    peer_all_reduce_kernel<float><<<blocks, kPeerThreads, 0, stream>>>(a);
  ASTRAI_CUDA_LAUNCH_CHECK(peer_all_reduce_kernel);
}

void PeerAllReduce::abort() {
  if (abort_host_) *abort_host_ = 1;
}

}  // namespace astrai::gpu
