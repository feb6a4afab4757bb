// The OpenAI Responses API (POST /v1/responses): request parsing onto the chat template's messages
// (input as a string or message / function_call / function_call_output items, instructions as the
// system message, function tools) and the response object or its typed SSE events
// (response.created ... response.output_text.delta ... response.completed); text.format json_object /
// json_schema constrains the output as chat's response_format does. What the server does
// not do (stored responses, previous_response_id, background runs, built-in tools, ...) is a 400
// naming the field.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "net/json_fields.h"
#include "net/openai_protocol.h"
#include "net/reasoning_parser.h"
#include "net/response_formatter.h"

namespace astrai::net {

struct ResponsesRequest {
  CommonParams common;               // max_output_tokens (as max_tokens), temperature, top_p, stream, model
  std::string messages_json;         // template messages: instructions first, then the input items
  std::string tools_json;            // chat-completions shape for the template; "" when none
  std::string tool_choice = "auto";  // none | auto | required | <function name>
  std::string template_kwargs_json;  // chat_template_kwargs (extension)
  // Echoed in the response object as the client sent them.
  std::optional<std::string> instructions;
  std::string tools_echo = "[]";  // the request's tools (Responses shape)
  std::string tool_choice_echo = "\"auto\"";
  std::string metadata_echo = "{}";
  std::string text_format_echo = R"({"type":"text"})";  // text.format; its constraint is common.constraint
  bool parallel_tool_calls = true;
};

MaybeError parse_responses_request(std::string_view body, ResponsesRequest& out);

std::unique_ptr<ResponseFormatter> make_responses_formatter(const ResponsesRequest& req,
                                                            const std::string& model,
                                                            ReasoningMode reasoning = {});

}  // namespace astrai::net
