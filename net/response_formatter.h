// Turns a Generation's deltas into what goes on the wire, without any I/O. One implementation per
// dialect and mode (OpenAI chat / completions, Anthropic messages, WebSocket frames); the connection
// coroutine only writes the bytes these return.
#pragma once

#include <string>
#include <vector>

#include "src/engine/generation.h"

namespace astrai::net {

class ResponseFormatter {
 public:
  virtual ~ResponseFormatter() = default;
  virtual bool streaming() const = 0;
  // Bytes to send before any token (SSE: role chunk / message_start); "" when not streaming.
  virtual std::string begin() { return {}; }
  // Bytes for these deltas when streaming; accumulates and returns "" otherwise.
  virtual std::string on_deltas(const std::vector<ChoiceDelta>& deltas, const Generation& g) = 0;
  // Streaming: the closing events. Otherwise: the whole JSON response body.
  virtual std::string end(const Generation& g) = 0;
};

}  // namespace astrai::net
