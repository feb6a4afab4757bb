// Open-addressing hash map from string_view (pointing into storage the owner keeps alive) to an
// id. Vocabulary lookups are the inner loop of loading and encoding, and std::unordered_map's
// node chains cost more than the hashing here.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

namespace astrai::tok {

class StringIdMap {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.id >= 0) insert_slot(s);
  }
  // Keeps the first id given for a key.
  void insert(std::string_view key, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) reserve(size_ + 1 > slots_.size() ? size_ + 1 : slots_.size());
    insert_slot(Slot{key.data(), uint32_t(key.size()), id, hash(key)});
  }
  std::optional<int32_t> find(std::string_view key) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return std::nullopt;
      if (s.hash == h && s.len == key.size() && std::memcmp(s.data, key.data(), key.size()) == 0) return s.id;
    }
  }
  size_t size() const { return size_; }

  static uint64_t hash(std::string_view s) {
    // FNV-1a over 8-byte words then a final mix: short keys (tokens) hash in a few steps.
    uint64_t h = 0xcbf29ce484222325ULL ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0x100000001b3ULL;
      h ^= h >> 29;
    }
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 32;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
    return h;
  }

 private:
  struct Slot {
    const char* data = nullptr;
    uint32_t len = 0;
    int32_t id = -1;
    uint64_t hash = 0;
  };
  void insert_slot(const Slot& n) {
    for (size_t i = n.hash & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = n;
        ++size_;
        return;
      }
      if (s.hash == n.hash && s.len == n.len && std::memcmp(s.data, n.data, n.len) == 0) return;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

}  // namespace astrai::tok
