// A client-facing error: HTTP status plus the fields both API dialects need. Formatted as
//   OpenAI:    {"error":{"message","type","param","code"}}
//   Anthropic: {"type":"error","error":{"type","message"}}
#pragma once

#include <string>

namespace astrai::net {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;                           // the offending field ("messages[1].content"), or empty
  std::string type = "invalid_request_error";  // OpenAI type; mapped for Anthropic
  std::string code;                            // OpenAI code, e.g. "model_not_found"
};

inline ApiError bad_field(const std::string& param, const std::string& message) {
  return ApiError{400, "'" + param + "': " + message, param, "invalid_request_error", ""};
}

std::string openai_error_body(const ApiError& e);
std::string anthropic_error_body(const ApiError& e);

}  // namespace astrai::net
