// What a template can call without defining it: jinja2's filters and tests (the ones chat
// templates use), attribute and item lookup with jinja2's rules (`a.b` tries the attribute, then
// the item; `a['b']` the other way round), the str/dict/list methods the sandbox allows, and
// Python's `%` string formatting.
#pragma once

#include <string>
#include <string_view>

#include "src/tokenizer/jinja_value.h"

namespace astrai::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);

// environment.getattr / environment.getitem of jinja2's sandbox: a miss is an undefined value
// with jinja2's hint ("'dict object' has no attribute 'x'"); undefined objects raise.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for lists, tuples and strings (null pointers are omitted bounds).
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

// Python's `a in b`.
bool contains(const Value& container, const Value& item);
// Python's printf-style `fmt % args`.
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace astrai::jinja
