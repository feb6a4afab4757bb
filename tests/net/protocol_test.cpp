#include <simdjson.h>

#include <catch2/catch.hpp>

#include "net/anthropic_protocol.h"
#include "net/api_error.h"
#include "net/config.h"
#include "net/openai_protocol.h"
#include "net/sse_format.h"
#include "net/websocket_frames.h"
#include "tools/test_util.h"

using namespace astrai::net;

namespace {
// Re-parses JSON text with simdjson's DOM parser (independent of the on-demand code under test).
simdjson::dom::element parse(simdjson::dom::parser& p, const std::string& s) {
  return p.parse(s);
}
}  // namespace

TEST_CASE("chat requests: content parts are joined and sampling fields read", "[unit]") {
  ChatRequest r;
  const auto e = parse_chat_request(R"({
    "model": "m", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": -1, "min_p": 0.1,
    "seed": 3, "stop": "END", "n": 2, "logprobs": true, "top_logprobs": 3, "stream": true,
    "stream_options": {"include_usage": true}, "user": "ignored"})",
                                    r);
  REQUIRE_FALSE(e);
  CHECK(r.common.model == "m");
  CHECK(r.common.max_tokens == 7);
  CHECK(r.common.sampling.temperature == Approx(0.5));
  CHECK(r.common.sampling.top_k == 0);
  CHECK(r.common.sampling.seed.value() == 3);
  CHECK(r.common.stop == std::vector<std::string>{"END"});
  CHECK(r.common.n == 2);
  CHECK(r.common.sampling.logprobs);
  CHECK(r.common.sampling.top_logprobs == 3);
  CHECK(r.common.stream);
  CHECK(r.common.include_usage);
  simdjson::dom::parser p;
  auto msgs = parse(p, r.messages_json).get_array();
  REQUIRE(msgs.size() == 4);
  CHECK(std::string_view(msgs.at(0)["role"]) == "system");
  CHECK(std::string_view(msgs.at(1)["content"]) == "hi\nthere");
  CHECK(std::string_view(msgs.at(2)["tool_calls"].at(0)["function"]["name"]) == "f");
  CHECK(std::string_view(msgs.at(3)["tool_call_id"]) == "c1");
}

TEST_CASE("chat request errors name the offending field", "[unit]") {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -5})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 1.5})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": "hello"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"model": "m"})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
       "tools[0].function.name"},
      {R"({"messages": [{"role": "user", "content": "x"}], "min_tokens": -1})", "min_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop_token_ids": 5})", "stop_token_ids"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop_token_ids": [3, -1]})", "stop_token_ids[1]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "skip_special_tokens": 1})",
       "skip_special_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "include_stop_str_in_output": "no"})",
       "include_stop_str_in_output"},
  };
  for (const auto& c : cases) {
    INFO(c.body);
    ChatRequest r;
    const auto e = parse_chat_request(c.body, r);
    REQUIRE(e);
    CHECK(e->status == 400);
    CHECK(e->param == c.param);
    CHECK(e->message.find(c.param) != std::string::npos);
  }
}

TEST_CASE(
    "vLLM's sampling extensions: min_tokens, stop_token_ids, include_stop_str_in_output, skip_special_tokens",
    "[unit]") {
  ChatRequest r;
  REQUIRE_FALSE(parse_chat_request(
      R"({"messages": [{"role": "user", "content": "x"}], "min_tokens": 4, "stop_token_ids": [7, 9],
          "include_stop_str_in_output": true, "skip_special_tokens": false, "max_tokens": 8})",
      r));
  CHECK(r.common.sampling.min_tokens == 4);
  CHECK(r.common.stop_ids == std::vector<int32_t>{7, 9});
  CHECK(r.common.include_stop_str_in_output);
  CHECK_FALSE(r.common.skip_special_tokens);
  CHECK_FALSE(validate_common(r.common));
  ChatRequest d;
  REQUIRE_FALSE(
      parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "min_tokens": null})", d));
  CHECK(d.common.sampling.min_tokens == 0);
  CHECK(d.common.stop_ids.empty());
  CHECK_FALSE(d.common.include_stop_str_in_output);
  CHECK(d.common.skip_special_tokens);
  // min_tokens past max_tokens is refused, naming min_tokens; without max_tokens it is the engine's.
  CompletionRequest c;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": "a", "min_tokens": 9, "max_tokens": 8})", c));
  const auto e = validate_common(c.common);
  REQUIRE(e);
  CHECK(e->param == "min_tokens");
  CHECK(e->message.find("at most max_tokens (8)") != std::string::npos);
  CompletionRequest open;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": "a", "min_tokens": 9})", open));
  CHECK_FALSE(validate_common(open.common));
}

TEST_CASE("malformed JSON and non-objects are 400s without a field", "[unit]") {
  for (const char* body : {"{\"messages\": [", "not json", "[1,2]", "",
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}"}) {
    INFO(body);
    ChatRequest r;
    const auto e = parse_chat_request(body, r);
    REQUIRE(e);
    CHECK(e->status == 400);
  }
}

TEST_CASE("completion prompts: a string or token ids", "[unit]") {
  CompletionRequest a;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": "abc", "echo": true, "logprobs": null})", a));
  REQUIRE(a.prompts.size() == 1);
  CHECK(a.prompts[0].text == "abc");
  CHECK_FALSE(a.prompts[0].is_ids);
  CHECK(a.echo);
  CHECK(a.logprobs == -1);
  CompletionRequest lp;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": "abc", "logprobs": 2})", lp));
  CHECK(lp.logprobs == 2);
  // max_tokens 0 asks for the prompt alone: only with echo.
  CompletionRequest only;
  REQUIRE_FALSE(parse_completion_request(R"({"max_tokens": 0, "prompt": "abc", "echo": true})", only));
  CHECK(only.prompt_only);
  CHECK(only.common.max_tokens == 1);
  CompletionRequest no_echo;
  auto zero = parse_completion_request(R"({"prompt": "abc", "max_tokens": 0})", no_echo);
  REQUIRE(zero);
  CHECK(zero->param == "max_tokens");
  CompletionRequest three;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": "abc", "max_tokens": 3})", three));
  CHECK_FALSE(three.prompt_only);
  CHECK(three.common.max_tokens == 3);
  // Lists of token-id lists (what evaluation harnesses send): a prompt each.
  CompletionRequest nested;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": [[4, 5, 6]], "echo": true, "logprobs": 1})", nested));
  REQUIRE(nested.prompts.size() == 1);
  CHECK(nested.prompts[0].is_ids);
  CHECK(nested.prompts[0].ids == std::vector<int32_t>{4, 5, 6});
  CHECK(nested.echo);
  CompletionRequest two;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": [[4, 5], [6]]})", two));
  REQUIRE(two.prompts.size() == 2);
  CHECK(two.prompts[1].ids == std::vector<int32_t>{6});
  CompletionRequest texts;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": ["a", "", "c"]})", texts));
  REQUIRE(texts.prompts.size() == 3);
  CHECK(texts.prompts[2].text == "c");
  CHECK_FALSE(texts.prompts[1].is_ids);
  // Mixed shapes, bad ids, empty lists: a 400 naming the element.
  for (auto [body, param] :
       std::vector<std::pair<const char*, const char*>>{{R"({"prompt": [[1], 2]})", "prompt[1]"},
                                                        {R"({"prompt": [[1, -1]]})", "prompt[0][1]"},
                                                        {R"({"prompt": [1, [2]]})", "prompt[1]"},
                                                        {R"({"prompt": ["a", 1]})", "prompt[1]"},
                                                        {R"({"prompt": [{"a": 1}]})", "prompt[0]"},
                                                        {R"({"prompt": [true]})", "prompt[0]"},
                                                        {R"({"prompt": []})", "prompt"},
                                                        {R"({"prompt": {"a": 1}})", "prompt"}}) {
    INFO(body);
    CompletionRequest bad;
    auto e = parse_completion_request(body, bad);
    REQUIRE(e);
    CHECK(e->status == 400);
    CHECK(e->param == param);
  }
  std::string many = R"({"prompt": [)";
  for (int i = 0; i <= kMaxCompletionPrompts; ++i) many += std::string(i ? "," : "") + "\"p\"";
  CompletionRequest too_many;
  auto over = parse_completion_request(many + "]}", too_many);
  REQUIRE(over);
  CHECK(over->param == "prompt");
  CHECK(over->message.find("more than 256 prompts") != std::string::npos);
  CompletionRequest b;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": [1, 2, 3]})", b));
  REQUIRE(b.prompts.size() == 1);
  CHECK(b.prompts[0].is_ids);
  CHECK(b.prompts[0].ids == std::vector<int32_t>{1, 2, 3});
  CompletionRequest c;
  auto e = parse_completion_request(R"({"prompt": [1, -2]})", c);
  REQUIRE(e);
  CHECK(e->param == "prompt[1]");
  CompletionRequest d;
  e = parse_completion_request(R"({"max_tokens": 3})", d);
  REQUIRE(e);
  CHECK(e->param == "prompt");
}

TEST_CASE("raw JSON passed through (tool calls, tools, tool inputs) must be valid (found by fuzz_api_json)",
          "[unit]") {
  ChatRequest r;
  auto e = parse_chat_request(
      R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","typ"f"e:function"}]}]})",
      r);
  REQUIRE(e);
  CHECK(e->param == "messages[0].tool_calls");
  MessagesRequest m;
  e = parse_messages_request(
      R"({"max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a" 1}}]}]})",
      m, true);
  REQUIRE(e);
  CHECK(e->message.find("input") != std::string::npos);
  // Valid raw JSON still passes through as written.
  REQUIRE_FALSE(parse_chat_request(
      R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]})",
      r));
  CHECK(r.messages_json.find(R"("tool_calls":[{"id":"c","type":"function")") != std::string::npos);
}

TEST_CASE("an integer beyond int64 is a range error that prints it (found by fuzz_api_json)", "[unit]") {
  // Converting 2.3e68 to int64 for the message was undefined behaviour (UBSan in the fuzz build).
  CompletionRequest c;
  auto e = parse_completion_request(
      R"({"prompt": [1, 23333333333333333333333333333333333333333333333333333333333333333333]})", c);
  REQUIRE(e);
  CHECK(e->param == "prompt[1]");
  CHECK(e->message.find("got 2.33333e+67") != std::string::npos);
  ChatRequest r;
  e = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-1e300})", r);
  REQUIRE(e);
  CHECK(e->message.find("got -1e+300") != std::string::npos);
  // In int64's range the value prints as an integer, as before.
  e = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-3000000000})", r);
  REQUIRE(e);
  CHECK(e->message.find("got -3000000000") != std::string::npos);
}

TEST_CASE("anthropic requests become template messages with system, tool_use and tool_result", "[unit]") {
  MessagesRequest r;
  const auto e = parse_messages_request(R"({
    "model": "m", "max_tokens": 5, "stop_sequences": ["X", "Y"],
    "messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": [{"type": "text", "text": "checking"},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"}]}],
    "system": [{"type": "text", "text": "sys"}],
    "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}]})",
                                        r, true);
  REQUIRE_FALSE(e);
  CHECK(r.common.max_tokens == 5);
  CHECK(r.common.stop == std::vector<std::string>{"X", "Y"});
  simdjson::dom::parser p;
  auto msgs = parse(p, r.messages_json).get_array();
  REQUIRE(msgs.size() == 4);
  CHECK(std::string_view(msgs.at(0)["role"]) == "system");
  CHECK(std::string_view(msgs.at(0)["content"]) == "sys");
  CHECK(std::string_view(msgs.at(2)["tool_calls"].at(0)["function"]["name"]) == "weather");
  CHECK(std::string_view(msgs.at(2)["tool_calls"].at(0)["function"]["arguments"]["city"]) == "Oslo");
  CHECK(std::string_view(msgs.at(3)["role"]) == "tool");
  CHECK(std::string_view(msgs.at(3)["content"]) == "cold");
  simdjson::dom::parser p2;
  auto tools = parse(p2, r.tools_json).get_array();
  CHECK(std::string_view(tools.at(0)["function"]["name"]) == "weather");
}

TEST_CASE("anthropic max_tokens is required for messages but not for count_tokens", "[unit]") {
  const char* body = R"({"messages": [{"role": "user", "content": "x"}]})";
  MessagesRequest a, b;
  const auto e = parse_messages_request(body, a, true);
  REQUIRE(e);
  CHECK(e->param == "max_tokens");
  CHECK_FALSE(parse_messages_request(body, b, false));
}

TEST_CASE("error bodies follow each API's shape", "[unit]") {
  const ApiError e = bad_field("max_tokens", "must be positive");
  simdjson::dom::parser p;
  auto o = parse(p, openai_error_body(e));
  CHECK(std::string_view(o["error"]["param"]) == "max_tokens");
  CHECK(std::string_view(o["error"]["type"]) == "invalid_request_error");
  CHECK(o["error"]["code"].is_null());
  simdjson::dom::parser p2;
  auto a = parse(p2, anthropic_error_body(ApiError{429, "slow down", "", "", ""}));
  CHECK(std::string_view(a["type"]) == "error");
  CHECK(std::string_view(a["error"]["type"]) == "rate_limit_error");
  CHECK(std::string_view(a["error"]["message"]) == "slow down");
}

TEST_CASE("SSE events are data lines closed by a blank line", "[unit]") {
  std::string out;
  append_sse(out, R"({"a":1})");
  append_sse(out, "x\ny", "ping");
  CHECK(out == "data: {\"a\":1}\n\nevent: ping\ndata: x\ndata: y\n\n");
}

TEST_CASE("websocket client frames need a type and an id", "[unit]") {
  ClientFrame f;
  REQUIRE_FALSE(parse_client_frame(R"({"type":"cancel","id":7})", f));
  CHECK(f.type == "cancel");
  CHECK(f.id == "7");
  ClientFrame g;
  CHECK(parse_client_frame(R"({"type":"dance","id":"a"})", g));
  ClientFrame h;
  CHECK(parse_client_frame(R"({"type":"generate"})", h));
  ClientFrame i;
  CHECK(parse_client_frame("\x01\x02garbage", i));
}

TEST_CASE("serve.yaml keys are read, checked, and each has a flag", "[unit]") {
  astrai::test::TempDir dir("serveyaml");
  astrai::test::write_file(dir / "serve.yaml",
                           "port: 8123\nnet_threads: 2\nmax_body: 64K\ncors: '*'\nengine:\n  page_size: 32\n "
                           " prefix_cache: false\n");
  ServeConfig c;
  REQUIRE(load_serve_yaml(dir / "serve.yaml", c).ok());
  CHECK(c.port == 8123);
  CHECK(c.net_threads == 2);
  CHECK(c.max_body == 64 * 1024);
  CHECK(c.cors == "*");
  CHECK(c.engine.page_size == 32);
  CHECK_FALSE(c.engine.prefix_cache);
  astrai::test::write_file(dir / "bad.yaml", "port: 99999\n");
  const auto s = load_serve_yaml(dir / "bad.yaml", c);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("port") != std::string::npos);
  astrai::test::write_file(dir / "unknown.yaml", "colour: blue\n");
  CHECK(load_serve_yaml(dir / "unknown.yaml", c).message().find("colour") != std::string::npos);
  CHECK(flag_name("max_concurrent") == "--max-concurrent");
  // A list or mapping used as a key is an error, not an uncaught yaml-cpp exception (found by
  // fuzz_serve_yaml).
  for (const char* bad : {"? [a]\n: 1\n", "engine:\n  ? {x: 1}\n  : 2\n"}) {
    astrai::test::write_file(dir / "key.yaml", bad);
    INFO(bad);
    const auto k = load_serve_yaml(dir / "key.yaml", c);
    REQUIRE_FALSE(k.ok());
    CHECK(k.message().find("setting names must be strings") != std::string::npos);
  }
}

TEST_CASE("chat template limits are serve.yaml keys (and flags) with checked ranges", "[unit]") {
  astrai::test::TempDir dir("serveyaml");
  astrai::test::write_file(dir / "serve.yaml",
                           "template_max_steps: 20000\ntemplate_max_output: 64K\ntemplate_max_memory: 4M\n"
                           "template_max_depth: 64\n");
  ServeConfig c;
  REQUIRE(load_serve_yaml(dir / "serve.yaml", c).ok());
  CHECK(c.template_limits.max_steps == 20000);
  CHECK(c.template_limits.max_output_bytes == 64 * 1024);
  CHECK(c.template_limits.max_memory_bytes == 4 * 1024 * 1024);
  CHECK(c.template_limits.max_value_depth == 64);
  // The limits a template is parsed with otherwise stay at their defaults.
  CHECK(c.template_limits.max_nesting == astrai::ChatTemplateLimits{}.max_nesting);
  for (const char* bad : {"template_max_steps: 10", "template_max_depth: 100000", "template_max_output: 12",
                          "template_max_memory: lots", "template_max_depth: -1"}) {
    astrai::test::write_file(dir / "bad.yaml", std::string(bad) + "\n");
    const auto s = load_serve_yaml(dir / "bad.yaml", c);
    INFO(bad);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find(std::string(bad).substr(0, std::string(bad).find(':'))) != std::string::npos);
  }
  size_t flags = 0;
  for (const auto& k : serve_config_keys())
    if (k.name.rfind("template_", 0) == 0 && k.is_flag) ++flags;
  CHECK(flags == 4);
}

TEST_CASE("each dialect keeps its documented ranges, then the engine's ranges name the client's field",
          "[unit]") {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  // Dialect rules: OpenAI temperature 0..2 and n 1..16, Anthropic temperature 0..1.
  ChatRequest a;
  REQUIRE_FALSE(parse_chat_request("{" + msgs + R"(, "temperature": 1.5, "n": 16})", a));
  CHECK_FALSE(validate_common(a.common));
  ChatRequest b;
  auto e = parse_chat_request("{" + msgs + R"(, "n": 17})", b);
  REQUIRE(e);
  CHECK(e->message == "'n': must be between 1 and 16, got 17");
  MessagesRequest m;
  e = parse_messages_request("{" + msgs + R"(, "max_tokens": 4, "temperature": 1.5})", m, true);
  REQUIRE(e);
  CHECK(e->message == "'temperature': must be between 0 and 1, got 1.5");

  // top_p 0 passes both dialects' ranges but no engine can sample from an empty nucleus.
  ChatRequest c;
  REQUIRE_FALSE(parse_chat_request("{" + msgs + R"(, "top_p": 0})", c));
  e = validate_common(c.common);
  REQUIRE(e);
  CHECK(e->status == 400);
  CHECK(e->param == "top_p");
  CHECK(e->message == "'top_p': must be in (0, 1], got 0");
  MessagesRequest d;
  REQUIRE_FALSE(parse_messages_request("{" + msgs + R"(, "max_tokens": 4, "top_p": 0})", d, true));
  e = validate_common(d.common);
  REQUIRE(e);
  CHECK(e->param == "top_p");
  // count_tokens reads the same body but runs nothing: the engine's ranges do not apply there.
  MessagesRequest ct;
  CHECK_FALSE(parse_messages_request("{" + msgs + R"(, "top_p": 0})", ct, false));
}

TEST_CASE("canonical fields are named as the client sent them", "[unit]") {
  ChatRequest r;
  REQUIRE_FALSE(parse_chat_request(
      R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5})", r));
  CHECK(r.common.max_tokens_key == "max_completion_tokens");
  r.common.max_tokens = -1;  // past what any parser lets through, to reach the engine's check
  auto e = validate_common(r.common);
  REQUIRE(e);
  CHECK(e->param == "max_completion_tokens");
  CommonParams plain;
  plain.max_tokens = -1;
  e = validate_common(plain);
  REQUIRE(e);
  CHECK(e->param == "max_tokens");

  CompletionRequest cr;
  REQUIRE_FALSE(parse_completion_request(R"({"prompt": "x", "logprobs": 20})", cr));
  CHECK(cr.common.sampling.top_logprobs == 20);
  CHECK_FALSE(validate_common(cr.common));
  cr.common.sampling.top_logprobs = 21;
  e = validate_common(cr.common);
  REQUIRE(e);
  CHECK(e->param == "logprobs");  // the completions API's name for it

  // No max_tokens (0) means the rest of the context window, which is always valid.
  CommonParams none;
  CHECK_FALSE(validate_common(none));
}
