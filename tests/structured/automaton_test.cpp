// The byte grammars: JSON schemas, json_object and regular expressions accept exactly the texts
// they should (whole strings fed byte by byte through the lazy DFA).
#include <catch2/catch.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "src/structured/json_schema.h"
#include "src/structured/matcher.h"

using namespace astrai::structured;

namespace {

// "accept": the whole text is a sentence; "prefix": it can still be completed; "reject": neither.
enum class Verdict { accept, prefix, reject };

Verdict run(GrammarDfa& dfa, std::string_view text) {
  int32_t s = dfa.start();
  for (char c : text) {
    s = dfa.step(s, uint8_t(c));
    if (s == GrammarDfa::kDead) return Verdict::reject;
  }
  return dfa.accepts(s) ? Verdict::accept : Verdict::prefix;
}

GrammarDfa schema(std::string_view json) {
  Grammar g;
  const std::string err = compile_json_schema(json, g);
  INFO(err);
  REQUIRE(err.empty());
  return GrammarDfa(std::move(g));
}

GrammarDfa regex(std::string_view p) {
  Grammar g;
  const std::string err = compile_regex(p, g);
  INFO(err);
  REQUIRE(err.empty());
  return GrammarDfa(std::move(g));
}

std::string schema_error(std::string_view json) {
  Grammar g;
  return compile_json_schema(json, g);
}

}  // namespace

TEST_CASE("an object schema accepts its properties in order, required ones present", "[structured]") {
  auto d = schema(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                     "ok":{"type":"boolean"}},"required":["name","age"],"additionalProperties":false})");
  CHECK(run(d, R"({"name":"bo","age":3})") == Verdict::accept);
  CHECK(run(d, R"({"name": "bo", "age": -12, "ok": true})") == Verdict::accept);
  CHECK(run(d, R"({"name":"bo","age":3,"ok":false})") == Verdict::accept);
  CHECK(run(d, R"({"name":"bo"})") == Verdict::reject);          // age is required
  CHECK(run(d, R"({"age":3,"name":"bo"})") == Verdict::reject);  // schema order
  CHECK(run(d, R"({"name":"bo","age":3,"x":1})") == Verdict::reject);
  CHECK(run(d, R"({"name":"b\"o\\","age":0})") == Verdict::accept);
  CHECK(run(d, R"({"name":"bo","age":03})") == Verdict::reject);  // no leading zeros
  CHECK(run(d, R"({"name":"bo","ag)") == Verdict::prefix);
  CHECK(run(d, R"({ "name":"bo","age":3})") == Verdict::reject);      // no free whitespace
  CHECK(run(d, "{\"name\":\"a\nb\",\"age\":1}") == Verdict::reject);  // raw control character
}

TEST_CASE("optional properties may be skipped anywhere, commas stay right", "[structured]") {
  auto d = schema(R"({"properties":{"a":{"type":"null"},"b":{"type":"null"},"c":{"type":"null"}}})");
  for (const char* ok : {"{}", R"({"a":null})", R"({"b":null})", R"({"c":null})", R"({"a":null,"c":null})",
                         R"({"a":null,"b":null,"c":null})"})
    CHECK(run(d, ok) == Verdict::accept);
  CHECK(run(d, R"({,"b":null})") == Verdict::reject);
  CHECK(run(d, R"({"b":null,})") == Verdict::reject);
}

TEST_CASE("integer and number bounds hold for every accepted text", "[structured]") {
  auto d = schema(R"({"type":"integer","minimum":-37,"maximum":1204})");
  for (int v = -200; v <= 2000; ++v) {
    const Verdict want = v >= -37 && v <= 1204 ? Verdict::accept : Verdict::reject;
    const Verdict got = run(d, std::to_string(v));
    // A too-small / too-large number may still be a prefix of a valid one ("-3" of "-30").
    if (want == Verdict::accept)
      CHECK(got == Verdict::accept);
    else
      CHECK(got != Verdict::accept);
  }
  auto e = schema(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})");
  CHECK(run(e, "0") != Verdict::accept);
  CHECK(run(e, "1") == Verdict::accept);
  CHECK(run(e, "9") == Verdict::accept);
  CHECK(run(e, "10") != Verdict::accept);
  auto n = schema(R"({"type":"number","minimum":-1.5,"maximum":2})");
  CHECK(run(n, "2") == Verdict::accept);
  CHECK(run(n, "1.999") == Verdict::accept);
  CHECK(run(n, "2.5") == Verdict::reject);
  CHECK(run(n, "-0.75") == Verdict::accept);
  CHECK(run(n, "-1") == Verdict::accept);
  CHECK(run(n, "-1.2") == Verdict::reject);  // bounds round inward: [-1, 2]
  CHECK(run(n, "3") == Verdict::reject);
  auto u = schema(R"({"type":"integer"})");
  CHECK(run(u, "999999999999999") == Verdict::accept);
  CHECK(run(u, "1000000000000000") == Verdict::reject);  // 16 digits
  CHECK(run(u, "-0") == Verdict::reject);
}

TEST_CASE("arrays respect minItems and maxItems", "[structured]") {
  auto d = schema(R"({"type":"array","items":{"enum":["x",1,null]},"minItems":2,"maxItems":3})");
  CHECK(run(d, "[]") == Verdict::reject);
  CHECK(run(d, R"(["x"])") == Verdict::reject);
  CHECK(run(d, R"(["x",1])") == Verdict::accept);
  CHECK(run(d, R"(["x", null,1])") == Verdict::accept);
  CHECK(run(d, R"(["x",1,1,1])") == Verdict::reject);
  CHECK(run(d, R"(["y",1])") == Verdict::reject);
}

TEST_CASE("strings: lengths count code points and escapes, patterns search unless anchored", "[structured]") {
  auto d = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  CHECK(run(d, R"("a")") == Verdict::reject);
  CHECK(run(d, R"("ab")") == Verdict::accept);
  CHECK(run(d, "\"\xc3\xa9\xe6\x97\xa5\"") == Verdict::accept);  // two code points, five bytes
  CHECK(run(d, R"("a\nb")") == Verdict::accept);
  CHECK(run(d, R"("abcd")") == Verdict::reject);
  CHECK(run(d, "\"a\xff\"") == Verdict::reject);              // not UTF-8
  CHECK(run(d, "\"a\xf0\x9f\x98\x80\"") == Verdict::reject);  // bounded strings stay in the BMP
  auto p = schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})");
  CHECK(run(p, R"("AB-123")") == Verdict::accept);
  CHECK(run(p, R"("AB-12")") == Verdict::reject);
  CHECK(run(p, R"("xAB-123")") == Verdict::reject);
  auto s = schema(R"({"type":"string","pattern":"ab+"})");
  CHECK(run(s, R"("xxabbby")") == Verdict::accept);
  CHECK(run(s, R"("xxa")") == Verdict::reject);
  auto q = schema(R"({"type":"string","pattern":"^a\"b$"})");  // a quote is written escaped
  CHECK(run(q, R"("a\"b")") == Verdict::accept);
  auto f = schema(R"({"type":"string","format":"date"})");
  CHECK(run(f, R"("2024-02-28")") == Verdict::accept);
  CHECK(run(f, R"("2024-13-01")") == Verdict::reject);
}

TEST_CASE("enum, const, anyOf, type lists and $ref to $defs (recursive)", "[structured]") {
  auto e = schema(R"({"enum":["red","gre\"en",3,{"a":[1,2]},null]})");
  CHECK(run(e, R"("red")") == Verdict::accept);
  CHECK(run(e, R"("gre\"en")") == Verdict::accept);
  CHECK(run(e, R"({"a":[1,2]})") == Verdict::accept);
  CHECK(run(e, "null") == Verdict::accept);
  CHECK(run(e, "4") == Verdict::reject);
  auto c = schema(R"({"const":"x"})");
  CHECK(run(c, R"("x")") == Verdict::accept);
  CHECK(run(c, R"("y")") == Verdict::reject);
  auto a = schema(R"({"anyOf":[{"type":"string","maxLength":1},{"type":"integer","minimum":5}]})");
  CHECK(run(a, R"("z")") == Verdict::accept);
  CHECK(run(a, "7") == Verdict::accept);
  CHECK(run(a, "4") != Verdict::accept);  // a prefix of 45
  auto t = schema(R"({"type":["string","null"]})");
  CHECK(run(t, "null") == Verdict::accept);
  CHECK(run(t, R"("")") == Verdict::accept);
  auto r = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                     "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},
                     "$ref":"#/$defs/node"})");
  CHECK(run(r, R"({"v":1,"next":{"v":2,"next":null}})") == Verdict::accept);
  CHECK(run(r, R"({"v":1,"next":{"v":2}})") == Verdict::reject);
}

TEST_CASE("json_object and the empty schema take any JSON", "[structured]") {
  Grammar g;
  REQUIRE(compile_json_object(g).empty());
  GrammarDfa d(std::move(g));
  CHECK(run(d, R"({"a":[1,{"b":null},"x",-2.5,true],"c":{}})") == Verdict::accept);
  CHECK(run(d, "{}") == Verdict::accept);
  CHECK(run(d, "[]") == Verdict::reject);  // an object
  CHECK(run(d, R"({"a":})") == Verdict::reject);
  CHECK(run(d, R"({,"a":1})") == Verdict::reject);  // a separator needs a member before it
  CHECK(run(d, R"({"a":[,1]})") == Verdict::reject);
  CHECK(run(d, R"({"a":[1,,2]})") == Verdict::reject);
  auto any = schema("{}");
  CHECK(run(any, "[1,2]") == Verdict::accept);
  CHECK(run(any, R"("s")") == Verdict::accept);
}

TEST_CASE("a complete value ends the text; a prefix with more possible is not complete", "[structured]") {
  auto d = schema(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
  int32_t s = d.start();
  for (char c : std::string(R"({"a":12)")) s = d.step(s, uint8_t(c));
  CHECK_FALSE(d.accepts(s));
  s = d.step(s, '}');
  CHECK(d.complete(s));
  auto n = schema(R"({"type":"integer"})");
  s = n.step(n.start(), '1');
  CHECK(n.accepts(s));
  CHECK_FALSE(n.complete(s));  // more digits may follow
}

TEST_CASE("unsupported or invalid schemas name the keyword and where it is", "[structured]") {
  CHECK(schema_error(R"({"type":"integer","multipleOf":3})") ==
        "schema: the keyword 'multipleOf' is not supported");
  CHECK(schema_error(R"({"properties":{"a":{"oneOf":[{}]}}})") ==
        "schema.properties.a: the keyword 'oneOf' is not supported");
  CHECK(schema_error(R"({"type":"strin"})") == "schema.type: unknown type 'strin'");
  CHECK(schema_error(R"({"$ref":"#/$defs/missing"})") ==
        "schema.$ref: '#/$defs/missing' does not point into the schema");
  CHECK(schema_error(R"({"properties":{"a":{}},"required":["b"]})") ==
        "schema.required: names 'b', which is not in properties");
  CHECK(schema_error(R"x({"type":"string","pattern":"(?=a)"})x").find("lookaround") != std::string::npos);
  CHECK(schema_error(R"({"type":"integer","minimum":5,"maximum":4})").find("bounds") != std::string::npos);
  CHECK(schema_error("{nope") == "schema: is not valid JSON");
  CHECK(schema_error("false") == "schema: the schema 'false' allows no value");
}

TEST_CASE("regular expressions match whole texts", "[structured]") {
  auto d = regex(R"(^(yes|no)-\d{2,3}[a-c]*$)");
  CHECK(run(d, "yes-12") == Verdict::accept);
  CHECK(run(d, "no-123abcab") == Verdict::accept);
  CHECK(run(d, "no-1") == Verdict::prefix);
  CHECK(run(d, "maybe") == Verdict::reject);
  auto u = regex("[\xc3\xa0-\xc3\xbf]+\\.");  // [à-ÿ]+\.
  CHECK(run(u, "\xc3\xa9\xc3\xa0.") == Verdict::accept);
  CHECK(run(u, "e.") == Verdict::reject);
  auto opt_star = regex("(a*)?b(c*|d)?");  // optional loops: no way into them but their entry
  CHECK(run(opt_star, "aab") == Verdict::accept);
  CHECK(run(opt_star, "bcc") == Verdict::accept);
  CHECK(run(opt_star, "bd") == Verdict::accept);
  CHECK(run(opt_star, "bcd") == Verdict::reject);
  auto neg = regex("[^a]x");
  CHECK(run(neg, "\xe6\x97\xa5x") == Verdict::accept);
  CHECK(run(neg, "ax") == Verdict::reject);
  auto dot = regex("a.c");
  CHECK(run(dot, "a\nc") == Verdict::reject);
  CHECK(run(dot,
            "a\xf0\x9f\x98\x80"
            "c") == Verdict::accept);
  Grammar g;
  CHECK(compile_regex("a{2,1}", g).find("m < n") != std::string::npos);
  CHECK(compile_regex("(a", g).find("')'") != std::string::npos);
  CHECK(compile_regex("\\1", g).find("backreferences") != std::string::npos);
}

TEST_CASE("a pattern or schema whose automaton passes the size budget is refused, not built",
          "[structured]") {
  // Nested bounded repeats multiply (16M copies); optional copies in a row make quadratic epsilon
  // closures (75M entries). Both would hold gigabytes; both are an error naming the cause.
  for (std::string_view p : {"(a{4096}){4096}", "(a?){4096}", "(a*){4096}", "((ab|c){64}x){2000}"}) {
    Grammar g;
    const std::string err = compile_regex(p, g);
    INFO(p);
    CHECK(err == "regex: " + std::string(kTooLarge));
    CHECK(g.rules.empty());
  }
  std::string many = R"({"type":"object","properties":{)";
  for (int i = 0; i < 3; ++i)
    many += std::string(i ? "," : "") + "\"p" + std::to_string(i) + R"(":{"type":"string","maxLength":4096})";
  many += "}}";
  CHECK(schema_error(many) == "schema: " + std::string(kTooLarge));
  CHECK(schema_error(R"({"type":"array","items":{"type":"string","pattern":"(x?){4096}"}})") ==
        "schema: " + std::string(kTooLarge));
  // The largest single constructs stay within it, twice over, and still match what they should.
  auto two = schema(R"({"type":"object","properties":{"a":{"type":"string","maxLength":4096},
                       "b":{"type":"string","minLength":4096}},"required":["a","b"]})");
  CHECK(run(two, R"({"a":"x","b":")" + std::string(4096, 'y') + "\"}") == Verdict::accept);
  CHECK(run(two, R"({"a":"x","b":")" + std::string(4095, 'y') + "\"}") == Verdict::reject);
  auto dots = regex("[^\"]{4096}.{0,4096}");
  CHECK(run(dots, std::string(4096, 'z')) == Verdict::accept);
  CHECK(run(dots, std::string(4095, 'z')) == Verdict::prefix);
}

TEST_CASE("a state inside a plain string names its position and room; one inside an escape does not",
          "[structured]") {
  auto d = schema(R"({"type":"string","minLength":1,"maxLength":3})");
  const auto& pos = d.grammar().string_positions;
  int32_t s = d.step(d.start(), '"');
  REQUIRE(d.string_position(s) >= 0);
  CHECK(pos[size_t(d.string_position(s))].room == 3);
  CHECK_FALSE(pos[size_t(d.string_position(s))].closable);
  s = d.step(s, 'a');
  REQUIRE(d.string_position(s) >= 0);
  CHECK(pos[size_t(d.string_position(s))].room == 2);
  CHECK(pos[size_t(d.string_position(s))].closable);
  CHECK(d.string_position(d.step(s, '\\')) == -1);    // mid-escape: only escape letters
  CHECK(d.string_position(d.step(s, '\xc3')) == -1);  // mid-character
  CHECK(d.string_position(d.start()) == -1);          // before the string
  auto p = schema(R"({"type":"string","pattern":"^a+$"})");
  CHECK(p.string_position(p.step(p.start(), '"')) == -1);  // patterns are walked
  auto a = schema(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"string","maxLength":5}]})");
  CHECK(a.string_position(a.step(a.start(), '"')) == -1);  // two strings at once
}
