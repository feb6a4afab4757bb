// The HTTP request path up to the routes: Beast's request parser with the server's limits (16 KiB of
// headers, max_body) over the bytes, fed in pieces the fuzzer picks as the socket would deliver
// them, then each request as the routes see it (to_plain), routed on a server with an API key whose
// model has not loaded: every answer is a well-formed status with a JSON (or text) body, and the
// parser never reads past what it was given. (The route bodies' JSON parsers have their own target,
// fuzz_api_json.)
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/connection.h"
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
    // As the connection's read loop does: the buffer holds every byte received and not yet
    // consumed; Beast takes what it can, and on need_more (or an empty buffer) the socket
    // delivers `piece` more bytes. (The buffer never shrinks below what Beast has seen: Beast's
    // parser relies on that.)
    size_t used = 0, received = std::min(in.size(), piece);
    while (!parser.is_done()) {
      const size_t avail = received - used;
      boost::beast::error_code ec;
      const size_t n = parser.put(boost::asio::buffer(in.data() + used, avail), ec);
      if (n > avail) std::abort();
      used += n;
      if (ec && ec != http::error::need_more) return 0;  // a 400 / 413 / 431; the connection closes
      if (ec == http::error::need_more || n == 0) {
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
