// Seeded random test strings for tokenizer parity tests: English, code, CJK, emoji (ZWJ
// sequences, skin tones, flags), combining marks, long and mixed whitespace (\r\n\t), digits and
// long numbers, contractions in mixed case, special tokens inside text, random Unicode.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace astrai::test {

// `specials`: added-token texts to sprinkle into some strings.
std::vector<std::string> make_corpus(uint64_t seed, size_t n, const std::vector<std::string>& specials);

// Random bytes that are mostly UTF-8 with invalid sequences mixed in (bad leads, truncated
// sequences, surrogates, overlongs, stray continuation bytes).
std::string random_invalid_utf8(std::mt19937_64& rng);

}  // namespace astrai::test
