// The syntax tree the parser builds and the interpreter walks. Every node keeps the line and
// column it came from for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/tokenizer/jinja_value.h"

namespace astrai::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprType {
  constant,  // value
  name,      // name
  getattr,   // a.name
  getitem,   // a[b]
  slice,     // a[b:c:d], any of b/c/d may be null
  call,      // a(args, kwargs)
  filter,    // a|name(args, kwargs); a is null for `{% filter %}` blocks and `{% set x | f %}`
  test,      // a is name(args, kwargs)
  unary,     // name in {"not", "-", "+"} applied to a
  binary,    // a name b, name in {"and", "or", "+", "-", "*", "/", "//", "%", "**", "~"}
  compare,   // a ops[0] args[0] ops[1] args[1] ... (chained as in Python)
  cond,      // b if a else c (c may be null: undefined)
  list,      // [args...]
  tuple,     // (args...)
  dict,      // {args[0]: args[1], args[2]: args[3], ...}
};

struct Expr {
  ExprType type = ExprType::constant;
  int line = 0, col = 0;
  Value value;
  std::string name;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

enum class StmtType {
  text,       // text
  output,     // {{ expr }}
  if_,        // branches (cond, body)..., else_body
  for_,       // for targets in expr [if cond]: body; else_body
  set,        // set targets = expr
  set_attr,   // set targets[0].targets[1] = expr (namespace attribute)
  block_set,  // set targets[0] [| expr filter chain] %} body {% endset
  macro,      // macro name(targets = defaults...) body
  break_,
  continue_,
  filter_block,  // filter expr (a filter chain with a null operand) body
  with,          // with targets[i] = defaults[i]...: body
  generation,    // transformers' {% generation %} body: rendered as is
};

struct Stmt {
  StmtType type = StmtType::text;
  int line = 0, col = 0;
  std::string text;  // text, or the macro name
  ExprPtr expr, cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> targets;
  bool tuple_target = false;      // `for a, b in` / `set a, b =`: unpack
  std::vector<ExprPtr> defaults;  // macro parameter defaults (null: none), with values
};

}  // namespace astrai::jinja
