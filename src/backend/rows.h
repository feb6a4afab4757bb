// Row addressing shared by the CPU ops and the CUDA kernels. Activations are "rows of width D": the
// last dim is contiguous, the leading dims may be strided (q/k/v are column slices of one fused qkv
// buffer, gate/up the two halves of one gate_up buffer). Row r enumerates the leading indices in
// order. A Rows is a plain value: CUDA kernels take it by value.
#pragma once

#include <cstdint>

#include "src/core/tensor.h"

#ifdef __CUDACC__
#define ASTRAI_HD __host__ __device__
#else
#define ASTRAI_HD
#endif

namespace astrai {

struct Rows {
  char* base = nullptr;
  int64_t esize = 4;
  int64_t n_rows = 0, width = 0;
  int64_t inner = 1;                 // rows per outer index (the size of dim ndim-2)
  int64_t s_outer = 0, s_inner = 0;  // element strides of the two leading dims

  template <typename T = float>
  ASTRAI_HD T* row(int64_t r) const {
    const int64_t off = (r / inner) * s_outer + (r % inner) * s_inner;
    return reinterpret_cast<T*>(base + off * esize);
  }
};

// Validates t (rank 1..4, contiguous last dim, leading dims of a 4-D tensor collapsible) and
// describes its rows. A bad shape is a bug in the caller (the model), not a user error: it throws
// an internal error naming the backend and the op, and nothing is written out of bounds.
Rows rows_of(const Tensor& t, const char* op);

}  // namespace astrai
