#include "src/tokenizer/jinja_strings.h"

#include <algorithm>
#include <stdexcept>

#include "src/core/utf8.h"
#include "src/tokenizer/jinja_budget.h"

namespace astrai::jinja {

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    int n = utf8_sequence_length(s.substr(i));
    if (n <= 0) {  // not valid UTF-8: keep the byte as U+FFFD, as Python's decode(errors="replace")
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(utf8_decode(s.substr(i, size_t(n))));
    i += size_t(n);
  }
  return out;
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, uint32_t(c));
  return out;
}

int64_t cp_length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool py_isspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool py_isprintable(uint32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x20) return true;
  if (py_isspace(c)) return false;  // Zs/Zl/Zp other than space
  if ((c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E)) return false;  // Cf
  if ((c >= 0x2060 && c <= 0x206F) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E) return false;
  if (c >= 0xD800 && c <= 0xF8FF) return false;    // surrogates, private use
  if (c >= 0xE0000 && c <= 0xE0FFF) return false;  // tags, variation selectors supplement are Cf/Mn
  if (c >= 0xF0000) return false;                  // private use planes
  if (c == 0xFFFE || c == 0xFFFF) return false;
  return true;
}

uint32_t cp_lower(uint32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';  // Python gives "i̇" (two code points); close enough for templates
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
    if (c == 0x178) return 0xFF;
    if (c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c & 1) ? c : c + 1;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0x460 && c <= 0x4FF && !(c >= 0x482 && c <= 0x489)) {
    if (c >= 0x4C1 && c <= 0x4CE) return (c & 1) ? c + 1 : c;
    if (c == 0x4C0) return 0x4CF;
    return (c & 1) ? c : c + 1;
  }
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

uint32_t cp_upper(uint32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return c;
    return (c & 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0x460 && c <= 0x4FF && !(c >= 0x482 && c <= 0x489)) {
    if (c >= 0x4C1 && c <= 0x4CE) return (c & 1) ? c : c - 1;
    if (c == 0x4CF) return 0x4C0;
    return (c & 1) ? c - 1 : c;
  }
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

bool cp_is_cased_lower(uint32_t c) {
  return cp_upper(c) != c || c == 0xDF;
}
bool cp_is_cased_upper(uint32_t c) {
  return cp_lower(c) != c;
}

bool py_isalnum(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0xD7 || c == 0xF7) return false;
  if (c >= 0x80 && c <= 0xBF)
    return c == 0xAA || c == 0xB5 || c == 0xBA || c == 0xB2 || c == 0xB3 || c == 0xB9 || c == 0xBC ||
           c == 0xBD || c == 0xBE;
  if (py_isspace(c)) return false;
  if ((c >= 0x2000 && c <= 0x2BFF) || (c >= 0x3000 && c <= 0x303F) || (c >= 0xFE30 && c <= 0xFE4F) ||
      (c >= 0xFF00 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) || (c >= 0x1F000 && c <= 0x1FAFF))
    return false;  // punctuation, symbols, emoji
  return py_isprintable(c);
}

namespace {
template <typename F>
std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : to_u32(s)) f(out, uint32_t(c));
  return out;
}
}  // namespace

std::string py_lower(std::string_view s) {
  return map_cps(s, [](std::string& o, uint32_t c) { utf8_append(o, cp_lower(c)); });
}

std::string py_upper(std::string_view s) {
  return map_cps(s, [](std::string& o, uint32_t c) {
    if (c == 0xDF) {
      o += "SS";
    } else {
      utf8_append(o, cp_upper(c));
    }
  });
}

// str.title(): a cased character after an uncased one is upper-cased, the others lower-cased.
std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_cps(s, [&](std::string& o, uint32_t c) {
    bool cased = cp_is_cased_lower(c) || cp_is_cased_upper(c);
    if (!prev_cased) {
      if (c == 0xDF) {
        o += "Ss";
      } else {
        utf8_append(o, cp_upper(c));
      }
    } else {
      utf8_append(o, cp_lower(c));
    }
    prev_cased = cased;
  });
}

std::string py_capitalize(std::string_view s) {
  bool first = true;
  return map_cps(s, [&](std::string& o, uint32_t c) {
    if (first && c == 0xDF) {
      o += "Ss";
    } else {
      utf8_append(o, first ? cp_upper(c) : cp_lower(c));
    }
    first = false;
  });
}

bool py_islower(std::string_view s) {
  bool any = false;
  for (char32_t c : to_u32(s)) {
    if (cp_is_cased_upper(c)) return false;
    any = any || cp_is_cased_lower(c);
  }
  return any;
}

bool py_isupper(std::string_view s) {
  bool any = false;
  for (char32_t c : to_u32(s)) {
    if (cp_is_cased_lower(c)) return false;
    any = any || cp_is_cased_upper(c);
  }
  return any;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = to_u32(s);
  std::u32string set = chars ? to_u32(*chars) : std::u32string();
  auto strip_me = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_me(u[b])) ++b;
  if (right)
    while (e > b && strip_me(u[e - 1])) --e;
  return to_utf8(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    std::u32string u = to_u32(s);
    size_t i = 0, n = u.size();
    while (true) {
      while (i < n && py_isspace(u[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        out.push_back(to_utf8(std::u32string_view(u).substr(i)));
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(u[j])) ++j;
      out.push_back(to_utf8(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  if (sep->empty()) throw std::invalid_argument("empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
    size_t f = s.find(*sep, pos);
    if (f == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, f - pos));
    pos = f + sep->size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    std::u32string u = to_u32(s);
    size_t e = u.size();
    while (true) {
      while (e > 0 && py_isspace(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        out.push_back(to_utf8(std::u32string_view(u).substr(0, e)));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(u[b - 1])) --b;
      out.push_back(to_utf8(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  if (sep->empty()) throw std::invalid_argument("empty separator");
  size_t end = s.size();
  while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t f = s.rfind(*sep, end - sep->size());
    if (f == std::string_view::npos) break;
    out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
    end = f;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::u32string u = to_u32(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0, n = u.size();
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
           c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < n) {
    if (is_break(u[i])) {
      size_t eol = i;
      size_t next = (u[i] == '\r' && i + 1 < n && u[i + 1] == '\n') ? i + 2 : i + 1;
      out.push_back(to_utf8(std::u32string_view(u).substr(start, (keepends ? next : eol) - start)));
      start = i = next;
    } else {
      ++i;
    }
  }
  if (start < n) out.push_back(to_utf8(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts repl between every code point (and at both ends)
    std::u32string u = to_u32(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < u.size()) utf8_append(out, uint32_t(u[i]));
      check_text_size(out.size());
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(repl);
    check_text_size(out.size());
    pos = f + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t py_find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
                std::optional<int64_t> end, bool reverse) {
  std::u32string u = to_u32(s), w = to_u32(sub);
  const int64_t n = int64_t(u.size());
  auto clamp = [n](int64_t x) { return x < 0 ? std::max<int64_t>(0, x + n) : std::min(x, n); };
  int64_t b = start ? clamp(*start) : 0, e = end ? clamp(*end) : n;
  if (e - b < int64_t(w.size())) return -1;
  std::u32string_view hay = std::u32string_view(u).substr(size_t(b), size_t(e - b));
  size_t f = reverse ? hay.rfind(w) : hay.find(w);
  return f == std::u32string_view::npos ? -1 : b + int64_t(f);
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return cp_length(s) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

std::string py_center(std::string_view s, int64_t width, std::string_view fill) {
  int64_t len = cp_length(s);
  if (width <= len) return std::string(s);
  int64_t marg = width - len;
  int64_t left = marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += fill;
  return out;
}

}  // namespace astrai::jinja
