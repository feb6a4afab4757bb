#include "gpu/check.h"
#include "gpu/ops.h"

namespace astrai::gpu {

Scratch::~Scratch() {
  if (ptr_) cudaFree(ptr_);
}

void* Scratch::ensure(size_t bytes) {
  if (bytes <= bytes_) return ptr_;
  if (ptr_) ASTRAI_CUDA_CHECK(cudaFree(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
  ASTRAI_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  bytes_ = bytes;
  return ptr_;
}

}  // namespace astrai::gpu
