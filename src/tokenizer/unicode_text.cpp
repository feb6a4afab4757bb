#include "src/tokenizer/unicode_text.h"

#include <unicode/bytestream.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <cstring>

#include "src/core/utf8.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {

std::string utf8_sanitize(std::string_view s) {
  if (tok::fast_utf8_is_valid(s)) return std::string(s);
  // Maximal-subpart replacement: a prefix of a valid sequence that is cut short becomes one
  // U+FFFD; any other bad byte becomes one U+FFFD on its own.
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    const int n = utf8_sequence_length(s.substr(i));
    if (n > 0) {
      out.append(s.substr(i, size_t(n)));
      i += size_t(n);
      continue;
    }
    // Length of the longest valid-so-far prefix at i (at least 1 byte is consumed).
    size_t bad = 1;
    for (size_t k = 2; k <= 3 && i + k <= s.size(); ++k) {
      if (utf8_sequence_length(s.substr(i, k)) == -2)
        bad = k;
      else
        break;
    }
    out += "\xEF\xBF\xBD";
    i += bad;
  }
  return out;
}

namespace tok {

bool fast_utf8_is_valid(std::string_view s) {
  // Skip ASCII eight bytes at a time; check the rest with the full decoder.
  size_t i = 0;
  while (i + 8 <= s.size()) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (w & 0x8080808080808080ULL) break;
    i += 8;
  }
  return utf8_is_valid(s.substr(i));
}

std::string unicode_normalize(std::string_view text, NormalForm form) {
  // Code points below U+0300 are unchanged by NFC (their quick check is Yes, and none of them
  // combines with what precedes it): in UTF-8 that is every byte below 0xCC.
  bool below_0300 = true;
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0xCC) {
      below_0300 = false;
      break;
    }
  if (below_0300 && form == NormalForm::nfc) return std::string(text);
  bool ascii = true;
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) return std::string(text);
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::nfc: n = icu::Normalizer2::getNFCInstance(err); break;
    case NormalForm::nfd: n = icu::Normalizer2::getNFDInstance(err); break;
    case NormalForm::nfkc: n = icu::Normalizer2::getNFKCInstance(err); break;
    case NormalForm::nfkd: n = icu::Normalizer2::getNFKDInstance(err); break;
  }
  if (U_FAILURE(err) || n == nullptr) return std::string(text);
  const icu::StringPiece in(text.data(), int32_t(text.size()));
  if (n->isNormalizedUTF8(in, err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, int32_t(text.size() + 16));
  n->normalizeUTF8(0, in, sink, nullptr, err);
  if (U_FAILURE(err)) return std::string(text);
  return out;
}

std::string unicode_lowercase(std::string_view text) {
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), int32_t(text.size())));
  icu::UnicodeString lower = in;
  lower.toLower(icu::Locale::getRoot());
  std::string s;
  lower.toUTF8String(s);
  return s;
}

bool is_unicode_whitespace(uint32_t cp) {
  return u_hasBinaryProperty(UChar32(cp), UCHAR_WHITE_SPACE);
}

const std::array<uint32_t, 256>& byte_to_unicode() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? uint32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(uint32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv;
    inv.fill(-1);
    const auto& fwd = byte_to_unicode();
    for (int b = 0; b < 256; ++b) inv[fwd[b]] = int16_t(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

}  // namespace tok
}  // namespace astrai
