// UTF-8 helpers shared by the tokenizer, the detokenizer and JSON output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace astrai {

// Length of the valid UTF-8 sequence that starts s (1..4), 0 if s is empty,
// -1 if the bytes there are not a valid sequence (bad lead, bad continuation, overlong,
// surrogate, > U+10FFFF), -2 if s ends before a sequence that is valid so far is complete.
int utf8_sequence_length(std::string_view s);

// Code point of a valid sequence (as checked by utf8_sequence_length).
uint32_t utf8_decode(std::string_view seq);

void utf8_append(std::string& out, uint32_t cp);

// Bytes at the end of s that form an incomplete (but so far valid) sequence: 0..3.
size_t utf8_incomplete_tail(std::string_view s);

bool utf8_is_valid(std::string_view s);

}  // namespace astrai
