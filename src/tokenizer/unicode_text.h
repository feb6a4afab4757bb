// Unicode helpers the tokenizer pipeline needs: normalization forms (through ICU), lower-casing,
// the White_Space property and the GPT-2 byte <-> unicode alphabet.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace astrai::tok {

// utf8_is_valid with a fast path over ASCII.
bool fast_utf8_is_valid(std::string_view s);

enum class NormalForm { nfc, nfd, nfkc, nfkd };

// `text` must be valid UTF-8. Returns it in the given normalization form.
std::string unicode_normalize(std::string_view text, NormalForm form);
// Full Unicode lower-casing without locale tailoring (as Rust's str::to_lowercase).
std::string unicode_lowercase(std::string_view text);
// The Unicode White_Space property (what Rust's char::is_whitespace tests).
bool is_unicode_whitespace(uint32_t cp);

// GPT-2's reversible byte -> printable code point map: bytes that are printable Latin-1 map to
// themselves, the other 68 bytes to U+0100.. in order.
const std::array<uint32_t, 256>& byte_to_unicode();
// Inverse map; -1 for code points that are not in the alphabet.
int unicode_to_byte(uint32_t cp);

}  // namespace astrai::tok
