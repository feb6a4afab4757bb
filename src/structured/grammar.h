// A grammar over bytes as a recursive transition network: each rule is an NFA whose edges read one
// byte in a range, call another rule (push; the callee's final states return to the edge's
// target) or move without input. JSON schemas and regular expressions both compile to this form
// (json_schema.h, regex.h); matcher.h runs it as a lazily built DFA over sets of call stacks.
//
// GrammarBuilder makes rules with Thompson-style fragments: every construction returns a fragment
// with one entry and one exit state of the rule being built, joined by epsilon edges. A fragment's
// exit state has no edges of its own (so that wrapping it in opt() or seq() adds no path into it).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace astrai::structured {

struct Edge {
  enum class Kind : uint8_t { byte, call, eps };
  Kind kind = Kind::eps;
  uint8_t lo = 0, hi = 0;  // byte: the accepted range [lo, hi]
  int32_t rule = -1;       // call: the callee
  int32_t to = -1;
};

struct Rule {
  std::string name;  // for error messages and debugging
  int32_t start = 0;
  std::vector<std::vector<Edge>> out;  // out[state]: the state's edges
  std::vector<uint8_t> final;          // final[state]: the rule may end here
  // tag[state]: the Grammar::string_positions entry the state belongs to (-1: none). Set on the
  // states of one position inside a plain JSON string (its next character or its closing quote).
  std::vector<int32_t> tag;
  // Filled by Grammar::finish: the states reachable through epsilon edges (the state included,
  // sorted), and which states have byte edges (a matcher waits there for input). The closures
  // lie in one array: state s's is closure[closure_at[s] .. closure_at[s + 1]).
  std::vector<int32_t> closure_at;
  std::vector<int32_t> closure;
  std::vector<uint8_t> scans;
  std::span<const int32_t> eps_closure(int32_t s) const {
    return {closure.data() + closure_at[size_t(s)], closure.data() + closure_at[size_t(s) + 1]};
  }
};

// A position inside a JSON string without a pattern: how many more characters it may take
// (-1: any number), whether the string may close here, and whether its characters stay below
// U+10000. The token mask uses it to allow the tokens that stay inside the string without walking
// them (token_grammar.cpp).
struct StringPosition {
  int32_t room = -1;
  bool closable = false;
  bool bmp_only = false;
};

// What one grammar may hold. Bounded repeats are unrolled, so nested counts multiply
// ((a{4096}){4096}: 16M copies), and a run of optional copies makes the epsilon closures
// quadratic ((a?){4096}: 75M entries); a request must not be able to hold gigabytes or the thread
// for minutes with a few bytes. The largest single construct allowed (a string of maxLength 4096:
// about 210k states, 1M closure entries) fits twice over.
inline constexpr size_t kMaxGrammarStates = size_t(1) << 19;
inline constexpr size_t kMaxClosureEntries = size_t(1) << 22;
// What compiling says when a budget is passed (after "schema: " or "regex: ").
inline constexpr std::string_view kTooLarge =
    "is too large to compile: its automaton would pass the size limit (bounded repetitions, "
    "minLength / maxLength and minItems / maxItems are unrolled, and nested ones multiply)";

// Thrown by GrammarBuilder::state() past kMaxGrammarStates; compile_json_schema and compile_regex
// catch it and return kTooLarge (it never leaves the structured module).
struct GrammarTooLarge {};

struct Grammar {
  std::vector<Rule> rules;
  std::vector<StringPosition> string_positions;
  int32_t root = -1;
  // Computes each rule's epsilon closures; call once, after the last rule is built. False (the
  // grammar is then unusable) when they would hold more than kMaxClosureEntries.
  [[nodiscard]] bool finish();
  size_t num_states() const;
};

// A piece of the rule being built: enter at `in`, leave from `out`.
struct Frag {
  int32_t in = -1, out = -1;
};

// A range of Unicode scalar values [lo, hi].
struct CodeRange {
  uint32_t lo, hi;
};
// Sorted, merged, without the surrogates U+D800..U+DFFF (they have no UTF-8 form).
std::vector<CodeRange> normalize_ranges(const std::vector<CodeRange>& r);
// The complement of normalized ranges within [0, 0x10FFFF] (surrogates excluded).
std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& r);
std::vector<CodeRange> intersect_ranges(const std::vector<CodeRange>& a, const std::vector<CodeRange>& b);

class GrammarBuilder {
 public:
  explicit GrammarBuilder(Grammar& g) : g_(g) {}

  // Starts a new, empty rule and returns its id; later fragments are built in the current rule.
  int32_t begin_rule(std::string name);
  // The rule being built: `body` runs from its start to its final state.
  void end_rule(Frag body);
  // Switches the current rule (a rule's body may be built after other rules were started).
  int32_t current_rule() const { return cur_; }
  void set_current_rule(int32_t r) { cur_ = r; }

  int32_t state();
  int32_t num_states() { return int32_t(rule().out.size()); }
  // Tags the states with byte edges that epsilon edges reach from `from` (Rule::tag).
  void tag_scanning_from(int32_t from, int32_t value);
  int32_t add_string_position(StringPosition p);
  void eps(int32_t from, int32_t to);
  Frag empty();
  Frag byte_range(uint8_t lo, uint8_t hi);
  Frag literal(std::string_view bytes);
  // Any one code point of the (normalized) ranges, as valid UTF-8.
  Frag code_points(const std::vector<CodeRange>& ranges);
  Frag call(int32_t rule);
  Frag seq(Frag a, Frag b);
  Frag alt(const std::vector<Frag>& options);
  Frag opt(Frag f);
  Frag star(Frag f);
  // make() min times, then (max - min) optional copies (max < 0: then star). `make` builds a fresh
  // copy each call.
  Frag repeat(const std::function<Frag()>& make, int64_t min, int64_t max);

 private:
  Rule& rule() { return g_.rules[size_t(cur_)]; }
  Grammar& g_;
  int32_t cur_ = -1;
  size_t states_ = 0;  // in every rule, against kMaxGrammarStates
  // tag_scanning_from's visited set (mark_[s] == stamp_) and stack, one allocation for every call.
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  std::vector<int32_t> todo_;
};

}  // namespace astrai::structured
