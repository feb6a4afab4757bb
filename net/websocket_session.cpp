#include "net/websocket_session.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <map>

#include "net/generation.h"
#include "net/router.h"
#include "net/waker.h"
#include "net/websocket_frames.h"

namespace astrai::net {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

namespace {

// State shared by the reader, the writer and the generation coroutines of one socket. All of them
// run on the connection's strand, so no locks; shared ownership only keeps it alive until the last
// of them has finished.
struct Session {
  explicit Session(beast::tcp_stream stream, ServerState& s)
      : ws(std::move(stream)), st(s), writer_wake(std::make_shared<Waker>(ws.get_executor())) {}

  websocket::stream<beast::tcp_stream> ws;
  ServerState& st;
  std::deque<std::string> outbox;
  std::shared_ptr<Waker> writer_wake;
  bool closed = false;  // reader saw the end, or a write failed: stop everything
  struct Task {
    Generation* gen = nullptr;
    std::shared_ptr<Waker> waker;
  };
  std::map<std::string, Task> tasks;

  void send(std::string frame) {
    if (closed) return;
    outbox.push_back(std::move(frame));
    writer_wake->wake();
  }
};

asio::awaitable<void> writer(std::shared_ptr<Session> s) {
  for (;;) {
    while (!s->outbox.empty() && !s->closed) {
      s->ws.text(true);
      auto [ec, n] =
          co_await s->ws.async_write(asio::buffer(s->outbox.front()), asio::as_tuple(asio::use_awaitable));
      (void)n;
      if (ec) {
        s->closed = true;
        break;
      }
      s->outbox.pop_front();
    }
    if (s->closed) break;
    co_await s->writer_wake->wait();
  }
}

asio::awaitable<void> generation(std::shared_ptr<Session> s, std::string id, GenerationJob job) {
  auto waker = std::make_shared<Waker>(co_await asio::this_coro::executor);
  auto started =
      Generation::start(*s->st.engine, *s->st.tokenizer, std::move(job.spec), waker->hook(), &s->st.metrics);
  if (!started.ok()) {
    s->send(ws_error_frame(id, submit_error(started.status()).message));
    co_return;
  }
  std::unique_ptr<Generation> gen = std::move(started).value();
  s->tasks[id] = Session::Task{gen.get(), waker};
  auto fmt = make_ws_formatter(id);
  std::vector<ChoiceDelta> deltas;
  for (;;) {
    if (s->closed) {
      gen->cancel();
      s->st.metrics.client_disconnects.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    deltas.clear();
    const bool done = gen->pump(deltas);
    std::string frames = fmt->on_deltas(deltas, *gen);
    for (size_t start = 0; start < frames.size();) {
      const size_t nl = frames.find('\n', start);
      s->send(frames.substr(start, nl - start));
      start = nl + 1;
    }
    if (done) {
      std::string done_frame = fmt->end(*gen);
      done_frame.pop_back();  // trailing newline
      s->send(std::move(done_frame));
      break;
    }
    co_await waker->wait();
  }
  s->tasks.erase(id);
}

}  // namespace

asio::awaitable<void> run_websocket_session(beast::tcp_stream stream, http::request<http::string_body> req,
                                            ServerState& st) {
  auto s = std::make_shared<Session>(std::move(stream), st);
  auto& ws = s->ws;
  beast::get_lowest_layer(ws).expires_never();
  ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  ws.set_option(websocket::stream_base::decorator(
      [](websocket::response_type& res) { res.set(http::field::server, "astrai"); }));
  ws.read_message_max(uint64_t(st.config.max_body));
  auto [aec] = co_await ws.async_accept(req, asio::as_tuple(asio::use_awaitable));
  if (aec) co_return;

  auto ex = co_await asio::this_coro::executor;
  asio::co_spawn(ex, writer(s), asio::detached);

  beast::flat_buffer buf;
  for (;;) {
    buf.clear();
    auto [ec, n] = co_await ws.async_read(buf, asio::as_tuple(asio::use_awaitable));
    (void)n;
    if (ec) {
      // Closed by the client, a protocol violation (Beast has already sent the close frame with
      // 1002 / 1007 / 1009), or the connection dropped.
      if (ec != websocket::error::closed) spdlog::debug("websocket: {}", ec.message());
      break;
    }
    if (!ws.got_text()) {
      // Binary frames are not part of the protocol: close with 1003 (unsupported data).
      s->closed = true;
      co_await ws.async_close(
          websocket::close_reason(websocket::close_code::unknown_data, "binary frames are not supported"),
          asio::as_tuple(asio::use_awaitable));
      break;
    }
    const std::string text = beast::buffers_to_string(buf.data());
    ClientFrame frame;
    if (auto e = parse_client_frame(text, frame)) {
      s->send(ws_error_frame(frame.id, e->message));
      continue;
    }
    if (frame.type == "cancel") {
      auto it = s->tasks.find(frame.id);
      if (it == s->tasks.end()) {
        s->send(ws_error_frame(frame.id, "no running generation with this id"));
        continue;
      }
      it->second.gen->cancel();  // the engine answers with a finish event: a done frame follows
      continue;
    }
    if (s->tasks.count(frame.id)) {
      s->send(ws_error_frame(frame.id, "a generation with this id is already running"));
      continue;
    }
    GenerationJob job;
    if (auto e = websocket_generate_job(text, st, job)) {
      s->send(ws_error_frame(frame.id, e->message));
      continue;
    }
    asio::co_spawn(ex, generation(s, frame.id, std::move(job)), asio::detached);
  }
  // The socket is done: stop the generations (they cancel in the engine) and the writer.
  s->closed = true;
  for (auto& [id, t] : s->tasks) t.waker->wake();
  s->writer_wake->wake();
}

}  // namespace astrai::net
