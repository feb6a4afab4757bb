// Typed reads of simdjson on-demand values with errors that name the field, so every 400 tells
// the client exactly which field was wrong and why. JSON null counts as "absent" for optional fields
// (callers check is_null first).
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>

#include "net/api_error.h"

namespace astrai::net {

using JsonValue = simdjson::ondemand::value;
using MaybeError = std::optional<ApiError>;

bool is_null(JsonValue& v);
MaybeError read_string(JsonValue& v, const std::string& field, std::string& out);
MaybeError read_bool(JsonValue& v, const std::string& field, bool& out);
MaybeError read_int(JsonValue& v, const std::string& field, int64_t lo, int64_t hi, int64_t& out);
MaybeError read_number(JsonValue& v, const std::string& field, double lo, double hi, double& out);
// The value's JSON text as written (objects, arrays and scalars).
MaybeError read_raw(JsonValue& v, const std::string& field, std::string& out);
// A string or an array of strings (OpenAI `stop`).
MaybeError read_string_list(JsonValue& v, const std::string& field, size_t max_items,
                            std::vector<std::string>& out);

// Wraps a simdjson failure while iterating (malformed JSON discovered late) as a 400.
ApiError json_syntax_error(simdjson::error_code ec);

}  // namespace astrai::net
