#include "src/structured/json_schema.h"

#include <simdjson.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/structured/regex.h"

namespace astrai::structured {

namespace {

namespace dom = simdjson::dom;

constexpr int64_t kMaxInt = 999'999'999'999'999;  // 15 digits
constexpr int kFractionDigits = 6;

// The JSON text of a string (the key of a property).
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = uint8_t(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Characters a JSON string holds as themselves.
std::vector<CodeRange> plain_ranges() {
  return normalize_ranges({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}});
}

class Compiler {
 public:
  explicit Compiler(Grammar& g) : b_(g) {}

  std::string error;

  // One character of a JSON string whose decoded value is in `ranges`.
  Frag json_char(const std::vector<CodeRange>& ranges) {
    std::vector<Frag> opts;
    const auto plain = intersect_ranges(ranges, plain_ranges());
    if (!plain.empty()) opts.push_back(b_.code_points(plain));
    auto has = [&](uint32_t c) {
      for (CodeRange r : ranges)
        if (r.lo <= c && c <= r.hi) return true;
      return false;
    };
    if (has('"')) opts.push_back(b_.literal("\\\""));
    if (has('\\')) opts.push_back(b_.literal("\\\\"));
    // Control characters only in their short escapes (no \u00XX: a model that wanders would fill
    // strings with them); a pattern that needs another one cannot be met.
    for (auto [c, esc] : {std::pair<uint32_t, const char*>{'\n', "\\n"},
                          {'\t', "\\t"},
                          {'\r', "\\r"},
                          {'\b', "\\b"},
                          {'\f', "\\f"}})
      if (has(c)) opts.push_back(b_.literal(esc));
    if (opts.empty()) {
      // No character fits: a state with no way on (the matcher treats it as dead).
      return {b_.state(), b_.state()};
    }
    return opts.size() == 1 ? opts[0] : b_.alt(opts);
  }

  // `"` chars{min,max} `"` with every position tagged (Grammar::string_positions): position i has
  // its own copy of the character and of the closing quote, so a DFA state inside the string
  // names exactly one position. max < 0: any number of characters past min.
  Frag plain_string(int64_t min, int64_t max, const std::vector<CodeRange>& chars, bool bmp_only) {
    Frag open = b_.literal("\"");
    const int32_t end = b_.state();
    int32_t hub = open.out;
    for (int64_t i = 0;; ++i) {
      StringPosition pos;
      pos.room = max < 0 ? -1 : int32_t(max - i);
      pos.closable = i >= min;
      pos.bmp_only = bmp_only;
      const int32_t id = b_.add_string_position(pos);
      if (i >= min) {
        Frag q = b_.literal("\"");
        b_.eps(hub, q.in);
        b_.eps(q.out, end);
      }
      if (max >= 0 && i == max) {
        b_.tag_scanning_from(hub, id);
        break;
      }
      Frag c = json_char(chars);
      b_.eps(hub, c.in);
      b_.tag_scanning_from(hub, id);
      if (max < 0 && i == min) {  // the loop: every later position is this one
        b_.eps(c.out, hub);
        break;
      }
      hub = c.out;
    }
    return {open.in, end};
  }

  Frag sep(char c) { return b_.seq(b_.literal(std::string_view(&c, 1)), b_.opt(b_.literal(" "))); }

  // ---- generic JSON ---------------------------------------------------------------------------
  int32_t any_string_rule() {
    if (any_string_ >= 0) return any_string_;
    const int32_t saved = b_.current_rule();
    any_string_ = b_.begin_rule("string");
    b_.end_rule(plain_string(0, -1, normalize_ranges({{0, 0x10FFFF}}), false));
    b_.set_current_rule(saved);
    return any_string_;
  }

  Frag unbounded_number() { return number_frag(-kMaxInt, kMaxInt, false); }

  int32_t any_value_rule() {
    if (any_value_ >= 0) return any_value_;
    const int32_t saved = b_.current_rule();
    any_value_ = b_.begin_rule("value");
    const int32_t obj = any_object_rule(-1);
    b_.set_current_rule(any_value_);
    const int32_t arr = b_.begin_rule("array");
    {
      Frag item = b_.call(any_value_);
      Frag more = b_.star(b_.seq(sep(','), b_.call(any_value_)));
      Frag body = b_.opt(b_.seq(item, more));
      b_.end_rule(b_.seq(b_.seq(b_.literal("["), body), b_.literal("]")));
    }
    b_.set_current_rule(any_value_);
    Frag v = b_.alt({b_.call(obj), b_.call(arr), b_.call(any_string_rule()), unbounded_number(),
                     b_.literal("true"), b_.literal("false"), b_.literal("null")});
    b_.end_rule(v);
    b_.set_current_rule(saved);
    return any_value_;
  }

  // An object with any keys; values of `value_rule` (-1: any JSON).
  int32_t any_object_rule(int32_t value_rule) {
    auto it = any_objects_.find(value_rule);
    if (it != any_objects_.end()) return it->second;
    const int32_t saved = b_.current_rule();
    const int32_t r = b_.begin_rule("object");
    any_objects_[value_rule] = r;
    const int32_t v = value_rule >= 0 ? value_rule : any_value_rule();
    b_.set_current_rule(r);
    auto member = [&] { return b_.seq(b_.seq(b_.call(any_string_rule()), sep(':')), b_.call(v)); };
    Frag first = member();
    Frag more = b_.star(b_.seq(sep(','), member()));
    b_.end_rule(b_.seq(b_.seq(b_.literal("{"), b_.opt(b_.seq(first, more))), b_.literal("}")));
    b_.set_current_rule(saved);
    return r;
  }

  // ---- numbers --------------------------------------------------------------------------------
  // Digit strings of equal length with lo <= x <= hi (digit by digit; leading zeros allowed).
  Frag digits_between(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return b_.empty();
    const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
    if (lo[0] == hi[0]) return b_.seq(b_.literal(lo.substr(0, 1)), digits_between(lo_rest, hi_rest));
    const std::string nines(lo_rest.size(), '9'), zeros(lo_rest.size(), '0');
    if (lo_rest == zeros && hi_rest == nines)
      return b_.seq(b_.byte_range(uint8_t(lo[0]), uint8_t(hi[0])), digits_between(zeros, nines));
    std::vector<Frag> opts;
    opts.push_back(b_.seq(b_.literal(lo.substr(0, 1)), digits_between(lo_rest, nines)));
    if (hi[0] - lo[0] > 1)
      opts.push_back(
          b_.seq(b_.byte_range(uint8_t(lo[0] + 1), uint8_t(hi[0] - 1)), digits_between(zeros, nines)));
    opts.push_back(b_.seq(b_.literal(hi.substr(0, 1)), digits_between(zeros, hi_rest)));
    return b_.alt(opts);
  }

  // Decimal integers in [lo, hi], 0 <= lo <= hi, without leading zeros.
  Frag nonneg_between(int64_t lo, int64_t hi) {
    std::vector<Frag> opts;
    int64_t p = 1;  // 10^(d-1)
    for (int d = 1; d <= 16; ++d, p *= 10) {
      const int64_t a = std::max(lo, d == 1 ? 0 : p), z = std::min(hi, p * 10 - 1);
      if (a <= z) opts.push_back(digits_between(std::to_string(a), std::to_string(z)));
      if (p * 10 > hi) break;
    }
    return opts.size() == 1 ? opts[0] : b_.alt(opts);
  }

  Frag integer_frag(int64_t lo, int64_t hi) {
    std::vector<Frag> opts;
    if (hi >= 0) opts.push_back(nonneg_between(std::max<int64_t>(lo, 0), hi));
    if (lo < 0) opts.push_back(b_.seq(b_.literal("-"), nonneg_between(hi < 0 ? -hi : 1, -lo)));
    return opts.size() == 1 ? opts[0] : b_.alt(opts);
  }

  Frag fraction() {
    return b_.seq(b_.literal("."), b_.repeat([&] { return b_.byte_range('0', '9'); }, 1, kFractionDigits));
  }

  // Integers in [lo, hi], or (with_fraction) numbers in [lo, hi] written as int[.frac].
  Frag number_frag(int64_t lo, int64_t hi, bool integer_only) {
    if (integer_only) return integer_frag(lo, hi);
    std::vector<Frag> opts;
    if (hi >= 0) {
      const int64_t a = std::max<int64_t>(lo, 0);
      opts.push_back(nonneg_between(a, hi));
      if (hi - 1 >= a) opts.push_back(b_.seq(nonneg_between(a, hi - 1), fraction()));
    }
    if (lo < 0) {
      opts.push_back(b_.seq(b_.literal("-"), nonneg_between(hi < 0 ? -hi : 1, -lo)));
      const int64_t a = hi < 0 ? -hi : 0;
      if (-lo - 1 >= a)
        opts.push_back(b_.seq(b_.literal("-"), b_.seq(nonneg_between(a, -lo - 1), fraction())));
    }
    return b_.alt(opts);
  }

  // ---- schemas --------------------------------------------------------------------------------
  bool fail(const std::string& path, const std::string& what) {
    if (error.empty()) error = (path.empty() ? std::string("schema") : path) + ": " + what;
    return false;
  }

  int32_t compile_root(dom::element root) {
    root_ = root;
    return rule_for(root, "schema");
  }

  // A rule for `s` (its body built in a rule of its own). -1 on error.
  int32_t rule_for(dom::element s, const std::string& path) {
    const int32_t saved = b_.current_rule();
    const int32_t r = b_.begin_rule(path);
    std::optional<Frag> f = body(s, path);
    if (!f) {
      b_.set_current_rule(saved);
      return -1;
    }
    b_.end_rule(*f);
    b_.set_current_rule(saved);
    return r;
  }

  std::optional<Frag> call_rule_for(dom::element s, const std::string& path) {
    const int32_t r = rule_for(s, path);
    if (r < 0) return std::nullopt;
    return b_.call(r);
  }

  std::optional<Frag> ref(std::string_view target, const std::string& path) {
    auto it = refs_.find(std::string(target));
    if (it != refs_.end()) return b_.call(it->second);
    if (target.empty() || target[0] != '#') {
      fail(path + ".$ref",
           "only local references ('#', '#/$defs/...') are supported, got '" + std::string(target) + "'");
      return std::nullopt;
    }
    dom::element el;
    if (target == "#") {
      el = root_;
    } else if (root_.at_pointer(target.substr(1)).get(el)) {
      fail(path + ".$ref", "'" + std::string(target) + "' does not point into the schema");
      return std::nullopt;
    }
    // Reserve the rule before building it, so that a recursive reference calls it.
    const int32_t saved = b_.current_rule();
    const int32_t r = b_.begin_rule(std::string(target));
    refs_.emplace(std::string(target), r);
    std::optional<Frag> f = body(el, std::string(target));
    if (!f) return std::nullopt;
    b_.end_rule(*f);
    b_.set_current_rule(saved);
    return b_.call(r);
  }

  std::optional<Frag> body(dom::element s, const std::string& path) {
    bool bv = false;
    if (!s.get_bool().get(bv)) {
      if (!bv) {
        fail(path, "the schema 'false' allows no value");
        return std::nullopt;
      }
      return b_.call(any_value_rule());
    }
    dom::object o;
    if (s.get_object().get(o)) {
      fail(path, "a schema must be an object or a boolean");
      return std::nullopt;
    }
    static const std::set<std::string_view> kKnown = {"type",
                                                      "properties",
                                                      "required",
                                                      "additionalProperties",
                                                      "items",
                                                      "minItems",
                                                      "maxItems",
                                                      "enum",
                                                      "const",
                                                      "minimum",
                                                      "maximum",
                                                      "exclusiveMinimum",
                                                      "exclusiveMaximum",
                                                      "minLength",
                                                      "maxLength",
                                                      "pattern",
                                                      "format",
                                                      "anyOf",
                                                      "allOf",
                                                      "$ref",
                                                      "$defs",
                                                      "definitions",
                                                      "title",
                                                      "description",
                                                      "default",
                                                      "examples",
                                                      "$schema",
                                                      "$id",
                                                      "$comment",
                                                      "deprecated",
                                                      "readOnly",
                                                      "writeOnly"};
    for (auto [k, v] : o) {
      (void)v;
      if (!kKnown.count(k)) {
        fail(path, "the keyword '" + std::string(k) + "' is not supported");
        return std::nullopt;
      }
    }
    dom::element el;
    std::string_view sv;
    if (!o["$ref"].get(el)) {
      if (el.get_string().get(sv)) {
        fail(path + ".$ref", "must be a string");
        return std::nullopt;
      }
      return ref(sv, path);
    }
    if (!o["anyOf"].get(el) || !o["allOf"].get(el)) {
      const bool any = !o["anyOf"].get(el);
      const std::string kw = any ? "anyOf" : "allOf";
      dom::array arr;
      if (o[kw].get_array().get(arr) || arr.size() == 0) {
        fail(path + "." + kw, "must be a non-empty array of schemas");
        return std::nullopt;
      }
      if (!any && arr.size() != 1) {
        fail(path + ".allOf", "allOf with more than one schema is not supported");
        return std::nullopt;
      }
      for (std::string_view other : {"type", "properties", "items", "enum", "const", "anyOf", "allOf"})
        if (other != kw && !o[other].get(el)) {
          fail(path, kw + " together with '" + std::string(other) + "' is not supported");
          return std::nullopt;
        }
      std::vector<Frag> opts;
      size_t i = 0;
      for (dom::element sub : arr) {
        auto f = call_rule_for(sub, path + "." + kw + "[" + std::to_string(i++) + "]");
        if (!f) return std::nullopt;
        opts.push_back(*f);
      }
      return opts.size() == 1 ? opts[0] : b_.alt(opts);
    }
    if (!o["const"].get(el)) return literal_of(el);
    if (!o["enum"].get(el)) {
      dom::array arr;
      if (el.get_array().get(arr) || arr.size() == 0) {
        fail(path + ".enum", "must be a non-empty array");
        return std::nullopt;
      }
      std::vector<Frag> opts;
      for (dom::element v : arr) opts.push_back(literal_of(v));
      return opts.size() == 1 ? opts[0] : b_.alt(opts);
    }
    // The types: given, or inferred from the keywords present.
    std::vector<std::string> types;
    if (!o["type"].get(el)) {
      if (!el.get_string().get(sv)) {
        types.emplace_back(sv);
      } else {
        dom::array arr;
        if (el.get_array().get(arr) || arr.size() == 0) {
          fail(path + ".type", "must be a type name or a non-empty array of them");
          return std::nullopt;
        }
        for (dom::element t : arr) {
          if (t.get_string().get(sv)) {
            fail(path + ".type", "must be a type name or a non-empty array of them");
            return std::nullopt;
          }
          types.emplace_back(sv);
        }
      }
    } else if (!o["properties"].get(el) || !o["additionalProperties"].get(el) || !o["required"].get(el)) {
      types = {"object"};
    } else if (!o["items"].get(el) || !o["minItems"].get(el) || !o["maxItems"].get(el)) {
      types = {"array"};
    } else if (!o["minLength"].get(el) || !o["maxLength"].get(el) || !o["pattern"].get(el) ||
               !o["format"].get(el)) {
      types = {"string"};
    } else if (!o["minimum"].get(el) || !o["maximum"].get(el) || !o["exclusiveMinimum"].get(el) ||
               !o["exclusiveMaximum"].get(el)) {
      types = {"number"};
    } else {
      return b_.call(any_value_rule());
    }
    std::vector<Frag> opts;
    for (const std::string& t : types) {
      std::optional<Frag> f;
      if (t == "object")
        f = object(o, path);
      else if (t == "array")
        f = array(o, path);
      else if (t == "string")
        f = string(o, path);
      else if (t == "integer" || t == "number")
        f = number(o, path, t == "integer");
      else if (t == "boolean")
        f = b_.alt({b_.literal("true"), b_.literal("false")});
      else if (t == "null")
        f = b_.literal("null");
      else
        fail(path + ".type", "unknown type '" + t + "'");
      if (!f) return std::nullopt;
      opts.push_back(*f);
    }
    return opts.size() == 1 ? opts[0] : b_.alt(opts);
  }

  Frag literal_of(dom::element v) { return b_.literal(simdjson::minify(v)); }

  bool read_count(dom::object o, const char* key, const std::string& path, int64_t& out) {
    dom::element el;
    if (o[key].get(el)) return true;
    int64_t i = 0;
    double d = 0;
    if (!el.get_int64().get(i)) {
    } else if (!el.get_uint64().error()) {
      i = kMaxRepeat + 1;
    } else if (!el.get_double().get(d) && d == std::floor(d) && d >= 0 && d < 1e15) {
      i = int64_t(d);
    } else {
      return fail(path + "." + key, "must be a non-negative integer");
    }
    if (i < 0) return fail(path + "." + key, "must be a non-negative integer");
    out = i;
    return true;
  }

  std::optional<Frag> array(dom::object o, const std::string& path) {
    int64_t mn = 0, mx = -1;
    if (!read_count(o, "minItems", path, mn) || !read_count(o, "maxItems", path, mx)) return std::nullopt;
    if (mx >= 0 && mx < mn) {
      fail(path, "maxItems is below minItems");
      return std::nullopt;
    }
    if (mn > kMaxRepeat || mx > kMaxRepeat) {
      fail(path, "minItems / maxItems above " + std::to_string(kMaxRepeat) + " are not supported");
      return std::nullopt;
    }
    dom::element items;
    int32_t item_rule = -1;
    if (!o["items"].get(items)) {
      if (items.is_array()) {
        fail(path + ".items", "an array of item schemas (tuple validation) is not supported");
        return std::nullopt;
      }
      item_rule = rule_for(items, path + ".items");
      if (item_rule < 0) return std::nullopt;
    } else {
      item_rule = any_value_rule();
    }
    Frag open = b_.literal("[");
    if (mx == 0) return b_.seq(open, b_.literal("]"));
    Frag first = b_.call(item_rule);
    Frag rest = b_.repeat([&] { return b_.seq(sep(','), b_.call(item_rule)); }, std::max<int64_t>(mn - 1, 0),
                          mx < 0 ? -1 : mx - 1);
    Frag items_frag = b_.seq(first, rest);
    if (mn == 0) items_frag = b_.opt(items_frag);
    return b_.seq(b_.seq(open, items_frag), b_.literal("]"));
  }

  std::optional<Frag> object(dom::object o, const std::string& path) {
    dom::element el;
    dom::object props;
    const bool have_props = !o["properties"].get(el);
    if (have_props && el.get_object().get(props)) {
      fail(path + ".properties", "must be an object");
      return std::nullopt;
    }
    std::set<std::string, std::less<>> required;
    if (!o["required"].get(el)) {
      dom::array arr;
      if (el.get_array().get(arr)) {
        fail(path + ".required", "must be an array of property names");
        return std::nullopt;
      }
      for (dom::element n : arr) {
        std::string_view name;
        if (n.get_string().get(name)) {
          fail(path + ".required", "must be an array of property names");
          return std::nullopt;
        }
        required.emplace(name);
      }
    }
    bool additional_false = false;
    dom::element additional;
    const bool have_additional = !o["additionalProperties"].get(additional);
    if (have_additional) {
      bool b = true;
      if (!additional.get_bool().get(b)) additional_false = !b;
    }
    if (!have_props) {
      if (!required.empty()) {
        fail(path + ".required", "names '" + *required.begin() + "', which is not in properties");
        return std::nullopt;
      }
      if (additional_false) return b_.literal("{}");
      int32_t value_rule = -1;
      if (have_additional && !additional.is_bool()) {
        value_rule = rule_for(additional, path + ".additionalProperties");
        if (value_rule < 0) return std::nullopt;
      }
      return b_.call(any_object_rule(value_rule));
    }
    struct Prop {
      std::string key;
      int32_t rule;
      bool required;
    };
    std::vector<Prop> list;
    for (auto [k, v] : props) {
      const int32_t r = rule_for(v, path + ".properties." + std::string(k));
      if (r < 0) return std::nullopt;
      list.push_back({quote(k), r, required.count(k) > 0});
    }
    for (const std::string& name : required) {
      bool found = false;
      for (auto [k, v] : props) found = found || k == name;
      if (!found) {
        fail(path + ".required", "names '" + name + "', which is not in properties");
        return std::nullopt;
      }
    }
    // a[i]: at property i, nothing written yet; w[i]: at property i, something written.
    const size_t n = list.size();
    std::vector<int32_t> a(n + 1), w(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      a[i] = b_.state();
      w[i] = b_.state();
    }
    for (size_t i = 0; i < n; ++i) {
      auto member = [&] { return b_.seq(b_.seq(b_.literal(list[i].key), sep(':')), b_.call(list[i].rule)); };
      Frag m1 = member();
      b_.eps(a[i], m1.in);
      b_.eps(m1.out, w[i + 1]);
      Frag m2 = b_.seq(sep(','), member());
      b_.eps(w[i], m2.in);
      b_.eps(m2.out, w[i + 1]);
      if (!list[i].required) {
        b_.eps(a[i], a[i + 1]);
        b_.eps(w[i], w[i + 1]);
      }
    }
    Frag open = b_.literal("{");
    b_.eps(open.out, a[0]);
    Frag close = b_.literal("}");
    b_.eps(a[n], close.in);
    b_.eps(w[n], close.in);
    return Frag{open.in, close.out};
  }

  std::optional<Frag> string(dom::object o, const std::string& path) {
    int64_t mn = 0, mx = -1;
    if (!read_count(o, "minLength", path, mn) || !read_count(o, "maxLength", path, mx)) return std::nullopt;
    if (mx >= 0 && mx < mn) {
      fail(path, "maxLength is below minLength");
      return std::nullopt;
    }
    if (mn > kMaxRepeat || mx > kMaxRepeat) {
      fail(path, "minLength / maxLength above " + std::to_string(kMaxRepeat) + " are not supported");
      return std::nullopt;
    }
    dom::element el;
    std::string_view pattern;
    bool have_pattern = false;
    ParsedRegex rx;
    if (!o["pattern"].get(el)) {
      if (el.get_string().get(pattern)) {
        fail(path + ".pattern", "must be a string");
        return std::nullopt;
      }
      std::string err;
      if (!parse_regex(pattern, rx, err)) {
        fail(path + ".pattern", err);
        return std::nullopt;
      }
      have_pattern = true;
    }
    if (!o["format"].get(el)) {
      std::string_view f;
      if (el.get_string().get(f)) {
        fail(path + ".format", "must be a string");
        return std::nullopt;
      }
      if (have_pattern) {
        fail(path, "format together with pattern is not supported");
        return std::nullopt;
      }
      const char* p = format_pattern(f);
      if (!p) {
        fail(path + ".format",
             "the format '" + std::string(f) + "' is not supported (date, time, date-time, uuid, email are)");
        return std::nullopt;
      }
      std::string err;
      parse_regex(p, rx, err);
      rx.anchored_start = rx.anchored_end = true;
      have_pattern = true;
    }
    const auto all = normalize_ranges({{0, 0x10FFFF}});
    Frag content;
    if (have_pattern) {
      if (mn > 0 || mx >= 0) {
        fail(path, "pattern or format together with minLength / maxLength is not supported");
        return std::nullopt;
      }
      // JSON Schema patterns search: unanchored ends take any characters.
      content = build_regex(b_, rx.root, [&](const std::vector<CodeRange>& r) { return json_char(r); });
      if (!rx.anchored_start) content = b_.seq(b_.star(json_char(all)), content);
      if (!rx.anchored_end) content = b_.seq(content, b_.star(json_char(all)));
    } else {
      // Bounded strings hold characters of the Basic Multilingual Plane only: their count is then
      // the same in code points (JSON Schema) and in UTF-16 units (JavaScript's length, which
      // zod's min / max check).
      const bool bounded = mn > 0 || mx >= 0;
      return plain_string(mn, mx, bounded ? normalize_ranges({{0, 0xFFFF}}) : all, bounded);
    }
    return b_.seq(b_.seq(b_.literal("\""), content), b_.literal("\""));
  }

  static const char* format_pattern(std::string_view f) {
    // Subsets of what ajv-formats accepts: days up to 28 are valid in every month.
    if (f == "date") return "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\\d|2[0-8])";
    if (f == "time")
      return "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,3})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
    if (f == "date-time")
      return "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\\d|2[0-8])T([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,3})?"
             "(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
    if (f == "uuid") return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
    if (f == "email") return "[a-z0-9]{1,32}(\\.[a-z0-9]{1,32})?@[a-z0-9]{1,32}\\.[a-z]{2,8}";
    return nullptr;
  }

  bool read_bound(dom::object o, const char* key, const std::string& path, std::optional<double>& out) {
    dom::element el;
    if (o[key].get(el)) return true;
    double d = 0;
    int64_t i = 0;
    uint64_t u = 0;
    if (!el.get_int64().get(i))
      d = double(i);
    else if (!el.get_uint64().get(u))
      d = double(u);
    else if (el.get_double().get(d))
      return fail(path + "." + key, "must be a number");
    if (!std::isfinite(d)) return fail(path + "." + key, "must be a finite number");
    out = d;
    return true;
  }

  std::optional<Frag> number(dom::object o, const std::string& path, bool integer) {
    std::optional<double> mn, mx, xmn, xmx;
    if (!read_bound(o, "minimum", path, mn) || !read_bound(o, "maximum", path, mx) ||
        !read_bound(o, "exclusiveMinimum", path, xmn) || !read_bound(o, "exclusiveMaximum", path, xmx))
      return std::nullopt;
    // Inward to integers, within the 15 digits generated.
    double lo = -double(kMaxInt), hi = double(kMaxInt);
    if (mn) lo = std::max(lo, std::ceil(*mn));
    if (xmn) lo = std::max(lo, std::floor(*xmn) + 1);
    if (mx) hi = std::min(hi, std::floor(*mx));
    if (xmx) hi = std::min(hi, std::ceil(*xmx) - 1);
    if (lo > hi) {
      fail(path, std::string("no ") + (integer ? "integer" : "number with an integer bound") +
                     " of at most 15 digits satisfies the bounds");
      return std::nullopt;
    }
    return number_frag(int64_t(lo), int64_t(hi), integer);
  }

 private:
  GrammarBuilder b_;
  dom::element root_;
  std::unordered_map<std::string, int32_t> refs_;
  std::unordered_map<int32_t, int32_t> any_objects_;
  int32_t any_value_ = -1, any_string_ = -1;
};

}  // namespace

namespace {

// Runs `build` (it fills `out` and returns "" or the error), then Grammar::finish; past either
// budget (grammar.h) the error is kTooLarge after `what`. On any error `out` is emptied.
template <typename Build>
std::string build_grammar(Grammar& out, std::string_view what, Build build) {
  std::string err;
  try {
    err = build();
  } catch (const GrammarTooLarge&) {
    err = std::string(what) + ": " + std::string(kTooLarge);
  }
  if (err.empty() && !out.finish()) err = std::string(what) + ": " + std::string(kTooLarge);
  if (!err.empty()) out = Grammar{};
  return err;
}

}  // namespace

std::string compile_json_schema(std::string_view schema_json, Grammar& out) {
  out = Grammar{};
  dom::parser parser;
  dom::element root;
  if (parser.parse(schema_json.data(), schema_json.size()).get(root)) return "schema: is not valid JSON";
  return build_grammar(out, "schema", [&]() -> std::string {
    Compiler c(out);
    const int32_t r = c.compile_root(root);
    if (r < 0) return c.error;
    out.root = r;
    return "";
  });
}

std::string compile_json_object(Grammar& out) {
  return compile_json_schema(R"({"type":"object"})", out);
}

std::string compile_regex(std::string_view pattern, Grammar& out) {
  out = Grammar{};
  ParsedRegex rx;
  std::string err;
  if (!parse_regex(pattern, rx, err)) return "regex: " + err;
  return build_grammar(out, "regex", [&]() -> std::string {
    GrammarBuilder b(out);
    out.root = b.begin_rule("regex");
    b.end_rule(build_regex(b, rx.root, [&](const std::vector<CodeRange>& r) { return b.code_points(r); }));
    return "";
  });
}

}  // namespace astrai::structured
