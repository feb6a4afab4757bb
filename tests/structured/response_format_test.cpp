// Reading the structured-output fields of a request: chat's response_format and the Responses
// API's text.format give the same constraint, a forced tool call constrains to its JSON call, and a
// bad one is an error naming the field.
#include "src/structured/response_format.h"

#include <catch2/catch.hpp>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "src/structured/json_schema.h"
#include "src/structured/matcher.h"
#include "src/structured/token_grammar.h"

using namespace astrai;
using namespace astrai::structured;

namespace {

namespace od = simdjson::ondemand;

// Runs `read` on the JSON value `text`.
template <typename Read>
json::MaybeFieldError read_json(std::string_view text, Read&& read) {
  od::parser p;
  simdjson::padded_string padded(text);
  od::document doc;
  json::Value v;
  REQUIRE(!p.iterate(padded).get(doc));
  REQUIRE(!doc.get_value().get(v));
  return read(v);
}

json::MaybeFieldError text_format(std::string_view text, ConstraintSpec& out) {
  return read_json(text, [&](json::Value& v) { return read_text_format(v, "text.format", out); });
}

json::MaybeFieldError response_format(std::string_view text, ConstraintSpec& out) {
  return read_json(text, [&](json::Value& v) {
    bool handled = false;
    auto e = read_constraint_field("response_format", v, out, handled);
    CHECK(handled);
    return e;
  });
}

constexpr std::string_view kSchema =
    R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})";

}  // namespace

TEST_CASE("text.format json_schema constrains to its schema, as response_format's json_schema does") {
  ConstraintSpec responses, chat;
  auto e = text_format(R"({"type":"json_schema","name":"e","strict":true,"description":"d","schema":)" +
                           std::string(kSchema) + "}",
                       responses);
  INFO((e ? e->message : ""));
  REQUIRE(!e);
  REQUIRE(!response_format(R"({"type":"json_schema","json_schema":{"name":"e","strict":true,"schema":)" +
                               std::string(kSchema) + "}}",
                           chat));
  CHECK(responses.kind == ConstraintKind::json_schema);
  CHECK(responses.source == kSchema);
  CHECK(chat.kind == responses.kind);
  CHECK(chat.source == responses.source);
}

TEST_CASE("text.format json_object and text: an object, or no constraint") {
  ConstraintSpec obj, text;
  REQUIRE(!text_format(R"({"type":"json_object"})", obj));
  CHECK(obj.kind == ConstraintKind::json_object);
  REQUIRE(!text_format(R"({"type":"text"})", text));
  CHECK(text.kind == ConstraintKind::none);
}

TEST_CASE("a bad text.format is an error naming the field inside it") {
  struct Case {
    std::string_view json, field, words;
  };
  const Case cases[] = {
      {R"({"type":"json_schema","name":"x"})", "text.format.schema", "is required"},
      {R"({"type":"json_schema","schema":null})", "text.format.schema", "is required"},
      {R"({"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"integer","multipleOf":3}}}})",
       "text.format.schema.properties.a", "'multipleOf'"},
      {R"({"type":"json_schema","strict":"yes","schema":{}})", "text.format.strict", "boolean"},
      {R"({"type":"json_schema","schema":{"type":"string","pattern":"(a{4096}){4096}"}})",
       "text.format.schema", "too large to compile"},
      {R"({"type":"grammar"})", "text.format.type", "'grammar'"},
      {R"({"name":"x"})", "text.format.type", "is required"},
      {R"(["json_object"])", "text.format", "must be an object"},
  };
  for (const auto& c : cases) {
    ConstraintSpec out;
    auto e = text_format(c.json, out);
    INFO(c.json);
    REQUIRE(e);
    CHECK(e->field == c.field);
    INFO(e->message);
    CHECK(e->message.find(c.words) != std::string::npos);
    CHECK(out.kind == ConstraintKind::none);
  }
}

namespace {

bool accepts(const ConstraintSpec& c, std::string_view text) {
  Grammar g;
  REQUIRE(compile_json_schema(c.source, g).empty());
  GrammarDfa dfa(std::move(g));
  int32_t s = dfa.start();
  for (char ch : text) {
    s = dfa.step(s, uint8_t(ch));
    if (s == GrammarDfa::kDead) return false;
  }
  return dfa.accepts(s);
}

}  // namespace

TEST_CASE("a forced tool call is the JSON call with arguments under the tool's schema, $refs re-rooted") {
  ConstraintSpec c;
  // A $defs reference, a recursive reference to the schema's root, and "$ref" as a plain string.
  const std::string input = R"({"$defs":{"d":{"type":"integer","minimum":0,"maximum":3}},"type":"object",
    "properties":{"n":{"$ref":"#/$defs/d"},"kind":{"enum":["$ref","#/$defs/d"]},
                  "next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["n","kind","next"]})";
  auto e = constrain_to_tool_call("walk", input, "tools[0].input_schema", c);
  INFO((e ? e->field + ": " + e->message : ""));
  REQUIRE(!e);
  CHECK(c.kind == ConstraintKind::json_schema);
  CHECK(accepts(c, R"({"name":"walk","arguments":{"n":2,"kind":"$ref","next":null}})"));
  CHECK(accepts(
      c,
      R"({"name":"walk","arguments":{"n":0,"kind":"#/$defs/d","next":{"n":3,"kind":"$ref","next":null}}})"));
  CHECK(!accepts(c, R"({"name":"walk","arguments":{"n":4,"kind":"$ref","next":null}})"));  // n > 3
  CHECK(!accepts(c, R"({"name":"run","arguments":{"n":1,"kind":"$ref","next":null}})"));   // another tool
  CHECK(!accepts(c, R"({"name":"walk","arguments":{"n":1,"kind":"#/$defs/d"}})"));         // next required
  CHECK(!accepts(c, R"({"name":"walk","arguments":{"n":1,"kind":"#/properties","next":null}})"));
}

TEST_CASE("a forced tool's bad schema is an error naming the place in the tool's input_schema") {
  ConstraintSpec c;
  auto e =
      constrain_to_tool_call("t", R"({"type":"object","properties":{"a":{"type":"integer","multipleOf":2}}})",
                             "tools[1].input_schema", c);
  REQUIRE(e);
  CHECK(e->field == "tools[1].input_schema.properties.a");
  CHECK(e->message.find("'multipleOf'") != std::string::npos);
  CHECK(c.kind == ConstraintKind::none);
}

TEST_CASE("a request's schema compiles once: the grammar read with it is the one the engine builds on") {
  // A schema no other case reads (the verdicts of read schemas are remembered process-wide).
  std::mt19937_64 rng(std::random_device{}());
  const std::string name = "field_" + std::to_string(rng());
  const std::string schema = R"({"type":"object","properties":{")" + name +
                             R"(":{"type":"string","maxLength":8}},"required":[")" + name + R"("]})";
  const std::string text = R"({"type":"json_schema","json_schema":{"name":"x","schema":)" + schema + "}}";
  auto vocab = std::make_shared<TokenVocabulary>(
      [] {
        std::vector<std::string> toks;
        for (int b = 0; b < 256; ++b) toks.emplace_back(1, char(b));
        return toks;
      }(),
      std::vector<uint8_t>{});

  const uint64_t before = grammar_compiles();
  ConstraintSpec first;
  REQUIRE_FALSE(response_format(text, first));
  CHECK(first.kind == ConstraintKind::json_schema);
  REQUIRE(first.grammar != nullptr);
  CHECK(grammar_compiles() == before + 1);

  // The engine's side (Generation::start) takes the carried grammar: no second compile.
  auto tg = compile_constraint(first.kind, first.source, vocab, first.grammar);
  REQUIRE(tg.ok());
  CHECK(grammar_compiles() == before + 1);
  Matcher m(tg.value());
  const std::string ok = "{\"" + name + "\":\"abc\"}";
  for (char c : ok) REQUIRE(m.advance(uint8_t(c)));
  CHECK(m.complete());
  Matcher too_long(tg.value());
  const std::string bad = "{\"" + name + "\":\"abcdefghi";  // nine characters: past maxLength
  bool refused = false;
  for (char c : bad) refused = refused || !too_long.advance(uint8_t(c));
  CHECK(refused);

  // The same schema again: the verdict is remembered, nothing compiles, no grammar is carried, and
  // the engine finds its token grammar in its own cache.
  ConstraintSpec again;
  REQUIRE_FALSE(response_format(text, again));
  CHECK(again.grammar == nullptr);
  auto tg2 = compile_constraint(again.kind, again.source, vocab);
  REQUIRE(tg2.ok());
  CHECK(tg2.value() == tg.value());
  CHECK(grammar_compiles() == before + 1);

  // A schema that does not compile carries nothing.
  ConstraintSpec broken;
  CHECK(response_format(
      R"({"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer","multipleOf":)" +
          std::to_string(rng() % 1000 + 2) + "}}}",
      broken));
  CHECK(broken.grammar == nullptr);
}
