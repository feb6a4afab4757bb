// Small accessors over simdjson DOM elements for reading tokenizer.json and friends.
#pragma once

#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>

namespace astrai::tok {

using JsonEl = simdjson::dom::element;

// The member `key` of `obj`, or nullopt when absent or null.
inline std::optional<JsonEl> member(const JsonEl& obj, std::string_view key) {
  if (!obj.is_object()) return std::nullopt;
  JsonEl v;
  if (obj.get_object().at_key(key).get(v) != simdjson::SUCCESS || v.is_null()) return std::nullopt;
  return v;
}
inline std::string str_or(const JsonEl& obj, std::string_view key, std::string_view dflt) {
  auto v = member(obj, key);
  if (!v || !v->is_string()) return std::string(dflt);
  return std::string(std::string_view(v->get_string().value_unsafe()));
}
inline bool bool_or(const JsonEl& obj, std::string_view key, bool dflt) {
  auto v = member(obj, key);
  if (!v || !v->is_bool()) return dflt;
  return v->get_bool().value_unsafe();
}
inline int64_t int_or(const JsonEl& obj, std::string_view key, int64_t dflt) {
  auto v = member(obj, key);
  if (!v) return dflt;
  int64_t i;
  if (v->get_int64().get(i) == simdjson::SUCCESS) return i;
  uint64_t u;
  if (v->get_uint64().get(u) == simdjson::SUCCESS) return int64_t(u);
  return dflt;
}
// Copies of the array / object views (never iterate a temporary simdjson_result: it dangles).
inline simdjson::dom::array as_array(const JsonEl& e) {
  simdjson::dom::array a;
  if (e.get_array().get(a) != simdjson::SUCCESS) return {};
  return a;
}
inline simdjson::dom::object as_object(const JsonEl& e) {
  simdjson::dom::object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) return {};
  return o;
}
inline std::string type_of(const JsonEl& obj) {
  return str_or(obj, "type", "");
}

// simdjson's DOM rejects integers beyond 64 bits (transformers writes model_max_length as
// 1000000000000000019884624838656). Returns `json` with such integers turned into floats
// ("123...0.0"), which parse; strings are left alone.
std::string tame_big_integers(std::string_view json);

}  // namespace astrai::tok
