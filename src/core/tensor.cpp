#include "src/core/tensor.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/core/out_of_memory.h"

namespace astrai {

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string memory_size(size_t bytes) {
  char s[32];
  if (bytes >= size_t(1) << 30)
    std::snprintf(s, sizeof s, "%.2f GiB", double(bytes) / double(size_t(1) << 30));
  else
    std::snprintf(s, sizeof s, "%.1f MiB", double(bytes) / double(size_t(1) << 20));
  return s;
}

Buffer Buffer::host(size_t bytes) {
  // Large buffers (weights, the KV pool) come from anonymous mmap: the kernel hands out zero pages
  // lazily, so a 1 GiB KV pool costs nothing until pages are touched, instead of a 1 GiB memset at
  // start-up.
  constexpr size_t kMmapThreshold = size_t(1) << 20;
  if (bytes >= kMmapThreshold) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw OutOfMemory("out of host memory: " + memory_size(bytes) + " asked");
    // Transparent huge pages where the kernel offers them on request: loading a model touches every
    // page of its weights once, and 2 MiB pages take 512x fewer faults than 4 KiB ones. Advice only:
    // failure changes nothing.
    ::madvise(p, bytes, MADV_HUGEPAGE);
    return Buffer(p, bytes, Device::cpu, [bytes](void* q) { ::munmap(q, bytes); });
  }
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p) throw OutOfMemory("out of host memory: " + memory_size(bytes) + " asked");
  if (p) std::memset(p, 0, rounded);
  return Buffer(p, bytes, Device::cpu, [](void* q) { std::free(q); });
}

}  // namespace astrai
