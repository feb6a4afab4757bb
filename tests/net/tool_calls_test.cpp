#include "net/tool_calls.h"

#include <catch2/catch.hpp>
#include <random>

#include "tools/test_util.h"

using namespace astrai::net;

namespace {

ToolParse stream_parse(const std::string& text, std::mt19937_64& rng) {
  ToolCallStreamParser p;
  ToolParse all;
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = std::min(text.size() - i, size_t(1 + rng() % 7));
    ToolParse part = p.push(std::string_view(text).substr(i, len));
    all.content += part.content;
    for (auto& c : part.calls) all.calls.push_back(std::move(c));
    i += len;
  }
  ToolParse tail = p.finish();
  all.content += tail.content;
  for (auto& c : tail.calls) all.calls.push_back(std::move(c));
  return all;
}

std::string random_word(std::mt19937_64& rng) {
  std::string w;
  const size_t n = 1 + rng() % 8;
  for (size_t i = 0; i < n; ++i) w += char('a' + rng() % 26);
  return w;
}

}  // namespace

TEST_CASE("Qwen/Hermes tool calls are parsed out of the text", "[unit]") {
  const ToolParse r = parse_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"days\": 2}}\n</tool_call>");
  REQUIRE(r.content == "Let me check.\n");
  REQUIRE(r.calls.size() == 1);
  REQUIRE(r.calls[0].name == "get_weather");
  REQUIRE(r.calls[0].arguments_json == R"({"city": "Paris", "days": 2})");
  REQUIRE(r.calls[0].id.rfind("call_", 0) == 0);
}

TEST_CASE("arguments given as a JSON string are kept as that JSON text", "[unit]") {
  const ToolParse r = parse_tool_calls(R"(<tool_call>{"name":"f","arguments":"{\"x\":1}"}</tool_call>)");
  REQUIRE(r.calls.size() == 1);
  REQUIRE(r.calls[0].arguments_json == R"({"x":1})");
}

TEST_CASE("a bare JSON function call (or an array of them) is a tool call", "[unit]") {
  ToolParse r = parse_tool_calls(R"(  {"name": "lookup", "parameters": {"q": "x"}} )");
  REQUIRE(r.calls.size() == 1);
  REQUIRE(r.calls[0].name == "lookup");
  REQUIRE(r.calls[0].arguments_json == R"({"q": "x"})");
  REQUIRE(r.content.empty());
  r = parse_tool_calls(R"([{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"k": [1, 2]}}])");
  REQUIRE(r.calls.size() == 2);
  REQUIRE(r.calls[1].name == "b");
  REQUIRE(r.calls[0].id != r.calls[1].id);
}

TEST_CASE("text that only looks like a call stays text", "[unit]") {
  REQUIRE(parse_tool_calls(R"({"answer": 42})").calls.empty());
  REQUIRE(parse_tool_calls(R"({"answer": 42})").content == R"({"answer": 42})");
  const ToolParse r = parse_tool_calls("a <tool_call>not json</tool_call> b");
  REQUIRE(r.calls.empty());
  REQUIRE(r.content == "a <tool_call>not json</tool_call> b");
  REQUIRE(parse_tool_calls("x < y and <tool").content == "x < y and <tool");
}

TEST_CASE("streaming tool-call parsing matches whole-text parsing for any split", "[unit]") {
  const uint64_t seed = astrai::test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    std::vector<std::pair<std::string, std::string>> want_calls;
    std::string want_content;
    const int parts = 1 + int(rng() % 4);
    for (int p = 0; p < parts; ++p) {
      if (rng() % 2) {
        std::string t = random_word(rng) + (rng() % 2 ? " <" : " ") + random_word(rng) + "\n";
        text += t;
        want_content += t;
      } else {
        const std::string name = random_word(rng);
        const std::string args = "{\"" + random_word(rng) + "\": " + std::to_string(rng() % 1000) + "}";
        text += "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
        want_calls.emplace_back(name, args);
      }
    }
    INFO("text: " << text);
    const ToolParse whole = parse_tool_calls(text);
    const ToolParse streamed = stream_parse(text, rng);
    REQUIRE(whole.content == want_content);
    REQUIRE(streamed.content == want_content);
    REQUIRE(whole.calls.size() == want_calls.size());
    REQUIRE(streamed.calls.size() == want_calls.size());
    for (size_t i = 0; i < want_calls.size(); ++i) {
      REQUIRE(streamed.calls[i].name == want_calls[i].first);
      REQUIRE(streamed.calls[i].arguments_json == want_calls[i].second);
    }
  }
}

TEST_CASE("streaming releases plain text before the end", "[unit]") {
  ToolCallStreamParser p;
  REQUIRE(p.push("Hello").content == "Hello");
  REQUIRE(p.push(" wor<tool").content == " wor");  // "<tool" may open a tag
  const ToolParse r = p.push("_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>after");
  REQUIRE(r.calls.size() == 1);
  REQUIRE(r.content == "after");
}
