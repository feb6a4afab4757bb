#include "net/api_error.h"

#include "src/core/json_writer.h"

namespace astrai::net {

std::string openai_error_body(const ApiError& e) {
  JsonWriter w;
  w.begin_object().key("error").begin_object();
  w.key("message").value(e.message).key("type").value(e.type);
  w.key("param");
  if (e.param.empty())
    w.null();
  else
    w.value(e.param);
  w.key("code");
  if (e.code.empty())
    w.null();
  else
    w.value(e.code);
  w.end_object().end_object();
  return w.take();
}

std::string anthropic_error_body(const ApiError& e) {
  // Anthropic's error types by status.
  const char* type = "invalid_request_error";
  switch (e.status) {
    case 401: type = "authentication_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 500: type = "api_error"; break;
    case 503: type = "overloaded_error"; break;
    default: break;
  }
  JsonWriter w;
  w.begin_object().key("type").value("error").key("error").begin_object();
  w.key("type").value(type).key("message").value(e.message);
  w.end_object().end_object();
  return w.take();
}

}  // namespace astrai::net
