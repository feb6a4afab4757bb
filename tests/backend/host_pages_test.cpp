// discard_host_pages: the whole OS pages inside the range go back to the kernel (resident memory
// falls, they read as zeros), the partial pages at its ends keep their bytes.
#include "src/backend/cpu/host_pages.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "src/core/tensor.h"

namespace astrai::test {
namespace {

size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident * size_t(::sysconf(_SC_PAGESIZE));
}

TEST_CASE(
    "discarding host memory gives the whole OS pages of a range back and keeps the partial pages at its ends",
    "[unit]") {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t size = size_t(64) << 20;  // mmap-backed, as the KV pool is (Buffer::host)
  Buffer buf = Buffer::host(size);
  auto* bytes = static_cast<unsigned char*>(buf.data());
  std::memset(bytes, 0xab, size);

  // A range that starts and ends inside OS pages, like a run of KV pages whose size is not a
  // multiple of the OS page.
  const size_t begin = 3 * page + 100, end = size - 5 * page - 7;
  const size_t first_whole = 4 * page, past_whole = size - 6 * page;
  const size_t before = resident_bytes();
  discard_host_pages(bytes + begin, end - begin);
  const size_t after = resident_bytes();

  INFO("resident before " << before << " after " << after);
  // Everything else in this process is small and idle: the fall is the discarded pages, give or
  // take a few pages of the test's own.
  REQUIRE(before > after);
  CHECK(before - after >= past_whole - first_whole - size_t(1 << 20));
  for (size_t i = 0; i < size; i += 997) {
    const bool gone = i >= first_whole && i < past_whole;
    INFO("byte " << i);
    REQUIRE(bytes[i] == (gone ? 0 : 0xab));
  }
  for (size_t i : {begin - 1, begin, first_whole - 1, past_whole, end - 1, end}) REQUIRE(bytes[i] == 0xab);
  CHECK(bytes[first_whole] == 0);
  CHECK(bytes[past_whole - 1] == 0);
}

TEST_CASE("discarding a range inside one OS page changes nothing", "[unit]") {
  Buffer buf = Buffer::host(size_t(2) << 20);
  auto* bytes = static_cast<unsigned char*>(buf.data());
  std::memset(bytes, 0x5a, buf.size());
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  discard_host_pages(bytes + page + 1, page - 2);
  for (size_t i = 0; i < buf.size(); ++i)
    if (bytes[i] != 0x5a) FAIL("byte " << i << " changed");
}

}  // namespace
}  // namespace astrai::test
