#include "sched/kv_pool.h"

#include <algorithm>
#include <cassert>
#include <cstdio>

namespace astrai {

KvPool::KvPool(int num_pages) : refcount_(size_t(std::max(num_pages, 0)), 0) {
  free_.reserve(refcount_.size());
  // Pushed in reverse so that page 0 is handed out first (readable traces).
  for (int p = num_pages - 1; p >= 0; --p) free_.push_back(p);
}

std::optional<int32_t> KvPool::alloc() {
  if (free_.empty()) return std::nullopt;
  const int32_t p = free_.back();
  free_.pop_back();
  assert(refcount_[size_t(p)] == 0);
  refcount_[size_t(p)] = 1;
  return p;
}

void KvPool::retain(int32_t page) {
  assert(page >= 0 && size_t(page) < refcount_.size() && refcount_[size_t(page)] > 0);
  ++refcount_[size_t(page)];
}

void KvPool::release(int32_t page) {
  assert(page >= 0 && size_t(page) < refcount_.size() && refcount_[size_t(page)] > 0);
  if (--refcount_[size_t(page)] == 0) free_.push_back(page);
}

Status KvPool::check() const {
  std::vector<int> on_free(refcount_.size(), 0);
  for (int32_t p : free_) {
    if (p < 0 || size_t(p) >= refcount_.size())
      return internal_error("free list holds bad page " + std::to_string(p));
    if (++on_free[size_t(p)] > 1)
      return internal_error("page " + std::to_string(p) + " is on the free list twice");
  }
  for (size_t p = 0; p < refcount_.size(); ++p) {
    if (refcount_[p] < 0) return internal_error("page " + std::to_string(p) + " has a negative refcount");
    if ((refcount_[p] == 0) != (on_free[p] == 1))
      return internal_error("page " + std::to_string(p) + " has refcount " + std::to_string(refcount_[p]) +
                            (on_free[p] ? " but is on the free list" : " but is not on the free list"));
  }
  return {};
}

Result<int> kv_pool_pages(const KvPoolSizing& s) {
  int64_t pages = 0;
  if (s.max_pages > 0) {
    pages = s.max_pages;
  } else {
    if (s.bytes_per_page == 0) return internal_error("kv pool: bytes per page is 0");
    int64_t budget = s.budget_bytes;
    if (budget <= 0) {
      if (s.memory_fraction <= 0 || s.memory_fraction > 1)
        return invalid_argument("kv memory fraction must be in (0, 1], got " +
                                std::to_string(s.memory_fraction));
      budget = int64_t(double(s.available_bytes) * s.memory_fraction);
    }
    pages = budget / int64_t(s.bytes_per_page);
    if (s.cap > 0) pages = std::min(pages, s.cap);
    if (pages < 2)
      return resource_exhausted("KV cache budget of " + std::to_string(budget) + " bytes holds " +
                                std::to_string(pages) + " pages of " + std::to_string(s.bytes_per_page) +
                                " bytes; at least 2 are needed (" + kMoreKvMemory + ")");
  }
  if (pages > INT32_MAX / 2) pages = INT32_MAX / 2;
  return int(pages);
}

}  // namespace astrai
