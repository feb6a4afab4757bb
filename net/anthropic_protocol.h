// Anthropic Messages API: request parsing into the chat template's message list (system, text,
// tool_use and tool_result blocks) and response / SSE event formatting.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "net/json_fields.h"
#include "net/openai_protocol.h"
#include "net/response_formatter.h"

namespace astrai::net {

struct MessagesRequest {
  CommonParams common;        // max_tokens, stop (stop_sequences), sampling, stream, model
  std::string messages_json;  // template messages (OpenAI/HF shape: system, user, assistant+tool_calls, tool)
  std::string tools_json;     // converted to [{"type":"function","function":{name, description, parameters}}]
  bool tool_choice_none = false;
  // chat_template_kwargs (extension), with `thinking` {"type":"enabled"|"disabled"} as
  // enable_thinking unless the kwargs set it; "" when neither is given.
  std::string template_kwargs_json;
};

// require_max_tokens: /v1/messages needs it, /v1/messages/count_tokens does not.
MaybeError parse_messages_request(std::string_view body, MessagesRequest& out, bool require_max_tokens);

// `reasoning` puts think-block text in `thinking` content blocks; default: off.
std::unique_ptr<ResponseFormatter> make_messages_formatter(const MessagesRequest& req,
                                                           const std::string& model,
                                                           ReasoningMode reasoning = {});

std::string count_tokens_body(int input_tokens);

}  // namespace astrai::net
