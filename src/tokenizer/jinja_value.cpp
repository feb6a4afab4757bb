#include "src/tokenizer/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "src/core/utf8.h"
#include "src/tokenizer/jinja_budget.h"
#include "src/tokenizer/jinja_strings.h"

namespace astrai::jinja {

void type_error(const std::string& msg) {
  throw RenderError("TypeError", msg);
}

void undefined_error(const Value& v) {
  throw RenderError("UndefinedError", v.str().empty() ? "undefined value" : v.str());
}

// ---- construction ------------------------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::boolean;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::integer;
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::floating;
  v.f_ = f;
  return v;
}
namespace {

// Heap payloads built during a render count against its memory budget while they live.
template <typename T>
std::shared_ptr<T> counted(T payload, size_t bytes) {
  Budget* b = current_budget();
  if (!b) return std::make_shared<T>(std::move(payload));
  b->add_memory(bytes);
  return std::shared_ptr<T>(new T(std::move(payload)), [meter = b->meter(), bytes](T* p) {
    meter->live -= bytes;
    delete p;
  });
}

uint32_t checked_depth(uint32_t depth) {
  if (depth > uint32_t(max_value_depth()))
    throw LimitError("value nested too deeply (max_value_depth = " + std::to_string(max_value_depth()) + ")");
  return depth;
}

std::shared_ptr<const ListData> make_list(ListData d) {
  uint32_t deepest = 0;
  for (const Value& x : d.items) deepest = std::max(deepest, x.depth());
  d.depth = checked_depth(deepest + 1);
  if (Budget* b = current_budget()) b->steps(d.items.size());
  const size_t bytes = sizeof(ListData) + d.items.size() * sizeof(Value);
  return counted(std::move(d), bytes);
}

}  // namespace

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::string;
  if (Budget* b = current_budget()) {
    b->string_bytes(s.size());
    const size_t bytes = sizeof(std::string) + s.size();
    v.s_ = counted(std::move(s), bytes);
  } else {
    v.s_ = std::make_shared<const std::string>(std::move(s));
  }
  return v;
}
Value Value::list(std::vector<Value> items, SeqKind seq) {
  Value v;
  v.kind_ = Kind::list;
  ListData d;
  d.items = std::move(items);
  d.seq = seq;
  v.list_ = make_list(std::move(d));
  return v;
}
Value Value::range(int64_t start, int64_t stop, int64_t step, std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::list;
  ListData d;
  d.items = std::move(items);
  d.seq = SeqKind::range;
  d.range_start = start;
  d.range_stop = stop;
  d.range_step = step;
  v.list_ = make_list(std::move(d));
  return v;
}
Value Value::dict(std::shared_ptr<DictData> d) {
  Value v;
  v.kind_ = Kind::dict;
  v.dict_ = std::move(d);
  return v;
}
Value Value::object(std::shared_ptr<ObjectData> o) {
  Value v;
  v.kind_ = Kind::object;
  v.obj_ = std::move(o);
  return v;
}
Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::callable;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<const NativeFn>(std::move(fn));
  return v;
}

const std::string& Value::str() const {
  static const std::string empty;
  return s_ ? *s_ : empty;
}
const std::vector<Value>& Value::items() const {
  static const std::vector<Value> empty;
  return list_ ? list_->items : empty;
}
SeqKind Value::seq_kind() const {
  return list_ ? list_->seq : SeqKind::list;
}
Value Value::call(CallArgs& args) const {
  return (*fn_)(args);
}

uint32_t Value::depth() const {
  switch (kind_) {
    case Kind::list: return list_->depth;
    case Kind::dict: return dict_->depth;
    case Kind::object: return obj_->depth;
    default: return 0;
  }
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::list: return list_.get();
    case Kind::dict: return dict_.get();
    case Kind::object: return obj_.get();
    case Kind::callable: return fn_.get();
    case Kind::string: return s_.get();
    default: return nullptr;
  }
}

// ---- containers --------------------------------------------------------------------------------

const Value* DictData::find(const Value& key) const {
  for (const auto& kv : items)
    if (equals(kv.first, key)) return &kv.second;
  return nullptr;
}
const Value* DictData::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first.is_string() && kv.first.str() == key) return &kv.second;
  return nullptr;
}
void DictData::set(const Value& key, Value v) {
  charge_steps(items.size());  // the scan below
  for (auto& kv : items)
    if (equals(kv.first, key)) {
      depth = std::max(depth, checked_depth(v.depth() + 1));
      kv.second = std::move(v);
      return;
    }
  append(key, std::move(v));
}
void DictData::append(Value key, Value v) {
  depth = std::max(depth, checked_depth(std::max(key.depth(), v.depth()) + 1));
  if (Budget* b = current_budget()) {
    b->add_memory(2 * sizeof(Value));
    if (!meter_) meter_ = b->meter();
    if (meter_ == b->meter()) charged_ += 2 * sizeof(Value);
  }
  items.emplace_back(std::move(key), std::move(v));
}
DictData::DictData(const DictData& other) : items(other.items), depth(other.depth) {
  if (Budget* b = current_budget()) {
    charged_ = items.size() * 2 * sizeof(Value);
    b->add_memory(charged_);
    meter_ = b->meter();
  }
}
DictData::~DictData() {
  if (meter_) meter_->live -= charged_;
}

Value CallArgs::get(size_t i, std::string_view name, Value dflt) const {
  if (i < args.size()) return args[i];
  for (const auto& kv : kwargs)
    if (kv.first == name) return kv.second;
  return dflt;
}
bool CallArgs::has(size_t i, std::string_view name) const {
  if (i < args.size()) return true;
  for (const auto& kv : kwargs)
    if (kv.first == name) return true;
  return false;
}

// ---- Python semantics --------------------------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return v.as_bool();
    case Kind::integer: return v.as_int() != 0;
    case Kind::floating: return v.as_double() != 0.0;
    case Kind::string: return !v.str().empty();
    case Kind::list: return v.seq_kind() == SeqKind::generator || !v.items().empty();
    case Kind::dict: return !v.dict_data().items.empty();
    default: return true;
  }
}

bool equals(const Value& a, const Value& b) {
  charge_steps(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Kind::floating && b.kind() != Kind::floating) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::undefined:
    case Kind::none: return true;
    case Kind::string: return a.str() == b.str();
    case Kind::list: {
      if (a.seq_kind() != b.seq_kind()) return false;
      if (a.seq_kind() == SeqKind::generator) return a.identity() == b.identity();
      WalkDepth guard;
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Kind::dict: {
      const auto &x = a.dict_data(), &y = b.dict_data();
      if (x.items.size() != y.items.size()) return false;
      WalkDepth guard;
      for (const auto& kv : x.items) {
        const Value* o = y.find(kv.first);
        if (!o || !equals(kv.second, *o)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::list:
      switch (v.seq_kind()) {
        case SeqKind::tuple: return "tuple";
        case SeqKind::generator: return "generator";
        case SeqKind::range: return "range";
        default: return "list";
      }
    case Kind::dict: return "dict";
    case Kind::object: return v.object_data().type_name;
    case Kind::callable: return "function";
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

bool less_than(const Value& a, const Value& b) {
  charge_steps(1);
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Kind::floating && b.kind() != Kind::floating) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order == code point order
  if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
      (a.seq_kind() == SeqKind::list || a.seq_kind() == SeqKind::tuple)) {
    WalkDepth guard;
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  type_error("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// Python's repr(float): the shortest digits that round-trip, positional for exponents in
// [-4, 16), otherwise d.ddde+XX; always with a ".0" when positional and integral.
std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string mant = sci.substr(0, epos);
  bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + eb;
  }
  if (exp < 0) return out + "0." + std::string(size_t(-exp - 1), '0') + digits;
  size_t int_len = size_t(exp) + 1;
  if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

void repr_string(std::string& out, std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos,
       has_double = s.find('"') != std::string_view::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  out += q;
  for (char32_t c : to_u32(s)) {
    if (c == char32_t(q) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_isprintable(c)) {
      char b[16];
      if (c < 0x100) {
        std::snprintf(b, sizeof(b), "\\x%02x", unsigned(c));
      } else if (c < 0x10000) {
        std::snprintf(b, sizeof(b), "\\u%04x", unsigned(c));
      } else {
        std::snprintf(b, sizeof(b), "\\U%08x", unsigned(c));
      }
      out += b;
    } else {
      utf8_append(out, uint32_t(c));
    }
  }
  out += q;
}

namespace {
void repr_into(std::string& out, const Value& v) {
  WalkDepth guard;
  charge_steps(1);
  check_text_size(out.size());
  switch (v.kind()) {
    case Kind::string: repr_string(out, v.str()); return;
    case Kind::list: {
      if (v.seq_kind() == SeqKind::generator) {
        out += "<generator object>";
        return;
      }
      if (v.seq_kind() == SeqKind::range) {
        const ListData& r = v.list_data();
        out += "range(" + std::to_string(r.range_start) + ", " + std::to_string(r.range_stop);
        if (r.range_step != 1) out += ", " + std::to_string(r.range_step);
        out += ')';
        return;
      }
      bool tuple = v.seq_kind() == SeqKind::tuple;
      out += tuple ? '(' : '[';
      bool first = true;
      for (const Value& x : v.items()) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, x);
      }
      if (tuple && v.items().size() == 1) out += ',';
      out += tuple ? ')' : ']';
      return;
    }
    case Kind::dict: {
      out += '{';
      bool first = true;
      for (const auto& kv : v.dict_data().items) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, kv.first);
        out += ": ";
        repr_into(out, kv.second);
      }
      out += '}';
      return;
    }
    case Kind::object: {
      const ObjectData& o = v.object_data();
      if (o.type_name == "Namespace") {
        out += "<Namespace ";
        repr_into(out, Value::dict(std::make_shared<DictData>(o.attrs)));
        out += '>';
      } else {
        out += "<" + o.type_name + ">";
      }
      return;
    }
    case Kind::undefined: out += "Undefined"; return;
    default: out += to_str(v);
  }
}
}  // namespace

std::string repr(const Value& v) {
  std::string out;
  repr_into(out, v);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined: return "";
    case Kind::none: return "None";
    case Kind::boolean: return v.as_bool() ? "True" : "False";
    case Kind::integer: return std::to_string(v.as_int());
    case Kind::floating: return float_repr(v.as_double());
    case Kind::string: return v.str();
    case Kind::list:
      if (v.seq_kind() == SeqKind::generator)
        throw RenderError("TypeError", "printing a generator (the output would be '<generator object ...>')");
      return repr(v);
    case Kind::callable: return "<function " + v.callable_name() + ">";
    default: return repr(v);
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined: return 0;
    case Kind::string: return cp_length(v.str());
    case Kind::list:
      if (v.seq_kind() == SeqKind::generator) type_error("object of type 'generator' has no len()");
      return int64_t(v.items().size());
    case Kind::dict: return int64_t(v.dict_data().items.size());
    default: type_error("object of type '" + type_name(v) + "' has no len()");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined: return {};
    case Kind::string: {
      charge_steps(v.str().size());  // one element per code point: at most one per byte
      check_room_for(v.str().size() * (sizeof(Value) + sizeof(std::string)));
      std::vector<Value> out;
      for (char32_t c : to_u32(v.str())) {
        std::string s;
        utf8_append(s, uint32_t(c));
        out.push_back(Value::string(std::move(s)));
      }
      return out;
    }
    case Kind::list: charge_steps(v.items().size()); return v.items();
    case Kind::dict: {
      charge_steps(v.dict_data().items.size());
      std::vector<Value> out;
      for (const auto& kv : v.dict_data().items) out.push_back(kv.first);
      return out;
    }
    default: type_error("'" + type_name(v) + "' object is not iterable");
  }
}

}  // namespace astrai::jinja
