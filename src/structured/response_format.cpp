#include "src/structured/response_format.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/core/json_writer.h"
#include "src/core/lru_cache.h"
#include "src/structured/token_grammar.h"

namespace astrai::structured {

namespace {

namespace od = simdjson::ondemand;
using json::FieldError;
using json::MaybeFieldError;

// A compile error "schema.properties.a: what" as the field error of `field` + ".properties.a";
// `root` is the error path that `field` stands for.
FieldError schema_error(const std::string& field, const std::string& err, std::string_view root) {
  const size_t colon = err.find(": ");
  std::string path = colon == std::string::npos ? std::string() : err.substr(0, colon);
  if (path.rfind(root, 0) == 0) path = path.substr(root.size());
  return {field + path, colon == std::string::npos ? err : err.substr(colon + 2)};
}

// What compiling `source` says ("" or the reason), remembered for the last kRemembered sources up
// to kRememberedBytes each: requests that share a schema would otherwise compile it again on every
// request's parse, on a network thread (`astrai bench structured`: 0.5 ms for an extraction schema
// of a dozen fields, 62-80 ms for a string of maxLength 4096, on the 2-core development VM; a
// remembered verdict 0.012 ms). Where it compiles, the grammar goes into `built`, and the request
// carries it to Generation::start, which then does not compile the source again (its own cache,
// compile_constraint's, is per vocabulary). Only verdicts are remembered here: a grammar can weigh
// tens of MB.
constexpr size_t kRemembered = 64, kRememberedBytes = 64 << 10;

std::string compile_verdict(ConstraintKind kind, const std::string& source,
                            std::shared_ptr<const Grammar>& built) {
  static LruCache<std::pair<ConstraintKind, std::string>, std::string> verdicts(kRemembered);
  if (kind != ConstraintKind::json_schema && kind != ConstraintKind::regex) return "";
  const bool remember = source.size() <= kRememberedBytes;
  if (remember)
    if (auto v = verdicts.get({kind, source})) return *v;
  auto g = std::make_shared<Grammar>();
  std::string err = compile_grammar(kind, source, *g);
  if (remember) verdicts.put({kind, source}, err);
  if (err.empty()) built = std::move(g);
  return err;
}

MaybeFieldError set(ConstraintSpec& out, const std::string& field, ConstraintKind kind, std::string source,
                    std::string_view schema_root = "schema") {
  if (out.kind != ConstraintKind::none)
    return FieldError{field,
                      "only one structured-output constraint may be given (response_format, "
                      "structured_outputs, guided_json / guided_regex / guided_choice or json_schema)"};
  std::shared_ptr<const Grammar> built;
  const std::string err = compile_verdict(kind, source, built);
  if (!err.empty()) {
    if (kind == ConstraintKind::json_schema) return schema_error(field, err, schema_root);
    return FieldError{field, err.rfind("regex: ", 0) == 0 ? err.substr(7) : err};
  }
  out.kind = kind;
  out.source = std::move(source);
  out.grammar = std::move(built);
  return std::nullopt;
}

MaybeFieldError read_schema(json::Value& v, const std::string& field, ConstraintSpec& out) {
  od::json_type t;
  if (v.type().get(t) ||
      (t != od::json_type::object && t != od::json_type::boolean && t != od::json_type::string))
    return FieldError{field, "must be a JSON schema (an object, or its JSON text)"};
  std::string raw;
  if (t == od::json_type::string) {  // vLLM took guided_json as a string too
    if (auto e = json::read_string(v, field, raw)) return e;
    return set(out, field, ConstraintKind::json_schema, std::move(raw));
  }
  if (auto e = json::read_raw(v, field, raw)) return e;
  return set(out, field, ConstraintKind::json_schema, std::move(raw));
}

MaybeFieldError read_pattern(json::Value& v, const std::string& field, ConstraintSpec& out) {
  std::string p;
  if (auto e = json::read_string(v, field, p)) return e;
  return set(out, field, ConstraintKind::regex, std::move(p));
}

// vLLM's choice: the output is exactly one of the strings (a regex of escaped alternatives).
MaybeFieldError read_choice(json::Value& v, const std::string& field, ConstraintSpec& out) {
  std::vector<std::string> choices;
  od::array arr;
  if (v.get_array().get(arr)) return FieldError{field, "must be a non-empty array of strings"};
  for (auto el : arr) {
    std::string_view s;
    if (el.get_string().get(s)) return FieldError{field, "must be a non-empty array of strings"};
    choices.emplace_back(s);
  }
  if (choices.empty()) return FieldError{field, "must be a non-empty array of strings"};
  std::string rx;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i) rx += '|';
    rx += "(?:";
    for (char c : choices[i]) {
      if (std::string_view("\\^$.|?*+()[]{}/-").find(c) != std::string_view::npos) rx += '\\';
      rx += c;
    }
    rx += ')';
  }
  return set(out, field, ConstraintKind::regex, std::move(rx));
}

// One member of a json_schema format object (chat's response_format.json_schema, or the Responses
// API's text.format itself): the schema is kept raw; name, description and strict are checked and
// dropped (constrained decoding is always strict).
MaybeFieldError read_json_schema_member(std::string_view k, json::Value& v, const std::string& at,
                                        std::string& schema_raw) {
  if (k == "schema") return json::read_raw(v, at, schema_raw);
  if (json::is_null(v)) return std::nullopt;
  if (k == "name" || k == "description") {
    std::string ignored;
    return json::read_string(v, at, ignored);
  }
  if (k == "strict") {
    bool ignored = false;
    return json::read_bool(v, at, ignored);
  }
  return std::nullopt;
}

// The constraint a format's type asks for. `schema_field` names where the schema is ("" when the
// request has no json_schema object at all).
MaybeFieldError set_format(const std::string& field, const std::string& type, const std::string& schema_field,
                           std::string schema_raw, ConstraintSpec& out) {
  if (type == "text") return std::nullopt;
  if (type == "json_object") return set(out, field, ConstraintKind::json_object, "");
  if (type == "json_schema") {
    if (schema_field.empty())
      return FieldError{field + ".json_schema", "is required when type is 'json_schema'"};
    if (schema_raw.empty() || schema_raw == "null") return FieldError{schema_field, "is required"};
    return set(out, schema_field, ConstraintKind::json_schema, std::move(schema_raw));
  }
  if (type.empty()) return FieldError{field + ".type", "is required"};
  return FieldError{field + ".type", "must be 'text', 'json_object' or 'json_schema', got '" + type + "'"};
}

MaybeFieldError read_response_format(json::Value& v, ConstraintSpec& out) {
  const std::string field = "response_format";
  od::object o;
  if (v.get_object().get(o)) return FieldError{field, "must be an object with a 'type'"};
  std::string type;
  std::string schema_raw;
  bool have_json_schema = false;
  auto e = json::for_each_field(
      o,
      [&](std::string_view k, json::Value& fv) -> MaybeFieldError {
        if (k == "type") return json::read_string(fv, field + ".type", type);
        if (k == "json_schema" && !json::is_null(fv)) {
          have_json_schema = true;
          od::object js;
          if (fv.get_object().get(js)) return FieldError{field + ".json_schema", "must be an object"};
          return json::for_each_field(
              js,
              [&](std::string_view jk, json::Value& jv) -> MaybeFieldError {
                return read_json_schema_member(jk, jv, field + ".json_schema." + std::string(jk), schema_raw);
              },
              [&](simdjson::error_code) -> MaybeFieldError {
                return FieldError{field + ".json_schema", "is not valid JSON"};
              });
        }
        return std::nullopt;
      },
      [&](simdjson::error_code) -> MaybeFieldError {
        return FieldError{field, "is not valid JSON"};
      });
  if (e) return e;
  return set_format(field, type, have_json_schema ? field + ".json_schema.schema" : "", std::move(schema_raw),
                    out);
}

MaybeFieldError read_structured_outputs(json::Value& v, ConstraintSpec& out) {
  const std::string field = "structured_outputs";
  od::object o;
  if (v.get_object().get(o)) return FieldError{field, "must be an object"};
  return json::for_each_field(
      o,
      [&](std::string_view k, json::Value& fv) -> MaybeFieldError {
        if (json::is_null(fv)) return std::nullopt;
        const std::string at = field + "." + std::string(k);
        if (k == "json") return read_schema(fv, at, out);
        if (k == "regex") return read_pattern(fv, at, out);
        if (k == "choice") return read_choice(fv, at, out);
        if (k == "grammar" || k == "structural_tag" || k == "json_object")
          return FieldError{at, "is not supported (json, regex and choice are)"};
        return std::nullopt;
      },
      [&](simdjson::error_code) -> MaybeFieldError {
        return FieldError{field, "is not valid JSON"};
      });
}

}  // namespace

MaybeFieldError read_text_format(json::Value& v, const std::string& field, ConstraintSpec& out) {
  od::object o;
  if (v.get_object().get(o)) return FieldError{field, "must be an object with a 'type'"};
  std::string type;
  std::string schema_raw;
  auto e = json::for_each_field(
      o,
      [&](std::string_view k, json::Value& fv) -> MaybeFieldError {
        if (k == "type") return json::read_string(fv, field + ".type", type);
        return read_json_schema_member(k, fv, field + "." + std::string(k), schema_raw);
      },
      [&](simdjson::error_code) -> MaybeFieldError {
        return FieldError{field, "is not valid JSON"};
      });
  if (e) return e;
  return set_format(field, type, field + ".schema", std::move(schema_raw), out);
}

namespace {

// `schema` with every local "$ref" ("#...") pointing `prefix` deeper ("#/$defs/a" ->
// "#<prefix>/$defs/a"), for the schema placed at `prefix` inside another. A "$ref" written with
// escapes in its key is left alone (it then fails to resolve: an error, not a wrong constraint).
std::string prefix_local_refs(std::string_view schema, std::string_view prefix) {
  std::string out;
  out.reserve(schema.size());
  bool after_ref_key = false;  // the last string was the key "$ref"
  for (size_t i = 0; i < schema.size();) {
    if (schema[i] != '"') {
      out += schema[i++];
      continue;
    }
    size_t end = i + 1;  // past the closing quote
    while (end < schema.size() && schema[end] != '"') end += schema[end] == '\\' ? 2 : 1;
    end = std::min(end + 1, schema.size());
    const std::string_view str = schema.substr(i, end - i);
    if (after_ref_key && str.size() >= 2 && str[1] == '#') {
      out.append("\"#").append(prefix).append(str.substr(2));
    } else {
      out.append(str);
    }
    i = end;
    while (i < schema.size() && std::isspace(static_cast<unsigned char>(schema[i]))) out += schema[i++];
    after_ref_key = str == "\"$ref\"" && i < schema.size() && schema[i] == ':';
  }
  return out;
}

}  // namespace

MaybeFieldError constrain_to_tool_call(std::string_view name, std::string_view input_schema,
                                       const std::string& field, ConstraintSpec& out) {
  JsonWriter w;
  w.begin_object().key("type").value("object").key("properties").begin_object();
  w.key("name").begin_object().key("const").value(name).end_object();
  w.key("arguments").raw(prefix_local_refs(input_schema, "/properties/arguments")).end_object();
  w.key("required").begin_array().value("name").value("arguments").end_array();
  w.key("additionalProperties").value(false).end_object();
  return set(out, field, ConstraintKind::json_schema, w.take(), "schema.properties.arguments");
}

MaybeFieldError read_constraint_field(std::string_view key, json::Value& v, ConstraintSpec& out,
                                      bool& handled) {
  handled = true;
  if (json::is_null(v) &&
      (key == "response_format" || key == "structured_outputs" || key == "guided_json" ||
       key == "guided_regex" || key == "guided_choice" || key == "json_schema" || key == "grammar"))
    return std::nullopt;
  if (key == "response_format") return read_response_format(v, out);
  if (key == "structured_outputs") return read_structured_outputs(v, out);
  if (key == "guided_json" || key == "json_schema") return read_schema(v, std::string(key), out);
  if (key == "guided_regex") return read_pattern(v, "guided_regex", out);
  if (key == "guided_choice") return read_choice(v, "guided_choice", out);
  if (key == "grammar")
    return FieldError{"grammar",
                      "GBNF grammars are not supported; use response_format (a JSON schema) or guided_regex"};
  handled = false;
  return std::nullopt;
}

}  // namespace astrai::structured
