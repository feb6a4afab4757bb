// Reading a request body with Beast's parser, around one Beast 1.81 defect.
//
// basic_parser::parse_chunk_header asserts `n >= 5` when it resumes a final chunk, but it can be
// resumed with 4 bytes: a chunked body that starts with the last chunk "0\r\n", delivered by one
// socket read, then one more byte by the next read (a client sending byte by byte does this). The
// code after the assertion handles 4 bytes correctly (it answers need_more), so a build with NDEBUG
// (Release, RelWithDebInfo) is unaffected; a build with assertions on (Debug, the fuzz build)
// aborts. Fixed upstream after Boost 1.85 (boostorg/beast#2861); Debian 12 ships 1.81.
//
// The way around it: never hand the parser exactly "0\r\n" in a chunked body. Beast only enters
// the final-chunk state with 3 bytes when that is all it is given; given "0\r\n" plus at least one
// more byte it enters it with 4 and resumes with 5 or more. Holding those 3 bytes back until more
// arrive never delays a request that could complete: every state in which they can be buffered
// needs at least 2 bytes more (the final CRLF, or the rest of a chunk), and a parser expecting a
// chunk's CRLF answers need_more for fewer than 4 bytes anyway.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <string_view>
#include <tuple>

namespace astrai::net {

// Whether Beast's request parser may be given `unconsumed` (every byte received and not yet
// consumed) now; false means: read more first.
bool parser_may_take(const boost::beast::http::basic_parser<true>& parser, std::string_view unconsumed);

// http::async_read for the rest of a message whose header has been read: Beast's own read loop
// (read_some's: parse what is buffered, on need_more read what the socket has, at end of stream
// tell the parser), with parser_may_take deciding when to parse. The same errors as http::async_read.
template <class Stream, class Parser>
boost::asio::awaitable<std::tuple<boost::beast::error_code>> async_read_body(
    Stream& stream, boost::beast::flat_buffer& buffer, Parser& parser) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  using Result = std::tuple<beast::error_code>;
  parser.eager(true);
  while (!parser.is_done()) {
    const std::string_view unconsumed(static_cast<const char*>(buffer.data().data()), buffer.size());
    if (!unconsumed.empty() && parser_may_take(parser, unconsumed)) {
      beast::error_code ec;
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec && ec != beast::http::error::need_more) co_return Result{ec};
      if (!ec && used > 0) continue;
    }
    const size_t room = beast::read_size(buffer, 65536);
    if (room == 0) co_return Result{beast::http::error::buffer_overflow};
    auto [ec, n] = co_await stream.async_read_some(buffer.prepare(room), asio::as_tuple(asio::use_awaitable));
    buffer.commit(n);
    if (ec == asio::error::eof) {
      if (!parser.got_some()) co_return Result{beast::http::error::end_of_stream};
      beast::error_code eof_ec;
      parser.put_eof(eof_ec);
      co_return Result{eof_ec};
    }
    if (ec) co_return Result{ec};
  }
  co_return Result{};
}

}  // namespace astrai::net
