#include "src/tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "src/core/utf8.h"
#include "src/tokenizer/regex.h"

namespace astrai::tok {
namespace {

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Splits `text` at `matches` (sorted, non-overlapping byte ranges) the way HF's
// NormalizedString::split does for each behaviour, appending non-empty pieces to `out`.
void split_by_matches(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                      Behavior behavior, bool invert, std::vector<std::string_view>& out) {
  // (begin, end, is_match) covering all of text.
  struct Span {
    size_t b, e;
    bool m;
  };
  thread_local std::vector<Span> spans, merged;
  spans.clear();
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) spans.push_back({prev, text.size(), invert});

  merged.clear();
  switch (behavior) {
    case Behavior::removed:
      for (const Span& s : spans)
        if (!s.m) merged.push_back(s);
      break;
    case Behavior::isolated: merged = spans; break;
    case Behavior::merged_with_previous: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.m && !prev_match && !merged.empty())
          merged.back().e = s.e;
        else
          merged.push_back(s);
        prev_match = s.m;
      }
      break;
    }
    case Behavior::merged_with_next: {
      bool prev_match = false;  // walking backwards: whether the span after this one matched
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.m && !prev_match && !merged.empty())
          merged.back().b = s.b;
        else
          merged.push_back(s);
        prev_match = s.m;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case Behavior::contiguous: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.m == prev_match && !merged.empty())
          merged.back().e = s.e;
        else
          merged.push_back(s);
        prev_match = s.m;
      }
      break;
    }
  }
  for (const Span& s : merged)
    if (s.e > s.b) out.push_back(text.substr(s.b, s.e - s.b));
}

void find_literal(std::string_view text, std::string_view lit, std::vector<std::pair<size_t, size_t>>& out) {
  out.clear();
  if (lit.empty()) return;
  for (size_t p = text.find(lit); p != std::string_view::npos; p = text.find(lit, p + lit.size()))
    out.emplace_back(p, p + lit.size());
}

class Split final : public PreTokenizer {
 public:
  Split(std::shared_ptr<const Regex> re, std::string literal, Behavior b, bool invert)
      : re_(std::move(re)), literal_(std::move(literal)), behavior_(b), invert_(invert) {}
  void pre_tokenize(std::vector<std::string_view>& pieces, PreTokenizeScratch& s, bool) const override {
    s.next.clear();
    for (std::string_view p : pieces) {
      if (re_)
        re_->find_all(p, s.matches);
      else
        find_literal(p, literal_, s.matches);
      split_by_matches(p, s.matches, behavior_, invert_, s.next);
    }
    pieces.swap(s.next);
  }

 private:
  std::shared_ptr<const Regex> re_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

// Splits on ASCII digits: each digit alone, or runs of digits together.
class Digits final : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<std::string_view>& pieces, PreTokenizeScratch& s, bool) const override {
    s.next.clear();
    for (std::string_view p : pieces) {
      s.matches.clear();
      for (size_t i = 0; i < p.size(); ++i)
        if (p[i] >= '0' && p[i] <= '9') s.matches.emplace_back(i, i + 1);
      split_by_matches(p, s.matches, individual_ ? Behavior::isolated : Behavior::contiguous, false, s.next);
    }
    pieces.swap(s.next);
  }

 private:
  bool individual_;
};

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::shared_ptr<const Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void pre_tokenize(std::vector<std::string_view>& pieces, PreTokenizeScratch& s, bool) const override {
    if (add_prefix_space_) {
      for (std::string_view& p : pieces) {
        if (!p.empty() && p[0] != ' ') {
          s.arena.emplace_back(1, ' ');
          s.arena.back().append(p);
          p = s.arena.back();
        }
      }
    }
    if (!re_) return;
    s.next.clear();
    for (std::string_view p : pieces) {
      re_->find_all(p, s.matches);
      split_by_matches(p, s.matches, Behavior::isolated, false, s.next);
    }
    pieces.swap(s.next);
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<const Regex> re_;
};

class Metaspace final : public PreTokenizer {
 public:
  enum class Prepend { always, first, never };
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  void pre_tokenize(std::vector<std::string_view>& pieces, PreTokenizeScratch& s,
                    bool first_section) const override {
    s.next.clear();
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string_view p = pieces[i];
      std::string t;
      t.reserve(p.size() + replacement_.size());
      for (char c : p) {
        if (c == ' ')
          t += replacement_;
        else
          t += c;
      }
      const bool prepend =
          prepend_ == Prepend::always || (prepend_ == Prepend::first && first_section && i == 0);
      if (prepend && t.compare(0, replacement_.size(), replacement_) != 0) t.insert(0, replacement_);
      s.arena.push_back(std::move(t));
      std::string_view v = s.arena.back();
      if (split_) {
        find_literal(v, replacement_, s.matches);
        split_by_matches(v, s.matches, Behavior::merged_with_next, false, s.next);
      } else if (!v.empty()) {
        s.next.push_back(v);
      }
    }
    pieces.swap(s.next);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> items) : items_(std::move(items)) {}
  void pre_tokenize(std::vector<std::string_view>& pieces, PreTokenizeScratch& s,
                    bool first_section) const override {
    for (const auto& p : items_) p->pre_tokenize(pieces, s, first_section);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

// GPT-2's split, used by ByteLevel with use_regex.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<Behavior> parse_behavior(const JsonEl& json) {
  const std::string b = str_or(json, "behavior", "Isolated");
  if (b == "Removed") return Behavior::removed;
  if (b == "Isolated") return Behavior::isolated;
  if (b == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (b == "MergedWithNext") return Behavior::merged_with_next;
  if (b == "Contiguous") return Behavior::contiguous;
  return unsupported("tokenizer.json: pre_tokenizer Split behavior '" + b + "' is not supported");
}

Result<std::unique_ptr<PreTokenizer>> parse_one(const JsonEl& json, bool& byte_level_seen,
                                                bool& byte_level_last) {
  const std::string type = type_of(json);
  byte_level_last = false;
  if (byte_level_seen && type != "ByteLevel")
    return unsupported("tokenizer.json: pre_tokenizer " + type +
                       " after ByteLevel is not supported (ByteLevel must be the last pre-tokenizer)");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> items;
    auto list = member(json, "pretokenizers");
    if (list && list->is_array())
      for (JsonEl item : as_array(*list)) {
        ASTRAI_ASSIGN_OR_RETURN(auto p, parse_one(item, byte_level_seen, byte_level_last));
        if (p) items.push_back(std::move(p));
      }
    return std::unique_ptr<PreTokenizer>(new Sequence(std::move(items)));
  }
  if (type == "Split") {
    ASTRAI_ASSIGN_OR_RETURN(Behavior b, parse_behavior(json));
    const bool invert = bool_or(json, "invert", false);
    auto pattern = member(json, "pattern");
    if (pattern && member(*pattern, "String"))
      return std::unique_ptr<PreTokenizer>(new Split(nullptr, str_or(*pattern, "String", ""), b, invert));
    if (pattern && member(*pattern, "Regex")) {
      ASTRAI_ASSIGN_OR_RETURN(auto re,
                              Regex::compile(str_or(*pattern, "Regex", ""), "pre_tokenizer Split pattern"));
      return std::unique_ptr<PreTokenizer>(new Split(std::move(re), "", b, invert));
    }
    return invalid_argument("tokenizer.json: pre_tokenizer Split has no String or Regex pattern");
  }
  if (type == "ByteLevel") {
    std::shared_ptr<const Regex> re;
    if (bool_or(json, "use_regex", true)) {
      ASTRAI_ASSIGN_OR_RETURN(re, Regex::compile(kGpt2Pattern, "ByteLevel pattern"));
    }
    byte_level_seen = byte_level_last = true;
    return std::unique_ptr<PreTokenizer>(
        new ByteLevel(bool_or(json, "add_prefix_space", true), std::move(re)));
  }
  if (type == "Digits")
    return std::unique_ptr<PreTokenizer>(new Digits(bool_or(json, "individual_digits", false)));
  if (type == "Metaspace") {
    std::string scheme = str_or(json, "prepend_scheme", "");
    if (scheme.empty()) scheme = bool_or(json, "add_prefix_space", true) ? "always" : "never";
    Metaspace::Prepend p = Metaspace::Prepend::always;
    if (scheme == "first")
      p = Metaspace::Prepend::first;
    else if (scheme == "never")
      p = Metaspace::Prepend::never;
    else if (scheme != "always")
      return unsupported("tokenizer.json: Metaspace prepend_scheme '" + scheme + "' is not supported");
    return std::unique_ptr<PreTokenizer>(
        new Metaspace(str_or(json, "replacement", "\xE2\x96\x81"), p, bool_or(json, "split", true)));
  }
  if (type == "Whitespace") {
    ASTRAI_ASSIGN_OR_RETURN(auto re, Regex::compile(R"(\w+|[^\w\s]+)", "Whitespace pattern"));
    return std::unique_ptr<PreTokenizer>(new Split(std::move(re), "", Behavior::removed, true));
  }
  if (type == "WhitespaceSplit") {
    ASTRAI_ASSIGN_OR_RETURN(auto re, Regex::compile(R"(\s+)", "WhitespaceSplit pattern"));
    return std::unique_ptr<PreTokenizer>(new Split(std::move(re), "", Behavior::removed, false));
  }
  return unsupported("tokenizer.json: pre_tokenizer type '" + type + "' is not supported");
}

}  // namespace

Result<ParsedPreTokenizer> parse_pre_tokenizer(const JsonEl& json) {
  ParsedPreTokenizer out;
  if (json.is_null()) return out;
  bool seen = false, last = false;
  ASTRAI_ASSIGN_OR_RETURN(out.pre_tokenizer, parse_one(json, seen, last));
  out.byte_level = seen;
  return out;
}

}  // namespace astrai::tok
