// Writes one streamed response (Server-Sent Events): as chunked transfer encoding for HTTP/1.1, so the
// connection stays usable for the next keep-alive request; unframed for HTTP/1.0 clients, which read
// until the connection closes. Asio/Beast header: include only from connection.cpp.
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
  enum class Framing {
    chunked,      // HTTP/1.1
    until_close,  // HTTP/1.0: no framing; the caller closes the connection after end()
  };

  SseWriter(boost::beast::tcp_stream& stream, bool keep_alive, Framing framing,
            std::vector<std::pair<std::string, std::string>> headers)
      : stream_(stream),
        keep_alive_(keep_alive && framing == Framing::chunked),
        framing_(framing),
        headers_(std::move(headers)) {}

  // Status line and headers (text/event-stream, no-cache, chunked or Connection: close).
  boost::asio::awaitable<boost::beast::error_code> begin();
  // These bytes (already SSE-framed), as one chunk when chunked.
  boost::asio::awaitable<boost::beast::error_code> write(std::string_view bytes);
  // The last chunk (nothing when unframed).
  boost::asio::awaitable<boost::beast::error_code> end();

 private:
  boost::beast::tcp_stream& stream_;
  bool keep_alive_;
  Framing framing_;
  std::vector<std::pair<std::string, std::string>> headers_;
};

}  // namespace astrai::net
