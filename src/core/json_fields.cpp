#include "src/core/json_fields.h"

#include <cmath>
#include <cstdio>

namespace astrai::json {
namespace od = simdjson::ondemand;

namespace {

FieldError bad(const std::string& field, std::string message) {
  return FieldError{field, std::move(message)};
}

FieldError type_error(const std::string& field, const char* want) {
  return bad(field, std::string("must be ") + want);
}

}  // namespace

namespace {
thread_local simdjson::ondemand::parser thread_parser;
thread_local bool thread_parser_lent = false;
}  // namespace

ParserLease::ParserLease() {
  if (thread_parser_lent) {
    own_ = std::make_unique<simdjson::ondemand::parser>();
    parser_ = own_.get();
  } else {
    thread_parser_lent = true;
    parser_ = &thread_parser;
  }
}

ParserLease::~ParserLease() {
  if (!own_) thread_parser_lent = false;
}

bool is_null(Value& v) {
  bool n = false;
  return !v.is_null().get(n) && n;
}

MaybeFieldError read_string(Value& v, const std::string& field, std::string& out) {
  std::string_view s;
  if (v.get_string().get(s)) return type_error(field, "a string");
  out.assign(s);
  return std::nullopt;
}

MaybeFieldError read_bool(Value& v, const std::string& field, bool& out) {
  if (v.get_bool().get(out)) return type_error(field, "a boolean");
  return std::nullopt;
}

MaybeFieldError read_int(Value& v, const std::string& field, int64_t lo, int64_t hi, int64_t& out) {
  od::json_type t;
  if (v.type().get(t) || t != od::json_type::number) return type_error(field, "an integer");
  double d = 0;
  if (v.get_double().get(d) || !std::isfinite(d) || d != std::floor(d))
    return type_error(field, "an integer");
  if (d < double(lo) || d > double(hi)) {
    // An integral d can be beyond int64 (1e300): converting it would be undefined; print it as %g.
    char got[32];
    if (std::fabs(d) < 9e18)
      std::snprintf(got, sizeof got, "%lld", static_cast<long long>(d));
    else
      std::snprintf(got, sizeof got, "%g", d);
    return bad(field,
               "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + got);
  }
  out = int64_t(d);
  return std::nullopt;
}

MaybeFieldError read_number(Value& v, const std::string& field, double lo, double hi, double& out) {
  od::json_type t;
  if (v.type().get(t) || t != od::json_type::number) return type_error(field, "a number");
  if (v.get_double().get(out) || !std::isfinite(out)) return type_error(field, "a finite number");
  if (out < lo || out > hi) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "must be between %g and %g, got %g", lo, hi, out);
    return bad(field, buf);
  }
  return std::nullopt;
}

MaybeFieldError read_raw(Value& v, const std::string& field, std::string& out) {
  od::json_type t;
  if (v.type().get(t)) return bad(field, "is not valid JSON");
  std::string_view raw;
  if (t == od::json_type::object) {
    od::object o;
    if (v.get_object().get(o) || o.raw_json().get(raw)) return bad(field, "is not valid JSON");
  } else if (t == od::json_type::array) {
    od::array a;
    if (v.get_array().get(a) || a.raw_json().get(raw)) return bad(field, "is not valid JSON");
  } else {
    raw = v.raw_json_token();
  }
  while (!raw.empty() &&
         (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
    raw.remove_suffix(1);
  // The on-demand parser skips what it is not asked to read without validating it (fuzz_api_json
  // found `"tool_calls":[{"typ"f"e:x"}]` passed through): check the text on its own.
  simdjson::dom::parser check;
  if (check.parse(simdjson::padded_string(raw)).error()) return bad(field, "is not valid JSON");
  out.assign(raw);
  return std::nullopt;
}

MaybeFieldError read_string_list(Value& v, const std::string& field, size_t max_items,
                                 std::vector<std::string>& out) {
  od::json_type t;
  if (v.type().get(t)) return type_error(field, "a string or an array of strings");
  out.clear();
  if (t == od::json_type::string) {
    std::string s;
    if (auto e = read_string(v, field, s)) return e;
    out.push_back(std::move(s));
  } else if (t == od::json_type::array) {
    od::array arr;
    if (v.get_array().get(arr)) return type_error(field, "a string or an array of strings");
    size_t i = 0;
    for (auto el : arr) {
      Value ev;
      if (el.get(ev)) return type_error(field, "a string or an array of strings");
      std::string s;
      if (auto e = read_string(ev, field + "[" + std::to_string(i) + "]", s)) return e;
      out.push_back(std::move(s));
      ++i;
    }
  } else {
    return type_error(field, "a string or an array of strings");
  }
  if (out.size() > max_items) return bad(field, "at most " + std::to_string(max_items) + " entries");
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) return bad(field + "[" + std::to_string(i) + "]", "must not be empty");
  return std::nullopt;
}

MaybeFieldError read_token_ids(od::array& arr, const std::string& field, int64_t max_id,
                               std::vector<int32_t>& out) {
  size_t i = 0;
  for (auto el : arr) {
    Value x;
    if (el.get(x)) return bad(field, "is not valid JSON");
    int64_t id = 0;
    if (auto e = read_int(x, field + "[" + std::to_string(i++) + "]", 0, max_id, id)) return e;
    out.push_back(int32_t(id));
  }
  return std::nullopt;
}

}  // namespace astrai::json
