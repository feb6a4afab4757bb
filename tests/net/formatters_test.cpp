// The dialects' formatters on a scripted output fed one byte-token at a time through a real
// Generation (a fake engine port): reasoning, answer and tool calls land in the right fields, tool
// calls are parsed from the answer only, and the streamed pieces add up to the non-streamed response.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include "net/anthropic_protocol.h"
#include "net/openai_protocol.h"
#include "net/responses_protocol.h"
#include "src/engine/generation.h"
#include "src/engine/request_state.h"

using namespace astrai;
using namespace astrai::net;

namespace {

const Tokenizer& tok() {
  static auto t = Tokenizer::builtin().value();
  return *t;
}

// Everything `fmt` writes for `output` (tokens of the built-in byte tokenizer, one per pump).
std::string run(ResponseFormatter& fmt, const std::string& output) {
  std::shared_ptr<RequestState> state;
  EnginePort port{[&](Request r) -> Result<Stream> {
                    state = std::make_shared<RequestState>(1, r.n, int(r.prompt.size()), 64);
                    return Stream(state);
                  },
                  [](RequestId) {}, 100000};
  GenerationSpec spec;
  spec.prompt = {1, 2, 3};
  auto g = Generation::start(port, tok(), spec, [] {}).value();
  std::string wire = fmt.begin();
  std::vector<ChoiceDelta> ds;
  auto pump = [&] {
    ds.clear();
    g->pump(ds);
    if (!ds.empty()) wire += fmt.on_deltas(ds, *g);
  };
  for (int32_t t : tok().encode(output, false)) {
    TokenEvent ev;
    ev.token = t;
    REQUIRE(state->push(ev));
    pump();
  }
  TokenEvent end;
  end.finish = FinishReason::stop;
  REQUIRE(state->push(end));
  pump();
  return wire + fmt.end(*g);
}

struct Event {
  std::string type, data;
};
std::vector<Event> sse(const std::string& wire) {
  std::vector<Event> out;
  size_t pos = 0;
  while (pos < wire.size()) {
    size_t end = wire.find("\n\n", pos);
    if (end == std::string::npos) end = wire.size();
    Event e;
    for (size_t at = pos; at < end;) {
      size_t nl = wire.find('\n', at);
      if (nl == std::string::npos || nl > end) nl = end;
      const std::string line = wire.substr(at, nl - at);
      if (line.rfind("event: ", 0) == 0) e.type = line.substr(7);
      if (line.rfind("data: ", 0) == 0) e.data += line.substr(6);
      at = nl + 1;
    }
    out.push_back(e);
    pos = end + 2;
  }
  return out;
}

std::string str(simdjson::dom::element e) {
  return std::string(std::string_view(e));
}

const std::string kCallInThought = R"(<tool_call>{"name": "f", "arguments": {}}</tool_call>)";
const std::string kReasoning = "\nI could call " + kCallInThought + " but ü no.\n";
const std::string kOutput = "<think>" + kReasoning + "</think>\n\nCalling." +
                            R"(<tool_call>{"name": "g", "arguments": {"x": 1}}</tool_call>)";
const std::string kTools = R"([{"type":"function","function":{"name":"g","parameters":{}}}])";
const ReasoningMode kOn{true, false};

}  // namespace

TEST_CASE("chat: think text goes to reasoning_content, tool calls come from the answer only", "[unit]") {
  simdjson::dom::parser p;
  ChatRequest req;
  req.tools_json = kTools;
  auto fmt = make_chat_formatter(req, "m", tok(), kOn);
  const std::string body = run(*fmt, kOutput);
  auto msg = p.parse(body)["choices"].at(0)["message"];
  CHECK(str(msg["reasoning_content"]) == kReasoning);
  CHECK(str(msg["content"]) == "Calling.");  // trimmed around calls, as without reasoning
  REQUIRE(msg["tool_calls"].get_array().size() == 1);
  CHECK(str(msg["tool_calls"].at(0)["function"]["name"]) == "g");
  CHECK(str(p.parse(body)["choices"].at(0)["finish_reason"]) == "tool_calls");

  req.common.stream = true;
  fmt = make_chat_formatter(req, "m", tok(), kOn);
  std::string reasoning, content;
  std::vector<std::string> calls;
  bool content_seen = false;
  for (const auto& e : sse(run(*fmt, kOutput))) {
    if (e.data == "[DONE]") continue;
    auto d = p.parse(e.data)["choices"].at(0)["delta"];
    std::string_view s;
    if (!d["reasoning_content"].get_string().get(s)) {
      CHECK_FALSE(content_seen);
      reasoning += s;
    }
    if (!d["content"].get_string().get(s)) {
      content += s;
      content_seen = content_seen || !s.empty();
    }
    simdjson::dom::array tc;
    if (!d["tool_calls"].get_array().get(tc)) calls.push_back(str(tc.at(0)["function"]["name"]));
  }
  CHECK(reasoning == kReasoning);
  CHECK(content == "\n\nCalling.");
  CHECK(calls == std::vector<std::string>{"g"});
}

TEST_CASE("Anthropic: a thinking block, the text block, then the tool_use from the answer", "[unit]") {
  simdjson::dom::parser p;
  MessagesRequest req;
  req.tools_json = kTools;
  auto fmt = make_messages_formatter(req, "m", kOn);
  const std::string body = run(*fmt, kOutput);
  auto content = p.parse(body)["content"].get_array();
  REQUIRE(content.size() == 3);
  CHECK(str(content.at(0)["type"]) == "thinking");
  CHECK(str(content.at(0)["thinking"]) == kReasoning);
  CHECK(str(content.at(1)["text"]) == "\n\nCalling.");
  CHECK(str(content.at(2)["name"]) == "g");
  CHECK(str(p.parse(body)["stop_reason"]) == "tool_use");

  req.common.stream = true;
  fmt = make_messages_formatter(req, "m", kOn);
  std::string thinking, text;
  std::vector<std::string> blocks;
  for (const auto& e : sse(run(*fmt, kOutput))) {
    auto d = p.parse(e.data);
    CHECK(str(d["type"]) == e.type);
    if (e.type == "content_block_start") {
      CHECK(int64_t(d["index"]) == int64_t(blocks.size()));
      blocks.push_back(str(d["content_block"]["type"]));
    }
    if (e.type == "content_block_delta") {
      const std::string kind = str(d["delta"]["type"]);
      if (kind == "thinking_delta") {
        CHECK(int64_t(d["index"]) == 0);
        thinking += str(d["delta"]["thinking"]);
      }
      if (kind == "text_delta") text += str(d["delta"]["text"]);
    }
  }
  CHECK(blocks == std::vector<std::string>{"thinking", "text", "tool_use"});
  CHECK(thinking == kReasoning);
  CHECK(text == "\n\nCalling.");
}

TEST_CASE("responses: reasoning, message and function_call items, streamed with consistent events",
          "[unit]") {
  simdjson::dom::parser p;
  ResponsesRequest req;
  REQUIRE_FALSE(parse_responses_request(
      R"({"input":"hi","tools":[{"type":"function","name":"g","parameters":{}}],"instructions":"be brief"})",
      req));
  auto fmt = make_responses_formatter(req, "m", kOn);
  const std::string body = run(*fmt, kOutput);
  auto out = p.parse(body)["output"].get_array();
  REQUIRE(out.size() == 3);
  CHECK(str(out.at(0)["type"]) == "reasoning");
  CHECK(str(out.at(0)["content"].at(0)["text"]) == kReasoning);
  CHECK(str(out.at(1)["content"].at(0)["text"]) == "\n\nCalling.");
  CHECK(str(out.at(2)["type"]) == "function_call");
  CHECK(str(out.at(2)["name"]) == "g");
  CHECK(str(out.at(2)["arguments"]) == R"({"x": 1})");
  CHECK(str(p.parse(body)["instructions"]) == "be brief");

  req.common.stream = true;
  fmt = make_responses_formatter(req, "m", kOn);
  std::string reasoning, text, args;
  std::vector<std::string> added;
  int64_t seq = 0;
  for (const auto& e : sse(run(*fmt, kOutput))) {
    auto d = p.parse(e.data);
    CHECK(str(d["type"]) == e.type);
    CHECK(int64_t(d["sequence_number"]) == seq++);
    if (e.type == "response.output_item.added") {
      CHECK(int64_t(d["output_index"]) == int64_t(added.size()));
      added.push_back(str(d["item"]["type"]));
    }
    if (e.type == "response.reasoning_text.delta") reasoning += str(d["delta"]);
    if (e.type == "response.output_text.delta") text += str(d["delta"]);
    if (e.type == "response.function_call_arguments.delta") args += str(d["delta"]);
    if (e.type == "response.completed") CHECK(d["response"]["output"].get_array().size() == 3);
  }
  CHECK(added == std::vector<std::string>{"reasoning", "message", "function_call"});
  CHECK(reasoning == kReasoning);
  CHECK(text == "\n\nCalling.");
  CHECK(args == R"({"x": 1})");
}

TEST_CASE("responses input items become template messages; unsupported fields name themselves", "[unit]") {
  simdjson::dom::parser p;
  ResponsesRequest req;
  REQUIRE_FALSE(parse_responses_request(R"({"instructions":"sys","input":[
      {"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
      {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]},
      {"type":"message","role":"assistant","content":"thinking aloud"},
      {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"k\":2}"},
      {"type":"function_call","call_id":"c2","name":"h","arguments":"{}"},
      {"type":"function_call_output","call_id":"c1","output":"r1"},
      {"type":"reasoning","summary":[]},
      {"role":"developer","content":"dev"}]})",
                                        req));
  auto m = p.parse(req.messages_json).get_array();
  REQUIRE(m.size() == 5);
  CHECK(str(m.at(0)["role"]) == "system");
  CHECK(str(m.at(0)["content"]) == "sys");
  CHECK(str(m.at(1)["content"]) == "a\nb");
  CHECK(str(m.at(2)["role"]) == "assistant");
  CHECK(str(m.at(2)["content"]) == "thinking aloud");
  CHECK(str(m.at(2)["reasoning_content"]) == "hmm");
  CHECK(m.at(2)["tool_calls"].get_array().size() == 2);
  CHECK(str(m.at(2)["tool_calls"].at(0)["function"]["arguments"]) == R"({"k":2})");
  CHECK(str(m.at(3)["role"]) == "tool");
  CHECK(str(m.at(3)["tool_call_id"]) == "c1");
  CHECK(str(m.at(4)["role"]) == "system");

  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"input":"x","store":true})", "store"},
      {R"({"input":"x","previous_response_id":"r"})", "previous_response_id"},
      {R"({"input":"x","background":true})", "background"},
      {R"({"input":"x","tools":[{"type":"file_search"}]})", "tools[0].type"},
      {R"({"input":[{"type":"item_reference","id":"x"}]})", "input[0].type"},
      {R"({"input":[{"role":"tool","content":"x"}]})", "input[0].role"},
      {R"({"input":[{"type":"function_call","name":"f"}]})", "input[0].call_id"},
      {R"({"input":"x","tool_choice":{"type":"web_search"}})", "tool_choice"},
      {R"({"input":"x","max_output_tokens":0})", "max_output_tokens"},
      {R"({"input":"x","chat_template_kwargs":true})", "chat_template_kwargs"},
      {R"({"instructions":"x"})", "input"},
  };
  for (const auto& c : cases) {
    ResponsesRequest r;
    auto e = parse_responses_request(c.body, r);
    INFO(c.body);
    REQUIRE(e);
    CHECK(e->status == 400);
    CHECK(e->param == c.param);
  }
}

TEST_CASE("Anthropic thinking blocks sent back become the turn's reasoning_content", "[unit]") {
  simdjson::dom::parser p;
  MessagesRequest req;
  REQUIRE_FALSE(parse_messages_request(R"({"max_tokens":5,"messages":[
      {"role":"user","content":"q"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"let me see","signature":""},
                                     {"type":"redacted_thinking","data":"xx"},{"type":"text","text":"a"}]},
      {"role":"user","content":"q2"}]})",
                                       req, true));
  auto m = p.parse(req.messages_json).get_array();
  REQUIRE(m.size() == 3);
  CHECK(str(m.at(1)["content"]) == "a");
  CHECK(str(m.at(1)["reasoning_content"]) == "let me see");
  CHECK(m.at(0)["reasoning_content"].error() == simdjson::NO_SUCH_FIELD);
}
