// Routes: one function per route, Asio-free. A route either answers at once (HttpResponse) or
// returns a GenerationJob that the connection runs (submit, wait for notify, write SSE / JSON).
#pragma once

#include <memory>
#include <optional>

#include "net/api_error.h"
#include "net/http_types.h"
#include "net/response_formatter.h"
#include "net/server_state.h"
#include "src/engine/generation.h"

namespace astrai::net {

enum class Dialect { openai, anthropic };

struct GenerationJob {
  GenerationSpec spec;
  std::unique_ptr<ResponseFormatter> fmt;
  Dialect dialect = Dialect::openai;
  GenerationSlot slot;
};

struct RouteResult {
  HttpResponse response;
  std::optional<GenerationJob> job;
};

RouteResult route(const HttpRequest& req, ServerState& state);

// The error shape of the route a target names: Anthropic's for /v1/messages..., else OpenAI's.
Dialect dialect_of(std::string_view target);

HttpResponse error_response(const ApiError& e, Dialect d);
// The HTTP error for a failed Engine::submit / Generation::start.
ApiError submit_error(const Status& s);
// Checks the API key of a request (Bearer or x-api-key); nullopt when allowed.
std::optional<ApiError> check_api_key(const HttpRequest& req, const ServerState& state);

// Parses a WebSocket "generate" frame into a job (the frame is a chat-completions body plus
// "type" and "id"; the session reads the id with parse_client_frame, the job does not carry it).
std::optional<ApiError> websocket_generate_job(std::string_view frame, ServerState& state,
                                               GenerationJob& job);

}  // namespace astrai::net
