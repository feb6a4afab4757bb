// Error checks for the CUDA backend. Every CUDA runtime and cuBLASLt call is checked, and every
// kernel launch is followed by ASTRAI_CUDA_LAUNCH_CHECK (cudaGetLastError), so a failure surfaces
// at the op that caused it as an astrai::Error naming the call, never as silent garbage later.
// Shape errors are bugs in the caller (the model): they throw too, before anything is launched.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "src/core/status.h"

namespace astrai::gpu {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);

}  // namespace astrai::gpu

#define ASTRAI_CUDA_CHECK(call)                                                                              \
  do {                                                                                                       \
    const cudaError_t astrai_err_ = (call);                                                                  \
    if (astrai_err_ != cudaSuccess) ::astrai::gpu::throw_cuda_error(astrai_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define ASTRAI_CUDA_LAUNCH_CHECK(kernel_name) ASTRAI_CUDA_CHECK(cudaGetLastError())

#define ASTRAI_GPU_CHECK(cond, what)                                                             \
  do {                                                                                           \
    if (!(cond)) throw ::astrai::Error(::astrai::internal_error(std::string("cuda ") + (what))); \
  } while (0)
