// Row addressing shared by the CPU ops. Activations are "rows of width D": the last dim is
// contiguous, the leading dims may be strided (q/k/v are column slices of one fused qkv buffer,
// gate/up the two halves of one gate_up buffer). Row r enumerates the leading indices in order.
#pragma once

#include <string>

#include "src/core/status.h"
#include "src/core/tensor.h"

namespace astrai::cpu {

// Shape errors are bugs in the caller (the model), not user errors: throw, never write out of bounds.
#define ASTRAI_OP_CHECK(cond, what)                                                             \
  do {                                                                                          \
    if (!(cond)) throw ::astrai::Error(::astrai::internal_error(std::string("cpu ") + (what))); \
  } while (0)

struct RowView {
  char* base = nullptr;
  size_t esize = 4;
  int64_t n_rows = 0, width = 0;
  int64_t inner = 1;                 // rows per outer index (the size of dim ndim-2)
  int64_t s_outer = 0, s_inner = 0;  // element strides of the two leading dims

  template <typename T = float>
  T* row(int64_t r) const {
    const int64_t off = (r / inner) * s_outer + (r % inner) * s_inner;
    return reinterpret_cast<T*>(base + off * int64_t(esize));
  }
};

inline RowView rows_of(const Tensor& t, const char* op) {
  ASTRAI_OP_CHECK(t.ndim >= 1 && t.ndim <= 4, std::string(op) + ": tensor rank " + std::to_string(t.ndim));
  ASTRAI_OP_CHECK(t.shape[t.ndim - 1] <= 1 || t.stride[t.ndim - 1] == 1,
                  std::string(op) + ": last dim must be contiguous, shape " + t.shape_str());
  RowView v;
  v.base = static_cast<char*>(t.data);
  v.esize = dtype_size(t.dtype);
  v.width = t.shape[t.ndim - 1];
  switch (t.ndim) {
    case 1: v.n_rows = 1; break;
    case 2:
      v.n_rows = t.shape[0];
      v.inner = t.shape[0] > 0 ? t.shape[0] : 1;
      v.s_inner = t.stride[0];
      break;
    case 3:
      v.n_rows = t.shape[0] * t.shape[1];
      v.inner = t.shape[1] > 0 ? t.shape[1] : 1;
      v.s_outer = t.stride[0];
      v.s_inner = t.stride[1];
      break;
    case 4:  // the first two dims must collapse into one
      ASTRAI_OP_CHECK(t.shape[0] <= 1 || t.stride[0] == t.shape[1] * t.stride[1],
                      std::string(op) + ": 4-D tensor with non-collapsible leading dims");
      v.n_rows = t.shape[0] * t.shape[1] * t.shape[2];
      v.inner = t.shape[2] > 0 ? t.shape[2] : 1;
      v.s_outer = t.stride[1];
      v.s_inner = t.stride[2];
      break;
  }
  return v;
}

inline void check_f32(const Tensor& t, const char* op, const char* name) {
  ASTRAI_OP_CHECK(t.dtype == DType::f32 && t.device == Device::cpu,
                  std::string(op) + ": " + name + " must be an f32 cpu tensor");
}
inline void check_i32(const Tensor& t, const char* op, const char* name) {
  ASTRAI_OP_CHECK(t.dtype == DType::i32 && t.device == Device::cpu && t.is_contiguous(),
                  std::string(op) + ": " + name + " must be a contiguous i32 cpu tensor");
}

}  // namespace astrai::cpu
