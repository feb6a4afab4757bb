// The typed JSON reads of src/core/json_fields.h with net's error type: every 400 tells the client
// exactly which field was wrong and why. JSON null counts as "absent" for optional fields (callers
// check is_null first).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/api_error.h"
#include "src/core/json_fields.h"

namespace astrai::net {

using JsonValue = json::Value;
using MaybeError = std::optional<ApiError>;

// Wraps a simdjson failure while iterating (malformed JSON discovered late) as a 400.
ApiError json_syntax_error(simdjson::error_code ec);

// A core field error as the 400 the client sees ("'field': message", param = field).
inline MaybeError field_error(json::MaybeFieldError e) {
  if (!e) return std::nullopt;
  return bad_field(e->field, e->message);
}

// Each field of a whole request body (or WebSocket frame) that must be one JSON object;
// `what` names it in the error when it is not one ("request body", "a frame").
template <typename Fn>
MaybeError for_each_body_field(std::string_view body, const char* what, Fn&& fn) {
  return json::for_each_field(
      body, fn, [](simdjson::error_code ec) -> MaybeError { return json_syntax_error(ec); },
      [what]() -> MaybeError {
        return ApiError{400, std::string(what) + " must be a JSON object", "", "invalid_request_error", ""};
      });
}

// Each field of a nested object at `at` ("messages[0]"); unreadable JSON inside it is a 400 on `at`.
template <typename Fn>
MaybeError for_each_field_at(json::Object& obj, const std::string& at, Fn&& fn) {
  return json::for_each_field(
      obj, fn, [&at](simdjson::error_code) -> MaybeError { return bad_field(at, "is not valid JSON"); });
}

inline bool is_null(JsonValue& v) {
  return json::is_null(v);
}
inline MaybeError read_string(JsonValue& v, const std::string& field, std::string& out) {
  return field_error(json::read_string(v, field, out));
}
inline MaybeError read_bool(JsonValue& v, const std::string& field, bool& out) {
  return field_error(json::read_bool(v, field, out));
}
inline MaybeError read_int(JsonValue& v, const std::string& field, int64_t lo, int64_t hi, int64_t& out) {
  return field_error(json::read_int(v, field, lo, hi, out));
}
inline MaybeError read_number(JsonValue& v, const std::string& field, double lo, double hi, double& out) {
  return field_error(json::read_number(v, field, lo, hi, out));
}
// The value's JSON text as written (objects, arrays and scalars).
inline MaybeError read_raw(JsonValue& v, const std::string& field, std::string& out) {
  return field_error(json::read_raw(v, field, out));
}
// A string or an array of strings (OpenAI `stop`).
inline MaybeError read_string_list(JsonValue& v, const std::string& field, size_t max_items,
                                   std::vector<std::string>& out) {
  return field_error(json::read_string_list(v, field, max_items, out));
}

// An array of token ids, each in [0, max_id] (an element's error names it: "field[i]").
inline MaybeError read_token_ids(simdjson::ondemand::array& arr, const std::string& field, int64_t max_id,
                                 std::vector<int32_t>& out) {
  return field_error(json::read_token_ids(arr, field, max_id, out));
}

}  // namespace astrai::net
