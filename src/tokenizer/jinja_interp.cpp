#include "src/tokenizer/jinja_interp.h"

#include <cmath>
#include <unordered_map>

#include "src/tokenizer/jinja_budget.h"
#include "src/tokenizer/jinja_builtins.h"

namespace astrai::jinja {
namespace {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { normal, brk, cont };

// A loop iteration builds a scope and a `loop` object of a dozen attributes, a macro call a scope
// and its parameters: each costs about as much as this many simple expression steps (measured:
// an empty loop body runs at about 3 µs an iteration, a constant expression at about 0.1 µs).
constexpr uint64_t kFrameSteps = 32;

// Python integer arithmetic with overflow reported instead of wrapping.
int64_t checked(bool overflow, int64_t r) {
  if (overflow) throw RenderError("OverflowError", "integer result too large for this interpreter");
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw RenderError("ZeroDivisionError", "integer division or modulo by zero");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == 0) throw RenderError("ZeroDivisionError", "integer division or modulo by zero");
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double py_fmod(double a, double b) {
  if (b == 0) throw RenderError("ZeroDivisionError", "float modulo");
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  if (r == 0) r = std::copysign(0.0, b);
  return r;
}

// Python's float floor division (CPython's float_divmod): floor((a - fmod(a, b)) / b), so that
// 7 // 0.1 == 69.0 (0.1 is slightly above 1/10), where floor(a / b) would round up to 70.
double py_floordiv(double a, double b) {
  if (b == 0) throw RenderError("ZeroDivisionError", "float floor division by zero");
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  type_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// Templates come from model files, but a runaway `'x' * 10**12` must be an error, not an OOM.
constexpr size_t kMaxRepeatBytes = size_t(256) << 20;

Value repeat(const Value& seq, int64_t n) {
  const size_t unit = seq.is_string() ? seq.str().size() : seq.items().size() * sizeof(Value);
  if (n > 0 && unit > 0 && size_t(n) > kMaxRepeatBytes / unit)
    throw RenderError("MemoryError", "sequence repetition result too large");
  if (n > 0) {  // within the render's budget, checked before the result is built
    if (seq.is_string()) check_text_size(size_t(n) * unit);
    check_room_for(size_t(n) * unit);
    charge_steps(seq.is_string() ? size_t(n) * unit / 64 : size_t(n) * seq.items().size());
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::string(out);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.seq_kind());
}

// `a ~ b` (and `+` on two strings): one allocation of the checked size, no copies of the operands
// on the way (templates that build a prompt by repeated concatenation copy it often enough).
Value concat(const Value& a, const Value& b) {
  std::string sa, sb;
  if (!a.is_string()) sa = to_str(a);
  if (!b.is_string()) sb = to_str(b);
  const std::string& x = a.is_string() ? a.str() : sa;
  const std::string& y = b.is_string() ? b.str() : sb;
  check_text_size(x.size() + y.size());
  std::string out;
  out.reserve(x.size() + y.size());
  out += x;
  out += y;
  return Value::string(std::move(out));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  // str % x formats without touching x unless a conversion consumes it (x may even be undefined).
  if (op == "%" && a.is_string()) return Value::string(percent_format(a.str(), b));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const bool ints = a.is_int() && b.is_int();
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (nums) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return concat(a, b);
    if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
        (a.seq_kind() == SeqKind::list || a.seq_kind() == SeqKind::tuple)) {
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.seq_kind());
    }
    if (a.is_string()) type_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.is_list() && a.seq_kind() == SeqKind::list)
      type_error("can only concatenate list (not \"" + type_name(b) + "\") to list");
    bad_operands("+", a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (nums) return Value::floating(a.as_double() - b.as_double());
    bad_operands("-", a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (nums) return Value::floating(a.as_double() * b.as_double());
    auto is_seq = [](const Value& v) {
      return v.is_string() ||
             (v.is_list() && (v.seq_kind() == SeqKind::list || v.seq_kind() == SeqKind::tuple));
    };
    if (is_seq(a) && b.is_int()) return repeat(a, b.as_int());
    if (a.is_int() && is_seq(b)) return repeat(b, a.as_int());
    if (is_seq(a) || is_seq(b)) {
      const Value& s = is_seq(a) ? b : a;
      type_error("can't multiply sequence by non-int of type '" + type_name(s) + "'");
    }
    bad_operands("*", a, b);
  }
  if (op == "/") {
    if (!nums) bad_operands("/", a, b);
    if (b.as_double() == 0) throw RenderError("ZeroDivisionError", "division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (ints) return Value::integer(floor_div(a.as_int(), b.as_int()));
    if (!nums) bad_operands("//", a, b);
    return Value::floating(py_floordiv(a.as_double(), b.as_double()));
  }
  if (op == "%") {
    if (a.is_string()) return Value::string(percent_format(a.str(), b));
    if (ints) return Value::integer(py_mod(a.as_int(), b.as_int()));
    if (!nums) bad_operands("%", a, b);
    return Value::floating(py_fmod(a.as_double(), b.as_double()));
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      // Square-and-multiply: O(log e) steps even for 1 ** 10**18.
      int64_t r = 1, base = a.as_int(), e = b.as_int();
      while (e > 0) {
        if (e & 1) {
          const bool overflow = __builtin_mul_overflow(r, base, &r);
          checked(overflow, r);
        }
        e >>= 1;
        if (e > 0) {
          const bool overflow = __builtin_mul_overflow(base, base, &base);
          checked(overflow, base);
        }
      }
      return Value::integer(r);
    }
    if (!nums) bad_operands("** or pow()", a, b);
    if (a.as_double() == 0 && b.as_double() < 0)
      throw RenderError("ZeroDivisionError", "0.0 cannot be raised to a negative power");
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  throw RenderError("TemplateRuntimeError", "unknown operator " + op);
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op != "in" && op != "not in") {  // orderings: undefined refuses them (even against itself)
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
  }
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  // less_than first: unorderable types (dicts, str vs int) raise even when equal.
  if (op == "<=") return less_than(a, b) || equals(a, b);
  if (op == ">=") return less_than(b, a) || equals(a, b);
  if (op == "in") return contains(b, a);
  return !contains(b, a);  // "not in"
}

// Python's unpacking of one loop item into `n` targets.
std::vector<Value> unpack(const Value& item, size_t n) {
  std::vector<Value> parts = iterate(item);
  if (parts.size() < n)
    throw RenderError("ValueError", "not enough values to unpack (expected " + std::to_string(n) + ", got " +
                                        std::to_string(parts.size()) + ")");
  if (parts.size() > n)
    throw RenderError("ValueError", "too many values to unpack (expected " + std::to_string(n) + ")");
  return parts;
}

class Interpreter {
 public:
  explicit Interpreter(const ChatTemplateLimits& limits) : limits_(limits) {}

  std::string run(const Body& body, ScopePtr root) {
    stack_base_ = static_cast<const char*>(__builtin_frame_address(0));
    std::string out;
    exec(body, out, root);
    return out;
  }

 private:
  Flow exec(const Body& body, std::string& out, ScopePtr& scope) {
    for (const StmtPtr& s : body) {
      Flow f = exec_one(*s, out, scope);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  // Everything a template writes goes through here: the output (or a captured block) stays under
  // max_output_bytes.
  void emit(std::string& out, std::string_view text) {
    check_text_size(out.size() + text.size());
    charge_scan(text.size());
    out += text;
  }

  Flow exec_one(const Stmt& s, std::string& out, ScopePtr& scope) {
    charge_steps(1);
    switch (s.type) {
      case StmtType::text: emit(out, s.text); return Flow::normal;
      case StmtType::output: emit(out, to_str(eval(*s.expr, scope))); return Flow::normal;
      case StmtType::if_:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond, scope))) return exec(body, out, scope);
        return exec(s.else_body, out, scope);
      case StmtType::for_: return exec_for(s, out, scope);
      case StmtType::set: assign(s, eval(*s.expr, scope), *scope); return Flow::normal;
      case StmtType::set_attr: {
        const Value* ns = scope->find(s.targets[0]);
        if (!ns || ns->kind() != Kind::object || !ns->object_data().assignable)
          throw RenderError("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
        ns->object_data().attrs.set(Value::string(s.targets[1]), eval(*s.expr, scope));
        return Flow::normal;
      }
      case StmtType::block_set: {
        std::string captured;
        exec(s.body, captured, scope);
        Value v = Value::string(std::move(captured));
        if (s.expr) v = eval_filter_chain(*s.expr, v, scope);
        scope->vars[s.targets[0]] = v;
        return Flow::normal;
      }
      case StmtType::macro: scope->vars[s.text] = make_macro(s, scope); return Flow::normal;
      case StmtType::break_: return Flow::brk;
      case StmtType::continue_: return Flow::cont;
      case StmtType::filter_block: {
        std::string captured;
        Flow f = exec(s.body, captured, scope);
        emit(out, to_str(eval_filter_chain(*s.expr, Value::string(std::move(captured)), scope)));
        return f;
      }
      case StmtType::with: {
        ScopePtr inner = child_of(scope);
        for (size_t i = 0; i < s.targets.size(); ++i) inner->vars[s.targets[i]] = eval(*s.defaults[i], scope);
        return exec(s.body, out, inner);
      }
      case StmtType::generation: return exec(s.body, out, scope);
    }
    return Flow::normal;
  }

  void assign(const Stmt& s, const Value& v, Scope& scope) {
    if (!s.tuple_target) {
      scope.vars[s.targets[0]] = v;
      return;
    }
    std::vector<Value> parts = unpack(v, s.targets.size());
    for (size_t i = 0; i < parts.size(); ++i) scope.vars[s.targets[i]] = parts[i];
  }

  Flow exec_for(const Stmt& s, std::string& out, ScopePtr& scope) {
    Value seq = eval(*s.expr, scope);
    if (!seq.is_undefined() && !seq.is_string() && !seq.is_list() && !seq.is_dict())
      type_error("'" + type_name(seq) + "' object is not iterable");
    std::vector<Value> items = iterate(seq);
    if (s.cond) {  // the loop filter sees the loop targets but not `loop`
      std::vector<Value> kept;
      for (const Value& item : items) {
        ScopePtr probe = child_of(scope);
        assign(s, item, *probe);
        if (truthy(eval(*s.cond, probe))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body, out, scope);

    auto changed_state = std::make_shared<std::vector<Value>>();
    auto has_changed = std::make_shared<bool>(false);
    // `loop.changed(loop)` stores the loop object in its own closure: a reference cycle that
    // leaking would be the only way out of, so the state goes when the loop does.
    struct ClearOnExit {
      std::vector<Value>& state;
      ~ClearOnExit() { state.clear(); }
    } clear_changed{*changed_state};
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      charge_steps(kFrameSteps);
      ScopePtr iter = child_of(scope);
      assign(s, items[size_t(i)], *iter);
      auto loop = std::make_shared<ObjectData>();
      loop->type_name = "LoopContext";
      loop->attrs.items.reserve(12);
      auto set = [&](const char* k, Value v) { loop->attrs.append(Value::string(k), std::move(v)); };
      set("index", Value::integer(i + 1));
      set("index0", Value::integer(i));
      set("revindex", Value::integer(n - i));
      set("revindex0", Value::integer(n - i - 1));
      set("first", Value::boolean(i == 0));
      set("last", Value::boolean(i == n - 1));
      set("length", Value::integer(n));
      set("depth", Value::integer(1));
      set("depth0", Value::integer(0));
      set("previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item"));
      set("nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item"));
      set("cycle", Value::callable("loop.cycle", [i](CallArgs& a) {
            if (a.args.empty()) type_error("no items for cycling given");
            return a.args[size_t(i) % a.args.size()];
          }));
      set("changed", Value::callable("loop.changed", [changed_state, has_changed](CallArgs& a) {
            bool same = *has_changed && changed_state->size() == a.args.size();
            if (same)
              for (size_t k = 0; k < a.args.size(); ++k)
                same = same && equals((*changed_state)[k], a.args[k]);
            *changed_state = a.args;
            *has_changed = true;
            return Value::boolean(!same);
          }));
      loop->depth = loop->attrs.depth;  // its attributes are fixed from here on
      iter->vars["loop"] = Value::object(loop);
      Flow f = exec(s.body, out, iter);
      if (f == Flow::brk) break;
    }
    return Flow::normal;
  }

  Value make_macro(const Stmt& s, const ScopePtr& scope) {
    std::weak_ptr<Scope> defined_in = scope;
    const Stmt* def = &s;
    return Value::callable(s.text, [this, def, defined_in](CallArgs& a) -> Value {
      ScopePtr parent = defined_in.lock();
      if (!parent)
        throw RenderError("TemplateRuntimeError", "macro '" + def->text + "' called outside its scope");
      if (a.args.size() > def->targets.size())
        type_error("macro '" + def->text + "' takes not more than " + std::to_string(def->targets.size()) +
                   " argument(s)");
      for (const auto& kv : a.kwargs)
        if (std::find(def->targets.begin(), def->targets.end(), kv.first) == def->targets.end())
          type_error("macro '" + def->text + "' takes no keyword argument '" + kv.first + "'");
      if (++depth_ > 200) throw RenderError("RecursionError", "maximum macro recursion depth exceeded");
      charge_steps(kFrameSteps);
      ScopePtr frame = child_of(parent);
      for (size_t i = 0; i < def->targets.size(); ++i) {
        const std::string& p = def->targets[i];
        if (a.has(i, p)) {
          frame->vars[p] = a.get(i, p);
        } else if (def->defaults[i]) {
          frame->vars[p] = eval(*def->defaults[i], frame);
        } else {
          frame->vars[p] = Value::undefined("parameter '" + p + "' was not provided");
        }
      }
      std::string out;
      exec(def->body, out, frame);
      --depth_;
      return Value::string(std::move(out));
    });
  }

  CallArgs eval_args(const Expr& e, const ScopePtr& scope) {
    CallArgs a;
    for (const auto& x : e.args) a.args.push_back(eval(*x, scope));
    for (const auto& [k, x] : e.kwargs) a.kwargs.emplace_back(k, eval(*x, scope));
    return a;
  }

  Value eval_filter_chain(const Expr& e, const Value& input, const ScopePtr& scope) {
    Value operand = e.a ? eval_filter_chain(*e.a, input, scope) : input;
    CallArgs a = eval_args(e, scope);
    return apply_filter(e.name, operand, a);
  }

  // Bounds C++ recursion: macros calling macros inside deep expressions. Counting frames is not
  // enough on its own (a frame's size depends on the build), so the stack used is measured too.
  struct EvalDepth {
    EvalDepth(Interpreter& in) : d_(in.eval_depth_) {
      const auto* here = static_cast<const char*>(__builtin_frame_address(0));
      if (++d_ > in.limits_.max_call_depth)
        fail("expression nested too deeply (max_call_depth = " + std::to_string(in.limits_.max_call_depth) +
             ")");
      if (in.stack_base_ > here && size_t(in.stack_base_ - here) > in.limits_.max_stack_bytes)
        fail("expression nested too deeply (max_stack_bytes = " + std::to_string(in.limits_.max_stack_bytes) +
             ")");
    }
    ~EvalDepth() { --d_; }
    [[noreturn]] void fail(const std::string& what) {
      --d_;
      throw LimitError(what);
    }
    int& d_;
  };

  Value eval(const Expr& e, const ScopePtr& scope) {
    EvalDepth guard(*this);
    charge_steps(1);
    switch (e.type) {
      case ExprType::constant: return e.value;
      case ExprType::name: {
        const Value* v = scope->find(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprType::getattr: return get_attr(eval(*e.a, scope), e.name);
      case ExprType::getitem: return get_item(eval(*e.a, scope), eval(*e.b, scope));
      case ExprType::slice: {
        Value obj = eval(*e.a, scope);
        Value b = e.b ? eval(*e.b, scope) : Value::none(), c = e.c ? eval(*e.c, scope) : Value::none(),
              d = e.d ? eval(*e.d, scope) : Value::none();
        return get_slice(obj, &b, &c, &d);
      }
      case ExprType::call: {
        Value fn = eval(*e.a, scope);
        CallArgs a = eval_args(e, scope);
        if (fn.is_undefined()) undefined_error(fn);
        if (!fn.is_callable()) type_error("'" + type_name(fn) + "' object is not callable");
        return fn.call(a);
      }
      case ExprType::filter: {
        Value operand = eval(*e.a, scope);
        CallArgs a = eval_args(e, scope);
        return apply_filter(e.name, operand, a);
      }
      case ExprType::test: {
        Value operand = eval(*e.a, scope);
        CallArgs a = eval_args(e, scope);
        return Value::boolean(apply_test(e.name, operand, a));
      }
      case ExprType::unary: {
        Value v = eval(*e.a, scope);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number()) type_error("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        if (e.name == "+") return v.kind() == Kind::boolean ? Value::integer(v.as_int()) : v;
        if (v.kind() == Kind::floating) return Value::floating(-v.as_double());
        return Value::integer(-v.as_int());
      }
      case ExprType::binary: {
        if (e.name == "and") {
          Value l = eval(*e.a, scope);
          return truthy(l) ? eval(*e.b, scope) : l;
        }
        if (e.name == "or") {
          Value l = eval(*e.a, scope);
          return truthy(l) ? l : eval(*e.b, scope);
        }
        Value l = eval(*e.a, scope), r = eval(*e.b, scope);
        if (e.name == "~") return concat(l, r);
        return arithmetic(e.name, l, r);
      }
      case ExprType::compare: {
        Value left = eval(*e.a, scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i], scope);
          if (!compare(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprType::cond:
        if (truthy(eval(*e.a, scope))) return eval(*e.b, scope);
        if (e.c) return eval(*e.c, scope);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      case ExprType::list:
      case ExprType::tuple: {
        std::vector<Value> items;
        for (const auto& x : e.args) items.push_back(eval(*x, scope));
        return Value::list(std::move(items), e.type == ExprType::tuple ? SeqKind::tuple : SeqKind::list);
      }
      case ExprType::dict: {
        auto d = std::make_shared<DictData>();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i], scope);
          if (k.is_list() && k.seq_kind() != SeqKind::tuple) type_error("unhashable type: 'list'");
          if (k.is_dict()) type_error("unhashable type: 'dict'");
          d->set(k, eval(*e.args[i + 1], scope));
        }
        return Value::dict(d);
      }
    }
    return Value();
  }

  const ChatTemplateLimits& limits_;
  const char* stack_base_ = nullptr;  // run()'s frame: the stack grows down from here
  int depth_ = 0;                     // macro calls in progress
  int eval_depth_ = 0;                // nested eval() frames
};

// jinja2's default globals.
void add_globals(Scope& g) {
  g.vars["range"] = Value::callable("range", [](CallArgs& a) {
    for (const Value& x : a.args)
      if (!x.is_int()) type_error("'" + type_name(x) + "' object cannot be interpreted as an integer");
    int64_t start = 0, stop = 0, step = 1;
    if (a.args.size() == 1) {
      stop = a.args[0].as_int();
    } else if (a.args.size() >= 2) {
      start = a.args[0].as_int();
      stop = a.args[1].as_int();
      if (a.args.size() >= 3) step = a.args[2].as_int();
    } else {
      type_error("range expected at least 1 argument, got 0");
    }
    if (step == 0) throw RenderError("ValueError", "range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000)
        throw RenderError("OverflowError",
                          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.push_back(Value::integer(i));
    }
    return Value::range(start, stop, step, std::move(out));
  });
  g.vars["namespace"] = Value::callable("namespace", [](CallArgs& a) {
    auto ns = std::make_shared<ObjectData>();
    ns->type_name = "Namespace";
    ns->assignable = true;
    if (Budget* b = current_budget()) b->keep_namespace(ns);
    for (const Value& x : a.args) {
      if (!x.is_dict()) type_error("namespace() positional argument must be a mapping");
      for (const auto& kv : x.dict_data().items) ns->attrs.set(kv.first, kv.second);
    }
    for (const auto& [k, v] : a.kwargs) ns->attrs.set(Value::string(k), v);
    return Value::object(ns);
  });
  g.vars["dict"] = Value::callable("dict", [](CallArgs& a) {
    auto d = std::make_shared<DictData>();
    for (const Value& x : a.args) {
      if (!x.is_dict()) type_error("dict() positional argument must be a mapping");
      for (const auto& kv : x.dict_data().items) d->set(kv.first, kv.second);
    }
    for (const auto& [k, v] : a.kwargs) d->set(Value::string(k), v);
    return Value::dict(d);
  });
  g.vars["joiner"] = Value::callable("joiner", [](CallArgs& a) {
    std::string sep = a.args.empty() ? ", " : to_str(a.args[0]);
    auto used = std::make_shared<bool>(false);
    return Value::callable("joiner", [sep, used](CallArgs&) {
      if (!*used) {
        *used = true;
        return Value::string("");
      }
      return Value::string(sep);
    });
  });
  g.vars["cycler"] = Value::callable("cycler", [](CallArgs& a) {
    auto cyc = std::make_shared<ObjectData>();
    cyc->type_name = "Cycler";
    auto items = std::make_shared<std::vector<Value>>(a.args);
    auto pos = std::make_shared<size_t>(0);
    for (const Value& x : *items) cyc->depth = std::max(cyc->depth, x.depth() + 1);
    cyc->attrs.set(Value::string("next"), Value::callable("cycler.next", [items, pos](CallArgs&) {
                     if (items->empty()) return Value::none();
                     Value v = (*items)[*pos % items->size()];
                     ++*pos;
                     return v;
                   }));
    cyc->attrs.set(Value::string("reset"), Value::callable("cycler.reset", [pos](CallArgs&) {
                     *pos = 0;
                     return Value::none();
                   }));
    return Value::object(cyc);
  });
}

}  // namespace

std::string render(const Body& body, const DictData& vars, const ChatTemplateLimits& limits) {
  auto root = std::make_shared<Scope>();
  add_globals(*root);
  for (const auto& [k, v] : vars.items)
    if (k.is_string()) root->vars[k.str()] = v;
  return Interpreter(limits).run(body, root);
}

}  // namespace astrai::jinja
