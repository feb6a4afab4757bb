// Minimal CUDA translation unit so the gpu/ target compiles from the start; the CUDA backend
// (cuBLASLt GEMMs, attention, sampling) lands in its own issue.
#include <cuda_runtime.h>

#include "gpu/device_info.h"

namespace astrai::gpu {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace astrai::gpu
