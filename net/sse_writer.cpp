#include "net/sse_writer.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <chrono>

namespace astrai::net {
namespace http = boost::beast::http;
namespace asio = boost::asio;
using boost::beast::error_code;

namespace {
// A client that stops reading for this long is treated as gone.
constexpr auto kWriteTimeout = std::chrono::seconds(60);
}  // namespace

asio::awaitable<error_code> SseWriter::begin() {
  http::response<http::empty_body> res{http::status::ok, 11};
  res.set(http::field::server, "astrai");
  res.set(http::field::content_type, "text/event-stream; charset=utf-8");
  res.set(http::field::cache_control, "no-cache");
  res.set("X-Accel-Buffering", "no");
  for (const auto& [k, v] : headers_) res.set(k, v);
  res.keep_alive(keep_alive_);
  res.chunked(framing_ == Framing::chunked);
  http::response_serializer<http::empty_body> sr{res};
  stream_.expires_after(kWriteTimeout);
  auto [ec, n] = co_await http::async_write_header(stream_, sr, asio::as_tuple(asio::use_awaitable));
  (void)n;
  co_return ec;
}

asio::awaitable<error_code> SseWriter::write(std::string_view bytes) {
  if (bytes.empty()) co_return error_code{};
  stream_.expires_after(kWriteTimeout);
  const auto data = asio::buffer(bytes.data(), bytes.size());
  if (framing_ == Framing::until_close) {
    auto [ec, n] = co_await asio::async_write(stream_, data, asio::as_tuple(asio::use_awaitable));
    (void)n;
    co_return ec;
  }
  auto [ec, n] =
      co_await asio::async_write(stream_, http::make_chunk(data), asio::as_tuple(asio::use_awaitable));
  (void)n;
  co_return ec;
}

asio::awaitable<error_code> SseWriter::end() {
  if (framing_ == Framing::until_close) co_return error_code{};
  stream_.expires_after(kWriteTimeout);
  auto [ec, n] =
      co_await asio::async_write(stream_, http::make_chunk_last(), asio::as_tuple(asio::use_awaitable));
  (void)n;
  co_return ec;
}

}  // namespace astrai::net
