// Tool calls in model output, turned into OpenAI `tool_calls` / Anthropic `tool_use` blocks.
// Two shapes are recognised:
//   Qwen/Hermes:  text <tool_call>{"name": "f", "arguments": {...}}</tool_call> ...
//   bare JSON:    the whole output is {"name": "f", "arguments"|"parameters": {...}} or an array of them
// A call whose JSON does not parse stays in the text, so nothing the model wrote is lost.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace astrai::net {

struct ToolCall {
  std::string id;  // "call_<hex>", unique per server process
  std::string name;
  std::string arguments_json;  // a JSON object's text ("{}" when the model gave none)
};

struct ToolParse {
  std::string content;  // the text outside the calls
  std::vector<ToolCall> calls;
};

// Parses one call body: {"name": ..., "arguments"|"parameters": object-or-JSON-string}.
bool parse_tool_call_json(std::string_view json, ToolCall& out);

// Whole-output parsing (non-streaming responses).
ToolParse parse_tool_calls(std::string_view text);

// Streaming: text deltas in, text deltas and completed calls out. Holds back only what could still
// become a "<tool_call>" tag; an output that starts with '{' or '[' is held until finish() because it
// may be a bare JSON call.
class ToolCallStreamParser {
 public:
  ToolParse push(std::string_view delta);
  ToolParse finish();
  // push(delta), and when `last` (the choice has ended) finish() too, merged: what a formatter
  // calls for each delta of a streamed choice.
  ToolParse feed(std::string_view delta, bool last);

 private:
  enum class State { start, text, in_call, bare_json };
  void drain(ToolParse& out, bool final);
  State state_ = State::start;
  std::string buf_;
};

std::string new_tool_call_id(std::string_view prefix = "call_");

// Length of the longest suffix of s that is a proper prefix of tag: what a streaming parser holds
// back because the next delta may complete the tag.
size_t partial_tag_suffix(std::string_view s, std::string_view tag);

}  // namespace astrai::net
