// Row addressing and argument checks for the CPU ops (rows: src/backend/rows.h).
#pragma once

#include <string>

#include "src/backend/rows.h"
#include "src/core/status.h"
#include "src/core/tensor.h"

namespace astrai::cpu {

// Shape errors are bugs in the caller (the model), not user errors: throw, never write out of bounds.
#define ASTRAI_OP_CHECK(cond, what)                                                             \
  do {                                                                                          \
    if (!(cond)) throw ::astrai::Error(::astrai::internal_error(std::string("cpu ") + (what))); \
  } while (0)

using RowView = ::astrai::Rows;  // src/backend/rows.h, shared with the CUDA kernels
using ::astrai::rows_of;

inline void check_f32(const Tensor& t, const char* op, const char* name) {
  ASTRAI_OP_CHECK(t.dtype == DType::f32 && t.device == Device::cpu,
                  std::string(op) + ": " + name + " must be an f32 cpu tensor");
}
inline void check_i32(const Tensor& t, const char* op, const char* name) {
  ASTRAI_OP_CHECK(t.dtype == DType::i32 && t.device == Device::cpu && t.is_contiguous(),
                  std::string(op) + ": " + name + " must be a contiguous i32 cpu tensor");
}

}  // namespace astrai::cpu
