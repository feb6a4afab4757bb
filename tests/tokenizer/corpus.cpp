#include "tokenizer/corpus.h"

#include <array>

#include "src/core/utf8.h"

namespace astrai::test {
namespace {

using Rng = std::mt19937_64;

size_t pick(Rng& r, size_t n) {
  return size_t(r() % n);
}
template <typename T, size_t N>
const T& pick(Rng& r, const std::array<T, N>& a) {
  return a[pick(r, N)];
}

std::string cp(uint32_t c) {
  std::string s;
  utf8_append(s, c);
  return s;
}

const std::array<const char*, 40> kWords = {
    "the",   "quick", "brown", "fox",       "jumps",  "over",   "lazy",   "dog",    "tokenizer", "model",
    "Hello", "World", "serve", "inference", "LLaMA",  "Qwen",   "GPU",    "kernel", "attention", "cache",
    "don't", "I'm",   "we'll", "they've",   "she'd",  "it's",   "you're", "HTTP",   "JSON",      "a",
    "an",    "naïve", "café",  "résumé",    "Zürich", "straße", "ÉCOLE",  "über",   "coöperate", "x"};
const std::array<const char*, 12> kContractions = {"'s",  "'S",  "'t",  "'T", "'re", "'RE",
                                                   "'Re", "'ve", "'VE", "'m", "'LL", "'D"};
const std::array<const char*, 10> kPunct = {".", ",", "!", "?", ";", ":", "...", " - ", "\"", "'"};
const std::array<const char*, 12> kCode = {
    "int main(int argc, char** argv) {\n  return 0;\n}\n",
    "def f(x):\n    return x ** 2  # square\n",
    "for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];",
    "    if (!ok) { throw std::runtime_error(\"bad\"); }\n",
    "const x = await fetch(`/v1/chat?id=${id}`);\r\n",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
    "<div class=\"row\"><span>&nbsp;</span></div>",
    "\t\tx = {'a': 1, \"b\": [1, 2, 3]}\n",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "#include <vector>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "$ echo $HOME && ls -la | grep '^d'\n",
    "a_b_c__d = 0x1F; b = 1e-9; c = 3.14159265358979",
};

// Code point ranges assigned since Unicode 6 or earlier (all engines agree on their properties).
// U+017F and U+212A are left out: Oniguruma folds them to 's' / 'k' under (?i), JS does not.
const std::array<std::pair<uint32_t, uint32_t>, 22> kRanges = {{
    {0x20, 0x7E},     {0xA0, 0x17E},      {0x180, 0x24F},   {0x370, 0x3FF},   {0x400, 0x4FF},
    {0x5D0, 0x5EA},   {0x620, 0x64A},     {0x900, 0x97F},   {0xE01, 0xE5B},   {0x1100, 0x11FF},
    {0x2000, 0x206F}, {0x20A0, 0x20B9},   {0x2190, 0x21FF}, {0x2200, 0x22FF}, {0x2500, 0x257F},
    {0x3000, 0x303F}, {0x3040, 0x309F},   {0x30A0, 0x30FF}, {0x4E00, 0x9FA5}, {0xAC00, 0xD7A3},
    {0xFF01, 0xFF5E}, {0x1F300, 0x1F5FF},
}};

std::string english(Rng& r) {
  std::string s;
  const size_t n = 1 + pick(r, 14);
  for (size_t i = 0; i < n; ++i) {
    if (i) s += pick(r, 8) == 0 ? "  " : " ";
    std::string w = pick(r, kWords);
    if (pick(r, 5) == 0 && !w.empty() && w[0] >= 'a' && w[0] <= 'z') w[0] = char(w[0] - 32);
    if (pick(r, 7) == 0)
      for (auto& c : w)
        if (c >= 'a' && c <= 'z') c = char(c - 32);
    s += w;
    if (pick(r, 6) == 0) s += pick(r, kContractions);
    if (pick(r, 5) == 0) s += pick(r, kPunct);
  }
  return s;
}

std::string cjk(Rng& r) {
  std::string s;
  const size_t n = 1 + pick(r, 20);
  for (size_t i = 0; i < n; ++i) {
    switch (pick(r, 5)) {
      case 0: s += cp(0x3040 + uint32_t(pick(r, 0x5F))); break;   // hiragana
      case 1: s += cp(0x30A0 + uint32_t(pick(r, 0x5F))); break;   // katakana
      case 2: s += cp(0xAC00 + uint32_t(pick(r, 11172))); break;  // hangul syllables
      case 3: s += pick(r, 3) ? "，" : "。"; break;
      default: s += cp(0x4E00 + uint32_t(pick(r, 0x51A5))); break;  // CJK ideographs
    }
  }
  return s;
}

std::string emoji(Rng& r) {
  static const std::array<uint32_t, 6> tones = {0x1F3FB, 0x1F3FC, 0x1F3FD, 0x1F3FE, 0x1F3FF, 0};
  std::string s;
  const size_t n = 1 + pick(r, 6);
  for (size_t i = 0; i < n; ++i) {
    switch (pick(r, 6)) {
      case 0: s += cp(0x1F600 + uint32_t(pick(r, 0x50))); break;
      case 1:  // ZWJ family / profession sequence
        s += cp(0x1F468) + cp(0x200D) + cp(0x1F469) + cp(0x200D) + cp(0x1F467);
        if (pick(r, 2)) s += cp(0x200D) + cp(0x1F466);
        break;
      case 2:  // skin tones
        s += cp(0x1F44D);
        if (uint32_t t = pick(r, tones)) s += cp(t);
        break;
      case 3: s += cp(0x1F1E6 + uint32_t(pick(r, 26))) + cp(0x1F1E6 + uint32_t(pick(r, 26))); break;  // flag
      case 4: s += cp(0x2764) + cp(0xFE0F); break;
      default: s += cp(0x1F9D1) + cp(0x1F3FD) + cp(0x200D) + cp(0x1F4BB); break;
    }
    if (pick(r, 3) == 0) s += " ";
  }
  return s;
}

std::string combining(Rng& r) {
  std::string s;
  const size_t n = 1 + pick(r, 10);
  for (size_t i = 0; i < n; ++i) {
    s += char('a' + pick(r, 26));
    const size_t marks = pick(r, 4);
    for (size_t m = 0; m < marks; ++m) s += cp(0x300 + uint32_t(pick(r, 0x70)));
    if (pick(r, 4) == 0)
      s += cp(0x1100 + uint32_t(pick(r, 19))) + cp(0x1161 + uint32_t(pick(r, 21)));  // jamo
    if (pick(r, 4) == 0) s += " ";
  }
  return s;
}

std::string whitespace(Rng& r) {
  static const std::array<const char*, 8> ws = {" ", "  ", "\t", "\n", "\r\n", "\n\n", "\u3000", "\u00A0"};
  std::string s;
  const size_t n = 1 + pick(r, 8);
  for (size_t i = 0; i < n; ++i) {
    if (pick(r, 3) == 0)
      s += std::string(1 + pick(r, 60), pick(r, 2) ? ' ' : '\n');
    else
      s += pick(r, ws);
    if (pick(r, 2)) s += pick(r, kWords);
  }
  return s;
}

std::string digits(Rng& r) {
  std::string s;
  const size_t n = 1 + pick(r, 5);
  for (size_t i = 0; i < n; ++i) {
    const size_t len = 1 + pick(r, pick(r, 3) == 0 ? 40 : 8);
    for (size_t k = 0; k < len; ++k) s += char('0' + pick(r, 10));
    switch (pick(r, 5)) {
      case 0: s += "."; break;
      case 1: s += ","; break;
      case 2: s += " "; break;
      case 3: s += "%"; break;
      default: s += "abc"; break;
    }
  }
  if (pick(r, 4) == 0) s += "٣٤٥ ١٢";  // Arabic-Indic digits (\p{N})
  return s;
}

std::string random_unicode(Rng& r) {
  std::string s;
  const size_t n = 1 + pick(r, 30);
  for (size_t i = 0; i < n; ++i) {
    const auto [lo, hi] = pick(r, kRanges);
    s += cp(lo + uint32_t(pick(r, hi - lo + 1)));
  }
  return s;
}

}  // namespace

std::vector<std::string> make_corpus(uint64_t seed, size_t n, const std::vector<std::string>& specials) {
  Rng r(seed);
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string s;
    const size_t parts = 1 + pick(r, 3);
    for (size_t p = 0; p < parts; ++p) {
      switch (pick(r, 9)) {
        case 0: s += english(r); break;
        case 1: s += pick(r, kCode); break;
        case 2: s += cjk(r); break;
        case 3: s += emoji(r); break;
        case 4: s += combining(r); break;
        case 5: s += whitespace(r); break;
        case 6: s += digits(r); break;
        case 7: s += random_unicode(r); break;
        default: s += english(r) + pick(r, kContractions); break;
      }
      if (!specials.empty() && pick(r, 4) == 0) {
        const std::string& sp = specials[pick(r, specials.size())];
        switch (pick(r, 3)) {
          case 0: s += sp; break;
          case 1: s += " " + sp + "\n"; break;
          default: s += sp.substr(0, sp.size() / 2); break;  // a prefix that must not match
        }
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string random_invalid_utf8(Rng& r) {
  static const std::array<const char*, 10> bad = {"\x80",         "\xBF",     "\xC0\xAF", "\xE0\x80\x80",
                                                  "\xED\xA0\x80", "\xF5\x80", "\xFF",     "\xE4\xB8",
                                                  "\xF0\x9F\x98", "\xC3"};
  std::string s;
  const size_t n = 1 + pick(r, 8);
  for (size_t i = 0; i < n; ++i) {
    if (pick(r, 2))
      s += pick(r, kWords);
    else
      s += pick(r, bad);
    if (pick(r, 3) == 0) s += cp(0x4E00 + uint32_t(pick(r, 100)));
  }
  return s;
}

}  // namespace astrai::test
