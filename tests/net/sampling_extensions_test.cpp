// vLLM's sampling extensions through the server: min_tokens, stop_token_ids,
// include_stop_str_in_output and skip_special_tokens. logit_bias and a regex make the tiny random
// model's output known, so each field's effect is exact.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include "net/server_fixture.h"
#include "tools/test_util.h"

using namespace astrai::test;

namespace {

struct Reply {
  std::string text, finish;
  int64_t completion_tokens = 0;
};

Reply complete(int port, const std::string& fields) {
  const std::string body = R"({"prompt": "Hello", "temperature": 0, )" + fields + "}";
  const HttpReply r = http(port, "POST", "/v1/completions", body);
  INFO(body << "\n" << r.body);
  REQUIRE(r.status == 200);
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(r.body);
  Reply out;
  out.text = std::string(std::string_view(doc["choices"].at(0)["text"]));
  out.finish = std::string(std::string_view(doc["choices"].at(0)["finish_reason"]));
  out.completion_tokens = int64_t(doc["usage"]["completion_tokens"]);
  return out;
}

int32_t token_id(int port, const std::string& text) {
  const HttpReply r =
      http(port, "POST", "/tokenize", R"({"text": ")" + text + R"(", "add_special_tokens": false})");
  REQUIRE(r.status == 200);
  simdjson::dom::parser p;
  simdjson::dom::array ids = p.parse(r.body)["tokens"];
  REQUIRE(ids.size() == 1);
  return int32_t(int64_t(ids.at(0)));
}

}  // namespace

TEST_CASE("min_tokens, stop_token_ids, include_stop_str_in_output and skip_special_tokens do what vLLM's do",
          "[integration]") {
  ServerProcess s;
  const int port = s.port();
  // The tiny preset's tokenizer: one token per byte, <|im_start|> (257) special, <|im_end|> (258) its eos.
  const std::string eos = R"("258": 100)", im_start = R"("257": 100)";

  // The model's eos made certain: it ends the choice at once, unless min_tokens holds it off.
  Reply r = complete(port, R"("max_tokens": 10, "logit_bias": {)" + eos + "}");
  CHECK(r.finish == "stop");
  CHECK(r.completion_tokens == 0);
  r = complete(port, R"("max_tokens": 10, "min_tokens": 4, "logit_bias": {)" + eos + "}");
  CHECK(r.finish == "stop");
  CHECK(r.completion_tokens == 4);
  // A request's stop id likewise (here a special token that is not the eos).
  r = complete(port, R"("max_tokens": 10, "stop_token_ids": [257], "logit_bias": {)" + im_start + "}");
  CHECK(r.finish == "stop");
  CHECK(r.completion_tokens == 0);
  r = complete(port, R"("max_tokens": 10, "min_tokens": 3, "stop_token_ids": [257], "logit_bias": {)" +
                         im_start + "}");
  CHECK(r.finish == "stop");
  CHECK(r.completion_tokens == 3);
  CHECK(r.text.find("<|im_start|>") == std::string::npos);

  // skip_special_tokens: a special token's text is left out by default, kept with false.
  r = complete(port, R"("max_tokens": 3, "ignore_eos": true, "logit_bias": {)" + im_start + "}");
  CHECK(r.text.empty());
  CHECK(r.completion_tokens == 3);
  r = complete(port, R"("max_tokens": 3, "ignore_eos": true, "skip_special_tokens": false, "logit_bias": {)" +
                         im_start + "}");
  CHECK(r.text == "<|im_start|><|im_start|><|im_start|>");

  // Stop strings over a known text: "ca" ends at bytes 4, 7 and 10 of the regex's only string.
  const std::string abc = R"("max_tokens": 20, "guided_regex": "(abc){4}", "stop": ["ca"])";
  r = complete(port, abc);
  CHECK(r.text == "ab");
  CHECK(r.finish == "stop");
  r = complete(port, abc + R"(, "include_stop_str_in_output": true)");
  CHECK(r.text == "abca");
  // Before min_tokens no stop string ends the text: the first "ca" ends in the 4th token.
  r = complete(port, abc + R"(, "min_tokens": 5)");
  CHECK(r.text == "abcab");
  r = complete(port, abc + R"(, "min_tokens": 4)");
  CHECK(r.text == "ab");

  // A constrained choice draws no stop id before min_tokens, even one the grammar spells with: 'c'
  // as a stop id, made the likeliest, ends the choice at its first chance past min_tokens.
  const int32_t c = token_id(port, "c");
  const std::string abc_any = R"("max_tokens": 12, "guided_regex": "[abc]{12}", "stop_token_ids": [)" +
                              std::to_string(c) + R"(], "logit_bias": {")" + std::to_string(c) + R"(": 100})";
  r = complete(port, abc_any);
  CHECK(r.completion_tokens == 0);
  r = complete(port, abc_any + R"(, "min_tokens": 5)");
  CHECK(r.completion_tokens == 5);
  CHECK(r.finish == "stop");
  CHECK(r.text.find('c') == std::string::npos);

  // Errors name the field.
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt": "a", "min_tokens": 5, "max_tokens": 2})", "min_tokens"},
           {R"({"prompt": "a", "stop_token_ids": ["x"]})", "stop_token_ids[0]"},
       }) {
    INFO(body);
    const HttpReply e = http(port, "POST", "/v1/completions", body);
    CHECK(e.status == 400);
    simdjson::dom::parser p;
    CHECK(std::string_view(p.parse(e.body)["error"]["param"]) == param);
  }
  // The chat route takes them too.
  const HttpReply chat = http(port, "POST", "/v1/chat/completions",
                              R"({"messages": [{"role": "user", "content": "hi"}], "temperature": 0,
                                  "max_tokens": 6, "min_tokens": 6, "logit_bias": {)" +
                                  eos + "}}");
  INFO(chat.body);
  REQUIRE(chat.status == 200);
  simdjson::dom::parser p;
  CHECK(int64_t(p.parse(chat.body)["usage"]["completion_tokens"]) == 6);
}
