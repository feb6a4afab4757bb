#include "src/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace astrai {

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Buffer Buffer::host(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p) throw std::bad_alloc();
  if (p) std::memset(p, 0, rounded);
  return Buffer(p, bytes, Device::cpu, [](void* q) { std::free(q); });
}

}  // namespace astrai
