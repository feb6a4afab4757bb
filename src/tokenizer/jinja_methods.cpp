// Attribute/item lookup and the methods of str, dict and list as jinja2's immutable sandbox
// exposes them: reading methods work, mutating ones (list.append, dict.update, ...) raise
// SecurityError when called.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "src/core/utf8.h"
#include "src/tokenizer/jinja_budget.h"
#include "src/tokenizer/jinja_builtins.h"
#include "src/tokenizer/jinja_strings.h"

namespace astrai::jinja {
namespace {

Value str_value(std::string s) {
  return Value::string(std::move(s));
}

Value str_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(Value::string(p));
  return Value::list(std::move(out));
}

const std::string& need_str(const Value& v, const char* what) {
  if (!v.is_string()) type_error(std::string(what) + " must be str, not " + type_name(v));
  return v.str();
}

std::optional<std::string> opt_str(const Value& v, const char* what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  return need_str(v, what);
}

int64_t need_int(const Value& v, const char* what) {
  if (!v.is_int())
    type_error(std::string(what) + ": '" + type_name(v) + "' object cannot be interpreted as an integer");
  return v.as_int();
}

std::optional<int64_t> opt_int(const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  return need_int(v, "slice index");
}

// A padding width, refused beyond 2^28 so a typo'd template cannot exhaust memory.
int64_t pad_width(const Value& v) {
  int64_t w = need_int(v, "width");
  if (w > (int64_t(1) << 28)) throw RenderError("MemoryError", "padding width too large");
  if (w > 0) check_text_size(size_t(w));
  return w;
}

[[noreturn]] void unsafe(const Value& obj, const std::string& name) {
  throw RenderError("SecurityError",
                    "access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
}

// `"prefix"` or a tuple of prefixes, as str.startswith accepts.
bool starts_or_ends(const std::string& s, const Value& arg, bool ends, const Value& start, const Value& end) {
  std::u32string u = to_u32(s);
  int64_t n = int64_t(u.size());
  auto clamp = [n](int64_t x) { return x < 0 ? std::max<int64_t>(0, x + n) : std::min(x, n); };
  int64_t b = opt_int(start) ? clamp(*opt_int(start)) : 0, e = opt_int(end) ? clamp(*opt_int(end)) : n;
  std::u32string_view view =
      b <= e ? std::u32string_view(u).substr(size_t(b), size_t(e - b)) : std::u32string_view();
  auto test = [&](const Value& p) {
    std::u32string w = to_u32(need_str(p, ends ? "endswith arg" : "startswith arg"));
    if (b > e) return false;
    if (w.size() > view.size()) return false;
    return ends ? view.substr(view.size() - w.size()) == w : view.substr(0, w.size()) == w;
  };
  if (arg.is_list() && arg.seq_kind() == SeqKind::tuple) {
    for (const Value& p : arg.items())
      if (test(p)) return true;
    return false;
  }
  return test(arg);
}

// str.format as the sandbox allows it: {} / {0} / {name} fields, {{ and }} escapes, no specs
// beyond an empty one.
std::string str_format(const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos)
      throw RenderError("ValueError", "Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      throw RenderError("UnsupportedError", "str.format field '{" + field + "}' is not supported");
    Value v;
    if (field.empty()) {
      if (auto_idx >= a.args.size()) throw RenderError("IndexError", "Replacement index out of range");
      v = a.args[auto_idx++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t k = std::stoul(field);
      if (k >= a.args.size()) throw RenderError("IndexError", "Replacement index out of range");
      v = a.args[k];
    } else {
      bool found = false;
      for (auto& kv : a.kwargs)
        if (kv.first == field) v = kv.second, found = true;
      if (!found) throw RenderError("KeyError", "'" + field + "'");
    }
    out += to_str(v);
    check_text_size(out.size());
    i = close;
  }
  return out;
}

Value str_method(const Value& obj, const std::string& name) {
  static const char* const kMethods[] = {
      "startswith", "endswith",  "split",   "rsplit",    "strip",      "lstrip",       "rstrip",
      "replace",    "upper",     "lower",   "title",     "capitalize", "find",         "rfind",
      "index",      "rindex",    "count",   "join",      "splitlines", "format",       "isdigit",
      "isalpha",    "isspace",   "isalnum", "islower",   "isupper",    "removeprefix", "removesuffix",
      "center",     "swapcase",  "zfill",   "isnumeric", "isdecimal",  "ljust",        "rjust",
      "partition",  "rpartition"};
  if (std::find_if(std::begin(kMethods), std::end(kMethods), [&](const char* m) { return name == m; }) ==
      std::end(kMethods))
    return Value::undefined("'str object' has no attribute '" + name + "'");
  // The method holds the string value (shared, not copied): a bound method of a long string is cheap.
  return Value::callable("str." + name, [obj, name](CallArgs& a) -> Value {
    const std::string& s = obj.str();
    charge_scan(s.size());  // every method reads or copies the string
    for (const Value& x : a.args)
      if (x.is_string()) charge_scan(x.str().size());
    auto arg = [&](size_t i, const char* kw) { return a.get(i, kw); };
    if (name == "startswith" || name == "endswith")
      return Value::boolean(
          starts_or_ends(s, arg(0, "prefix"), name == "endswith", arg(1, "start"), arg(2, "end")));
    if (name == "split" || name == "rsplit") {
      auto sep = opt_str(arg(0, "sep"), "sep");
      Value m = arg(1, "maxsplit");
      int64_t maxsplit = m.is_undefined() ? -1 : need_int(m, "maxsplit");
      if (sep && sep->empty()) throw RenderError("ValueError", "empty separator");
      return str_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return str_value(py_strip(s, opt_str(arg(0, "chars"), "chars"), name != "rstrip", name != "lstrip"));
    if (name == "replace") {
      Value c = arg(2, "count");
      return str_value(py_replace(s, need_str(arg(0, "old"), "replace() argument 1"),
                                  need_str(arg(1, "new"), "replace() argument 2"),
                                  c.is_undefined() ? -1 : need_int(c, "count")));
    }
    if (name == "upper") return str_value(py_upper(s));
    if (name == "lower") return str_value(py_lower(s));
    if (name == "title") return str_value(py_title(s));
    if (name == "capitalize") return str_value(py_capitalize(s));
    if (name == "swapcase") {
      std::string out;
      for (char32_t c : to_u32(s)) utf8_append(out, cp_is_cased_upper(c) ? cp_lower(c) : cp_upper(c));
      return str_value(out);
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
      int64_t r = py_find(s, need_str(arg(0, "sub"), "must be str"), opt_int(arg(1, "start")),
                          opt_int(arg(2, "end")), name[0] == 'r');
      if (r < 0 && name.find("index") != std::string::npos)
        throw RenderError("ValueError", "substring not found");
      return Value::integer(r);
    }
    if (name == "count") return Value::integer(py_count(s, need_str(arg(0, "sub"), "must be str")));
    if (name == "join") {
      std::string out;
      size_t i = 0;
      for (const Value& x : iterate(arg(0, "iterable"))) {
        if (!x.is_string())
          type_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(x) +
                     " found");
        if (i++) out += s;
        out += x.str();
      }
      return str_value(out);
    }
    if (name == "splitlines") return str_list(py_splitlines(s, truthy(arg(0, "keepends"))));
    if (name == "format") return str_value(str_format(s, a));
    if (name == "removeprefix") {
      const std::string& p = need_str(arg(0, "prefix"), "removeprefix() argument");
      return str_value(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
    }
    if (name == "removesuffix") {
      const std::string& p = need_str(arg(0, "suffix"), "removesuffix() argument");
      bool has = s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      return str_value(has && !p.empty() ? s.substr(0, s.size() - p.size()) : s);
    }
    if (name == "center" || name == "ljust" || name == "rjust") {
      int64_t w = pad_width(arg(0, "width"));
      Value f = arg(1, "fillchar");
      std::string fill = f.is_undefined() ? " " : need_str(f, "fillchar");
      if (name == "center") return str_value(py_center(s, w, fill));
      int64_t len = cp_length(s);
      std::string pad;
      for (int64_t i = len; i < w; ++i) pad += fill;
      return str_value(name == "ljust" ? s + pad : pad + s);
    }
    if (name == "zfill") {
      int64_t w = pad_width(arg(0, "width")), len = cp_length(s);
      if (len >= w) return str_value(s);
      std::string pad(size_t(w - len), '0');
      if (!s.empty() && (s[0] == '-' || s[0] == '+')) return str_value(s.substr(0, 1) + pad + s.substr(1));
      return str_value(pad + s);
    }
    if (name == "partition" || name == "rpartition") {
      const std::string& sep = need_str(arg(0, "sep"), "sep");
      size_t f = name == "partition" ? s.find(sep) : s.rfind(sep);
      if (f == std::string::npos)
        return Value::list(name == "partition"
                               ? std::vector<Value>{str_value(s), str_value(""), str_value("")}
                               : std::vector<Value>{str_value(""), str_value(""), str_value(s)},
                           SeqKind::tuple);
      return Value::list({str_value(s.substr(0, f)), str_value(sep), str_value(s.substr(f + sep.size()))},
                         SeqKind::tuple);
    }
    // Character-class predicates.
    std::u32string u = to_u32(s);
    if (u.empty()) return Value::boolean(false);
    if (name == "islower") return Value::boolean(py_islower(s));
    if (name == "isupper") return Value::boolean(py_isupper(s));
    auto all = [&](auto pred) { return Value::boolean(std::all_of(u.begin(), u.end(), pred)); };
    if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
      return all([](char32_t c) { return c >= '0' && c <= '9'; });
    if (name == "isspace") return all([](char32_t c) { return py_isspace(c); });
    if (name == "isalpha")
      return all([](char32_t c) { return py_isalnum(c) && c != '_' && !(c >= '0' && c <= '9'); });
    return all([](char32_t c) { return py_isalnum(c) && c != '_'; });  // isalnum
  });
}

Value dict_method(const Value& obj, const std::string& name) {
  if (name == "get")
    return Value::callable("dict.get", [obj](CallArgs& a) {
      const Value* v = obj.dict_data().find(a.get(0, "key"));
      return v ? *v : a.get(1, "default", Value::none());
    });
  if (name == "items")
    return Value::callable("dict.items", [obj](CallArgs&) {
      std::vector<Value> out;
      for (const auto& kv : obj.dict_data().items)
        out.push_back(Value::list({kv.first, kv.second}, SeqKind::tuple));
      return Value::list(std::move(out));
    });
  if (name == "keys" || name == "values")
    return Value::callable("dict." + name, [obj, name](CallArgs&) {
      std::vector<Value> out;
      for (const auto& kv : obj.dict_data().items) out.push_back(name == "keys" ? kv.first : kv.second);
      return Value::list(std::move(out));
    });
  if (name == "copy")
    return Value::callable(
        "dict.copy", [obj](CallArgs&) { return Value::dict(std::make_shared<DictData>(obj.dict_data())); });
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear")
    return Value::callable("dict." + name, [obj, name](CallArgs&) -> Value { unsafe(obj, name); });
  return Value();  // not a method
}

Value list_method(const Value& obj, const std::string& name) {
  if (name == "index" || name == "count")
    return Value::callable("list." + name, [obj, name](CallArgs& a) {
      Value x = a.get(0, "value");
      int64_t n = 0;
      for (size_t i = 0; i < obj.items().size(); ++i) {
        if (!equals(obj.items()[i], x)) continue;
        if (name == "index") return Value::integer(int64_t(i));
        ++n;
      }
      if (name == "index") throw RenderError("ValueError", repr(x) + " is not in list");
      return Value::integer(n);
    });
  static const char* const kMutators[] = {"append", "extend",  "insert", "pop",
                                          "remove", "reverse", "sort",   "clear"};
  for (const char* m : kMutators)
    if (name == m)
      return Value::callable("list." + name, [obj, name](CallArgs&) -> Value { unsafe(obj, name); });
  return Value();
}

Value missing(const Value& obj, const Value& key) {
  std::string hint = "'";  // built by appending: GCC 12 misreports "lit" + std::string (-Wrestrict)
  hint += object_type_repr(obj);
  if (key.is_string()) {
    hint += "' has no attribute '";
    hint += key.str();
    hint += '\'';
  } else {
    hint += "' has no element ";
    hint += repr(key);
  }
  return Value::undefined(std::move(hint));
}

// Python's obj[key]; nullopt where Python raises TypeError/LookupError.
std::optional<Value> subscript(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    const Value* v = obj.dict_data().find(key);
    if (v) return *v;
    return std::nullopt;
  }
  if ((obj.is_list() && obj.seq_kind() != SeqKind::generator) || obj.is_string()) {
    if (!key.is_int()) return std::nullopt;
    int64_t i = key.as_int();
    if (obj.is_string()) {
      std::u32string u = to_u32(obj.str());
      int64_t n = int64_t(u.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return std::nullopt;
      std::string out;
      utf8_append(out, uint32_t(u[size_t(i)]));
      return Value::string(out);
    }
    int64_t n = int64_t(obj.items().size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    return obj.items()[size_t(i)];
  }
  return std::nullopt;
}

// Python's getattr(obj, name); nullopt for AttributeError.
std::optional<Value> attribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::string: {
      Value m = str_method(obj, name);
      if (m.is_undefined()) return std::nullopt;
      return m;
    }
    case Kind::dict: {
      Value m = dict_method(obj, name);
      if (m.is_undefined()) return std::nullopt;
      return m;
    }
    case Kind::list: {
      if (obj.seq_kind() == SeqKind::generator) return std::nullopt;
      Value m = list_method(obj, name);
      if (m.is_undefined()) return std::nullopt;
      return m;
    }
    case Kind::object: {
      const Value* v = obj.object_data().attrs.find(name);
      if (v) return *v;
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (auto v = attribute(obj, name)) return *v;
  if (auto v = subscript(obj, Value::string(name))) return *v;
  return missing(obj, Value::string(name));
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (auto v = subscript(obj, key)) return *v;
  if (key.is_string())
    if (auto v = attribute(obj, key.str())) return *v;
  return missing(obj, key);
}

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) undefined_error(obj);
  auto bound = [](const Value* v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_int()) type_error("slice indices must be integers or None or have an __index__ method");
    return v->as_int();
  };
  std::optional<int64_t> b = bound(start), e = bound(stop), st = bound(step);
  int64_t k = st.value_or(1);
  if (k == 0) throw RenderError("ValueError", "slice step cannot be zero");
  // jinja2 compiles slices to plain Python subscripts (no environment.getitem fallback).
  bool is_str = obj.is_string();
  if (obj.is_dict()) type_error("unhashable type: 'slice'");
  if (!is_str && !(obj.is_list() && obj.seq_kind() != SeqKind::generator))
    type_error("'" + type_name(obj) + "' object is not subscriptable");
  std::u32string u = is_str ? to_u32(obj.str()) : std::u32string();
  const int64_t n = is_str ? int64_t(u.size()) : int64_t(obj.items().size());
  // PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t v = *x;
    if (v < 0) {
      v += n;
      if (v < 0) v = k < 0 ? -1 : 0;
    } else if (v >= n) {
      v = k < 0 ? n - 1 : n;
    }
    return v;
  };
  int64_t lo = adjust(b, k < 0 ? n - 1 : 0), hi = adjust(e, k < 0 ? -1 : n);
  std::vector<int64_t> idx;
  if (k > 0) {
    for (int64_t i = lo; i < hi; i += k) idx.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += k) idx.push_back(i);
  }
  if (is_str) {
    std::string out;
    for (int64_t i : idx) utf8_append(out, uint32_t(u[size_t(i)]));
    return Value::string(out);
  }
  std::vector<Value> out;
  for (int64_t i : idx) out.push_back(obj.items()[size_t(i)]);
  if (obj.seq_kind() == SeqKind::range) {  // a sliced range is a range over the selected positions
    const ListData& r = obj.list_data();
    return Value::range(r.range_start + lo * r.range_step, r.range_start + hi * r.range_step,
                        r.range_step * k, std::move(out));
  }
  return Value::list(std::move(out), obj.seq_kind());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::undefined: return false;
    case Kind::string:
      if (!item.is_string())
        type_error("'in <string>' requires string as left operand, not " + type_name(item));
      charge_scan(container.str().size());
      return container.str().find(item.str()) != std::string::npos;
    case Kind::list:
      for (const Value& x : container.items())
        if (equals(x, item)) return true;
      return false;
    case Kind::dict:
      if (item.is_dict() || (item.is_list() && item.seq_kind() == SeqKind::list))
        type_error("unhashable type: '" + type_name(item) + "'");
      return container.dict_data().find(item) != nullptr;
    default: type_error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

// printf-style formatting: %s %r %d %i %f %e %g %x %o %c %% with flags, width and precision.
std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> list;
  const DictData* mapping = nullptr;
  if (args.is_list() && args.seq_kind() == SeqKind::tuple) {
    list = args.items();
  } else if (args.is_dict()) {
    mapping = &args.dict_data();
  } else {
    list.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw RenderError("ValueError", "incomplete format");
    Value v;
    bool have_v = false;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) throw RenderError("ValueError", "incomplete format key");
      const Value* m = mapping->find(fmt.substr(i + 1, close - i - 1));
      if (!m) throw RenderError("KeyError", "'" + fmt.substr(i + 1, close - i - 1) + "'");
      v = *m;
      have_v = true;
      i = close + 1;
    }
    size_t spec_begin = i;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) ++i;
    while (i < fmt.size() && ((fmt[i] >= '0' && fmt[i] <= '9') || fmt[i] == '.')) ++i;
    if (i >= fmt.size()) throw RenderError("ValueError", "incomplete format");
    const char conv = fmt[i];
    std::string spec = fmt.substr(spec_begin, i - spec_begin);
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!have_v) {
      if (next >= list.size()) type_error("not enough arguments for format string");
      v = list[next++];
    }
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? to_str(v) : repr(v);
        std::snprintf(buf, sizeof(buf), ("%" + spec + "s").c_str(), s.c_str());
        out += s.size() < 256 ? std::string(buf) : s;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_number())
          type_error(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
        long long n = v.is_int() ? v.as_int() : (long long)std::trunc(v.as_double());
        std::snprintf(buf, sizeof(buf), ("%" + spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), n);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.is_number()) type_error("must be real number, not " + type_name(v));
        std::snprintf(buf, sizeof(buf), ("%" + spec + conv).c_str(), v.as_double());
        out += buf;
        break;
      }
      case 'c': out += to_str(v); break;
      default: throw RenderError("ValueError", std::string("unsupported format character '") + conv + "'");
    }
    check_text_size(out.size());
  }
  // Python skips this check for mapping-like arguments (anything subscriptable but a tuple or str).
  const bool mapping_like =
      args.is_dict() || args.is_undefined() || (args.is_list() && args.seq_kind() != SeqKind::tuple);
  if (!mapping_like && next < list.size()) type_error("not all arguments converted during string formatting");
  return out;
}

}  // namespace astrai::jinja
