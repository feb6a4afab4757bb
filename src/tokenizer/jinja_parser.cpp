#include "src/tokenizer/jinja_parser.h"

#include <initializer_list>

#include "src/tokenizer/jinja_builtins.h"
#include "src/tokenizer/jinja_lexer.h"

namespace astrai::jinja {
namespace {

// Thrown inside the recursive-descent parser only; parse_template() turns it into a Status.
struct ParseError {
  std::string message;
};

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::text: return "template text";
    case Tok::var_begin: return "'{{'";
    case Tok::var_end: return "end of print statement";
    case Tok::block_begin: return "'{%'";
    case Tok::block_end: return "end of statement block";
    case Tok::name: return "'" + t.value + "'";
    case Tok::string: return "string literal";
    case Tok::integer:
    case Tok::floating: return "number";
    case Tok::op: return "'" + t.value + "'";
    case Tok::eof: return "end of template";
  }
  return "token";
}

class Parser {
 public:
  Parser(std::vector<Token> toks, int max_nesting) : t_(std::move(toks)), max_nesting_(max_nesting) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != Tok::eof) fail_at(cur(), "unexpected " + describe(cur()));
    return body;
  }

 private:
  // Bounds the recursion so that hostile nesting ("((((...", 10k nested ifs) is an error, not a
  // stack overflow. jinja2 itself stops at Python's recursion limit.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) { p_.deeper(); }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };
  // A left-associative chain (`a ~ b ~ c`, `x|f|g`, `a.b.c`, `f()()`) is built in a loop but is as
  // deep as it is long: every link counts as one level of nesting, so that the tree stays shallow
  // enough to evaluate and to destroy without running out of stack.
  struct ChainGuard {
    explicit ChainGuard(Parser& p) : p_(p) {}
    void link() {
      p_.deeper();
      ++links_;
    }
    ~ChainGuard() { p_.depth_ -= links_; }
    Parser& p_;
    int links_ = 0;
  };
  void deeper() {
    if (++depth_ > max_nesting_) {
      --depth_;
      fail_at(cur(), "nesting too deep");
    }
  }

  // ---- token helpers ---------------------------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& look(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == Tok::op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::name && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_at(cur(), std::string("expected '") + op + "', got " + describe(cur()));
  }
  const Token& expect(Tok type, const char* what) {
    if (cur().type != type) fail_at(cur(), std::string("expected ") + what + ", got " + describe(cur()));
    return next();
  }
  [[noreturn]] void fail_at(const Token& t, const std::string& what) const {
    throw ParseError{"chat template: syntax error at line " + std::to_string(t.line) + ", column " +
                     std::to_string(t.col) + ": " + what};
  }
  [[noreturn]] void unsupported_at(const Token& t, const std::string& kind, const std::string& name) const {
    throw ParseError{"chat template: unsupported " + kind + " '" + name + "' at line " +
                     std::to_string(t.line) + ", column " + std::to_string(t.col)};
  }

  ExprPtr make(ExprType type, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  StmtPtr make_stmt(StmtType type, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->type = type;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // ---- statements ------------------------------------------------------------------------------

  // Parses until `{% <one of end_tags>`, leaving the cursor on that tag's name.
  Body subparse(std::initializer_list<const char*> end_tags) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::eof) {
        if (end_tags.size())
          fail_at(t, "unexpected end of template, expected '" + std::string(*end_tags.begin()) + "'");
        return body;
      }
      if (t.type == Tok::text) {
        auto s = make_stmt(StmtType::text, t);
        s->text = t.value;
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::var_begin) {
        next();
        auto s = make_stmt(StmtType::output, t);
        s->expr = parse_tuple(false, true, {});
        expect(Tok::var_end, "end of print statement");
        body.push_back(std::move(s));
      } else if (t.type == Tok::block_begin) {
        const Token& name = look();
        if (name.type == Tok::name)
          for (const char* e : end_tags)
            if (name.value == e) {
              next();
              return body;
            }
        next();
        body.push_back(parse_statement());
      } else {
        fail_at(t, "unexpected " + describe(t));
      }
    }
  }

  // After the end tag's name: `%}`.
  void end_block() { expect(Tok::block_end, "end of statement block"); }

  StmtPtr parse_statement() {
    const Token& t = cur();
    if (t.type != Tok::name) fail_at(t, "tag name expected");
    const std::string& n = t.value;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail_at(t, "'" + n + "' outside of a loop");
      auto s = make_stmt(n == "break" ? StmtType::break_ : StmtType::continue_, t);
      next();
      end_block();
      return s;
    }
    if (n == "filter") return parse_filter_block();
    if (n == "with") return parse_with();
    if (n == "generation") {
      auto s = make_stmt(StmtType::generation, t);
      next();
      end_block();
      s->body = subparse({"endgeneration"});
      next();
      end_block();
      return s;
    }
    static const char* const kEndTags[] = {"endif",   "endfor", "endset", "endmacro",      "endfilter",
                                           "endwith", "else",   "elif",   "endgeneration", "endraw"};
    for (const char* e : kEndTags)
      if (n == e) fail_at(t, "unexpected '" + n + "'");
    unsupported_at(t, "tag", n);
  }

  StmtPtr parse_if() {
    auto s = make_stmt(StmtType::if_, cur());
    next();
    while (true) {
      ExprPtr cond = parse_tuple(false, false, {});
      end_block();
      Body body = subparse({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      const Token& tag = next();
      if (tag.value == "elif") continue;
      if (tag.value == "else") {
        end_block();
        s->else_body = subparse({"endif"});
        next();
      }
      end_block();
      return s;
    }
  }

  // Assignment targets: a name or a tuple of names (`a, b` or `(a, b)`).
  void parse_targets(Stmt& s, std::initializer_list<const char*> end_names) {
    bool paren = skip_op("(");
    while (true) {
      const Token& n = expect(Tok::name, "a variable name");
      s.targets.push_back(n.value);
      if (!skip_op(",")) break;
      s.tuple_target = true;
      bool at_end = paren ? is_op(")") : false;
      for (const char* e : end_names) at_end = at_end || is_name(e) || is_op(e);
      if (at_end) break;
    }
    if (paren) {
      expect_op(")");
      s.tuple_target = s.tuple_target || s.targets.size() > 1;
    }
  }

  StmtPtr parse_for() {
    auto s = make_stmt(StmtType::for_, cur());
    next();
    parse_targets(*s, {"in"});
    if (!skip_name("in")) fail_at(cur(), "expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) unsupported_at(cur(), "tag", "for ... recursive");
    end_block();
    ++loop_depth_;
    s->body = subparse({"endfor", "else"});
    --loop_depth_;
    if (next().value == "else") {
      end_block();
      s->else_body = subparse({"endfor"});
      next();
    }
    end_block();
    return s;
  }

  StmtPtr parse_set() {
    const Token& at = cur();
    next();
    if (cur().type == Tok::name && look().type == Tok::op && look().value == ".") {
      auto s = make_stmt(StmtType::set_attr, at);
      s->targets.push_back(next().value);
      next();
      s->targets.push_back(expect(Tok::name, "an attribute name").value);
      expect_op("=");
      s->expr = parse_tuple(false, true, {});
      end_block();
      return s;
    }
    auto s = make_stmt(StmtType::set, at);
    parse_targets(*s, {"="});
    if (skip_op("=")) {
      s->expr = parse_tuple(false, true, {});
      end_block();
      return s;
    }
    if (s->tuple_target) fail_at(cur(), "expected '='");
    s->type = StmtType::block_set;
    if (is_op("|")) s->expr = parse_filter(nullptr, false);
    end_block();
    s->body = subparse({"endset"});
    next();
    end_block();
    return s;
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(StmtType::macro, cur());
    next();
    s->text = expect(Tok::name, "a macro name").value;
    expect_op("(");
    while (!is_op(")")) {
      if (!s->targets.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      s->targets.push_back(expect(Tok::name, "a parameter name").value);
      if (skip_op("=")) {
        s->defaults.push_back(parse_expression(true));
      } else {
        s->defaults.push_back(nullptr);
      }
    }
    expect_op(")");
    end_block();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endmacro"});
    loop_depth_ = saved;
    next();
    end_block();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = make_stmt(StmtType::filter_block, cur());
    next();
    s->expr = parse_filter(nullptr, true);
    end_block();
    s->body = subparse({"endfilter"});
    next();
    end_block();
    return s;
  }

  StmtPtr parse_with() {
    auto s = make_stmt(StmtType::with, cur());
    next();
    while (cur().type != Tok::block_end) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect(Tok::name, "a variable name").value);
      expect_op("=");
      s->defaults.push_back(parse_expression(true));
    }
    end_block();
    s->body = subparse({"endwith"});
    next();
    end_block();
    return s;
  }

  // ---- expressions -----------------------------------------------------------------------------

  bool tuple_end(std::initializer_list<const char*> extra) const {
    if (cur().type == Tok::var_end || cur().type == Tok::block_end || is_op(")")) return true;
    for (const char* e : extra)
      if (is_name(e)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool explicit_parens, bool with_condexpr,
                      std::initializer_list<const char*> extra_end) {
    const Token& at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_at(cur(), "expected an expression, got " + describe(cur()));
    }
    auto e = make(ExprType::tuple, at);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    ExprPtr e1 = parse_or();
    ChainGuard chain(*this);
    while (is_name("if")) {
      chain.link();
      auto c = make(ExprType::cond, next());
      c->a = parse_or();
      c->b = std::move(e1);
      if (skip_name("else")) c->c = parse_condexpr();
      e1 = std::move(c);
    }
    return e1;
  }

  ExprPtr binary(const char* op, const Token& at, ExprPtr l, ExprPtr r) {
    auto e = make(ExprType::binary, at);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    ChainGuard chain(*this);
    while (is_name("or")) {
      chain.link();
      const Token& at = next();
      l = binary("or", at, std::move(l), parse_and());
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    ChainGuard chain(*this);
    while (is_name("and")) {
      chain.link();
      const Token& at = next();
      l = binary("and", at, std::move(l), parse_not());
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = make(ExprType::unary, next());
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                    cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && look().type == Tok::name && look().value == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprType::compare, at);
        cmp->a = std::move(first);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    ChainGuard chain(*this);
    while (is_op("+") || is_op("-")) {
      chain.link();
      const Token& at = next();
      l = binary(at.value == "+" ? "+" : "-", at, std::move(l), parse_concat());
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    ChainGuard chain(*this);
    while (is_op("~")) {
      chain.link();
      const Token& at = next();
      l = binary("~", at, std::move(l), parse_math2());
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    ChainGuard chain(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.link();
      const Token& at = next();
      const char* op = at.value == "*" ? "*" : at.value == "/" ? "/" : at.value == "//" ? "//" : "%";
      l = binary(op, at, std::move(l), parse_pow());
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    ChainGuard chain(*this);
    while (is_op("**")) {
      chain.link();
      const Token& at = next();
      l = binary("**", at, std::move(l), parse_unary(true));
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      node = make(ExprType::unary, at);
      node->name = at.value;
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == Tok::name) {
      next();
      auto e = make(ExprType::constant, t);
      if (t.value == "true" || t.value == "True") {
        e->value = Value::boolean(true);
      } else if (t.value == "false" || t.value == "False") {
        e->value = Value::boolean(false);
      } else if (t.value == "none" || t.value == "None") {
        e->value = Value::none();
      } else {
        e->type = ExprType::name;
        e->name = t.value;
      }
      return e;
    }
    if (t.type == Tok::string) {
      std::string s;
      while (cur().type == Tok::string) s += next().value;  // adjacent literals concatenate
      auto e = make(ExprType::constant, t);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == Tok::integer || t.type == Tok::floating) {
      next();
      auto e = make(ExprType::constant, t);
      e->value = t.type == Tok::integer ? Value::integer(t.ival) : Value::floating(t.fval);
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, true, {});
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(ExprType::list, next());
      while (!is_op("]")) {
        if (!e->args.empty()) {
          expect_op(",");
          if (is_op("]")) break;
        }
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      auto e = make(ExprType::dict, next());
      while (!is_op("}")) {
        if (!e->args.empty()) {
          expect_op(",");
          if (is_op("}")) break;
        }
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail_at(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      if (is_op(".") || is_op("[") || is_op("(")) chain.link();
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      if (is_op("|") || is_name("is") || is_op("(")) chain.link();
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& at = next();
    if (at.value == ".") {
      const Token& t = cur();
      if (t.type == Tok::name) {
        next();
        auto e = make(ExprType::getattr, t);
        e->a = std::move(node);
        e->name = t.value;
        return e;
      }
      if (t.type == Tok::integer) {
        next();
        auto e = make(ExprType::getitem, t);
        e->a = std::move(node);
        e->b = make(ExprType::constant, t);
        e->b->value = Value::integer(t.ival);
        return e;
      }
      fail_at(t, "expected name or number after '.'");
    }
    // '['
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) {
        expect_op(",");
        if (is_op("]")) break;
      }
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) fail_at(at, "expected a subscript");
    ExprPtr key;
    if (args.size() == 1) {
      key = std::move(args[0]);
    } else {
      // jinja2 would make a tuple holding a slice object; we have no such value (found by fuzz_jinja:
      // the slice, which has no object of its own, was evaluated as an expression).
      for (const ExprPtr& x : args)
        if (x->type == ExprType::slice) unsupported_at(at, "syntax", "a slice inside a tuple subscript");
      key = make(ExprType::tuple, at);
      key->args = std::move(args);
    }
    if (key->type == ExprType::slice) {
      key->a = std::move(node);
      return key;
    }
    auto e = make(ExprType::getitem, at);
    e->a = std::move(node);
    e->b = std::move(key);
    return e;
  }

  // `expr` or a slice `[start]:[stop][:[step]]` (returned as a slice node without its object).
  ExprPtr parse_subscribed() {
    const Token& at = cur();
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    auto e = make(ExprType::slice, at);
    e->b = std::move(start);
    if (!is_op("]") && !is_op(",") && !is_op(":")) e->c = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) e->d = parse_expression(true);
    }
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (!e.args.empty() || !e.kwargs.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) unsupported_at(cur(), "syntax", cur().value + "arguments");
      if (cur().type == Tok::name && look().type == Tok::op && look().value == "=") {
        std::string key = next().value;
        next();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail_at(cur(), "positional argument after keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprType::call, cur());
    e->a = std::move(node);
    parse_call_args(*e);
    return e;
  }

  // `|name(args)` repeated; `start_inline`: the first filter has no leading '|'.
  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    ChainGuard chain(*this);
    while (is_op("|") || start_inline) {
      chain.link();
      if (!start_inline) next();
      start_inline = false;
      const Token& t = expect(Tok::name, "a filter name");
      std::string name = t.value;
      while (skip_op(".")) name += "." + expect(Tok::name, "a name").value;
      if (!has_filter(name)) unsupported_at(t, "filter", name);
      auto e = make(ExprType::filter, t);
      e->name = name;
      e->a = std::move(node);
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    next();  // 'is'
    bool negated = skip_name("not");
    const Token& t = expect(Tok::name, "a test name");
    std::string name = t.value;
    while (skip_op(".")) name += "." + expect(Tok::name, "a name").value;
    if (!has_test(name)) unsupported_at(t, "test", name);
    auto e = make(ExprType::test, t);
    e->name = name;
    e->a = std::move(node);
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == Tok::name || cur().type == Tok::string || cur().type == Tok::integer ||
                cur().type == Tok::floating || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_at(cur(), "you cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = make(ExprType::unary, t);
    n->name = "not";
    n->a = std::move(e);
    return n;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
  int max_nesting_;
};

}  // namespace

Result<Body> parse_template(std::string_view source, const ChatTemplateLimits& limits) {
  if (source.size() > limits.max_source_bytes)
    return resource_exhausted(
        "chat template: " + std::to_string(source.size()) +
        " bytes, over the limit (max_source_bytes = " + std::to_string(limits.max_source_bytes) + ")");
  auto toks = tokenize(source);
  if (!toks.ok()) return toks.status();
  try {
    return Parser(std::move(toks).value(), limits.max_nesting).parse_all();
  } catch (const ParseError& e) {
    return invalid_argument(e.message);
  }
}

}  // namespace astrai::jinja
