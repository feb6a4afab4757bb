#include "net/http_read.h"

namespace astrai::net {

bool parser_may_take(const boost::beast::http::basic_parser<true>& parser, std::string_view unconsumed) {
  return !(parser.is_header_done() && parser.chunked() && unconsumed == "0\r\n");
}

}  // namespace astrai::net
