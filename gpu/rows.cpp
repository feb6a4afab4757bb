#include "gpu/rows.h"

#include <string>

#include "gpu/check.h"

namespace astrai::gpu {

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  throw Error(internal_error(std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ") in " + what + " at " + file + ":" +
                             std::to_string(line)));
}

Rows rows_of(const Tensor& t, const char* op) {
  ASTRAI_GPU_CHECK(t.ndim >= 1 && t.ndim <= 4, std::string(op) + ": tensor rank " + std::to_string(t.ndim));
  ASTRAI_GPU_CHECK(t.shape[t.ndim - 1] <= 1 || t.stride[t.ndim - 1] == 1,
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
      ASTRAI_GPU_CHECK(t.shape[0] <= 1 || t.stride[0] == t.shape[1] * t.stride[1],
                       std::string(op) + ": 4-D tensor with non-collapsible leading dims");
      v.n_rows = t.shape[0] * t.shape[1] * t.shape[2];
      v.inner = t.shape[2] > 0 ? t.shape[2] : 1;
      v.s_outer = t.stride[1];
      v.s_inner = t.stride[2];
      break;
  }
  return v;
}

void check_tensor(const Tensor& t, const char* op, const char* name, DType dtype, DType dtype2) {
  ASTRAI_GPU_CHECK(t.device == Device::cuda && (t.dtype == dtype || t.dtype == dtype2),
                   std::string(op) + ": " + name + " must be a " + std::string(dtype_name(dtype)) +
                       (dtype2 != dtype ? " or " + std::string(dtype_name(dtype2)) : std::string()) +
                       " cuda tensor, got " + std::string(dtype_name(t.dtype)) +
                       (t.device == Device::cuda ? " on cuda" : " on cpu"));
}

void check_index(const Tensor& t, const char* op, const char* name) {
  ASTRAI_GPU_CHECK(t.dtype == DType::i32 && t.device == Device::cuda && t.is_contiguous(),
                   std::string(op) + ": " + name + " must be a contiguous i32 cuda tensor");
}

}  // namespace astrai::gpu
