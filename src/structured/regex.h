// Regular expressions (the ECMAScript subset JSON Schema's `pattern` and vLLM's `guided_regex`
// use): literals, `.`, classes `[...]` with ranges and negation, the escapes \d \w \s (and their
// complements), \n \t \r \f \v \0 \xHH \uHHHH \u{H...}, groups `(...)`, `(?:...)`, `(?<name>...)`,
// alternation, and the quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same strings). A
// leading ^ and a trailing $ anchor the match; lookaround, backreferences and anchors elsewhere
// are refused with a message naming them. Classes are sets of code points; the grammar builder
// turns them into UTF-8 byte sequences.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "src/structured/grammar.h"

namespace astrai::structured {

struct RegexNode {
  enum class Kind : uint8_t { empty, chars, concat, alternate, repeat };
  Kind kind = Kind::empty;
  std::vector<CodeRange> chars;  // chars: one code point of these (normalized)
  std::vector<RegexNode> kids;   // concat / alternate: the parts; repeat: the one repeated
  int64_t min = 0, max = -1;     // repeat: counts (max -1: unbounded)
};

struct ParsedRegex {
  RegexNode root;
  bool anchored_start = false, anchored_end = false;
};

// Repetition counts above this are refused (a bounded repeat is unrolled in the grammar).
inline constexpr int64_t kMaxRepeat = 4096;

// Parses `pattern`; on failure returns false with `error` saying what and where.
bool parse_regex(std::string_view pattern, ParsedRegex& out, std::string& error);

// Builds `n` in the builder's current rule; `chars` builds one character of a class (the caller
// decides how a code point is written: as itself, or escaped inside a JSON string).
using CharsBuilder = std::function<Frag(const std::vector<CodeRange>&)>;
Frag build_regex(GrammarBuilder& b, const RegexNode& n, const CharsBuilder& chars);

// Any code point but \n, \r, U+2028, U+2029 (ECMAScript's `.`).
std::vector<CodeRange> dot_ranges();

}  // namespace astrai::structured
