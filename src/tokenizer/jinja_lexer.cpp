#include "src/tokenizer/jinja_lexer.h"

#include <cstdint>
#include <cstdlib>

#include "src/core/utf8.h"
#include "src/tokenizer/jinja_strings.h"

namespace astrai::jinja {
namespace {

// jinja2 normalises line endings before lexing and drops a single trailing newline
// (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length of the Unicode whitespace character (Python's \s) at s[i], 0 if none.
size_t space_at(std::string_view s, size_t i) {
  int n = utf8_sequence_length(s.substr(i));
  if (n <= 0) return 0;
  return py_isspace(utf8_decode(s.substr(i, size_t(n)))) ? size_t(n) : 0;
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (i < s.size()) {
    size_t n = space_at(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}

// Python's str.rstrip(): end of s without trailing Unicode whitespace.
size_t rstrip_end(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    size_t b = e - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    if (space_at(s, b) != e - b) break;
    e = b;
  }
  return e;
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  Result<std::vector<Token>> run() {
    std::string_view s = src_;
    size_t pos = 0;
    bool line_starting = true;  // the previous match ended with a newline (or nothing came before)
    while (pos < s.size()) {
      size_t start = find_tag(pos);
      if (start == std::string_view::npos) {
        emit_text(s.substr(pos), pos);
        break;
      }
      const char kind = s[start + 1];
      size_t p = start + 2;
      char sign = 0;
      if (p < s.size() && (s[p] == '-' || s[p] == '+')) sign = s[p++];
      std::string_view text = s.substr(pos, start - pos);
      if (sign == '-') {
        text = text.substr(0, rstrip_end(text));
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && skip_spaces(text, l_pos) == text.size())
          text = text.substr(0, l_pos);
      }
      emit_text(text, pos);

      if (kind == '%') {
        size_t raw_end = match_raw_begin(p);
        if (raw_end) {
          auto r = lex_raw(raw_end, start);
          if (!r.ok()) return r.status();
          pos = *r;
          line_starting = pos > 0 && s[pos - 1] == '\n';
          continue;
        }
      }
      if (kind == '#') {
        size_t q = s.find("#}", p);
        if (q == std::string_view::npos) return error("missing end of comment tag", start);
        pos = q + 2;
        if (q > p && s[q - 1] == '-') {
          pos = skip_spaces(s, pos);
        } else if (!(q > p && s[q - 1] == '+') && pos < s.size() && s[pos] == '\n') {
          ++pos;  // trim_blocks
        }
        line_starting = s[pos - 1] == '\n';
        continue;
      }
      const bool block = kind == '%';
      push(block ? Tok::block_begin : Tok::var_begin, "", start);
      auto r = lex_tag(p, block);
      if (!r.ok()) return r.status();
      pos = *r;
      line_starting = s[pos - 1] == '\n';
    }
    push(Tok::eof, "", s.size());
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // `{%[-+]? raw [-]%}`: returns the position after the tag, 0 if this is not a raw tag.
  size_t match_raw_begin(size_t p) const {
    std::string_view s = src_;
    size_t q = skip_spaces(s, p);
    if (s.substr(q, 3) != "raw" || (q + 3 < s.size() && is_name_char(s[q + 3]))) return 0;
    q = skip_spaces(s, q + 3);
    if (s.substr(q, 3) == "-%}") return skip_spaces(s, q + 3);
    if (s.substr(q, 2) == "%}") return q + 2;
    return 0;
  }

  // Text up to `{% endraw %}`, with the same stripping rules as text before any block tag.
  Result<size_t> lex_raw(size_t from, size_t tag_pos) {
    std::string_view s = src_;
    for (size_t i = s.find("{%", from); i != std::string_view::npos; i = s.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < s.size() && (s[p] == '-' || s[p] == '+')) sign = s[p++];
      size_t q = skip_spaces(s, p);
      if (s.substr(q, 6) != "endraw") continue;
      q = skip_spaces(s, q + 6);
      size_t end;
      if (s.substr(q, 3) == "+%}") {
        end = q + 3;
      } else if (s.substr(q, 3) == "-%}") {
        end = skip_spaces(s, q + 3);
      } else if (s.substr(q, 2) == "%}") {
        end = q + 2;
        if (end < s.size() && s[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string_view text = s.substr(from, i - from);
      if (sign == '-') {
        text = text.substr(0, rstrip_end(text));
      } else if (sign != '+') {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos > 0 && l_pos < text.size() && skip_spaces(text, l_pos) == text.size())
          text = text.substr(0, l_pos);
      }
      emit_text(text, from);
      return end;
    }
    return error("missing end of raw directive", tag_pos);
  }

  // Tokens of one `{% %}` or `{{ }}` tag starting at p; returns the position after its end.
  Result<size_t> lex_tag(size_t p, bool block) {
    std::string_view s = src_;
    std::string balance;  // expected closing brackets; the tag cannot end while one is open
    while (true) {
      if (p >= s.size()) return error(block ? "unexpected end of template inside a tag" : "missing '}}'", p);
      if (balance.empty()) {
        if (block) {
          if (s.substr(p, 3) == "+%}") return finish(Tok::block_end, p, p + 3);
          if (s.substr(p, 3) == "-%}") return finish(Tok::block_end, p, skip_spaces(s, p + 3));
          if (s.substr(p, 2) == "%}") {
            size_t e = p + 2;
            if (e < s.size() && s[e] == '\n') ++e;  // trim_blocks
            return finish(Tok::block_end, p, e);
          }
        } else {
          if (s.substr(p, 3) == "-}}") return finish(Tok::var_end, p, skip_spaces(s, p + 3));
          if (s.substr(p, 2) == "}}") return finish(Tok::var_end, p, p + 2);
        }
      }
      if (size_t n = space_at(s, p)) {
        p += n;
        continue;
      }
      const char c = s[p];
      if (is_digit(c)) {
        auto r = lex_number(p);
        if (!r.ok()) return r.status();
        p = *r;
        continue;
      }
      if (is_name_start(c)) {
        size_t e = p;
        while (e < s.size() && is_name_char(s[e])) ++e;
        push(Tok::name, std::string(s.substr(p, e - p)), p);
        p = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        auto r = lex_string(p);
        if (!r.ok()) return r.status();
        p = *r;
        continue;
      }
      static const char* const kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
      bool two = false;
      for (const char* op : kOps2)
        if (s.substr(p, 2) == op) two = true;
      if (two) {
        push(Tok::op, std::string(s.substr(p, 2)), p);
        p += 2;
        continue;
      }
      if (std::string_view("+-/*%~[](){}.:,|=<>;").find(c) != std::string_view::npos) {
        if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        if (c == ')' || c == ']' || c == '}') {
          if (balance.empty()) return error(std::string("unexpected '") + c + "'", p);
          if (balance.back() != c)
            return error(std::string("unexpected '") + c + "', expected '" + balance.back() + "'", p);
          balance.pop_back();
        }
        push(Tok::op, std::string(1, c), p);
        ++p;
        continue;
      }
      return error(std::string("unexpected character '") + c + "'", p);
    }
  }

  size_t finish(Tok t, size_t at, size_t end) {
    push(t, "", at);
    return end;
  }

  // jinja2's float_re is tried before integer_re; a number right after '.' is never a float
  // (so `x.0.1` is item 0 then item 1).
  Result<size_t> lex_number(size_t p) {
    std::string_view s = src_;
    auto digits = [&](size_t i) {  // (\d+_)*\d+ ; returns end or i when none
      size_t e = i;
      while (e < s.size() && is_digit(s[e])) {
        while (e < s.size() && is_digit(s[e])) ++e;
        if (e + 1 < s.size() && s[e] == '_' && is_digit(s[e + 1])) ++e;
      }
      return e;
    };
    const bool after_dot = p > 0 && s[p - 1] == '.';
    size_t ie = digits(p);
    if (!after_dot) {
      size_t e = ie;
      bool is_float = false;
      if (e + 1 < s.size() && s[e] == '.' && is_digit(s[e + 1])) {
        e = digits(e + 1);
        is_float = true;
      }
      if (e < s.size() && (s[e] == 'e' || s[e] == 'E')) {
        size_t x = e + 1;
        if (x < s.size() && (s[x] == '+' || s[x] == '-')) ++x;
        if (x < s.size() && is_digit(s[x])) {
          e = digits(x);
          is_float = true;
        }
      }
      if (is_float) {
        std::string txt;
        for (char c : s.substr(p, e - p))
          if (c != '_') txt += c;
        push(Tok::floating, txt, p);
        out_.back().fval = std::strtod(txt.c_str(), nullptr);
        return e;
      }
    }
    // Integers: 0b/0o/0x prefixes, decimal without leading zeros, or zeros.
    int base = 10;
    size_t b = p;
    if (s[p] == '0' && p + 1 < s.size()) {
      char x = char(s[p + 1] | 0x20);
      if (x == 'b' || x == 'o' || x == 'x') {
        base = x == 'b' ? 2 : x == 'o' ? 8 : 16;
        b = p + 2;
      }
    }
    size_t e = b;
    std::string txt;
    while (e < s.size() && (is_hex(s[e]) || s[e] == '_')) {
      if (s[e] != '_') {
        int d = is_digit(s[e]) ? s[e] - '0' : (s[e] | 0x20) - 'a' + 10;
        if (d >= base) break;
        txt += s[e];
      }
      ++e;
    }
    if (base == 10) e = ie, txt.clear();
    if (base == 10)
      for (char c : s.substr(p, e - p))
        if (c != '_') txt += c;
    errno = 0;
    long long v = std::strtoll(txt.c_str(), nullptr, base);
    if (errno == ERANGE) return error("integer literal out of range", p);
    push(Tok::integer, std::string(s.substr(p, e - p)), p);
    out_.back().ival = v;
    return e;
  }

  // A quoted literal, unescaped as Python's "unicode-escape" codec does.
  Result<size_t> lex_string(size_t p) {
    std::string_view s = src_;
    const char q = s[p];
    size_t e = p + 1;
    while (e < s.size() && s[e] != q) e += (s[e] == '\\') ? 2 : 1;
    if (e >= s.size()) return error("unterminated string literal", p);
    std::string_view body = s.substr(p + 1, e - p - 1);
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      char c = body[i];
      if (c != '\\' || i + 1 >= body.size()) {
        out += c;
        continue;
      }
      char n = body[++i];
      switch (n) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          size_t len = n == 'x' ? 2 : n == 'u' ? 4 : 8;
          if (i + len >= body.size()) return error("truncated \\" + std::string(1, n) + " escape", p);
          std::string hex(body.substr(i + 1, len));
          for (char h : hex)
            if (!is_hex(h)) return error("truncated \\" + std::string(1, n) + " escape", p);
          uint32_t cp = uint32_t(std::strtoul(hex.c_str(), nullptr, 16));
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return error("unsupported escape in string literal", p);
          utf8_append(out, cp);
          i += len;
          break;
        }
        case 'N': return error("\\N{...} escapes are not supported", p);
        default:
          if (n >= '0' && n <= '7') {
            uint32_t cp = uint32_t(n - '0');
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
              cp = cp * 8 + uint32_t(body[++i] - '0');
            utf8_append(out, cp);
          } else {
            out += '\\';
            out += n;
          }
      }
    }
    push(Tok::string, std::move(out), p);
    return e + 1;
  }

  void emit_text(std::string_view text, size_t at) {
    if (!text.empty()) push(Tok::text, std::string(text), at);
  }

  void push(Tok t, std::string value, size_t at) {
    Token tok;
    tok.type = t;
    tok.value = std::move(value);
    position(at, tok.line, tok.col);
    out_.push_back(std::move(tok));
  }

  // Columns count code points from the line start. Tokens arrive in source order, so counting on
  // from the previous token's position keeps lexing linear on a template that is one long line
  // (counting from the line start each time was quadratic: a 200,000-element list took > 20 s).
  void position(size_t at, int& line, int& col) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      (line_starts_[mid] <= at ? lo : hi) = mid;
    }
    line = int(lo + 1);
    size_t from = line_starts_[lo];
    size_t count = 0;
    if (last_line_ == lo && last_at_ <= at) {
      from = last_at_;
      count = last_col_;
    }
    count += size_t(cp_length(std::string_view(src_).substr(from, at - from)));
    last_line_ = lo;
    last_at_ = at;
    last_col_ = count;
    col = int(count) + 1;
  }

  Status error(const std::string& what, size_t at) const {
    int line, col;
    position(at, line, col);
    return invalid_argument("chat template: syntax error at line " + std::to_string(line) + ", column " +
                            std::to_string(col) + ": " + what);
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  // The last position() answer: line index, byte offset and code points from the line start.
  mutable size_t last_line_ = SIZE_MAX, last_at_ = 0, last_col_ = 0;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace astrai::jinja
