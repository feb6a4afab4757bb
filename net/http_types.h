// Plain HTTP request/response values handed between the connection coroutine (Beast) and the
// routes, so that routes, protocols and their tests never include Asio or Beast.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace astrai::net {

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string target;                                        // as sent, with query
  std::string path;                                          // target without the query
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::string peer;  // "ip:port" for logs

  std::string_view header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers)
      if (k == lower_name) return v;
    return {};
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Retry-After, Allow, ...)
};

}  // namespace astrai::net
