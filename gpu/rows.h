// Row addressing for the CUDA kernels, the device twin of the CPU ops' RowView: activations are
// rows of `width` contiguous elements whose leading dims may be strided (q/k/v are column slices
// of one fused qkv buffer, gate/up the two halves of one gate_up buffer). Row r enumerates the
// leading indices in order. Passed to kernels by value.
#pragma once

#include <cstdint>

#include "src/core/tensor.h"

#ifdef __CUDACC__
#define ASTRAI_HD __host__ __device__
#else
#define ASTRAI_HD
#endif

namespace astrai::gpu {

struct Rows {
  char* base = nullptr;
  int64_t esize = 2;
  int64_t n_rows = 0, width = 0;
  int64_t inner = 1;                 // rows per outer index (the size of dim ndim-2)
  int64_t s_outer = 0, s_inner = 0;  // element strides of the two leading dims

  template <typename T>
  ASTRAI_HD T* row(int64_t r) const {
    const int64_t off = (r / inner) * s_outer + (r % inner) * s_inner;
    return reinterpret_cast<T*>(base + off * esize);
  }
};

// Whether every row starts on a 16-byte boundary (base and strides), for 16-byte vector access.
inline bool rows_aligned16(const Rows& r) {
  return (reinterpret_cast<uintptr_t>(r.base) % 16 == 0) && (r.s_outer * r.esize) % 16 == 0 &&
         (r.s_inner * r.esize) % 16 == 0 && (r.width * r.esize) % 16 == 0;
}

// Validates t (rank 1..4, contiguous last dim, on the GPU) and describes its rows.
Rows rows_of(const Tensor& t, const char* op);

// Throws unless t lives on the GPU with one of the two dtypes (dtype2 defaults to dtype).
void check_tensor(const Tensor& t, const char* op, const char* name, DType dtype, DType dtype2);
inline void check_tensor(const Tensor& t, const char* op, const char* name, DType dtype) {
  check_tensor(t, op, name, dtype, dtype);
}
// Throws unless t is a contiguous i32 tensor on the GPU.
void check_index(const Tensor& t, const char* op, const char* name);

}  // namespace astrai::gpu
