#include "src/core/lru_cache.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

using astrai::LruCache;

TEST_CASE("the cache keeps the most recently used values and drops the least recently used", "[unit]") {
  LruCache<std::string, int> c(2);
  CHECK_FALSE(c.get(std::string("a")));
  c.put("a", 1);
  c.put("b", 2);
  REQUIRE(c.get(std::string("a")) == 1);  // a is now the most recent
  c.put("c", 3);                          // so b goes
  CHECK_FALSE(c.get(std::string("b")));
  CHECK(c.get(std::string("a")) == 1);
  CHECK(c.get(std::string("c")) == 3);
  c.put("a", 10);  // replaced in place: still two entries
  CHECK(c.size() == 2);
  CHECK(c.get(std::string("a")) == 10);
}

TEST_CASE("the cache agrees with a plain list model over random operations", "[unit]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (size_t capacity : {size_t(1), size_t(3), size_t(8)}) {
    LruCache<int, int> c(capacity);
    std::vector<std::pair<int, int>> model;  // most recent first
    for (int step = 0; step < 2000; ++step) {
      const int key = int(rng() % 12);
      if (rng() % 2) {
        const int value = int(rng() % 1000);
        c.put(key, value);
        std::erase_if(model, [&](const auto& e) { return e.first == key; });
        model.insert(model.begin(), {key, value});
        if (model.size() > capacity) model.pop_back();
      } else {
        auto got = c.get(key);
        auto it = std::find_if(model.begin(), model.end(), [&](const auto& e) { return e.first == key; });
        REQUIRE(got.has_value() == (it != model.end()));
        if (got) {
          CHECK(*got == it->second);
          std::rotate(model.begin(), it, it + 1);
        }
      }
      REQUIRE(c.size() == model.size());
    }
  }
}
