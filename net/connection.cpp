#include "net/connection.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <cctype>
#include <chrono>

#include "net/http_read.h"
#include "net/router.h"
#include "net/sse_writer.h"
#include "net/waker.h"
#include "net/websocket_session.h"

namespace astrai::net {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kHeaderLimit = 16 * 1024;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// 2 -> "2", 0.5 -> "0.5": the setting as the operator wrote it.
std::string format_seconds(double s) {
  std::string t = std::to_string(s);
  t.erase(t.find_last_not_of('0') + 1);
  if (t.back() == '.') t.pop_back();
  return t;
}

void add_cors(const ServerState& st, std::vector<std::pair<std::string, std::string>>& h) {
  if (st.config.cors.empty()) return;
  h.emplace_back("Access-Control-Allow-Origin", st.config.cors);
  h.emplace_back("Access-Control-Allow-Headers", "*");
  h.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
}

http::response<http::string_body> to_beast(HttpResponse r, bool keep_alive, const ServerState& st) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::server, "astrai");
  if (!r.content_type.empty()) res.set(http::field::content_type, r.content_type);
  add_cors(st, r.headers);
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = std::move(r.body);
  res.prepare_payload();
  return res;
}

void count_status(ServerState& st, int status) {
  if (status >= 500)
    st.metrics.http_errors_5xx.fetch_add(1, std::memory_order_relaxed);
  else if (status >= 400)
    st.metrics.http_errors_4xx.fetch_add(1, std::memory_order_relaxed);
}

// The client closed its end (or reset) while we were generating? A readable socket with no data.
bool peer_gone(asio::ip::tcp::socket& s) {
  char b;
  const ssize_t n = ::recv(s.native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  return false;  // pipelined bytes: the next request, not a disconnect
}

// Runs one generation and writes it (SSE when streaming, one JSON body otherwise). Returns false
// when the connection must close (client gone or write failed).
asio::awaitable<bool> serve_generation(beast::tcp_stream& stream, ServerState& st, GenerationJob job,
                                       bool keep_alive, bool http10, int& status) {
  auto ex = co_await asio::this_coro::executor;
  auto waker = std::make_shared<Waker>(ex);
  auto started =
      Generation::start(*st.engine, *st.tokenizer, std::move(job.spec), waker->hook(), &st.metrics);
  if (!started.ok()) {
    HttpResponse r = error_response(submit_error(started.status()), job.dialect);
    status = r.status;
    auto res = to_beast(std::move(r), keep_alive, st);
    stream.expires_after(std::chrono::seconds(30));
    auto [ec, n] = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
    (void)n;
    co_return !ec && keep_alive;
  }
  std::unique_ptr<Generation> gen = std::move(started).value();
  ResponseFormatter& fmt = *job.fmt;
  status = 200;

  std::vector<std::pair<std::string, std::string>> headers;
  add_cors(st, headers);
  // HTTP/1.0 clients cannot read chunked framing (RFC 9112 7.1): their stream is sent unframed and
  // ends when the connection closes.
  const auto framing = http10 ? SseWriter::Framing::until_close : SseWriter::Framing::chunked;
  if (fmt.streaming() && http10) keep_alive = false;
  SseWriter sse(stream, keep_alive, framing, headers);
  if (fmt.streaming()) {
    if (auto ec = co_await sse.begin()) co_return false;
    if (auto ec = co_await sse.write(fmt.begin())) co_return false;
  }

  auto& socket = stream.socket();
  bool watch_socket = true;
  std::vector<ChoiceDelta> deltas;
  for (;;) {
    deltas.clear();
    const bool done = gen->pump(deltas);
    if (!deltas.empty()) {
      std::string bytes = fmt.on_deltas(deltas, *gen);
      if (fmt.streaming() && !bytes.empty()) {
        if (auto ec = co_await sse.write(bytes)) {
          gen->cancel();
          st.metrics.client_disconnects.fetch_add(1, std::memory_order_relaxed);
          co_return false;
        }
      }
    }
    if (done) break;
    if (!watch_socket) {
      co_await waker->wait();
      continue;
    }
    // Either the engine has news or the client hung up: a closed socket becomes readable.
    auto which = co_await (waker->wait() || socket.async_wait(asio::ip::tcp::socket::wait_read,
                                                              asio::as_tuple(asio::use_awaitable)));
    if (which.index() == 1) {
      if (peer_gone(socket)) {
        gen->cancel();  // frees the request's KV pages at the next step boundary
        st.metrics.client_disconnects.fetch_add(1, std::memory_order_relaxed);
        co_return false;
      }
      watch_socket = false;  // pipelined next request: stop watching, it will be read later
    }
  }

  std::string tail = fmt.end(*gen);
  gen.reset();
  if (fmt.streaming()) {
    if (auto ec = co_await sse.write(tail)) co_return false;
    if (auto ec = co_await sse.end()) co_return false;
    co_return keep_alive;
  }
  HttpResponse r;
  r.body = std::move(tail);
  auto res = to_beast(std::move(r), keep_alive, st);
  stream.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
  (void)n;
  co_return !ec && keep_alive;
}

// Runs one read under a deadline. tcp_stream::expires_after would close the socket when it fires;
// this cancels only the read, so a timeout can still be answered (408). Returns beast::error::timeout
// when the deadline won.
template <class Read>
asio::awaitable<beast::error_code> read_within(beast::tcp_stream& stream, double limit_s, Read read) {
  stream.expires_never();
  asio::steady_timer deadline(stream.get_executor(), seconds(limit_s));
  auto first = co_await (read() || deadline.async_wait(asio::as_tuple(asio::use_awaitable)));
  if (first.index() == 1) co_return beast::error::timeout;
  co_return std::get<0>(std::get<0>(first));
}

// An error answer for a request we could not read; the connection closes after it.
asio::awaitable<void> write_and_close(beast::tcp_stream& stream, ServerState& st, int status,
                                      const std::string& msg, Dialect dialect = Dialect::openai) {
  HttpResponse r = error_response(ApiError{status, msg, "", "invalid_request_error", ""}, dialect);
  count_status(st, status);
  auto res = to_beast(std::move(r), false, st);
  stream.expires_after(std::chrono::seconds(5));
  co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
  beast::error_code ec;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
}

// Routes a request: on the worker pool when it has a body to work through, else here.
asio::awaitable<RouteResult> route_request(const HttpRequest& req, ServerState& st, WorkExecutor work) {
  auto run = [&] {
    if (st.on_route) st.on_route();
    return route(req, st);
  };
  if (req.method != "POST") co_return run();
  co_return co_await asio::co_spawn(
      work, [&]() -> asio::awaitable<RouteResult> { co_return run(); }, asio::use_awaitable);
}

struct OpenConnection {
  explicit OpenConnection(ServerState& s) : st(s) { st.metrics.open_connections.fetch_add(1); }
  ~OpenConnection() { st.metrics.open_connections.fetch_sub(1); }
  ServerState& st;
};

}  // namespace

// Moves rather than copies the body: it can be max_body large, and this runs on the net thread.
HttpRequest to_plain(http::request<http::string_body>& req, const std::string& peer) {
  HttpRequest r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  r.path = r.target.substr(0, r.target.find('?'));
  for (const auto& f : req) {
    std::string name(f.name_string());
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    r.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  r.body = std::move(req.body());
  r.peer = peer;
  return r;
}

asio::awaitable<void> run_connection(asio::ip::tcp::socket socket, ServerState& st, WorkExecutor work) {
  OpenConnection open(st);
  std::string peer;
  {
    beast::error_code ec;
    auto ep = socket.remote_endpoint(ec);
    if (!ec) peer = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  bool first = true;
  try {
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(kHeaderLimit);
      parser.body_limit(uint64_t(st.config.max_body));
      // The whole header must arrive within header_timeout (slowloris cannot trickle bytes forever);
      // an idle keep-alive connection gets idle_timeout before its next request.
      const double header_limit =
          first ? st.config.header_timeout : std::max(st.config.idle_timeout, st.config.header_timeout);
      first = false;
      const beast::error_code ec = co_await read_within(stream, header_limit, [&] {
        return http::async_read_header(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
      });
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
          ec == asio::error::operation_aborted)
        break;
      if (ec == beast::error::timeout) {
        // A connection that has sent nothing of a next request is just idle: close it silently.
        if (buffer.size() > 0 || parser.got_some())
          co_await write_and_close(
              stream, st, 408,
              "request headers not received within header_timeout (" + format_seconds(header_limit) + " s)");
        break;
      }
      if (ec == http::error::header_limit) {
        co_await write_and_close(stream, st, 431, "request headers are larger than 16 KiB");
        break;
      }
      if (ec == http::error::body_limit) {
        co_await write_and_close(
            stream, st, 413,
            "request body is larger than max_body (" + std::to_string(st.config.max_body) + " bytes)");
        break;
      }
      if (ec) {
        co_await write_and_close(stream, st, 400, std::string("malformed HTTP request: ") + ec.message());
        break;
      }
      const auto t0 = Clock::now();
      auto& hdr = parser.get();
      // Clients that send "Expect: 100-continue" (curl, for large bodies) wait for this first.
      if (beast::iequals(hdr[http::field::expect], "100-continue")) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        stream.expires_after(std::chrono::seconds(5));
        co_await http::async_write(stream, cont, asio::as_tuple(asio::use_awaitable));
      }
      // The route is known now: its errors take that route's JSON shape.
      const Dialect dialect = dialect_of(std::string_view(hdr.target()));
      // Not http::async_read: Beast 1.81 can abort on a chunked body read byte by byte (net/http_read.h).
      const beast::error_code bec = co_await read_within(
          stream, st.config.body_timeout, [&] { return async_read_body(stream, buffer, parser); });
      if (bec == http::error::body_limit) {
        co_await write_and_close(
            stream, st, 413,
            "request body is larger than max_body (" + std::to_string(st.config.max_body) + " bytes)",
            dialect);
        break;
      }
      if (bec == beast::error::timeout) {
        co_await write_and_close(stream, st, 408,
                                 "request body not received within body_timeout (" +
                                     format_seconds(st.config.body_timeout) + " s)",
                                 dialect);
        break;
      }
      if (bec) {
        if (bec != http::error::end_of_stream && bec != asio::error::eof)
          co_await write_and_close(stream, st, 400, std::string("malformed HTTP request: ") + bec.message(),
                                   dialect);
        break;
      }
      http::request<http::string_body> req = parser.release();
      const bool keep_alive = req.keep_alive() && !st.draining.load(std::memory_order_relaxed);
      st.metrics.http_requests.fetch_add(1, std::memory_order_relaxed);

      if (req.target() == "/v1/ws" || req.target().starts_with("/v1/ws?")) {
        HttpRequest plain = to_plain(req, peer);
        if (!beast::websocket::is_upgrade(req)) {
          co_await write_and_close(stream, st, 400, "/v1/ws expects a WebSocket upgrade request");
          break;
        }
        if (auto e = check_api_key(plain, st)) {
          HttpResponse r = error_response(*e, Dialect::openai);
          count_status(st, r.status);
          auto res = to_beast(std::move(r), false, st);
          co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
          break;
        }
        if (st.config.access_log) spdlog::info("{} GET /v1/ws 101", peer);
        co_await run_websocket_session(std::move(stream), std::move(req), st, work);
        co_return;
      }

      const HttpRequest plain = to_plain(req, peer);
      RouteResult rr = co_await route_request(plain, st, work);
      int status = rr.response.status;
      bool keep = keep_alive;
      if (rr.job) {
        keep =
            co_await serve_generation(stream, st, std::move(*rr.job), keep_alive, req.version() < 11, status);
      } else {
        auto res = to_beast(std::move(rr.response), keep_alive, st);
        stream.expires_after(std::chrono::seconds(60));
        auto [wec, wn] = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
        (void)wn;
        if (wec) keep = false;
      }
      count_status(st, status);
      if (st.config.access_log)
        spdlog::info("{} {} {} {} {:.1f}ms", peer, std::string(req.method_string()),
                     std::string(req.target()), status,
                     std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (!keep) break;
    }
  } catch (const std::exception& e) {
    spdlog::error("{}: connection error: {}", peer, e.what());
  }
  beast::error_code ec;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  stream.socket().close(ec);
}

}  // namespace astrai::net
