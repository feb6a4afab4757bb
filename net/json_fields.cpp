#include "net/json_fields.h"

namespace astrai::net {

ApiError json_syntax_error(simdjson::error_code ec) {
  return ApiError{400, std::string("request body is not valid JSON: ") + simdjson::error_message(ec), "",
                  "invalid_request_error", ""};
}

}  // namespace astrai::net
