#include "sched/kv_pool.h"

#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <set>

#include "tools/test_util.h"

using namespace astrai;

TEST_CASE("kv pool hands out every page once and then runs dry", "[unit]") {
  KvPool pool(5);
  std::set<int32_t> got;
  for (int i = 0; i < 5; ++i) {
    auto p = pool.alloc();
    REQUIRE(p);
    REQUIRE(*p >= 0);
    REQUIRE(*p < 5);
    got.insert(*p);
  }
  CHECK(got.size() == 5);
  CHECK_FALSE(pool.alloc());
  CHECK(pool.num_free() == 0);
  REQUIRE(pool.check().ok());
}

TEST_CASE("kv pool page is free only when its last reference is released", "[unit]") {
  KvPool pool(2);
  const int32_t p = *pool.alloc();
  pool.retain(p);
  CHECK(pool.refcount(p) == 2);
  pool.release(p);
  CHECK(pool.num_free() == 1);
  pool.release(p);
  CHECK(pool.num_free() == 2);
  CHECK(pool.refcount(p) == 0);
  REQUIRE(pool.check().ok());
}

TEST_CASE("kv pool random operations match a reference refcount model", "[unit]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int n = 37;
  KvPool pool(n);
  std::map<int32_t, int> ref;  // page -> refcount (absent: free)
  for (int op = 0; op < 20000; ++op) {
    const int kind = int(rng() % 3);
    if (kind == 0) {
      auto p = pool.alloc();
      if (int(ref.size()) == n) {
        REQUIRE_FALSE(p);
      } else {
        REQUIRE(p);
        REQUIRE(ref.count(*p) == 0);
        ref[*p] = 1;
      }
    } else if (!ref.empty()) {
      auto it = ref.begin();
      std::advance(it, long(rng() % ref.size()));
      if (kind == 1) {
        pool.retain(it->first);
        ++it->second;
      } else {
        pool.release(it->first);
        if (--it->second == 0) ref.erase(it);
      }
    }
    REQUIRE(pool.num_free() == n - int(ref.size()));
    for (auto& [p, c] : ref) REQUIRE(pool.refcount(p) == c);
  }
  REQUIRE(pool.check().ok());
}

TEST_CASE("kv pool sizing follows the exact count, the byte budget or the memory fraction", "[unit]") {
  KvPoolSizing s;
  s.bytes_per_page = 1000;
  s.max_pages = 7;
  CHECK(kv_pool_pages(s).value() == 7);
  s.max_pages = 0;
  s.budget_bytes = 10'500;
  CHECK(kv_pool_pages(s).value() == 10);
  s.budget_bytes = 0;
  s.memory_fraction = 0.25;
  s.available_bytes = 100'000;
  CHECK(kv_pool_pages(s).value() == 25);
  s.cap = 12;
  CHECK(kv_pool_pages(s).value() == 12);
  s.cap = 0;
  s.available_bytes = 1000;
  auto r = kv_pool_pages(s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::resource_exhausted);
}
