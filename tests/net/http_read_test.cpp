// async_read_body (net/http_read.h), the connection's body read, over Beast's test stream with reads
// of every size from 1 byte up: the same request as Beast parses it in one piece, the bytes after it
// left in the buffer, Beast's errors for bad bodies, and never the parser state that trips Beast
// 1.81's BOOST_ASSERT(n >= 5) in parse_chunk_header. That assertion is compiled out in this
// (NDEBUG) build, so the last check looks at what the parser is given instead: the fuzz build
// (assertions on) aborts on it, `scripts/fuzz http 0` with the corpus input open_beast_chunk_assert.
#include "net/http_read.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

using namespace astrai::net;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

// Records every buffer the body read hands to the parser (name lookup in the template finds this
// put before the base's).
struct RecordingParser : http::request_parser<http::string_body> {
  std::vector<std::string> given;
  size_t put(asio::const_buffer b, beast::error_code& ec) {
    given.emplace_back(static_cast<const char*>(b.data()), b.size());
    return http::request_parser<http::string_body>::put(b, ec);
  }
};

struct ReadResult {
  beast::error_code header_ec, body_ec;
  std::string body, left_over;
  std::vector<std::string> given;
};

// The connection's two reads over `bytes`, delivered `read_size` bytes per read, then end of stream.
ReadResult read_request(const std::string& bytes, size_t read_size) {
  asio::io_context ioc;
  beast::test::stream stream(ioc, bytes);
  stream.read_size(read_size);
  stream.close_remote();  // end of stream after the bytes
  ReadResult r;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        beast::flat_buffer buffer;
        RecordingParser parser;
        auto [hec, hn] =
            co_await http::async_read_header(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
        (void)hn;
        r.header_ec = hec;
        if (hec) co_return;
        parser.given.clear();
        auto [bec] = co_await async_read_body(stream, buffer, parser);
        r.body_ec = bec;
        r.given = parser.given;
        if (!bec) r.body = parser.get().body();
        r.left_over.assign(static_cast<const char*>(buffer.data().data()), buffer.size());
      },
      asio::detached);
  ioc.run();
  return r;
}

// Beast's parse of the whole request in one piece: the body, or nullopt on an error.
std::optional<std::string> parse_whole(const std::string& bytes) {
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  beast::error_code ec;
  parser.put(asio::buffer(bytes), ec);
  if (ec || !parser.is_done()) return std::nullopt;
  return parser.get().body();
}

const std::string kHead = "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
const std::string kNext = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";

}  // namespace

TEST_CASE("async_read_body reads a chunked body split into reads of any size as Beast parses it whole",
          "[unit]") {
  const std::vector<std::string> bodies = {
      "0\r\n\r\n",                                       // empty: the body that tripped Beast's assertion
      "00\r\n\r\n",                                      // a longer last chunk
      "0\r\nX-Trailer: 1\r\n\r\n",                       // a trailer
      "5\r\nhello\r\n0\r\n\r\n",                         // data, then the last chunk after its CRLF
      "3\r\n0\r\n\r\n0\r\n\r\n",                         // data that looks like a last chunk
      "1;ext=v\r\nx\r\n2\r\nyz\r\n0;e\r\nT: v\r\n\r\n",  // extensions
  };
  for (const auto& body : bodies) {
    const std::string request = kHead + body;
    const auto whole = parse_whole(request);
    REQUIRE(whole);
    for (size_t read_size = 1; read_size <= request.size() + kNext.size(); ++read_size) {
      INFO("body " << body << ", " << read_size << " bytes per read");
      const ReadResult r = read_request(request + kNext, read_size);
      REQUIRE_FALSE(r.header_ec);
      REQUIRE_FALSE(r.body_ec);
      CHECK(r.body == *whole);
      // The next request's bytes stay in the buffer (pipelining): at most what one read brought.
      CHECK(kNext.starts_with(r.left_over));
      // Beast 1.81 asserts when it resumes a last chunk it first saw as exactly these 3 bytes.
      for (const auto& g : r.given) CHECK(g != "0\r\n");
    }
  }
}

TEST_CASE("async_read_body answers a bad or cut chunked body with Beast's error", "[unit]") {
  for (size_t read_size : {size_t(1), size_t(2), size_t(3), size_t(64)}) {
    INFO(read_size << " bytes per read");
    CHECK(read_request(kHead + "zz\r\n\r\n", read_size).body_ec == http::error::bad_chunk);
    CHECK(read_request(kHead + "5\r\nhelloXX0\r\n\r\n", read_size).body_ec == http::error::bad_chunk);
    // The client stops after the last chunk without its final CRLF: the bytes held back are
    // given to the parser at the end of stream, which finds the message cut.
    CHECK(read_request(kHead + "0\r\n", read_size).body_ec == http::error::partial_message);
    CHECK(read_request(kHead + "5\r\nhel", read_size).body_ec == http::error::partial_message);
  }
}

TEST_CASE("async_read_body reads a Content-Length body and keeps Beast's body limit", "[unit]") {
  const std::string body(300, 'b');
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 300\r\n\r\n" + body + kNext;
  for (size_t read_size : {size_t(1), size_t(7), size_t(4096)}) {
    const ReadResult r = read_request(request, read_size);
    REQUIRE_FALSE(r.body_ec);
    CHECK(r.body == body);
    CHECK(kNext.starts_with(r.left_over));
  }
  asio::io_context ioc;
  beast::test::stream stream(ioc, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n" +
                                      std::string(16, 'x') + "\r\n0\r\n\r\n");
  stream.close_remote();
  beast::error_code ec;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        beast::flat_buffer buffer;
        http::request_parser<http::string_body> parser;
        parser.body_limit(8);
        co_await http::async_read_header(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
        std::tie(ec) = co_await async_read_body(stream, buffer, parser);
      },
      asio::detached);
  ioc.run();
  CHECK(ec == http::error::body_limit);
}
