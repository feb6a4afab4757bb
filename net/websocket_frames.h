// The WebSocket protocol of /v1/ws, without I/O:
//   client: {"type":"generate","id":"<client id>", ...chat-completions body...} |
//   {"type":"cancel","id":"..."} server: {"type":"token","id","text","token_id"} per detokenized piece,
//           {"type":"done","id","finish_reason","usage"}, {"type":"error","id","message"}
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "net/json_fields.h"
#include "net/response_formatter.h"

namespace astrai::net {

struct ClientFrame {
  std::string type;  // generate | cancel
  std::string id;
};

// Reads "type" and "id" (a string or a number, kept as text) from a client frame.
MaybeError parse_client_frame(std::string_view text, ClientFrame& out);

std::string ws_error_frame(const std::string& id, const std::string& message);

// Token frames while running, the done frame at the end (always "streaming").
std::unique_ptr<ResponseFormatter> make_ws_formatter(std::string id);

}  // namespace astrai::net
