// Pre-tokenizer behaviours as Hugging Face documents them, and clear errors for components we do
// not support.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include "src/tokenizer/pre_tokenizer.h"
#include "src/tokenizer/tokenizer.h"

using namespace astrai;

namespace {

std::vector<std::string> pre_tokenize(const std::string& json, const std::string& text) {
  simdjson::dom::parser p;
  const simdjson::padded_string ps(json);
  auto parsed = tok::parse_pre_tokenizer(p.parse(ps).value()).value();
  tok::PreTokenizeScratch s;
  std::vector<std::string_view> pieces{text};
  parsed.pre_tokenizer->pre_tokenize(pieces, s, true);
  return {pieces.begin(), pieces.end()};
}

std::string split(const std::string& behavior) {
  return R"({"type":"Split","pattern":{"String":"-"},"behavior":")" + behavior + R"(","invert":false})";
}

using V = std::vector<std::string>;

// A minimal tokenizer.json with one component replaced.
std::string with(const std::string& key, const std::string& value) {
  std::string j =
      R"({"normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,)"
      R"("added_tokens":[],"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}})";
  const std::string k = "\"" + key + "\":";
  const size_t at = j.find(k) + k.size();
  const size_t end = key == "model" ? j.size() - 1 : j.find(',', at);
  return j.replace(at, end - at, value);
}

}  // namespace

TEST_CASE("Split behaviours cut the-final--countdown as the HF docs show", "[unit]") {
  const std::string t = "the-final--countdown";
  CHECK(pre_tokenize(split("Removed"), t) == V{"the", "final", "countdown"});
  CHECK(pre_tokenize(split("Isolated"), t) == V{"the", "-", "final", "-", "-", "countdown"});
  CHECK(pre_tokenize(split("MergedWithPrevious"), t) == V{"the-", "final-", "-", "countdown"});
  CHECK(pre_tokenize(split("MergedWithNext"), t) == V{"the", "-final", "-", "-countdown"});
  CHECK(pre_tokenize(split("Contiguous"), t) == V{"the", "-", "final", "--", "countdown"});
}

TEST_CASE("Split with invert keeps the matches as pieces", "[unit]") {
  const std::string j = R"({"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Removed","invert":true})";
  CHECK(pre_tokenize(j, "Hey, friend!  ok") == V{"Hey", "friend", "ok"});
}

TEST_CASE("Digits splits ASCII digits one by one or in runs", "[unit]") {
  CHECK(pre_tokenize(R"({"type":"Digits","individual_digits":true})", "ab123c45") ==
        V{"ab", "1", "2", "3", "c", "4", "5"});
  CHECK(pre_tokenize(R"({"type":"Digits","individual_digits":false})", "ab123c45") ==
        V{"ab", "123", "c", "45"});
}

TEST_CASE("Metaspace replaces spaces, prepends and splits before each word", "[unit]") {
  CHECK(pre_tokenize(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true})",
                     "Hey friend") == V{"▁Hey", "▁friend"});
  CHECK(pre_tokenize(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":false})",
                     "Hey friend") == V{"Hey▁friend"});
}

TEST_CASE("the split regexes treat U+0085 as whitespace and fold case like Oniguruma", "[unit]") {
  const std::string j = R"({"type":"Split","pattern":{"Regex":"(?i:'s)|\\s+|\\S+"},"behavior":"Isolated"})";
  CHECK(pre_tokenize(j,
                     "a\xC2\x85"
                     "b") == V{"a", "\xC2\x85", "b"});
  CHECK(pre_tokenize(j, "'S") == V{"'S"});
}

TEST_CASE("unsupported components are errors that name them", "[unit]") {
  auto msg = [](const std::string& json) {
    auto r = Tokenizer::from_json(json);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK_THAT(msg(with("pre_tokenizer", R"({"type":"Foo"})")),
             Catch::Contains("pre_tokenizer type 'Foo' is not supported"));
  CHECK_THAT(msg(with("normalizer", R"({"type":"BertNormalizer"})")),
             Catch::Contains("normalizer type 'BertNormalizer' is not supported"));
  CHECK_THAT(msg(with("decoder", R"({"type":"CTC"})")),
             Catch::Contains("decoder type 'CTC' is not supported"));
  CHECK_THAT(msg(with("post_processor", R"({"type":"Weird"})")),
             Catch::Contains("post_processor type 'Weird' is not supported"));
  CHECK_THAT(msg(with("model", R"({"type":"Unigram","vocab":[["a",0.0]]})")),
             Catch::Contains("model type 'Unigram' is not supported"));
  CHECK_THAT(
      msg(with("pre_tokenizer", R"({"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated"})")),
      Catch::Contains("does not compile"));
  CHECK_THAT(msg("not json"), Catch::Contains("not valid JSON"));
}

TEST_CASE("merges are read in both the \"a b\" and [\"a\", \"b\"] forms", "[unit]") {
  auto a =
      Tokenizer::from_json(with("model", R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]})"));
  auto b = Tokenizer::from_json(
      with("model", R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]})"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK((*a)->encode("abab") == std::vector<int32_t>{2, 2});
  CHECK((*b)->encode("abab") == std::vector<int32_t>{2, 2});
}

TEST_CASE("a chat template that does not parse leaves the tokenizer usable and reports why", "[unit]") {
  auto t = Tokenizer::from_json(with("normalizer", "null"), R"({"chat_template":"{% for %}"})");
  REQUIRE(t.ok());
  CHECK((*t)->chat_template() == nullptr);
  CHECK_FALSE((*t)->chat_template_status().ok());
  CHECK_THAT((*t)->chat_template_status().message(), Catch::Contains("chat_template"));
  CHECK((*t)->encode("ab") == std::vector<int32_t>{2});
}

TEST_CASE("a chat_template list takes the one named default", "[unit]") {
  auto t = Tokenizer::from_json(
      with("normalizer", "null"),
      R"({"chat_template":[{"name":"tool_use","template":"{% for %}"},{"name":"default","template":"{{ bos_token }}"}]})");
  REQUIRE(t.ok());
  // The default template is fine; the broken tool_use one is ignored.
  INFO((*t)->chat_template_status().message());
  CHECK(((*t)->chat_template() != nullptr ||
         (*t)->chat_template_status().message().find("not implemented") != std::string::npos));
}
