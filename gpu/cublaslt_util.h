// What every cuBLASLt caller in gpu/ shares (Linear's forward GEMMs, Gemm's training GEMMs): the
// status check, the dtype mapping, and the row alignment cuBLASLt's heuristic needs to know.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <numeric>
#include <string>

#include "src/core/dtype.h"
#include "src/core/status.h"

#define ASTRAI_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                   \
    const cublasStatus_t astrai_st_ = (call);                                                            \
    if (astrai_st_ != CUBLAS_STATUS_SUCCESS)                                                             \
      throw ::astrai::Error(::astrai::internal_error(std::string("cuBLASLt error ") +                    \
                                                     cublasLtGetStatusName(astrai_st_) + " in " #call)); \
  } while (0)

namespace astrai::gpu {

// 32 MiB of workspace per handle: enough for the split-K algorithms the heuristic returns.
inline constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

inline cudaDataType_t cuda_type(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The alignment (bytes, at most 256) every row of a matrix starts on: the base pointer's and the
// row pitch's largest common power of two.
inline int row_alignment(const void* p, int64_t ld, DType t) {
  const uint64_t pitch = uint64_t(ld) * dtype_size(t);
  uint64_t a = std::gcd(uint64_t(reinterpret_cast<uintptr_t>(p)), uint64_t(256));
  if (pitch) a = std::gcd(a, pitch);
  return int(a == 0 ? 256 : a);
}

}  // namespace astrai::gpu
