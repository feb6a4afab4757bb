// Paged KV pool: hands out fixed-size pages (int32 ids) of the model's KV cache and refcounts them.
// A page is free exactly when its refcount is 0. Holders: each sequence that uses the page (one
// reference each, so n > 1 choices can share prompt pages) and the radix prefix cache (one
// reference per cached page). Only the step-loop thread touches the pool.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "src/core/status.h"

namespace astrai {

class KvPool {
 public:
  explicit KvPool(int num_pages);

  int num_pages() const { return int(refcount_.size()); }
  int num_free() const { return int(free_.size()); }
  int num_used() const { return num_pages() - num_free(); }

  // A free page with refcount 1, or nullopt when none is free.
  std::optional<int32_t> alloc();
  void retain(int32_t page);
  // Drops one reference; the page returns to the free list when its count reaches 0.
  void release(int32_t page);
  int refcount(int32_t page) const { return refcount_[size_t(page)]; }
  // The pages with refcount 0, in no particular order.
  std::span<const int32_t> free_pages() const { return free_; }

  // Consistency of the free list and the counts (tests): every page with refcount 0 is on the free
  // list exactly once and no other page is. Returns a description of the first violation.
  Status check() const;

 private:
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // a stack: the most recently freed page is reused first
};

// Pages a pool gets from EngineOptions-style sizing: an exact count, or a byte budget, or a
// fraction of available memory, capped at `cap` (no more than every batch slot at full context).
struct KvPoolSizing {
  int max_pages = 0;            // > 0: exactly this many
  int64_t budget_bytes = 0;     // > 0: this many bytes
  double memory_fraction = 0;   // else: this fraction of available memory
  int64_t available_bytes = 0;  // Backend::memory_available()
  size_t bytes_per_page = 0;
  int64_t cap = 0;  // > 0: at most this many pages
};
Result<int> kv_pool_pages(const KvPoolSizing& s);

// What an error about a cache too small for a request tells the user to do, naming the options
// that size it.
inline constexpr char kMoreKvMemory[] =
    "give the KV cache more memory: --kv-memory-fraction or --max-pages on serve, --kv-memory on generate";

}  // namespace astrai
