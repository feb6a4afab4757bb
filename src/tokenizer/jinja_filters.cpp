// jinja2's built-in filters, plus transformers' `tojson`. Each follows the jinja2 3.1
// source: argument names and defaults, what it returns (a list, or a one-shot generator where
// jinja2 yields one: select/reject/map/unique/items/reverse) and its errors.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "src/core/utf8.h"
#include "src/tokenizer/jinja_budget.h"
#include "src/tokenizer/jinja_builtins.h"
#include "src/tokenizer/jinja_json.h"
#include "src/tokenizer/jinja_strings.h"

namespace astrai::jinja {
namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);

Value str_v(std::string s) {
  return Value::string(std::move(s));
}
Value gen(std::vector<Value> items) {
  return Value::list(std::move(items), SeqKind::generator);
}

// make_attrgetter: "a.b.0" looks up each part with getitem (item first), integer parts as ints.
Value attr_path(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  std::string path = to_str(attribute);
  Value cur = item;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

Value ignore_case(const Value& v) {
  return v.is_string() ? Value::string(py_lower(v.str())) : v;
}

Value f_abs(const Value& v, CallArgs&) {
  if (v.kind() == Kind::floating) return Value::floating(std::fabs(v.as_double()));
  if (v.is_int()) return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  type_error("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(const Value& v, CallArgs& a) {
  std::string name = to_str(a.get(0, "name"));
  Value r = get_attr(v, name);
  if (v.is_dict() && !r.is_callable())
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  return r;
}

Value f_batch(const Value& v, CallArgs& a) {
  int64_t n = a.get(0, "linecount").as_int();
  if (n <= 0) throw RenderError("ValueError", "batch size must be positive");
  Value fill = a.get(1, "fill_with", Value::none());
  std::vector<Value> out, cur;
  for (const Value& x : iterate(v)) {
    cur.push_back(x);
    if (int64_t(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (int64_t(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return gen(std::move(out));
}

Value f_capitalize(const Value& v, CallArgs&) {
  return str_v(py_capitalize(to_str(v)));
}
Value f_center(const Value& v, CallArgs& a) {
  int64_t width = a.get(0, "width", Value::integer(80)).as_int();
  if (width > (int64_t(1) << 28)) throw RenderError("MemoryError", "center width too large");
  if (width > 0) check_text_size(size_t(width));
  return str_v(py_center(to_str(v), width, " "));
}

Value f_default(const Value& v, CallArgs& a) {
  Value dflt = a.get(0, "default_value", Value::string(""));
  bool boolean = truthy(a.get(1, "boolean", Value::boolean(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return dflt;
  return v;
}

// Python's sorted(items, key=key, reverse=reverse). key_in_list: jinja2's sort filter wraps each key
// in a list ([key], make_multi_attrgetter), and list comparison tests == before <, so equal keys
// never meet '<' (two equal dicts sort; dictsort's bare keys would raise).
Value sorted_by(std::vector<Value> items, bool reverse, const std::function<Value(const Value&)>& key,
                bool key_in_list = false) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& x : items) keyed.emplace_back(key(x), std::move(x));
  auto less = [key_in_list](const Value& a, const Value& b) {
    return key_in_list && equals(a, b) ? false : less_than(a, b);
  };
  std::stable_sort(keyed.begin(), keyed.end(), [reverse, &less](const auto& p, const auto& q) {
    return reverse ? less(q.first, p.first) : less(p.first, q.first);
  });
  std::vector<Value> out;
  for (auto& p : keyed) out.push_back(std::move(p.second));
  return Value::list(std::move(out));
}

Value f_dictsort(const Value& v, CallArgs& a) {
  if (!v.is_dict()) type_error("dictsort requires a mapping");
  bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  std::string by = to_str(a.get(1, "by", Value::string("key")));
  bool reverse = truthy(a.get(2, "reverse", Value::boolean(false)));
  if (by != "key" && by != "value")
    throw RenderError("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items;
  for (const auto& kv : v.dict_data().items)
    items.push_back(Value::list({kv.first, kv.second}, SeqKind::tuple));
  size_t pos = by == "key" ? 0 : 1;
  return sorted_by(std::move(items), reverse,
                   [&](const Value& x) { return cs ? x.items()[pos] : ignore_case(x.items()[pos]); });
}

Value f_escape(const Value& v, CallArgs&) {
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return str_v(out);
}

Value f_first(const Value& v, CallArgs&) {
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(const Value& v, CallArgs&) {
  if (v.is_list() && v.seq_kind() == SeqKind::generator) type_error("'generator' object is not reversible");
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python's float(str): surrounding whitespace, underscores between digits, inf/nan spellings.
std::optional<double> parse_py_float(const std::string& s) {
  std::string t = py_strip(s, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      if (i == 0 || i + 1 >= t.size() || !isdigit((unsigned char)t[i - 1]) ||
          !isdigit((unsigned char)t[i + 1]))
        return std::nullopt;
      continue;
    }
    clean += t[i];
  }
  if (clean.empty()) return std::nullopt;
  std::string low = py_lower(clean);
  std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double x = body == "nan" ? NAN : INFINITY;
    return low[0] == '-' ? -x : x;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> parse_py_int(const std::string& s, int base) {
  std::string t = py_strip(s, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_' && i > 0 && i + 1 < t.size()) continue;
    clean += t[i];
  }
  if (clean.empty()) return std::nullopt;
  size_t start = (clean[0] == '+' || clean[0] == '-') ? 1 : 0;
  if (start >= clean.size()) return std::nullopt;
  // A 0x/0o/0b prefix is allowed when it matches the base; base 0 takes the base from it.
  if (clean.size() > start + 2 && clean[start] == '0') {
    char p = char(clean[start + 1] | 0x20);
    int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (pb && (base == 0 || base == pb)) {
      base = pb;
      clean.erase(start, 2);
    }
  }
  if (base == 0) base = 10;
  for (size_t i = start; i < clean.size(); ++i) {
    char c = char(clean[i] | 0x20);
    int d = isdigit((unsigned char)clean[i]) ? clean[i] - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
  }
  errno = 0;
  long long v = std::strtoll(clean.c_str(), nullptr, base);
  if (errno == ERANGE) return std::nullopt;
  return v;
}

Value f_float(const Value& v, CallArgs& a) {
  Value dflt = a.get(0, "default", Value::floating(0.0));
  if (v.is_undefined()) undefined_error(v);  // float(Undefined) raises in jinja2
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string())
    if (auto d = parse_py_float(v.str())) return Value::floating(*d);
  return dflt;
}

Value f_int(const Value& v, CallArgs& a) {
  Value dflt = a.get(0, "default", Value::integer(0));
  int base = int(a.get(1, "base", Value::integer(10)).as_int());
  if (v.is_undefined()) undefined_error(v);  // int(Undefined) raises in jinja2
  if (v.is_int()) return Value::integer(v.as_int());
  if (v.kind() == Kind::floating) {
    if (std::isnan(v.as_double())) return dflt;
    if (std::fabs(v.as_double()) >= 9.2e18)
      throw RenderError("OverflowError", "integer beyond 64 bits (Python would give a big integer)");
    return Value::integer(int64_t(std::trunc(v.as_double())));
  }
  if (v.is_string()) {
    if (auto i = parse_py_int(v.str(), base)) return Value::integer(*i);
    if (auto d = parse_py_float(v.str()))
      if (!std::isnan(*d) && !std::isinf(*d)) return Value::integer(int64_t(std::trunc(*d)));
  }
  return dflt;
}

Value f_format(const Value& v, CallArgs& a) {
  if (!a.kwargs.empty()) {
    auto d = std::make_shared<DictData>();
    for (auto& kv : a.kwargs) d->set(Value::string(kv.first), kv.second);
    return str_v(percent_format(to_str(v), Value::dict(d)));
  }
  return str_v(percent_format(to_str(v), Value::list(a.args, SeqKind::tuple)));
}

Value f_indent(const Value& v, CallArgs& a) {
  Value w = a.get(0, "width", Value::integer(4));
  std::string ind = w.is_string() ? w.str() : std::string(size_t(std::max<int64_t>(0, w.as_int())), ' ');
  bool first = truthy(a.get(1, "first", Value::boolean(false)));
  bool blank = truthy(a.get(2, "blank", Value::boolean(false)));
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_string())
    type_error("indent expects a string, not " + type_name(v));  // jinja2 fails on `s += "\n"`
  std::string s = v.str() + "\n";  // jinja2 appends a newline so splitlines keeps a trailing one
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        rv += lines[i].empty() ? lines[i] : ind + lines[i];
        check_text_size(rv.size());
      }
    }
  }
  if (first) rv = ind + rv;
  return str_v(rv);
}

Value f_items(const Value& v, CallArgs&) {
  if (v.is_undefined()) return gen({});
  if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& kv : v.dict_data().items)
    out.push_back(Value::list({kv.first, kv.second}, SeqKind::tuple));
  return gen(std::move(out));
}

Value f_join(const Value& v, CallArgs& a) {
  std::string sep = to_str(a.get(0, "d", Value::string("")));
  Value attribute = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_none() ? x : attr_path(x, attribute));
    check_text_size(out.size());
  }
  return str_v(out);
}

Value f_length(const Value& v, CallArgs&) {
  return Value::integer(length(v));
}
Value f_list(const Value& v, CallArgs&) {
  return Value::list(iterate(v));
}
Value f_lower(const Value& v, CallArgs&) {
  return str_v(py_lower(to_str(v)));
}
Value f_upper(const Value& v, CallArgs&) {
  return str_v(py_upper(to_str(v)));
}

Value f_map(const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return gen({});  // jinja2 checks `if value:` before looking at the arguments
  if (a.args.empty()) {
    Value attribute, dflt = Value::none();
    bool has_default = false;
    for (auto& kv : a.kwargs) {
      if (kv.first == "attribute") {
        attribute = kv.second;
      } else if (kv.first == "default") {
        dflt = kv.second;
        has_default = true;
      } else {
        throw RenderError("FilterArgumentError", "Unexpected keyword argument '" + kv.first + "'");
      }
    }
    if (attribute.is_undefined()) throw RenderError("FilterArgumentError", "map requires a filter argument");
    for (const Value& x : iterate(v)) {
      Value r = attr_path(x, attribute);
      out.push_back(r.is_undefined() && has_default ? dflt : r);
    }
    return gen(std::move(out));
  }
  std::string name = to_str(a.args[0]);
  if (!has_filter(name)) throw RenderError("TemplateRuntimeError", "No filter named '" + name + "'.");
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& x : iterate(v)) {
    CallArgs copy = rest;
    out.push_back(apply_filter(name, x, copy));
  }
  return gen(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, bool want_max) {
  bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  Value attribute = a.get(1, "attribute", Value::none());
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    Value k = attribute.is_none() ? x : attr_path(x, attribute);
    return cs ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? less_than(best_key, k) : less_than(k, best_key)) best = i, best_key = k;
  }
  return items[best];
}
Value f_max(const Value& v, CallArgs& a) {
  return min_max(v, a, true);
}
Value f_min(const Value& v, CallArgs& a) {
  return min_max(v, a, false);
}

Value select_reject(const Value& v, CallArgs& a, bool by_attr, bool select) {
  if (!truthy(v)) return gen({});  // jinja2 checks `if value:` first
  size_t off = by_attr ? 1 : 0;
  Value attribute = by_attr ? a.get(0, "attr") : Value();
  bool has_test_name = a.args.size() > off;
  std::string test = has_test_name ? to_str(a.args[off]) : "";
  if (has_test_name && !has_test(test))
    throw RenderError("TemplateRuntimeError", "No test named '" + test + "'.");
  CallArgs targs;
  if (has_test_name) targs.args.assign(a.args.begin() + long(off) + 1, a.args.end());
  targs.kwargs = a.kwargs;
  std::vector<Value> out;
  for (const Value& x : iterate(v)) {
    Value subject = by_attr ? attr_path(x, attribute) : x;
    bool ok;
    if (has_test_name) {
      CallArgs copy = targs;
      ok = apply_test(test, subject, copy);
    } else {
      ok = truthy(subject);
    }
    if (ok == select) out.push_back(x);
  }
  return gen(std::move(out));
}
Value f_select(const Value& v, CallArgs& a) {
  return select_reject(v, a, false, true);
}
Value f_reject(const Value& v, CallArgs& a) {
  return select_reject(v, a, false, false);
}
Value f_selectattr(const Value& v, CallArgs& a) {
  return select_reject(v, a, true, true);
}
Value f_rejectattr(const Value& v, CallArgs& a) {
  return select_reject(v, a, true, false);
}

Value f_replace(const Value& v, CallArgs& a) {
  Value count = a.get(2, "count", Value::none());
  return str_v(py_replace(to_str(v), to_str(a.get(0, "old")), to_str(a.get(1, "new")),
                          count.is_none() ? -1 : count.as_int()));
}

Value f_reverse(const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string u = to_u32(v.str());
    std::reverse(u.begin(), u.end());
    return str_v(to_utf8(u));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return gen(std::move(items));
}

// Python's round(x, n): correctly rounded, ties to even on the exact binary value.
double py_round(double x, int64_t n) {
  if (!std::isfinite(x)) return x;
  if (n >= 0) {
    if (n > 300) return x;
    char buf[1024];  // up to 309 integer digits + 300 decimals
    std::snprintf(buf, sizeof(buf), "%.*f", int(n), x);
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, double(-n));
  int saved = std::fegetround();
  std::fesetround(FE_TONEAREST);
  double r = std::nearbyint(x / p) * p;
  std::fesetround(saved);
  return r;
}

Value f_round(const Value& v, CallArgs& a) {
  int64_t precision = a.get(0, "precision", Value::integer(0)).as_int();
  std::string method = to_str(a.get(1, "method", Value::string("common")));
  if (method != "common" && method != "ceil" && method != "floor")
    throw RenderError("FilterArgumentError", "method must be common, ceil or floor");
  if (!v.is_number()) type_error("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int()) {
      if (precision >= 0) return Value::integer(v.as_int());
      double r = py_round(double(v.as_int()), precision);
      return Value::integer(int64_t(r));
    }
    return Value::floating(py_round(v.as_double(), precision));
  }
  double p = std::pow(10.0, double(precision));
  double x = v.as_double() * p;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_safe(const Value& v, CallArgs&) {
  return str_v(to_str(v));
}
Value f_string(const Value& v, CallArgs&) {
  return str_v(to_str(v));
}

Value f_sort(const Value& v, CallArgs& a) {
  bool reverse = truthy(a.get(0, "reverse", Value::boolean(false)));
  bool cs = truthy(a.get(1, "case_sensitive", Value::boolean(false)));
  Value attribute = a.get(2, "attribute", Value::none());
  return sorted_by(
      iterate(v), reverse,
      [&](const Value& x) {
        Value k = attribute.is_none() ? x : attr_path(x, attribute);
        return cs ? k : ignore_case(k);
      },
      /*key_in_list=*/true);
}

Value add_values(const Value& x, const Value& y) {
  if (x.is_number() && y.is_number()) {
    if (x.kind() == Kind::floating || y.kind() == Kind::floating)
      return Value::floating(x.as_double() + y.as_double());
    return Value::integer(x.as_int() + y.as_int());
  }
  type_error("unsupported operand type(s) for +: '" + type_name(x) + "' and '" + type_name(y) + "'");
}

Value f_sum(const Value& v, CallArgs& a) {
  Value attribute = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value::integer(0));
  for (const Value& x : iterate(v))
    total = add_values(total, attribute.is_none() ? x : attr_path(x, attribute));
  return total;
}

// jinja2's title filter: upper-case the first character of each word, where words start after
// runs of whitespace, '-', '(', '{', '[' or '<'; lower-case the rest.
Value f_title(const Value& v, CallArgs&) {
  std::u32string u = to_u32(to_str(v));
  auto is_sep = [](char32_t c) {
    return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  bool start = true;
  for (char32_t c : u) {
    if (is_sep(c)) {
      utf8_append(out, c);
      start = true;
    } else {
      utf8_append(out, start ? cp_upper(c) : cp_lower(c));
      start = false;
    }
  }
  return str_v(out);
}

Value f_tojson(const Value& v, CallArgs& a) {
  JsonDumpOptions o;
  bool ensure_ascii = truthy(a.get(0, "ensure_ascii", Value::boolean(false)));
  Value indent = a.get(1, "indent", Value::none());
  Value seps = a.get(2, "separators", Value::none());
  o.sort_keys = truthy(a.get(3, "sort_keys", Value::boolean(false)));
  if (!indent.is_none()) {
    o.indent =
        indent.is_string() ? indent.str() : std::string(size_t(std::max<int64_t>(0, indent.as_int())), ' ');
    o.item_sep = ",";
  }
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.items().size() != 2)
      throw RenderError("ValueError", "separators must be a pair");
    o.item_sep = to_str(seps.items()[0]);
    o.key_sep = to_str(seps.items()[1]);
  }
  std::string s = json_dumps(v, o);
  if (!ensure_ascii) return str_v(s);
  std::string out;
  for (char32_t c : to_u32(s)) {
    if (c < 0x80) {
      out += char(c);
      continue;
    }
    char b[16];
    if (c >= 0x10000) {
      uint32_t x = uint32_t(c) - 0x10000;
      std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xD800 + (x >> 10), 0xDC00 + (x & 0x3FF));
    } else {
      std::snprintf(b, sizeof(b), "\\u%04x", unsigned(c));
    }
    out += b;
  }
  return str_v(out);
}

Value f_trim(const Value& v, CallArgs& a) {
  Value chars = a.get(0, "chars", Value::none());
  std::optional<std::string> cs;
  if (!chars.is_none()) cs = to_str(chars);
  return str_v(py_strip(to_str(v), cs, true, true));
}

Value f_unique(const Value& v, CallArgs& a) {
  bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  Value attribute = a.get(1, "attribute", Value::none());
  std::vector<Value> seen, out;
  for (const Value& x : iterate(v)) {
    Value k = attribute.is_none() ? x : attr_path(x, attribute);
    if (!cs) k = ignore_case(k);
    if ((k.is_list() && k.seq_kind() == SeqKind::list) || k.is_dict())
      type_error("unhashable type: '" + type_name(k) + "'");
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(k);
    out.push_back(x);
  }
  return gen(std::move(out));
}

Value f_wordcount(const Value& v, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : to_u32(to_str(v))) {
    bool w = py_isalnum(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_truncate(const Value& v, CallArgs& a) {
  std::u32string s = to_u32(to_str(v));
  int64_t length = a.get(0, "length", Value::integer(255)).as_int();
  bool killwords = truthy(a.get(1, "killwords", Value::boolean(false)));
  std::u32string end = to_u32(to_str(a.get(2, "end", Value::string("..."))));
  int64_t leeway = a.get(3, "leeway", Value::integer(5)).as_int();
  if (int64_t(s.size()) <= length + leeway) return str_v(to_utf8(s));
  if (killwords)
    return str_v(to_utf8(s.substr(0, size_t(std::max<int64_t>(0, length - int64_t(end.size())))) + end));
  std::u32string r = s.substr(0, size_t(std::max<int64_t>(0, length - int64_t(end.size()))));
  size_t sp = r.rfind(U' ');
  if (sp != std::u32string::npos) r = r.substr(0, sp);
  return str_v(to_utf8(r + end));
}

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> m = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"truncate", f_truncate},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
      {"forceescape", f_escape},
  };
  return m;
}

}  // namespace

bool has_filter(std::string_view name) {
  return filters().count(name) > 0;
}

Value apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw RenderError("TemplateRuntimeError", "No filter named '" + name + "'.");
  // String filters scan their operand (and string arguments) once or a few times.
  if (v.is_string()) charge_scan(v.str().size());
  for (const Value& x : args.args)
    if (x.is_string()) charge_scan(x.str().size());
  return it->second(v, args);
}

}  // namespace astrai::jinja
