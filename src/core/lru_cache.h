// A small cache of the most recently used values, safe to share between threads: what compiling a
// grammar, or building a tokenizer's vocabulary table, produced for a key, kept for the next
// request that brings the same key. Lookups scan the entries in use order (the capacities are
// tens), so a key needs only ==.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <utility>

namespace astrai {

template <typename Key, typename Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // The value kept for `key` (a copy), which becomes the most recent; nullopt when there is none.
  std::optional<Value> get(const Key& key) {
    std::lock_guard g(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return entries_.front().second;
      }
    return std::nullopt;
  }

  // Keeps `value` for `key` as the most recent, replacing what `key` had; past the capacity the
  // least recently used entry goes.
  void put(Key key, Value value) {
    std::lock_guard g(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == key) {
        entries_.erase(it);
        break;
      }
    entries_.emplace_front(std::move(key), std::move(value));
    while (entries_.size() > capacity_) entries_.pop_back();
  }

  size_t size() {
    std::lock_guard g(mu_);
    return entries_.size();
  }

 private:
  std::mutex mu_;
  size_t capacity_;
  std::list<std::pair<Key, Value>> entries_;  // most recent first
};

}  // namespace astrai
