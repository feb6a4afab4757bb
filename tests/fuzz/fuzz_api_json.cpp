// The request bodies of every route that takes JSON: OpenAI chat completions, completions and
// responses, Anthropic messages (and count_tokens), WebSocket client frames. The first byte picks the parser,
// the rest is the body. Any body is a request or a 400 naming the problem; an accepted request's
// message and tool lists are JSON arrays (they go to the chat template as they are), and its
// parameters pass or fail the engine's checks without crashing.
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/anthropic_protocol.h"
#include "net/openai_protocol.h"
#include "net/responses_protocol.h"
#include "net/websocket_frames.h"

using namespace astrai::net;

namespace {

void require_json_array(const std::string& text, bool may_be_empty) {
  if (text.empty() && may_be_empty) return;
  simdjson::dom::parser p;
  auto doc = p.parse(text);
  if (doc.error() || !doc.value().is_array()) std::abort();
}

void require_error_message(const MaybeError& e) {
  if (e && (e->status != 400 || e->message.empty())) std::abort();
}

// What every chat-shaped request (OpenAI chat, Anthropic messages, Responses) must hold once parsed:
// messages and tools re-serialised as JSON arrays, and common parameters that validate or say why.
template <typename Request>
void require_chat_request(const Request& r) {
  require_json_array(r.messages_json, false);
  require_json_array(r.tools_json, true);
  require_error_message(validate_common(r.common));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      ChatRequest r;
      auto e = parse_chat_request(body, r);
      require_error_message(e);
      if (e) break;
      require_chat_request(r);
      break;
    }
    case 1: {
      CompletionRequest r;
      auto e = parse_completion_request(body, r);
      require_error_message(e);
      if (e) break;
      if (r.prompts.empty() || r.prompts.size() > size_t(kMaxCompletionPrompts)) std::abort();
      for (const auto& p : r.prompts) {
        if (!p.is_ids && !p.ids.empty()) std::abort();
        for (int32_t id : p.ids)
          if (id < 0) std::abort();  // ids are checked against the vocabulary later, by value
      }
      require_error_message(validate_common(r.common));
      break;
    }
    case 2:
    case 3: {
      MessagesRequest r;
      auto e = parse_messages_request(body, r, data[0] % 6 == 2);
      require_error_message(e);
      if (e) break;
      require_chat_request(r);
      break;
    }
    case 5: {
      ResponsesRequest r;
      auto e = parse_responses_request(body, r);
      require_error_message(e);
      if (e) break;
      require_chat_request(r);
      break;
    }
    default: {
      ClientFrame f;
      auto e = parse_client_frame(body, f);
      require_error_message(e);
      if (!e && ((f.type != "generate" && f.type != "cancel") || f.id.empty())) std::abort();
      // A generate frame is a chat-completions body as well.
      ChatRequest r;
      if (!e && f.type == "generate" && !parse_chat_request(body, r))
        require_json_array(r.messages_json, false);
      break;
    }
  }
  return 0;
}
