// Python `str` operations on UTF-8 text, as chat templates call them (strip, split, find, lower,
// title, ...). Python strings index code points, so lengths, indexes and slices here count code
// points, not bytes. Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and
// full-width Latin (Python covers all of Unicode; templates only case-map role names and such).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace astrai::jinja {

std::u32string to_u32(std::string_view s);
std::string to_utf8(std::u32string_view s);
int64_t cp_length(std::string_view s);

bool py_isspace(uint32_t cp);
bool py_isprintable(uint32_t cp);  // what repr() leaves unescaped
bool py_isalnum(uint32_t cp);      // a \w character (approximation outside the mapped scripts)
uint32_t cp_lower(uint32_t cp);
uint32_t cp_upper(uint32_t cp);
bool cp_is_cased_lower(uint32_t cp);
bool cp_is_cased_upper(uint32_t cp);

std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);

// strip/lstrip/rstrip: chars == nullopt strips Unicode whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// split/rsplit: sep == nullopt splits on whitespace runs and drops empty parts. maxsplit < 0: no limit.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// find/rfind/count over code points, with optional [start, end) bounds.
int64_t py_find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
                std::optional<int64_t> end, bool reverse);
int64_t py_count(std::string_view s, std::string_view sub);
std::string py_center(std::string_view s, int64_t width, std::string_view fill);

}  // namespace astrai::jinja
