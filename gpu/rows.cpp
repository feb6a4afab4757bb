#include "gpu/rows.h"

#include <string>

#include "gpu/check.h"

namespace astrai::gpu {

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  throw Error(internal_error(std::string("CUDA error ") + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ") in " + what + " at " + file + ":" +
                             std::to_string(line)));
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
