// tokenizer.json "added_tokens": tokens matched in the text before the model sees it, as HF's
// AddedVocabulary does. Matching is leftmost-longest over a byte trie; `lstrip` / `rstrip` also
// consume the whitespace on that side, `single_word` only matches a whole word. Tokens with
// `normalized: false` are matched in the raw text, the others in the normalized text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace astrai::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// One run of the text: either an added token (id >= 0) or text for the model (id < 0).
struct Section {
  std::string_view text;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  // `patterns[i]` is what to look for, with the token's flags.
  void build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return nodes_.size() <= 1; }
  // Appends the sections of `text` to `out`; empty text sections are dropped.
  void split(std::string_view text, std::vector<Section>& out) const;

 private:
  struct Node {
    int32_t token = -1;                                       // index into tokens_ when a pattern ends here
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
  };
  int32_t child(int32_t node, unsigned char c) const;
  std::vector<Node> nodes_;
  int32_t root_next_[256];
  bool first_byte_[256] = {};
  int single_first_byte_ = -1;  // the only first byte of all patterns, or -1
  std::vector<AddedToken> tokens_;
};

}  // namespace astrai::tok
