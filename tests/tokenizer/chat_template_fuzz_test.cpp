// Random expressions over values of every type, rendered by jinja2 and by us: the same text, or
// an error in both. This is where Python's value semantics (truthiness, equality, ordering,
// arithmetic, str() of floats and containers, filters on odd inputs) get exercised widely.
#include <catch2/catch.hpp>
#include <random>

#include "chat_template_reference.h"
#include "tools/test_util.h"

namespace {

class ExprGen {
 public:
  explicit ExprGen(uint64_t seed) : rng_(seed) {}

  std::string expr(int depth) {
    if (depth <= 0) return atom();
    switch (pick(12)) {
      case 0:
      case 1: {
        static const char* const kOps[] = {"+", "-",  "*", "/",  "//", "%",      "~",   "==", "!=",
                                           "<", "<=", ">", ">=", "in", "not in", "and", "or", "**"};
        std::string op = kOps[pick(int(std::size(kOps)))];
        if (op == "**") return "(" + small_int() + " ** " + small_int() + ")";
        return "(" + expr(depth - 1) + " " + op + " " + expr(depth - 1) + ")";
      }
      case 2: return "(not " + expr(depth - 1) + ")";
      case 3: return "(-" + expr(depth - 1) + ")";
      case 4: return "(" + expr(depth - 1) + " if " + expr(depth - 1) + " else " + expr(depth - 1) + ")";
      case 5:
      case 6: return "(" + expr(depth - 1) + "|" + filter() + ")";
      case 7: return "(" + expr(depth - 1) + " is " + test() + ")";
      // Subscripts and methods on variables: jinja2 folds constant subexpressions at compile time,
      // where a failing slice becomes undefined instead of an error.
      case 8: return variable() + subscript();
      case 9: return variable() + method();
      case 10: return "[" + expr(depth - 1) + ", " + expr(depth - 1) + "]";
      default: return atom();
    }
  }

 private:
  int pick(int n) { return int(rng_() % uint64_t(n)); }
  std::string small_int() { return std::to_string(pick(7) - 2); }

  std::string atom() {
    static const char* const kAtoms[] = {"0",
                                         "1",
                                         "2",
                                         "-3",
                                         "7",
                                         "0.5",
                                         "1.0",
                                         "2.5",
                                         "-1.5",
                                         "1e16",
                                         "''",
                                         "'a'",
                                         "'Ab c'",
                                         "'héllo'",
                                         "' x '",
                                         "'1,2'",
                                         "'10'",
                                         "none",
                                         "true",
                                         "false",
                                         "[]",
                                         "[1, 2]",
                                         "['b', 'a', 'B']",
                                         "{}",
                                         "{'a': 1, 'b': [2]}",
                                         "(1, 'x')",
                                         "s",
                                         "n",
                                         "f",
                                         "l",
                                         "d",
                                         "u",
                                         "m",
                                         "m[0]",
                                         "d.a",
                                         "range(3)",
                                         "'%s-%d'",
                                         "0.1",
                                         "3.0"};
    return kAtoms[pick(int(std::size(kAtoms)))];
  }

  std::string variable() {
    static const char* const kVars[] = {"s",   "n",       "f", "l", "d", "u", "m", "m[0]", "m[1].content",
                                        "d.a", "range(n)"};
    return kVars[pick(int(std::size(kVars)))];
  }

  std::string filter() {
    static const char* const kFilters[] = {"length",
                                           "upper",
                                           "lower",
                                           "trim",
                                           "first",
                                           "last",
                                           "list",
                                           "string",
                                           "int",
                                           "float",
                                           "default('x')",
                                           "default('y', true)",
                                           "join(',')",
                                           "reverse|list",
                                           "sort",
                                           "unique|list",
                                           "tojson",
                                           "abs",
                                           "round",
                                           "round(1)",
                                           "title",
                                           "capitalize",
                                           "replace('a', 'b')",
                                           "count",
                                           "items|list",
                                           "dictsort",
                                           "sum",
                                           "max",
                                           "min",
                                           "indent(2)",
                                           "wordcount",
                                           "center(7)",
                                           "select('odd')|list",
                                           "map('string')|list",
                                           "batch(2)|list",
                                           "tojson(indent=1)",
                                           "format(1, 2)",
                                           "selectattr('a')|list",
                                           "map(attribute='a')|list"};
    return kFilters[pick(int(std::size(kFilters)))];
  }

  std::string test() {
    static const char* const kTests[] = {"defined",       "undefined",   "none",    "string",   "number",
                                         "integer",       "float",       "mapping", "iterable", "sequence",
                                         "boolean",       "true",        "false",   "odd",      "even",
                                         "divisibleby 2", "in [1, 'a']", "eq 1",    "lower",    "not none"};
    return kTests[pick(int(std::size(kTests)))];
  }

  std::string subscript() {
    static const char* const kSubs[] = {"[0]",   "[-1]", "[1:]", "[::-1]",  "[:2]",
                                        "['a']", ".a",   "[5]",  "[1:-1:2]"};
    return kSubs[pick(int(std::size(kSubs)))];
  }

  std::string method() {
    static const char* const kMethods[] = {
        ".upper()",         ".split()",       ".split(',')",        ".strip()",
        ".startswith('a')", ".endswith('c')", ".replace('a', 'z')", ".get('a')",
        ".items()|list",    ".keys()|list",   ".title()",           ".find('l')",
        ".count('a')",      ".lstrip(' ')",   ".rsplit(',', 1)",    ".index(2)"};
    return kMethods[pick(int(std::size(kMethods)))];
  }

  std::mt19937_64 rng_;
};

}  // namespace

TEST_CASE("random expressions render like jinja2 or fail in both", "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  ExprGen gen(seed);
  std::vector<astrai::test::TemplateCase> cases;
  const std::string vars =
      R"({"s": "Hello, wörld", "n": 4, "f": 2.25, "l": [3, "x", null, 1.5, true], "d": {"a": "A", "b": 2},
          "m": [{"role": "user", "content": "hi", "a": 1}, {"role": "assistant", "content": null}]})";
  for (int i = 0; i < 600; ++i) {
    astrai::test::TemplateCase c;
    c.tmpl = "{{ " + gen.expr(1 + i % 3) + " }}";
    c.name = c.tmpl;
    c.extra_json = vars;
    cases.push_back(std::move(c));
  }
  size_t rendered = astrai::test::expect_same_as_jinja2(cases);
  CHECK(rendered * 3 >= cases.size());  // the comparison is mostly of outputs, not of errors
}
