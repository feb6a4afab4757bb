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

TEST_CASE("rows and cols of a matrix address the same elements as the parent", "[unit]") {
  constexpr int64_t R = 5, C = 7;
  astrai::Buffer b = astrai::Buffer::host(size_t(R * C) * sizeof(float));
  const astrai::Tensor m = b.as(astrai::DType::f32, {R, C});
  for (int64_t i = 0; i < R * C; ++i) m.ptr<float>()[i] = float(i);
  const astrai::Tensor c = m.cols(2, 6), r = m.rows(1, 4).cols(3, 4);
  CHECK(c.shape[0] == R);
  CHECK(c.shape[1] == 4);
  CHECK(c.stride[0] == C);
  CHECK_FALSE(c.is_contiguous());
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < 4; ++j) CHECK(c.ptr<float>()[i * c.stride[0] + j] == float(i * C + 2 + j));
  CHECK(r.shape[0] == 3);
  CHECK(r.shape[1] == 1);
  for (int64_t i = 0; i < 3; ++i) CHECK(r.ptr<float>()[i * r.stride[0]] == float((i + 1) * C + 3));
  CHECK(m.cols(0, C).is_contiguous());
}
