// Writes one HTTP/1.1 streamed response (Server-Sent Events) as chunked transfer encoding, so the
// connection stays usable for the next keep-alive request. Asio/Beast header: include only from
// connection.cpp.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace astrai::net {

class SseWriter {
 public:
  SseWriter(boost::beast::tcp_stream& stream, bool keep_alive,
            std::vector<std::pair<std::string, std::string>> headers)
      : stream_(stream), keep_alive_(keep_alive), headers_(std::move(headers)) {}

  // Status line and headers (text/event-stream, no-cache, chunked).
  boost::asio::awaitable<boost::beast::error_code> begin();
  // One chunk with these bytes (already SSE-framed).
  boost::asio::awaitable<boost::beast::error_code> write(std::string_view bytes);
  // The last chunk.
  boost::asio::awaitable<boost::beast::error_code> end();

 private:
  boost::beast::tcp_stream& stream_;
  bool keep_alive_;
  std::vector<std::pair<std::string, std::string>> headers_;
};

}  // namespace astrai::net
