#include "src/backend/rows.h"

#include <string>

#include "src/core/status.h"

namespace astrai {
namespace {

void check(bool ok, const Tensor& t, const std::string& what) {
  if (!ok) throw Error(internal_error(std::string(t.device == Device::cuda ? "cuda " : "cpu ") + what));
}

}  // namespace

Rows rows_of(const Tensor& t, const char* op) {
  check(t.ndim >= 1 && t.ndim <= 4, t, std::string(op) + ": tensor rank " + std::to_string(t.ndim));
  check(t.shape[t.ndim - 1] <= 1 || t.stride[t.ndim - 1] == 1, t,
        std::string(op) + ": last dim must be contiguous, shape " + t.shape_str());
  Rows v;
  v.base = static_cast<char*>(t.data);
  v.esize = int64_t(dtype_size(t.dtype));
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
      check(t.shape[0] <= 1 || t.stride[0] == t.shape[1] * t.stride[1], t,
            std::string(op) + ": 4-D tensor with non-collapsible leading dims");
      v.n_rows = t.shape[0] * t.shape[1] * t.shape[2];
      v.inner = t.shape[2] > 0 ? t.shape[2] : 1;
      v.s_outer = t.stride[1];
      v.s_inner = t.stride[2];
      break;
  }
  return v;
}

}  // namespace astrai
