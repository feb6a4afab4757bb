// Constrained requests through the step loop (fake model, sampled): every choice's tokens spell a
// sentence of the grammar, n > 1 choices fork the matcher, stop ids only where the text is
// complete, a closed JSON value ends the choice by itself.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "src/structured/json_schema.h"
#include "src/structured/matcher.h"
#include "src/structured/token_grammar.h"
#include "step_loop_fixture.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

constexpr int kVocab = 300;
constexpr int32_t kEos = 299;

// Tokens 0..255 are the bytes; 256.. a few longer pieces; 299 (eos) adds no bytes.
std::shared_ptr<const structured::TokenVocabulary> vocab() {
  static auto v = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.emplace_back(1, char(b));
    for (const char* s : {"\"", "\":", "},{", "null", "true", "12", "\"a\"", "aa", "[1", "]}"})
      t.emplace_back(s);
    t.resize(kVocab);
    std::vector<uint8_t> excluded(kVocab, 0);
    excluded[kEos] = 1;
    return std::make_shared<structured::TokenVocabulary>(std::move(t), std::move(excluded));
  }();
  return v;
}

std::string text_of(const std::vector<int32_t>& toks) {
  std::string s;
  for (int32_t t : toks) s += vocab()->bytes(t);
  return s;
}

bool matches(ConstraintKind kind, const std::string& source, const std::string& text) {
  structured::Grammar g;
  const std::string err = kind == ConstraintKind::regex ? structured::compile_regex(source, g)
                                                        : structured::compile_json_schema(source, g);
  REQUIRE(err.empty());
  structured::GrammarDfa d(std::move(g));
  int32_t s = d.start();
  for (char c : text) s = d.step(s, uint8_t(c));
  return s != structured::GrammarDfa::kDead && d.accepts(s);
}

Request constrained(ConstraintKind kind, const std::string& source, uint64_t seed, int n) {
  Request r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 300;
  r.n = n;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.constraint = {kind, structured::compile_constraint(kind, source, vocab()).value()};
  return r;
}

}  // namespace

TEST_CASE("constrained choices spell sentences of the grammar and end with stop", "[sched][structured]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 4000;
  auto fl = make_fake_loop(o, {kVocab, 4096, {kEos}});
  const std::string schema =
      R"({"type":"object","properties":{"a":{"type":"integer","minimum":-9,"maximum":99},
          "b":{"type":"array","items":{"enum":["x","y",null]},"maxItems":3},"c":{"type":"string","maxLength":4}},
          "required":["a","c"],"additionalProperties":false})";
  std::vector<Stream> streams;
  for (int i = 0; i < 8; ++i)
    streams.push_back(
        fl.loop->submit(constrained(ConstraintKind::json_schema, schema, seed + uint64_t(i), 3)).value());
  streams.push_back(
      fl.loop->submit(constrained(ConstraintKind::regex, "(ab|c)+-[0-9]{1,3}", seed, 4)).value());
  for (size_t i = 0; i < streams.size(); ++i) {
    const bool json = i < 8;
    Outcome out = collect(streams[i], json ? 3 : 4);
    for (size_t c = 0; c < out.tokens.size(); ++c) {
      const std::string text = text_of(out.tokens[c]);
      INFO("request " << i << " choice " << c << ": " << text);
      CHECK(out.finish[c] == FinishReason::stop);
      CHECK(matches(json ? ConstraintKind::json_schema : ConstraintKind::regex,
                    json ? schema : "(ab|c)+-[0-9]{1,3}", text));
    }
  }
  REQUIRE(fl.loop->check_invariants().ok());
}

TEST_CASE("ignore_eos under a constraint runs until the value is complete or max_tokens",
          "[sched][structured]") {
  const int overlap = GENERATE(0, 1);  // the step loop overlapped or not
  INFO("overlap " << overlap);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  EngineOptions o;
  o.overlap = overlap;
  o.page_size = 4;
  o.max_pages = 1000;
  auto fl = make_fake_loop(o, {kVocab, 4096, {kEos}});
  // "a+" is complete after one a, but may go on: without eos the choice runs to max_tokens.
  Request r = constrained(ConstraintKind::regex, "a+", seed, 1);
  r.ignore_eos = true;
  r.max_tokens = 20;
  Outcome out = collect(fl.loop->submit(std::move(r)).value());
  CHECK(out.finish[0] == FinishReason::length);
  const std::string text = text_of(out.tokens[0]);
  CHECK(text.find_first_not_of('a') == std::string::npos);
  CHECK(text.size() >= 20);
  // A closed value ends the choice although eos is ignored.
  Request j = constrained(ConstraintKind::json_schema, R"({"enum":["yes","no"]})", seed, 2);
  j.ignore_eos = true;
  Outcome jo = collect(fl.loop->submit(std::move(j)).value(), 2);
  for (int c = 0; c < 2; ++c) {
    CHECK(jo.finish[size_t(c)] == FinishReason::stop);
    const std::string t = text_of(jo.tokens[size_t(c)]);
    CHECK((t == "\"yes\"" || t == "\"no\""));
  }
}

TEST_CASE("a request whose constraint has no grammar is refused", "[sched][structured]") {
  EngineOptions o;
  o.max_pages = 100;
  auto fl = make_fake_loop(o, {kVocab, 4096, {kEos}});
  Request r;
  r.prompt = {1};
  r.constraint.kind = ConstraintKind::json_object;
  auto st = fl.loop->submit(std::move(r));
  REQUIRE_FALSE(st.ok());
  CHECK(st.status().message() == "the constraint has no compiled grammar");
}
