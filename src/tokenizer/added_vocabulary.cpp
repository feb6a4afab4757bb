#include "src/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cstring>

#include "src/core/utf8.h"
#include "src/tokenizer/unicode_text.h"

namespace astrai::tok {
namespace {

// Code point ending at byte offset `end` (exclusive) / starting at `begin`; 0 at the edges.
uint32_t cp_before(std::string_view t, size_t end) {
  if (end == 0) return 0;
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(t[b]) & 0xC0) == 0x80) --b;
  return utf8_decode(t.substr(b, end - b));
}
uint32_t cp_at(std::string_view t, size_t begin, size_t* len = nullptr) {
  if (begin >= t.size()) return 0;
  const int n = utf8_sequence_length(t.substr(begin));
  const size_t k = n > 0 ? size_t(n) : 1;
  if (len) *len = k;
  return utf8_decode(t.substr(begin, k));
}
bool is_word_char(uint32_t cp) {
  if (cp == 0) return false;
  if (cp < 0x80)
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  return !is_unicode_whitespace(cp);  // non-ASCII letters and digits: close to Rust's is_alphanumeric
}

}  // namespace

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens,
                              const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node{});
  std::fill(std::begin(root_next_), std::end(root_next_), -1);
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  tokens_ = tokens;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : p) {
      int32_t next = child(node, c);
      if (next < 0) {
        next = int32_t(nodes_.size());
        nodes_.push_back(Node{});
        if (node == 0) root_next_[c] = next;
        auto& ch = nodes_[size_t(node)].children;
        ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, int32_t(-1))), {c, next});
      }
      node = next;
    }
    if (nodes_[size_t(node)].token < 0) nodes_[size_t(node)].token = int32_t(t);  // first listed wins
    first_byte_[static_cast<unsigned char>(p[0])] = true;
  }
  int distinct = 0;
  for (int c = 0; c < 256; ++c)
    if (first_byte_[c]) {
      ++distinct;
      single_first_byte_ = c;
    }
  if (distinct != 1) single_first_byte_ = -1;
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char c) const {
  if (node == 0) return root_next_[c];
  const auto& ch = nodes_[size_t(node)].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, int32_t(-1)));
  return it != ch.end() && it->first == c ? it->second : -1;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Section>& out) const {
  size_t emitted = 0;  // text before this offset has been emitted
  auto emit_text = [&](size_t b, size_t e) {
    if (e > b) out.push_back({text.substr(b, e - b), -1});
  };
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      if (single_first_byte_ >= 0) {  // all patterns start with one byte (often '<'): memchr to it
        const void* p = std::memchr(text.data() + i, single_first_byte_, text.size() - i);
        if (!p) break;
        i = size_t(static_cast<const char*>(p) - text.data());
      } else {
        ++i;
        continue;
      }
    }
    // Longest pattern starting at i.
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      if (nodes_[size_t(node)].token >= 0) {
        best = nodes_[size_t(node)].token;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[size_t(best)];
    if (tok.single_word && (is_word_char(cp_before(text, i)) || is_word_char(cp_at(text, best_end)))) {
      ++i;
      continue;
    }
    size_t b = i, e = best_end;
    if (tok.lstrip) {
      while (b > emitted) {
        size_t s = b - 1;
        while (s > emitted && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        if (!is_unicode_whitespace(cp_at(text, s))) break;
        b = s;
      }
    }
    if (tok.rstrip) {
      size_t n = 1;
      while (e < text.size() && is_unicode_whitespace(cp_at(text, e, &n))) e += n;
    }
    emit_text(emitted, b);
    out.push_back({text.substr(i, best_end - i), tok.id});
    emitted = i = e;
  }
  emit_text(emitted, text.size());
}

}  // namespace astrai::tok
