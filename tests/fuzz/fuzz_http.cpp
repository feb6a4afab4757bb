// The HTTP request path up to the routes: Beast's request parser with the server's limits (16 KiB of
// headers, max_body) over the bytes, fed in pieces the fuzzer picks as the socket would deliver them
// and as the connection reads them (net/http_read.h), then each request as the routes see it
// (to_plain), routed on a server with an API key whose model has not loaded: every answer is a
// well-formed status with a JSON (or text) body, and the parser never reads past what it was given.
// (The route bodies' JSON parsers have their own target, fuzz_api_json.)
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/connection.h"
#include "net/http_read.h"
#include "net/router.h"

namespace http = boost::beast::http;
using namespace astrai::net;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ServerState* st = [] {
    auto* s = new ServerState;
    s->config.api_key = "k";
    s->config.max_body = 64 << 10;
    return s;
  }();
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 64;  // bytes per "read"
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  // Requests follow each other on one connection (keep-alive, pipelining) until one fails to parse.
  for (int requests = 0; requests < 8 && !in.empty(); ++requests) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(uint64_t(st->config.max_body));
    // As the connection reads: the buffer holds every byte received and not yet consumed; the
    // header is read as http::async_read_header does (eager off), the body as async_read_body
    // (net/http_read.h) does (eager on, parser_may_take asked before each put); on need_more, or
    // when nothing may be parsed yet, the socket delivers `piece` more bytes.
    size_t used = 0, received = std::min(in.size(), piece);
    while (!parser.is_done()) {
      parser.eager(parser.is_header_done());
      const std::string_view unconsumed = in.substr(used, received - used);
      bool read_more = true;
      if (!unconsumed.empty() && parser_may_take(parser, unconsumed)) {
        boost::beast::error_code ec;
        const size_t n = parser.put(boost::asio::buffer(unconsumed.data(), unconsumed.size()), ec);
        if (n > unconsumed.size()) std::abort();
        used += n;
        if (ec && ec != http::error::need_more) return 0;  // a 400 / 413 / 431; the connection closes
        read_more = ec == http::error::need_more || n == 0;
      }
      if (read_more) {
        if (received == in.size()) return 0;  // the client stopped mid-request: a 408 later
        received = std::min(in.size(), received + piece);
      }
    }
    auto req = parser.release();
    const HttpRequest plain = to_plain(req, "fuzz");
    const RouteResult r = route(plain, *st);
    if (r.job) std::abort();  // no model: nothing may start
    if (r.response.status < 200 || r.response.status > 599) std::abort();
    in.remove_prefix(used);
  }
  return 0;
}
