#include "src/structured/regex.h"

#include <utility>

#include "src/core/utf8.h"

namespace astrai::structured {

std::vector<CodeRange> dot_ranges() {
  return complement_ranges(normalize_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
}

namespace {

std::vector<CodeRange> digit_ranges() {
  return {{'0', '9'}};
}
std::vector<CodeRange> word_ranges() {
  return normalize_ranges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
}
std::vector<CodeRange> space_ranges() {
  return normalize_ranges({{'\t', '\r'},
                           {' ', ' '},
                           {0xA0, 0xA0},
                           {0x1680, 0x1680},
                           {0x2000, 0x200A},
                           {0x2028, 0x2029},
                           {0x202F, 0x202F},
                           {0x205F, 0x205F},
                           {0x3000, 0x3000},
                           {0xFEFF, 0xFEFF}});
}

class Parser {
 public:
  explicit Parser(std::string_view p) {
    // Work on code points: a literal or a class bound may be any character.
    size_t i = 0;
    while (i < p.size()) {
      const int n = utf8_sequence_length(p.substr(i));
      if (n <= 0) {
        bad_utf8_ = true;
        return;
      }
      cps_.push_back(utf8_decode(p.substr(i, size_t(n))));
      i += size_t(n);
    }
  }

  bool parse(ParsedRegex& out, std::string& error) {
    if (bad_utf8_) return fail("the pattern is not valid UTF-8", error);
    if (pos_ < cps_.size() && cps_[pos_] == '^') {
      out.anchored_start = true;
      ++pos_;
    }
    // A trailing unescaped $ (count the backslashes before it).
    if (!cps_.empty() && cps_.back() == '$') {
      size_t bs = 0;
      for (size_t k = cps_.size() - 1; k > pos_ && cps_[k - 1] == '\\'; --k) ++bs;
      if (bs % 2 == 0 && cps_.size() - 1 >= pos_) {
        out.anchored_end = true;
        cps_.pop_back();
      }
    }
    if (!alternation(out.root)) return fail(err_, error);
    if (pos_ != cps_.size()) return fail("unmatched ')'", error);
    return true;
  }

 private:
  bool fail(const std::string& what, std::string& error) {
    error = what;
    return false;
  }
  bool err(std::string what) {
    if (err_.empty()) err_ = std::move(what) + " at offset " + std::to_string(pos_);
    return false;
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  uint32_t peek() const { return cps_[pos_]; }

  bool alternation(RegexNode& out) {
    RegexNode first;
    if (!concatenation(first)) return false;
    if (at_end() || peek() != '|') {
      out = std::move(first);
      return true;
    }
    out = RegexNode{};
    out.kind = RegexNode::Kind::alternate;
    out.kids.push_back(std::move(first));
    while (!at_end() && peek() == '|') {
      ++pos_;
      RegexNode next;
      if (!concatenation(next)) return false;
      out.kids.push_back(std::move(next));
    }
    return true;
  }

  bool concatenation(RegexNode& out) {
    out = RegexNode{};
    out.kind = RegexNode::Kind::concat;
    while (!at_end() && peek() != '|' && peek() != ')') {
      RegexNode atom;
      if (!quantified(atom)) return false;
      out.kids.push_back(std::move(atom));
    }
    if (out.kids.size() == 1) out = RegexNode(std::move(out.kids[0]));
    if (out.kids.empty() && out.kind == RegexNode::Kind::concat) out.kind = RegexNode::Kind::empty;
    return true;
  }

  bool number(int64_t& v) {
    if (at_end() || peek() < '0' || peek() > '9') return false;
    v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = std::min<int64_t>(v * 10 + (peek() - '0'), int64_t(1) << 40);
      ++pos_;
    }
    return true;
  }

  bool quantified(RegexNode& out) {
    RegexNode atom_node;
    if (!atom(atom_node)) return false;
    out = std::move(atom_node);
    while (!at_end()) {
      int64_t mn = 0, mx = -1;
      const uint32_t c = peek();
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        mn = 1;
        ++pos_;
      } else if (c == '?') {
        mx = 1;
        ++pos_;
      } else if (c == '{') {
        const size_t save = pos_;
        ++pos_;
        if (!number(mn)) {  // ECMAScript reads a '{' that starts no quantifier as a literal
          pos_ = save;
          return true;
        }
        mx = mn;
        if (!at_end() && peek() == ',') {
          ++pos_;
          if (!number(mx)) mx = -1;
        }
        if (at_end() || peek() != '}') return err("unterminated {n,m} quantifier");
        ++pos_;
        if (mx >= 0 && mx < mn) return err("quantifier {n,m} with m < n");
        if (mn > kMaxRepeat || mx > kMaxRepeat)
          return err("repetition counts above " + std::to_string(kMaxRepeat) + " are not supported");
      } else {
        return true;
      }
      if (!at_end() && peek() == '?') ++pos_;  // lazy: the same strings
      RegexNode r;
      r.kind = RegexNode::Kind::repeat;
      r.min = mn;
      r.max = mx;
      r.kids.push_back(std::move(out));
      out = std::move(r);
    }
    return true;
  }

  static RegexNode chars(const std::vector<CodeRange>& r) {
    RegexNode n;
    n.kind = RegexNode::Kind::chars;
    n.chars = normalize_ranges(r);
    return n;
  }

  bool hex(int digits, uint32_t& v) {
    v = 0;
    for (int i = 0; i < digits; ++i) {
      if (at_end()) return err("incomplete hex escape");
      const uint32_t c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        return err("bad hex digit in escape");
      v = v * 16 + d;
      ++pos_;
    }
    return true;
  }

  // After a backslash: a class escape (\d ...) into `set`, or a single character into `cp`.
  bool escape(std::vector<CodeRange>& set, bool& is_set, uint32_t& cp) {
    if (at_end()) return err("trailing backslash");
    const uint32_t c = peek();
    ++pos_;
    is_set = true;
    switch (c) {
      case 'd': set = digit_ranges(); return true;
      case 'D': set = complement_ranges(digit_ranges()); return true;
      case 'w': set = word_ranges(); return true;
      case 'W': set = complement_ranges(word_ranges()); return true;
      case 's': set = space_ranges(); return true;
      case 'S': set = complement_ranges(space_ranges()); return true;
      default: break;
    }
    is_set = false;
    switch (c) {
      case 'n': cp = '\n'; return true;
      case 't': cp = '\t'; return true;
      case 'r': cp = '\r'; return true;
      case 'f': cp = '\f'; return true;
      case 'v': cp = '\v'; return true;
      case '0': cp = 0; return true;
      case 'x': return hex(2, cp);
      case 'u':
        if (!at_end() && peek() == '{') {
          ++pos_;
          cp = 0;
          int n = 0;
          while (!at_end() && peek() != '}') {
            uint32_t d;
            if (!hex(1, d)) return false;
            cp = cp * 16 + d;
            if (++n > 6 || cp > 0x10FFFF) return err("\\u{...} escape out of range");
          }
          if (at_end() || n == 0) return err("unterminated \\u{...} escape");
          ++pos_;
          return true;
        }
        return hex(4, cp);
      case 'b':
      case 'B': return err("word-boundary assertions (\\b, \\B) are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') return err("backreferences are not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      std::string name = "\\";
      name += char(c);
      return err("the escape " + name + " is not supported");
    }
    cp = c;  // an escaped punctuation character stands for itself
    return true;
  }

  bool char_class(RegexNode& out) {
    ++pos_;  // [
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CodeRange> set;
    bool first = true;
    while (!at_end() && (peek() != ']' || false)) {
      if (peek() == ']' && !first) break;
      if (peek() == ']' && first) break;  // ECMAScript: [] matches nothing, [^] anything
      first = false;
      uint32_t lo = 0;
      bool is_set = false;
      std::vector<CodeRange> esc;
      if (peek() == '\\') {
        ++pos_;
        if (!at_end() && peek() == 'b') {  // inside a class \b is backspace
          ++pos_;
          lo = '\b';
        } else if (!escape(esc, is_set, lo)) {
          return false;
        }
      } else {
        lo = peek();
        ++pos_;
      }
      if (is_set) {
        set.insert(set.end(), esc.begin(), esc.end());
        continue;
      }
      uint32_t hi = lo;
      if (pos_ + 1 < cps_.size() && peek() == '-' && cps_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          std::vector<CodeRange> e2;
          bool s2 = false;
          if (!escape(e2, s2, hi)) return false;
          if (s2) return err("a class escape cannot end a range");
        } else {
          hi = peek();
          ++pos_;
        }
        if (hi < lo) return err("range out of order in character class");
      }
      set.push_back({lo, hi});
    }
    if (at_end()) return err("unterminated character class");
    ++pos_;  // ]
    set = normalize_ranges(set);
    out = chars(negate ? complement_ranges(set) : set);
    return true;
  }

  bool atom(RegexNode& out) {
    const uint32_t c = peek();
    if (c == '(') {
      ++pos_;
      if (!at_end() && peek() == '?') {
        ++pos_;
        if (!at_end() && peek() == ':') {
          ++pos_;
        } else if (!at_end() && peek() == '<' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != '=' &&
                   cps_[pos_ + 1] != '!') {
          while (!at_end() && peek() != '>') ++pos_;
          if (at_end()) return err("unterminated group name");
          ++pos_;
        } else {
          return err("lookaround and other (?...) groups are not supported");
        }
      }
      if (!alternation(out)) return false;
      if (at_end() || peek() != ')') return err("missing ')'");
      ++pos_;
      return true;
    }
    if (c == '[') return char_class(out);
    if (c == '.') {
      ++pos_;
      out = chars(dot_ranges());
      return true;
    }
    if (c == '*' || c == '+' || c == '?') return err("nothing to repeat");
    if (c == '^' || c == '$') return err("anchors other than a leading ^ and a trailing $ are not supported");
    if (c == '\\') {
      ++pos_;
      std::vector<CodeRange> set;
      bool is_set = false;
      uint32_t cp = 0;
      if (!escape(set, is_set, cp)) return false;
      out = is_set ? chars(set) : chars({{cp, cp}});
      return true;
    }
    ++pos_;
    out = chars({{c, c}});
    return true;
  }

  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
  bool bad_utf8_ = false;
  std::string err_;
};

}  // namespace

bool parse_regex(std::string_view pattern, ParsedRegex& out, std::string& error) {
  Parser p(pattern);
  return p.parse(out, error);
}

Frag build_regex(GrammarBuilder& b, const RegexNode& n, const CharsBuilder& chars) {
  switch (n.kind) {
    case RegexNode::Kind::empty: return b.empty();
    case RegexNode::Kind::chars: return chars(n.chars);
    case RegexNode::Kind::concat: {
      Frag f = b.empty();
      for (const RegexNode& k : n.kids) f = b.seq(f, build_regex(b, k, chars));
      return f;
    }
    case RegexNode::Kind::alternate: {
      std::vector<Frag> opts;
      for (const RegexNode& k : n.kids) opts.push_back(build_regex(b, k, chars));
      return b.alt(opts);
    }
    case RegexNode::Kind::repeat:
      return b.repeat([&] { return build_regex(b, n.kids[0], chars); }, n.min, n.max);
  }
  return b.empty();
}

}  // namespace astrai::structured
