#include "src/tokenizer/jinja_json.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "src/tokenizer/jinja_budget.h"

namespace astrai::jinja {
namespace {

Value from_element(const simdjson::dom::element& el) {
  using T = simdjson::dom::element_type;
  switch (el.type()) {
    case T::ARRAY: {
      std::vector<Value> items;
      simdjson::dom::array arr;
      if (el.get_array().get(arr) == simdjson::SUCCESS)
        for (simdjson::dom::element x : arr) items.push_back(from_element(x));
      return Value::list(std::move(items));
    }
    case T::OBJECT: {
      auto d = std::make_shared<DictData>();
      simdjson::dom::object obj;
      if (el.get_object().get(obj) == simdjson::SUCCESS)
        for (simdjson::dom::key_value_pair kv : obj)
          d->set(Value::string(std::string(kv.key)), from_element(kv.value));  // a repeated key: last wins
      return Value::dict(std::move(d));
    }
    case T::INT64: return Value::integer(el.get_int64().value_unsafe());
    case T::UINT64: {
      uint64_t u = el.get_uint64().value_unsafe();
      if (u > uint64_t(INT64_MAX)) return Value::floating(double(u));  // beyond our integers
      return Value::integer(int64_t(u));
    }
    case T::DOUBLE: return Value::floating(el.get_double().value_unsafe());
    case T::STRING: return Value::string(std::string(el.get_string().value_unsafe()));
    case T::BOOL: return Value::boolean(el.get_bool().value_unsafe());
    case T::NULL_VALUE: return Value::none();
  }
  return Value::none();
}

void dump_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

std::string float_json(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return float_repr(f);
}

// Dict keys as json.dumps coerces them: str as is, numbers/bools/None to their JSON text.
std::string key_text(const Value& k) {
  switch (k.kind()) {
    case Kind::string: return k.str();
    case Kind::boolean: return k.as_bool() ? "true" : "false";
    case Kind::integer: return std::to_string(k.as_int());
    case Kind::floating: return float_json(k.as_double());
    case Kind::none: return "null";
    default: type_error("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  WalkDepth guard;
  charge_steps(1);
  check_text_size(out.size());
  auto newline = [&](int d) {
    out += '\n';
    for (int i = 0; i < d; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Kind::none: out += "null"; return;
    case Kind::boolean: out += v.as_bool() ? "true" : "false"; return;
    case Kind::integer: out += std::to_string(v.as_int()); return;
    case Kind::floating: out += float_json(v.as_double()); return;
    case Kind::string: dump_string(out, v.str()); return;
    case Kind::list: {
      if (v.seq_kind() == SeqKind::generator || v.seq_kind() == SeqKind::range) break;
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.indent) newline(depth + 1);
        dump(out, items[i], o, depth + 1);
      }
      if (o.indent) newline(depth);
      out += ']';
      return;
    }
    case Kind::dict: {
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& kv : v.dict_data().items) items.emplace_back(key_text(kv.first), &kv.second);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.indent) newline(depth + 1);
        dump_string(out, items[i].first);
        out += o.key_sep;
        dump(out, *items[i].second, o, depth + 1);
      }
      if (o.indent) newline(depth);
      out += '}';
      return;
    }
    default: break;
  }
  type_error("Object of type " + type_name(v) + " is not JSON serializable");
}

}  // namespace

Result<Value> value_from_json(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element el;
  simdjson::padded_string padded(json);
  if (auto err = parser.parse(padded).get(el); err != simdjson::SUCCESS)
    return invalid_argument(std::string("invalid JSON: ") + simdjson::error_message(err));
  try {
    return from_element(el);
  } catch (const LimitError& e) {  // too deep for templates, or over the render's budget
    return resource_exhausted(e.what());
  }
}

std::string json_dumps(const Value& v, const JsonDumpOptions& opts) {
  std::string out;
  dump(out, v, opts, 0);
  return out;
}

}  // namespace astrai::jinja
