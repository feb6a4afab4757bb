#include "src/backend/cpu/host_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace astrai {

void discard_host_pages(void* data, size_t bytes) {
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(data) + page - 1) / page * page;
  const uintptr_t end = (uintptr_t(data) + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace astrai
