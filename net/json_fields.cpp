#include "net/json_fields.h"

#include <cmath>

namespace astrai::net {

ApiError json_syntax_error(simdjson::error_code ec) {
  return ApiError{400, std::string("request body is not valid JSON: ") + simdjson::error_message(ec), "",
                  "invalid_request_error", ""};
}

bool is_null(JsonValue& v) {
  bool n = false;
  return !v.is_null().get(n) && n;
}

static MaybeError type_error(const std::string& field, const char* want) {
  return bad_field(field, std::string("must be ") + want);
}

MaybeError read_string(JsonValue& v, const std::string& field, std::string& out) {
  std::string_view s;
  if (v.get_string().get(s)) return type_error(field, "a string");
  out.assign(s);
  return std::nullopt;
}

MaybeError read_bool(JsonValue& v, const std::string& field, bool& out) {
  if (v.get_bool().get(out)) return type_error(field, "a boolean");
  return std::nullopt;
}

MaybeError read_int(JsonValue& v, const std::string& field, int64_t lo, int64_t hi, int64_t& out) {
  simdjson::ondemand::json_type t;
  if (v.type().get(t) || t != simdjson::ondemand::json_type::number) return type_error(field, "an integer");
  double d = 0;
  if (v.get_double().get(d) || !std::isfinite(d) || d != std::floor(d))
    return type_error(field, "an integer");
  if (d < double(lo) || d > double(hi))
    return bad_field(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                                ", got " + std::to_string(int64_t(d)));
  out = int64_t(d);
  return std::nullopt;
}

MaybeError read_number(JsonValue& v, const std::string& field, double lo, double hi, double& out) {
  simdjson::ondemand::json_type t;
  if (v.type().get(t) || t != simdjson::ondemand::json_type::number) return type_error(field, "a number");
  if (v.get_double().get(out) || !std::isfinite(out)) return type_error(field, "a finite number");
  if (out < lo || out > hi) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "must be between %g and %g, got %g", lo, hi, out);
    return bad_field(field, buf);
  }
  return std::nullopt;
}

MaybeError read_raw(JsonValue& v, const std::string& field, std::string& out) {
  simdjson::ondemand::json_type t;
  if (v.type().get(t)) return bad_field(field, "is not valid JSON");
  std::string_view raw;
  if (t == simdjson::ondemand::json_type::object) {
    simdjson::ondemand::object o;
    if (v.get_object().get(o) || o.raw_json().get(raw)) return bad_field(field, "is not valid JSON");
  } else if (t == simdjson::ondemand::json_type::array) {
    simdjson::ondemand::array a;
    if (v.get_array().get(a) || a.raw_json().get(raw)) return bad_field(field, "is not valid JSON");
  } else {
    raw = v.raw_json_token();
  }
  while (!raw.empty() &&
         (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
    raw.remove_suffix(1);
  out.assign(raw);
  return std::nullopt;
}

MaybeError read_string_list(JsonValue& v, const std::string& field, size_t max_items,
                            std::vector<std::string>& out) {
  simdjson::ondemand::json_type t;
  if (v.type().get(t)) return type_error(field, "a string or an array of strings");
  out.clear();
  if (t == simdjson::ondemand::json_type::string) {
    std::string s;
    if (auto e = read_string(v, field, s)) return e;
    out.push_back(std::move(s));
  } else if (t == simdjson::ondemand::json_type::array) {
    simdjson::ondemand::array arr;
    if (v.get_array().get(arr)) return type_error(field, "a string or an array of strings");
    size_t i = 0;
    for (auto el : arr) {
      JsonValue ev;
      if (el.get(ev)) return type_error(field, "a string or an array of strings");
      std::string s;
      if (auto e = read_string(ev, field + "[" + std::to_string(i) + "]", s)) return e;
      out.push_back(std::move(s));
      ++i;
    }
  } else {
    return type_error(field, "a string or an array of strings");
  }
  if (out.size() > max_items) return bad_field(field, "at most " + std::to_string(max_items) + " entries");
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) return bad_field(field + "[" + std::to_string(i) + "]", "must not be empty");
  return std::nullopt;
}

}  // namespace astrai::net
