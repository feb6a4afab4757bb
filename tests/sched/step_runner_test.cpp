// StepRunner::discard_pages: the memory of free KV pages goes back to the system (the flush's page
// release) and nothing else changes: an OS page reads as zeros afterwards exactly when every byte
// of it belongs to a discarded KV page, in every layer's K and V buffer.
#include "sched/step_runner.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "fake_model.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

TEST_CASE("discarding free KV pages zeroes exactly the OS pages they cover whole, in every layer", "[unit]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const size_t os_page = size_t(::sysconf(_SC_PAGESIZE));
  // A KV page of 1.5 OS pages (f32, one slot per page): OS pages straddle KV page boundaries, so
  // whether one goes back depends on both its KV pages being free.
  KvCache kv;
  kv.num_pages = 300;
  kv.page_size = 1;
  kv.num_kv_heads = 1;
  kv.head_dim = int(os_page * 3 / 2 / sizeof(float));
  kv.dtype = DType::f32;
  const size_t kv_page = os_page * 3 / 2;
  const size_t bytes = size_t(kv.num_pages) * kv_page;  // over 1 MiB: page-aligned mmap memory
  for (int layer = 0; layer < 2; ++layer) {
    kv.k.push_back(Buffer::host(bytes));
    kv.v.push_back(Buffer::host(bytes));
  }
  std::vector<unsigned char*> buffers;  // the memory stays where it is when the runner takes the cache
  for (const auto* layers : {&kv.k, &kv.v})
    for (const Buffer& b : *layers) buffers.push_back(static_cast<unsigned char*>(b.data()));
  for (unsigned char* b : buffers) std::memset(b, 0x7f, bytes);

  // A random free set with runs of every length, in the pool's (unsorted) order.
  std::vector<int32_t> free;
  std::vector<bool> is_free(size_t(kv.num_pages), false);
  for (int32_t p = 0; p < kv.num_pages; ++p)
    if (rng() % 3 != 0) {
      free.push_back(p);
      is_free[size_t(p)] = true;
    }
  std::shuffle(free.begin(), free.end(), rng);

  StepRunner runner(nullptr, std::make_unique<FakeModel>(), std::move(kv));
  runner.discard_pages(free);

  for (const unsigned char* data : buffers) {
    REQUIRE(uintptr_t(data) % os_page == 0);
    for (size_t os = 0; os * os_page < bytes; ++os) {
      const size_t begin = os * os_page, end = std::min(bytes, begin + os_page);
      bool whole = end - begin == os_page;
      for (size_t kp = begin / kv_page; kp * kv_page < end; ++kp) whole = whole && is_free[kp];
      const unsigned char want = whole ? 0 : 0x7f;
      INFO("OS page " << os);
      REQUIRE(data[begin] == want);
      REQUIRE(data[end - 1] == want);
      REQUIRE(size_t(std::count(data + begin, data + end, want)) == end - begin);
    }
  }
}
