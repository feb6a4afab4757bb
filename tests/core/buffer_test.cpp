#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>

#include "src/core/tensor.h"

TEST_CASE("host buffers are zeroed, aligned and writable on both allocation paths", "[unit]") {
  for (size_t bytes : {size_t(1), size_t(1000), size_t(1) << 20, (size_t(1) << 22) + 3}) {
    INFO("bytes " << bytes);
    astrai::Buffer b = astrai::Buffer::host(bytes);
    REQUIRE(b.data() != nullptr);
    CHECK(b.size() == bytes);
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
    auto* p = static_cast<unsigned char*>(b.data());
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i += 997) nonzero += p[i] != 0;
    nonzero += p[bytes - 1] != 0;
    CHECK(nonzero == 0);
    std::memset(p, 0xab, bytes);
    CHECK(p[bytes - 1] == 0xab);
  }
}

TEST_CASE("moving a buffer transfers ownership once", "[unit]") {
  astrai::Buffer a = astrai::Buffer::host(size_t(2) << 20);
  void* p = a.data();
  astrai::Buffer b = std::move(a);
  CHECK(b.data() == p);
  CHECK(a.data() == nullptr);
  a = astrai::Buffer::host(64);
  a = std::move(b);
  CHECK(a.data() == p);
}
