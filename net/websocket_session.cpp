#include "net/websocket_session.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <map>
#include <optional>

#include "net/router.h"
#include "net/waker.h"
#include "net/websocket_close_filter.h"
#include "net/websocket_frames.h"
#include "src/engine/generation.h"

namespace astrai::net {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using namespace asio::experimental::awaitable_operators;

namespace {

// The TCP stream under the WebSocket, with the client's bytes passed through a CloseCodeFilter on the
// way in, so that Beast answers a forbidden close code with 1002 instead of echoing it.
class CloseCheckedStream {
 public:
  using executor_type = beast::tcp_stream::executor_type;
  using next_layer_type = beast::tcp_stream;

  explicit CloseCheckedStream(beast::tcp_stream s) : next_(std::move(s)) {}
  executor_type get_executor() noexcept { return next_.get_executor(); }
  next_layer_type& next_layer() noexcept { return next_; }
  const next_layer_type& next_layer() const noexcept { return next_; }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return next_.async_write_some(buffers, std::forward<Token>(token));
  }

  // Reads into the first non-empty buffer only (a read_some may fill less than it is given). A byte
  // the filter holds back is kept here and put in front of the next read.
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    asio::mutable_buffer dst;
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers); ++it)
      if (asio::mutable_buffer(*it).size() > 0) {
        dst = *it;
        break;
      }
    return asio::async_compose<Token, void(beast::error_code, size_t)>(
        [this, dst, have = size_t(0), started = false](auto& self, beast::error_code ec = {},
                                                       size_t n = 0) mutable {
          auto* p = static_cast<uint8_t*>(dst.data());
          if (!started) {
            started = true;
            // Too small to hold a held-back byte and its partner: pass through unfiltered (Beast
            // never reads this little).
            if (dst.size() < 2) return next_.async_read_some(dst, std::move(self));
            if (held_) p[have++] = *std::exchange(held_, std::nullopt);
            return next_.async_read_some(asio::buffer(p + have, dst.size() - have), std::move(self));
          }
          if (dst.size() < 2) return self.complete(ec, n);
          const size_t total = have + n;
          const size_t pass = filter_.scan(std::span<uint8_t>(p, total));
          if (pass < total) held_ = p[pass];
          if (pass == 0 && !ec) {  // only the held byte so far: read on behind it
            have = 0;
            p[have++] = *std::exchange(held_, std::nullopt);
            return next_.async_read_some(asio::buffer(p + have, dst.size() - have), std::move(self));
          }
          self.complete(ec, pass);
        },
        token, next_);
  }

  // Closing the WebSocket tears down the TCP stream beneath (found by Beast through ADL; the session
  // uses only asynchronous operations, so only the asynchronous teardown is needed).
  template <class Handler>
  friend void async_teardown(beast::role_type role, CloseCheckedStream& s, Handler&& handler) {
    async_teardown(role, s.next_, std::forward<Handler>(handler));
  }

 private:
  beast::tcp_stream next_;
  CloseCodeFilter filter_;
  std::optional<uint8_t> held_;
};

// One socket and the generations multiplexed on it. It lives in run_websocket_session's frame; the
// reader and the writer are two halves of one `&&` in that frame, so both may use it by reference.
// Everything runs on the connection's strand: no locks.
class WsSession {
 public:
  WsSession(beast::tcp_stream stream, ServerState& st, asio::thread_pool::executor_type work)
      : ws_(std::move(stream)),
        st_(st),
        work_(std::move(work)),
        wake_(std::make_shared<Waker>(ws_.get_executor())) {}

  websocket::stream<CloseCheckedStream>& socket() { return ws_; }

  // Reads client frames until the socket ends, then stops the writer.
  asio::awaitable<void> read_frames() {
    beast::flat_buffer buf;
    for (;;) {
      buf.clear();
      auto [ec, n] = co_await ws_.async_read(buf, asio::as_tuple(asio::use_awaitable));
      (void)n;
      if (ec) {
        // Closed by the client, a protocol violation (Beast has already sent the close frame with
        // 1002 / 1007 / 1009), or the connection dropped.
        if (ec != websocket::error::closed) spdlog::debug("websocket: {}", ec.message());
        break;
      }
      if (!ws_.got_text()) {
        // Binary frames are not part of the protocol: close with 1003 (unsupported data).
        closed_ = true;
        co_await ws_.async_close(
            websocket::close_reason(websocket::close_code::unknown_data, "binary frames are not supported"),
            asio::as_tuple(asio::use_awaitable));
        break;
      }
      co_await on_frame(beast::buffers_to_string(buf.data()));
      wake_->wake();
    }
    closed_ = true;
    wake_->wake();
  }

  // Pumps every running generation and writes the frames, then sleeps until the engine or the reader
  // has news. Ends when the socket does (or a write fails); the generations still running are
  // cancelled in the engine then.
  asio::awaitable<void> write_frames() {
    std::vector<ChoiceDelta> deltas;
    while (!closed_) {
      pump_all(deltas);
      while (!outbox_.empty() && !closed_) {
        ws_.text(true);
        auto [ec, n] =
            co_await ws_.async_write(asio::buffer(outbox_.front()), asio::as_tuple(asio::use_awaitable));
        (void)n;
        if (ec)
          closed_ = true;
        else
          outbox_.pop_front();
      }
      if (!closed_) co_await wake_->wait();
    }
    for (auto& [id, g] : running_) {
      g.gen->cancel();  // frees its KV pages at the next step
      st_.metrics.client_disconnects.fetch_add(1, std::memory_order_relaxed);
    }
    running_.clear();
  }

 private:
  // A generation this socket runs, under the client's id.
  struct WsGeneration {
    std::unique_ptr<Generation> gen;
    std::unique_ptr<ResponseFormatter> fmt;
    GenerationSlot slot;  // held until the generation ends
  };

  void queue(std::string frame) {
    if (!closed_) outbox_.push_back(std::move(frame));
  }

  // Frames are handled one at a time, in order: the reader waits while a generate frame's job is
  // worked out on the worker pool (the writer keeps streaming meanwhile).
  asio::awaitable<void> on_frame(const std::string& text) {
    ClientFrame frame;
    if (auto e = parse_client_frame(text, frame)) co_return queue(ws_error_frame(frame.id, e->message));
    if (frame.type == "cancel") {
      auto it = running_.find(frame.id);
      if (it == running_.end())
        co_return queue(ws_error_frame(frame.id, "no running generation with this id"));
      it->second.gen->cancel();  // the engine answers with a finish event: a done frame follows
      co_return;
    }
    if (running_.count(frame.id))
      co_return queue(ws_error_frame(frame.id, "a generation with this id is already running"));
    GenerationJob job;
    auto error = co_await asio::co_spawn(
        work_,
        [&]() -> asio::awaitable<std::optional<ApiError>> {
          if (st_.on_route) st_.on_route();
          co_return websocket_generate_job(text, st_, job);
        },
        asio::use_awaitable);
    if (error) co_return queue(ws_error_frame(frame.id, error->message));
    if (closed_) co_return;
    auto started =
        Generation::start(*st_.engine, *st_.tokenizer, std::move(job.spec), wake_->hook(), &st_.metrics);
    if (!started.ok()) co_return queue(ws_error_frame(frame.id, submit_error(started.status()).message));
    running_.emplace(
        frame.id, WsGeneration{std::move(started).value(), make_ws_formatter(frame.id), std::move(job.slot)});
  }

  void pump_all(std::vector<ChoiceDelta>& deltas) {
    for (auto it = running_.begin(); it != running_.end();) {
      WsGeneration& g = it->second;
      deltas.clear();
      const bool done = g.gen->pump(deltas);
      // The formatter returns frames separated by newlines (JSON we write never contains a raw one).
      const std::string frames = g.fmt->on_deltas(deltas, *g.gen);
      for (size_t start = 0; start < frames.size();) {
        const size_t nl = frames.find('\n', start);
        queue(frames.substr(start, nl - start));
        start = nl + 1;
      }
      if (!done) {
        ++it;
        continue;
      }
      std::string done_frame = g.fmt->end(*g.gen);
      done_frame.pop_back();  // trailing newline
      queue(std::move(done_frame));
      it = running_.erase(it);
    }
  }

  websocket::stream<CloseCheckedStream> ws_;
  ServerState& st_;
  asio::thread_pool::executor_type work_;
  // Shared with the engine's notify hooks, which may fire after a generation has ended.
  std::shared_ptr<Waker> wake_;
  std::deque<std::string> outbox_;
  std::map<std::string, WsGeneration> running_;
  bool closed_ = false;  // the reader saw the end, or a write failed: stop everything
};

}  // namespace

asio::awaitable<void> run_websocket_session(beast::tcp_stream stream, http::request<http::string_body> req,
                                            ServerState& st, asio::thread_pool::executor_type work) {
  WsSession s(std::move(stream), st, work);
  auto& ws = s.socket();
  beast::get_lowest_layer(ws).expires_never();
  ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  ws.set_option(websocket::stream_base::decorator(
      [](websocket::response_type& res) { res.set(http::field::server, "astrai"); }));
  ws.read_message_max(uint64_t(st.config.max_body));
  auto [aec] = co_await ws.async_accept(req, asio::as_tuple(asio::use_awaitable));
  if (aec) co_return;
  co_await (s.read_frames() && s.write_frames());
}

}  // namespace astrai::net
