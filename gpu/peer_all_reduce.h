// A one-shot all-reduce over peer memory for the small tensors of tensor-parallel decode (the two
// all-reduces per layer of a few KB each), where NCCL's ring costs ~15 us per call on NVLink and
// this costs one kernel (gpu/peer_all_reduce_kernel.cuh says how it works). One group per set of
// GPUs of one process; each rank launches on its own stream, in the same order of calls as every
// other rank (what the Communicator contract asks anyway). Larger tensors stay with NCCL.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "src/core/tensor.h"

namespace astrai::gpu {

class PeerAllReduce {
 public:
  // The group over `devices` (rank r on devices[r]), for tensors of up to max_bytes; null when some
  // pair of them has no peer access (the caller keeps NCCL for everything then).
  static std::unique_ptr<PeerAllReduce> create(std::span<const int> devices, int64_t max_bytes);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  // Whether t can take this path: contiguous bf16 or f32 on the GPU, 16-byte aligned and sized, at
  // most max_bytes.
  bool fits(const Tensor& t) const;
  // t = the sum over the ranks of their t, in place, enqueued on `stream` (rank's device current).
  void all_reduce_sum(int rank, const Tensor& t, cudaStream_t stream);
  // Bytes per block of a call (a multiple of 16; at most 32 blocks, so larger tensors get larger
  // chunks). Every rank must use the same (the blocks meet by index).
  void set_chunk_bytes(int64_t bytes) { chunk_bytes_ = bytes; }

  // Releases every rank's waits for good: a peer will not arrive. The group cannot be used again.
  void abort();

 private:
  PeerAllReduce() = default;
  struct Rank {
    int device = -1;
    char* recv = nullptr;
    uint32_t* flags = nullptr;
    uint32_t* epochs = nullptr;
  };
  std::vector<Rank> ranks_;
  int64_t max_bytes_ = 0;
  int64_t chunk_bytes_ = 8192;
  volatile int* abort_host_ = nullptr;  // pinned, mapped into every device
  int* abort_device_ = nullptr;
};

}  // namespace astrai::gpu
