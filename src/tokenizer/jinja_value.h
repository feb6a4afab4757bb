// The value type of the Jinja interpreter, with Python's semantics: what is true, what is equal,
// what sorts before what, and how str()/repr() print a value. jinja2 hands values to Python, so a
// template's output depends on these rules ("1.0" not "1", "None", "True", "['a', 1]").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace astrai::jinja {

// A render-time failure. `type` is the Python exception class jinja2 would raise (UndefinedError,
// TypeError, TemplateError for raise_exception, ...). Thrown inside the interpreter only; the
// ChatTemplate boundary turns it into a Status.
class RenderError : public std::runtime_error {
 public:
  RenderError(std::string type, const std::string& msg) : std::runtime_error(msg), type_(std::move(type)) {}
  const std::string& type() const { return type_; }

 private:
  std::string type_;
};

[[noreturn]] void type_error(const std::string& msg);

enum class Kind : uint8_t {
  undefined,  // jinja2.Undefined: renders empty, iterates empty, fails on attribute access
  none,
  boolean,
  integer,
  floating,
  string,
  list,      // list, tuple or a one-shot generator (see SeqKind)
  dict,      // insertion-ordered, keys compared with Python equality
  object,    // attribute bag: namespace() and the loop variable
  callable,  // macro, global function or bound method
};

// range: what range() returns (a list that prints as "range(0, 3)" and is not JSON).
enum class SeqKind : uint8_t { list, tuple, generator, range };

class Value;
struct ListData;
struct DictData;
struct ObjectData;
struct CallArgs;
using NativeFn = std::function<Value(CallArgs&)>;

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, SeqKind seq = SeqKind::list);
  static Value range(int64_t start, int64_t stop, int64_t step, std::vector<Value> items);
  static Value dict(std::shared_ptr<DictData> d);
  static Value object(std::shared_ptr<ObjectData> o);
  static Value callable(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_int() const { return kind_ == Kind::integer || kind_ == Kind::boolean; }  // bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::floating; }
  bool is_callable() const { return kind_ == Kind::callable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::boolean ? int64_t(b_) : i_; }
  double as_double() const { return kind_ == Kind::floating ? f_ : double(as_int()); }
  const std::string& str() const;  // string text (kind string) or undefined hint
  const std::vector<Value>& items() const;
  SeqKind seq_kind() const;
  const ListData& list_data() const { return *list_; }
  const DictData& dict_data() const { return *dict_; }
  DictData& dict_data_mut() { return *dict_; }
  const std::shared_ptr<DictData>& dict_ptr() const { return dict_; }
  ObjectData& object_data() const { return *obj_; }
  const std::string& callable_name() const { return *s_; }
  Value call(CallArgs& args) const;

  // Identity of the heap payload (for `is sameas`).
  const void* identity() const;
  // Nesting of lists, dicts and objects: 0 for a scalar, 1 for a flat list (see jinja_budget.h).
  uint32_t depth() const;

 private:
  Kind kind_ = Kind::undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<ObjectData> obj_;
  std::shared_ptr<const NativeFn> fn_;
};

struct ListData {
  std::vector<Value> items;
  uint32_t depth = 1;
  SeqKind seq = SeqKind::list;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // SeqKind::range only
};

struct MemoryMeter;

struct DictData {
  std::vector<std::pair<Value, Value>> items;
  uint32_t depth = 1;  // an upper bound: kept up to date by set() and append()

  DictData() = default;
  DictData(const DictData& other);  // a copy counts against the running render's memory anew
  DictData& operator=(const DictData&) = delete;
  ~DictData();

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);
  void append(Value key, Value v);  // for keys known to be new

 private:
  // The render budget's meter this dict's entries are counted on, given back when it goes.
  std::shared_ptr<MemoryMeter> meter_;
  size_t charged_ = 0;
};

struct ObjectData {
  std::string type_name;    // "Namespace", "LoopContext"
  bool assignable = false;  // `{% set ns.x = ... %}` is allowed on namespaces only
  DictData attrs;
  uint32_t depth = 1;  // 1 for namespaces (see jinja_budget.h), else 1 + the deepest attribute
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  // Positional argument i or keyword `name`, else `dflt`; consumed arguments are not re-checked.
  Value get(size_t i, std::string_view name, Value dflt = Value()) const;
  bool has(size_t i, std::string_view name) const;
};

// Python semantics.
bool truthy(const Value& v);  // generators are always true, undefined false
bool equals(const Value& a, const Value& b);
// a < b as Python orders them; TypeError for unorderable pairs.
bool less_than(const Value& a, const Value& b);
// Python's type name for error messages: 'int', 'str', 'NoneType', 'list', 'dict', ...
std::string type_name(const Value& v);
// jinja2's object_type_repr for undefined hints: "dict object", "None", ...
std::string object_type_repr(const Value& v);

// str(v) as jinja2 prints it in `{{ }}` (undefined prints as "").
std::string to_str(const Value& v);
// repr(v).
std::string repr(const Value& v);
void repr_string(std::string& out, std::string_view s);
std::string float_repr(double f);

// Length as Python's len(); TypeError for values without one.
int64_t length(const Value& v);
// Elements as Python's iter(): a string gives its characters, a dict its keys.
std::vector<Value> iterate(const Value& v);

// Raises jinja2's UndefinedError for operations that undefined values refuse.
[[noreturn]] void undefined_error(const Value& v);

}  // namespace astrai::jinja
