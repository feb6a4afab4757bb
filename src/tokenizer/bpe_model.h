// tokenizer.json "model" of type BPE: vocabulary, ranked merges, byte_fallback, ignore_merges,
// unk_token / fuse_unk.
//
// Merging follows HF: repeatedly apply the lowest-ranked merge present in the word, leftmost
// first on ties, using a min-heap of candidate pairs over a linked list of symbols (stale heap
// entries are recognised by the ids they recorded). Results for short words are memoised in a
// per-thread direct-mapped cache, so the common words of a text cost one hash lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/status.h"
#include "src/tokenizer/json_util.h"
#include "src/tokenizer/string_id_map.h"

namespace astrai::tok {

// Open-addressing map from a pair of token ids to (rank, merged id).
class MergeTable {
 public:
  void reserve(size_t n);
  void insert(int32_t a, int32_t b, uint32_t rank, int32_t merged);
  // True and sets rank/merged when (a, b) is a merge.
  bool find(int32_t a, int32_t b, uint32_t& rank, int32_t& merged) const {
    if (slots_.empty()) return false;
    const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) {
        rank = s.rank;
        merged = s.merged;
        return true;
      }
      if (s.key == kEmpty) return false;
    }
  }

 private:
  struct Slot {
    uint64_t key;
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return size_t(k);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

class BpeModel {
 public:
  // byte_level: the pre-tokenizer ends with ByteLevel, so vocabulary entries are converted from
  // the GPT-2 alphabet to raw bytes and words are split into bytes rather than characters.
  static Result<std::unique_ptr<BpeModel>> parse(const JsonEl& model, bool byte_level);

  // Appends the ids of one pre-tokenized word (model space: raw bytes when byte_level).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  size_t size() const { return model_text_.size(); }  // 1 + largest id (gaps are empty)
  // Id of a vocabulary entry as written in tokenizer.json.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The entry as written in tokenizer.json ("" for a gap).
  const std::string& id_to_token(int32_t id) const;
  // The entry in model space (raw bytes when byte_level).
  const std::string& model_text(int32_t id) const { return model_text_[size_t(id)]; }
  bool byte_level() const { return byte_level_; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  bool byte_level_ = false, byte_fallback_ = false, ignore_merges_ = false, fuse_unk_ = false;
  std::optional<int32_t> unk_id_;
  std::vector<std::string> model_text_;  // by id
  std::vector<std::string> original_;    // by id, only when byte_level (else model_text_)
  StringIdMap vocab_;                    // model space -> id
  StringIdMap originals_;                // original -> id, only when byte_level
  int32_t byte_ids_[256];                // byte_level: id of each single byte (-1: none)
  int32_t fallback_ids_[256];            // byte_fallback: id of <0xAB> (-1: none)
  MergeTable merges_;
  uint64_t uid_;  // distinguishes models in the per-thread word cache
};

}  // namespace astrai::tok
