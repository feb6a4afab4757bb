#include "sched/radix_cache.h"

#include <catch2/catch.hpp>
#include <map>
#include <random>

#include "tools/test_util.h"

using namespace astrai;

namespace {
std::vector<int32_t> page_tokens(int a, int ps) {
  std::vector<int32_t> v;
  for (int i = 0; i < ps; ++i) v.push_back(a * 100 + i);
  return v;
}
}  // namespace

TEST_CASE("radix cache matches whole pages of a cached prefix only", "[unit]") {
  KvPool pool(8);
  RadixCache cache(pool, 4);
  std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const int32_t p0 = *pool.alloc(), p1 = *pool.alloc();
  auto* n0 = cache.insert(nullptr, std::span(toks).subspan(0, 4), p0);
  REQUIRE(n0);
  auto* n1 = cache.insert(n0, std::span(toks).subspan(4, 4), p1);
  REQUIRE(n1);
  CHECK(pool.refcount(p0) == 2);  // ours + the cache's
  CHECK(cache.cached_pages() == 2);
  CHECK(cache.evictable_pages() == 0);  // both locked by the inserter

  auto m = cache.match(toks, 10);
  REQUIRE(m.size() == 2);
  CHECK(RadixCache::page_of(m[0]) == p0);
  CHECK(RadixCache::page_of(m[1]) == p1);
  CHECK(cache.match(toks, 1).size() == 1);
  std::vector<int32_t> other = {1, 2, 3, 4, 5, 6, 7, 9};
  CHECK(cache.match(other, 10).size() == 1);
  std::vector<int32_t> short_ = {1, 2, 3};
  CHECK(cache.match(short_, 10).empty());

  // A second copy of the same page is refused: the caller keeps its own.
  const int32_t p2 = *pool.alloc();
  CHECK(cache.insert(nullptr, std::span(toks).subspan(0, 4), p2) == nullptr);
  REQUIRE(cache.check().ok());
}

TEST_CASE("radix cache evicts only unlocked pages, least recently used leaf first", "[unit]") {
  KvPool pool(8);
  RadixCache cache(pool, 2);
  auto a = page_tokens(1, 2), b = page_tokens(2, 2), c = page_tokens(3, 2);
  const int32_t pa = *pool.alloc(), pb = *pool.alloc(), pc = *pool.alloc();
  auto* na = cache.insert(nullptr, a, pa);
  auto* nb = cache.insert(na, b, pb);  // a -> b
  auto* nc = cache.insert(nullptr, c, pc);
  for (int32_t p : {pa, pb, pc}) pool.release(p);  // the sequence is done with its pages
  cache.unlock(nc);
  cache.unlock(nb);
  cache.unlock(na);
  CHECK(cache.evictable_pages() == 3);
  CHECK(pool.num_free() == 5);
  // c was used least recently -> goes first; then b (a leaf), then a.
  std::vector<int32_t> ca = a;
  ca.insert(ca.end(), b.begin(), b.end());
  auto m = cache.match(ca, 2);  // touch a, b
  REQUIRE(m.size() == 2);
  CHECK(cache.evict(1) == 1);
  CHECK(pool.refcount(pc) == 0);
  CHECK(cache.match(c, 1).empty());
  // Lock a (as a sequence would): b can still go, a cannot.
  cache.lock(na);
  pool.retain(pa);
  CHECK(cache.evict(5) == 1);
  CHECK(pool.refcount(pb) == 0);
  CHECK(pool.refcount(pa) == 2);
  REQUIRE(cache.check().ok());
  cache.unlock(na);
  pool.release(pa);
  CHECK(cache.evict(5) == 1);
  CHECK(pool.num_free() == 8);
  REQUIRE(cache.check().ok());
}

// Random insert / match+lock / unlock / evict sequences against a straightforward model: a map from
// token prefix to (page, locks), checked after every operation.
TEST_CASE("radix cache random operations keep the refcount and lock invariants", "[unit]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int ps = 2, npages = 40;
  KvPool pool(npages);
  RadixCache cache(pool, ps);
  struct Holder {
    std::vector<int32_t> tokens;
    std::vector<RadixCache::Node*> chain;
    std::vector<int32_t> pages;
  };
  std::vector<Holder> holders;
  std::map<std::vector<int32_t>, int32_t> model;  // prefix -> cached page
  for (int op = 0; op < 5000; ++op) {
    const int kind = int(rng() % 4);
    if (kind <= 1) {
      // A new "sequence": random tokens over a tiny alphabet (so prefixes collide), reuse the
      // cached prefix, compute the rest into fresh pages and insert them.
      Holder h;
      const int len = 1 + int(rng() % 4);
      for (int i = 0; i < len * ps; ++i) h.tokens.push_back(int32_t(rng() % 2));
      h.chain = cache.match(h.tokens, len);
      for (auto* n : h.chain) {
        cache.lock(n);
        pool.retain(RadixCache::page_of(n));
        h.pages.push_back(RadixCache::page_of(n));
      }
      bool ok = true;
      for (size_t i = h.chain.size(); i < size_t(len) && ok; ++i) {
        auto p = pool.alloc();
        if (!p && cache.evict(1) == 1) p = pool.alloc();
        if (!p) {
          ok = false;
          break;
        }
        h.pages.push_back(*p);
        std::span<const int32_t> t(h.tokens.data() + i * ps, ps);
        auto* n = cache.insert(h.chain.empty() ? nullptr : h.chain.back(), t, *p);
        REQUIRE(n);  // the match was maximal, so this page cannot be cached yet
        h.chain.push_back(n);
        model[std::vector<int32_t>(h.tokens.begin(), h.tokens.begin() + long(i + 1) * ps)] = *p;
      }
      holders.push_back(std::move(h));
    } else if (kind == 2 && !holders.empty()) {
      const size_t i = rng() % holders.size();
      for (auto* n : holders[i].chain) cache.unlock(n);
      for (int32_t p : holders[i].pages) pool.release(p);
      holders.erase(holders.begin() + long(i));
    } else if (kind == 3) {
      const int before = cache.cached_pages();
      const int n = cache.evict(int(rng() % 3));
      CHECK(cache.cached_pages() == before - n);
    }
    REQUIRE(cache.check().ok());
    REQUIRE(pool.check().ok());
    // Every still-cached model entry is found by match with the page we recorded.
    int found = 0;
    for (auto& [prefix, page] : model) {
      auto m = cache.match(prefix, int(prefix.size()) / ps);
      if (int(m.size()) * ps == int(prefix.size())) {
        REQUIRE(RadixCache::page_of(m.back()) == page);
        ++found;
      }
    }
    REQUIRE(found == cache.cached_pages());
    // Pages in use = cached pages + pages held by holders but not cached (none here: all inserted).
    REQUIRE(pool.num_used() == cache.cached_pages());
  }
  for (auto& h : holders) {
    for (auto* n : h.chain) cache.unlock(n);
    for (int32_t p : h.pages) pool.release(p);
  }
  CHECK(cache.evictable_pages() == cache.cached_pages());
  cache.evict(npages);
  CHECK(pool.num_free() == npages);
}
