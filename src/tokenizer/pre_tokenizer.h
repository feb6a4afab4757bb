// tokenizer.json "pre_tokenizer": Sequence, Split (Regex or String pattern; Isolated, Removed,
// MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel, Digits, Metaspace,
// Whitespace, WhitespaceSplit.
//
// Pieces are string_views into the section being encoded or into strings kept in an arena (for
// pre-tokenizers that rewrite text), so splitting allocates nothing per piece.
//
// ByteLevel maps every byte to a printable code point so the BPE vocabulary can be stored as
// text. We skip that mapping: the tokenizer converts the vocabulary back to raw bytes once at
// load time and BPE runs on bytes. That is exact as long as ByteLevel is the last pre-tokenizer
// (true of every byte-level tokenizer we know); otherwise loading fails with a clear error.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/status.h"
#include "src/tokenizer/json_util.h"

namespace astrai::tok {

struct PreTokenizeScratch {
  std::deque<std::string> arena;  // owns rewritten text; deque keeps element addresses stable
  std::vector<std::string_view> next;
  std::vector<std::pair<size_t, size_t>> matches;
  void clear() {
    arena.clear();
    next.clear();
  }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokenized pieces. first_section: the text is the first
  // section of the input (Metaspace's prepend_scheme "first").
  virtual void pre_tokenize(std::vector<std::string_view>& pieces, PreTokenizeScratch& s,
                            bool first_section) const = 0;
};

struct ParsedPreTokenizer {
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // null: none
  bool byte_level = false;                      // ends with ByteLevel: the model works on raw bytes
};

Result<ParsedPreTokenizer> parse_pre_tokenizer(const JsonEl& json);

}  // namespace astrai::tok
