// Row addressing (src/backend/rows.h) and argument checks for the CUDA kernels.
#pragma once

#include <cstdint>

#include "src/backend/rows.h"
#include "src/core/tensor.h"

namespace astrai::gpu {

using ::astrai::Rows;  // src/backend/rows.h, shared with the CPU ops
using ::astrai::rows_of;

// Whether every row starts on a 16-byte boundary (base and strides), for 16-byte vector access.
inline bool rows_aligned16(const Rows& r) {
  return (reinterpret_cast<uintptr_t>(r.base) % 16 == 0) && (r.s_outer * r.esize) % 16 == 0 &&
         (r.s_inner * r.esize) % 16 == 0 && (r.width * r.esize) % 16 == 0;
}

// Throws unless t lives on the GPU with one of the two dtypes (dtype2 defaults to dtype).
void check_tensor(const Tensor& t, const char* op, const char* name, DType dtype, DType dtype2);
inline void check_tensor(const Tensor& t, const char* op, const char* name, DType dtype) {
  check_tensor(t, op, name, dtype, dtype);
}
// Throws unless t is a contiguous i32 tensor on the GPU.
void check_index(const Tensor& t, const char* op, const char* name);

}  // namespace astrai::gpu
