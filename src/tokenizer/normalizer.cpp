#include "src/tokenizer/normalizer.h"

#include <vector>

#include "src/core/utf8.h"
#include "src/tokenizer/regex.h"
#include "src/tokenizer/replace.h"
#include "src/tokenizer/unicode_text.h"

namespace astrai::tok {
namespace {

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(NormalForm f) : form_(f) {}
  std::string normalize(std::string text) const override { return unicode_normalize(text, form_); }

 private:
  NormalForm form_;
};

class Lowercase final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return unicode_lowercase(text); }
};

class Replace final : public Normalizer {
 public:
  explicit Replace(Replacement r) : r_(std::move(r)) {}
  std::string normalize(std::string text) const override { return r_.apply(text); }

 private:
  Replacement r_;
};

// Rust's Prepend leaves empty text empty.
class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  std::string normalize(std::string text) const override { return text.empty() ? text : prepend_ + text; }

 private:
  std::string prepend_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string text) const override {
    size_t b = 0, e = text.size();
    if (left_) {
      while (b < e) {
        const int n = utf8_sequence_length(std::string_view(text).substr(b));
        if (n <= 0 || !is_unicode_whitespace(utf8_decode(std::string_view(text).substr(b, size_t(n))))) break;
        b += size_t(n);
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        if (!is_unicode_whitespace(utf8_decode(std::string_view(text).substr(s, e - s)))) break;
        e = s;
      }
    }
    return text.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> items) : items_(std::move(items)) {}
  std::string normalize(std::string text) const override {
    for (const auto& n : items_) text = n->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

}  // namespace

Result<std::unique_ptr<Normalizer>> parse_normalizer(const JsonEl& json) {
  if (json.is_null()) return std::unique_ptr<Normalizer>();
  const std::string type = type_of(json);
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeForm(NormalForm::nfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeForm(NormalForm::nfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeForm(NormalForm::nfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeForm(NormalForm::nfkd));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
  if (type == "Prepend") return std::unique_ptr<Normalizer>(new Prepend(str_or(json, "prepend", "")));
  if (type == "Strip")
    return std::unique_ptr<Normalizer>(
        new Strip(bool_or(json, "strip_left", true), bool_or(json, "strip_right", true)));
  if (type == "Replace") {
    ASTRAI_ASSIGN_OR_RETURN(Replacement r, Replacement::parse(json, "normalizer"));
    return std::unique_ptr<Normalizer>(new Replace(std::move(r)));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> items;
    auto list = member(json, "normalizers");
    if (list && list->is_array())
      for (JsonEl item : as_array(*list)) {
        ASTRAI_ASSIGN_OR_RETURN(auto n, parse_normalizer(item));
        if (n) items.push_back(std::move(n));
      }
    return std::unique_ptr<Normalizer>(new Sequence(std::move(items)));
  }
  return unsupported("tokenizer.json: normalizer type '" + type + "' is not supported");
}

}  // namespace astrai::tok
