#include "src/tokenizer/replace.h"

namespace astrai::tok {

std::string replace_literal(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  size_t prev = 0;
  for (size_t p = text.find(from); p != std::string_view::npos; p = text.find(from, prev)) {
    out.append(text.substr(prev, p - prev));
    out.append(to);
    prev = p + from.size();
  }
  out.append(text.substr(prev));
  return out;
}

Result<Replacement> Replacement::parse(const JsonEl& json, const std::string& component) {
  Replacement r;
  r.content_ = str_or(json, "content", "");
  auto pattern = member(json, "pattern");
  if (pattern && member(*pattern, "String")) {
    r.literal_ = str_or(*pattern, "String", "");
    return r;
  }
  if (pattern && member(*pattern, "Regex")) {
    ASTRAI_ASSIGN_OR_RETURN(r.re_,
                            Regex::compile(str_or(*pattern, "Regex", ""), component + " Replace pattern"));
    return r;
  }
  return invalid_argument("tokenizer.json: " + component + " Replace has no String or Regex pattern");
}

std::string Replacement::apply(std::string_view text) const {
  return re_ ? re_->replace_all(text, content_) : replace_literal(text, literal_, content_);
}

}  // namespace astrai::tok
