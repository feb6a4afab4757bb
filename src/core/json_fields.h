// Reading JSON objects field by field (simdjson on-demand), with errors that name the field, so a
// caller can tell its user exactly which field was wrong and why. Every parser of a request body,
// a WebSocket frame or an offline JSONL line walks its object with for_each_field and reads values
// with the typed reads below; JSON null counts as "absent" for optional fields (callers check
// is_null first).
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace astrai::json {

using Value = simdjson::ondemand::value;
using Object = simdjson::ondemand::object;

struct FieldError {
  std::string field;    // "messages[1].content"
  std::string message;  // what is wrong with it: "must be a string"
};
using MaybeFieldError = std::optional<FieldError>;

// Calls fn(std::string_view key, Value& value) for each field of obj, in document order, and stops at
// the first error fn returns (fn returns an error type testable as bool, e.g. std::optional<E>; a
// value-initialised one means "no error"). A key or value simdjson cannot read (on-demand parsing
// finds malformed JSON only when it gets there) returns on_bad(error_code) instead.
template <typename Fn, typename OnBad>
auto for_each_field(Object& obj, Fn&& fn, OnBad&& on_bad)
    -> std::invoke_result_t<Fn&, std::string_view, Value&> {
  for (auto field : obj) {
    std::string_view key;
    if (auto ec = field.unescaped_key().get(key)) return on_bad(ec);
    Value v;
    if (auto ec = field.value().get(v)) return on_bad(ec);
    if (auto e = fn(key, v)) return e;
  }
  return {};
}

// Lends the calling thread's parser, which keeps its buffers from one text to the next, or a parser of
// its own when the thread's is in use (a for_each_field over a text inside another one).
class ParserLease {
 public:
  ParserLease();
  ~ParserLease();
  ParserLease(const ParserLease&) = delete;
  ParserLease& operator=(const ParserLease&) = delete;
  simdjson::ondemand::parser& get() { return *parser_; }

 private:
  simdjson::ondemand::parser* parser_;
  std::unique_ptr<simdjson::ondemand::parser> own_;
};

// The same over a whole JSON text that must be one object. Text that is not JSON: on_bad(ec); JSON
// that is not an object: not_object().
template <typename Fn, typename OnBad, typename NotObject>
auto for_each_field(std::string_view text, Fn&& fn, OnBad&& on_bad, NotObject&& not_object)
    -> std::invoke_result_t<Fn&, std::string_view, Value&> {
  ParserLease parser;
  simdjson::padded_string padded(text);
  simdjson::ondemand::document doc;
  if (auto ec = parser.get().iterate(padded).get(doc)) return on_bad(ec);
  Object obj;
  if (doc.get_object().get(obj)) return not_object();
  return for_each_field(obj, fn, on_bad);
}

bool is_null(Value& v);
MaybeFieldError read_string(Value& v, const std::string& field, std::string& out);
MaybeFieldError read_bool(Value& v, const std::string& field, bool& out);
// An integral number (1.0 counts, 1.5 does not) in [lo, hi].
MaybeFieldError read_int(Value& v, const std::string& field, int64_t lo, int64_t hi, int64_t& out);
// A finite number in [lo, hi].
MaybeFieldError read_number(Value& v, const std::string& field, double lo, double hi, double& out);
// The value's JSON text as written (objects, arrays and scalars), trailing whitespace trimmed.
MaybeFieldError read_raw(Value& v, const std::string& field, std::string& out);
// A string or an array of at most max_items non-empty strings (OpenAI `stop`).
MaybeFieldError read_string_list(Value& v, const std::string& field, size_t max_items,
                                 std::vector<std::string>& out);

// An array of token ids, each an integer in [0, max_id], appended to out; an element's error names
// it ("field[i]").
MaybeFieldError read_token_ids(simdjson::ondemand::array& arr, const std::string& field, int64_t max_id,
                               std::vector<int32_t>& out);

}  // namespace astrai::json
