// Hugging Face's `Replace` component, used both as a normalizer and as a decoder: a pattern
// ({"String": s} or {"Regex": r}) and the content that replaces every non-overlapping match.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "src/core/status.h"
#include "src/tokenizer/json_util.h"
#include "src/tokenizer/regex.h"

namespace astrai::tok {

// Every non-overlapping occurrence of `from` (left to right) replaced by `to`; empty `from`: no change.
std::string replace_literal(std::string_view text, std::string_view from, std::string_view to);

class Replacement {
 public:
  // `component` names the place in errors: "normalizer" or "decoder".
  static Result<Replacement> parse(const JsonEl& json, const std::string& component);
  bool is_regex() const { return re_ != nullptr; }
  std::string apply(std::string_view text) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> re_;
  std::string content_;
};

}  // namespace astrai::tok
