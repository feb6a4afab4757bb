// jinja2's built-in tests (`x is defined`, `n is divisibleby 3`, ...), as jinja2 3.1 defines them:
// `number` includes booleans, `integer` does not; `sequence` and `iterable` hold for undefined.
#include <cmath>
#include <map>

#include "src/tokenizer/jinja_budget.h"
#include "src/tokenizer/jinja_builtins.h"
#include "src/tokenizer/jinja_strings.h"

namespace astrai::jinja {
namespace {

using TestFn = bool (*)(const Value&, CallArgs&);

bool t_defined(const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_none(const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_boolean(const Value& v, CallArgs&) {
  return v.kind() == Kind::boolean;
}
bool t_true(const Value& v, CallArgs&) {
  return v.kind() == Kind::boolean && v.as_bool();
}
bool t_false(const Value& v, CallArgs&) {
  return v.kind() == Kind::boolean && !v.as_bool();
}
bool t_integer(const Value& v, CallArgs&) {
  return v.kind() == Kind::integer;
}
bool t_float(const Value& v, CallArgs&) {
  return v.kind() == Kind::floating;
}
bool t_number(const Value& v, CallArgs&) {
  return v.is_number();
}
bool t_string(const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_mapping(const Value& v, CallArgs&) {
  return v.is_dict();
}
bool t_callable(const Value& v, CallArgs&) {
  return v.is_callable();
}
bool t_iterable(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_sequence(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_dict() ||
         (v.is_list() && v.seq_kind() != SeqKind::generator);
}
// value % 2 as Python computes it (the result has the divisor's sign; floats stay floats).
double py_mod2(const Value& v) {
  if (!v.is_number()) type_error("unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
  if (v.kind() == Kind::floating) {
    double r = std::fmod(v.as_double(), 2.0);
    return r < 0 ? r + 2.0 : r;
  }
  int64_t r = v.as_int() % 2;
  return double(r < 0 ? r + 2 : r);
}
bool t_odd(const Value& v, CallArgs&) {
  return py_mod2(v) == 1.0;
}
bool t_even(const Value& v, CallArgs&) {
  return py_mod2(v) == 0.0;
}
bool t_divisibleby(const Value& v, CallArgs& a) {
  Value n = a.get(0, "num");
  if (!n.is_number() || !v.is_number()) type_error("unsupported operand type(s) for %");
  if (n.kind() == Kind::floating || v.kind() == Kind::floating) {
    if (n.as_double() == 0) throw RenderError("ZeroDivisionError", "float modulo");
    return std::fmod(v.as_double(), n.as_double()) == 0.0;
  }
  if (n.as_int() == 0) throw RenderError("ZeroDivisionError", "integer division or modulo by zero");
  return v.as_int() % n.as_int() == 0;
}
bool t_eq(const Value& v, CallArgs& a) {
  return equals(v, a.get(0, "other"));
}
bool t_ne(const Value& v, CallArgs& a) {
  return !equals(v, a.get(0, "other"));
}
bool t_lt(const Value& v, CallArgs& a) {
  return less_than(v, a.get(0, "other"));
}
bool t_le(const Value& v, CallArgs& a) {
  return !less_than(a.get(0, "other"), v);
}
bool t_gt(const Value& v, CallArgs& a) {
  return less_than(a.get(0, "other"), v);
}
bool t_ge(const Value& v, CallArgs& a) {
  return !less_than(v, a.get(0, "other"));
}
bool t_in(const Value& v, CallArgs& a) {
  return contains(a.get(0, "seq"), v);
}
bool t_lower(const Value& v, CallArgs&) {
  return py_islower(to_str(v));
}
bool t_upper(const Value& v, CallArgs&) {
  return py_isupper(to_str(v));
}
bool t_escaped(const Value&, CallArgs&) {
  return false;
}
bool t_sameas(const Value& v, CallArgs& a) {
  Value o = a.get(0, "other");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::none:
    case Kind::undefined: return true;
    case Kind::boolean: return v.as_bool() == o.as_bool();
    case Kind::integer:
      return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // CPython's cache
    default: return v.identity() != nullptr && v.identity() == o.identity();
  }
}
bool t_filter(const Value& v, CallArgs&) {
  return v.is_string() && has_filter(v.str());
}
bool t_test(const Value& v, CallArgs&) {
  return v.is_string() && has_test(v.str());
}

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> m = {
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"escaped", t_escaped},
      {"even", t_even},
      {"false", t_false},
      {"filter", t_filter},
      {"float", t_float},
      {"ge", t_ge},
      {">=", t_ge},
      {"gt", t_gt},
      {">", t_gt},
      {"greaterthan", t_gt},
      {"in", t_in},
      {"integer", t_integer},
      {"iterable", t_iterable},
      {"le", t_le},
      {"<=", t_le},
      {"lower", t_lower},
      {"lt", t_lt},
      {"<", t_lt},
      {"lessthan", t_lt},
      {"mapping", t_mapping},
      {"ne", t_ne},
      {"!=", t_ne},
      {"none", t_none},
      {"number", t_number},
      {"odd", t_odd},
      {"sameas", t_sameas},
      {"sequence", t_sequence},
      {"string", t_string},
      {"test", t_test},
      {"true", t_true},
      {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return m;
}

}  // namespace

bool has_test(std::string_view name) {
  return tests().count(name) > 0;
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw RenderError("TemplateRuntimeError", "No test named '" + name + "'.");
  if (v.is_string()) charge_scan(v.str().size());
  for (const Value& x : args.args)
    if (x.is_string()) charge_scan(x.str().size());
  return it->second(v, args);
}

}  // namespace astrai::jinja
