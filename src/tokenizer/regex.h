// PCRE2 (JIT) regexes for tokenizer.json patterns, set up to match as the Oniguruma engine that
// Hugging Face tokenizers compiles them with: UTF mode, Unicode properties for \w \d and POSIX
// classes (PCRE2_UCP), Unicode case folding under (?i), and \s / \S meaning the Unicode
// White_Space property (PCRE2's own \s leaves out U+0085, Oniguruma's does not).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/status.h"

namespace astrai::tok {

class Regex {
 public:
  // `what` names the pattern's place in error messages ("pre_tokenizer Split pattern").
  static Result<std::shared_ptr<const Regex>> compile(std::string_view pattern, const std::string& what);
  // A regex matching `literal` exactly.
  static Result<std::shared_ptr<const Regex>> literal(std::string_view literal, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All non-overlapping, non-empty matches in `text` (valid UTF-8), as [begin, end) byte offsets,
  // appended to `out` (which is cleared first).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  // Replaces every match with `with`.
  std::string replace_all(std::string_view text, std::string_view with) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace astrai::tok
