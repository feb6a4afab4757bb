#include "net/server.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <csignal>
#include <cstdio>
#include <latch>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "net/connection.h"

namespace astrai::net {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

asio::awaitable<void> accept_loop(asio::io_context& ioc, tcp::acceptor& acceptor, ServerState& st,
                                  WorkExecutor work) {
  for (;;) {
    // Each connection gets its own strand: its coroutine and the engine's wake-up posts never run
    // concurrently, even with several net threads.
    auto [ec, socket] =
        co_await acceptor.async_accept(asio::make_strand(ioc), asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      spdlog::warn("accept: {}", ec.message());
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    auto ex = socket.get_executor();
    asio::co_spawn(ex, run_connection(std::move(socket), st, work), asio::detached);
  }
}

// SIGTERM/SIGINT: close the listener, wait for in-flight generations (bounded), stop the loop.
// `signals` outlives the coroutine (it lives in run_server) so that a second SIGTERM during the
// shutdown that follows is still caught instead of killing the process with the default action.
asio::awaitable<void> drain_on_signal(asio::io_context& ioc, tcp::acceptor& acceptor, ServerState& st,
                                      asio::signal_set& signals) {
  auto [ec, sig] = co_await signals.async_wait(asio::as_tuple(asio::use_awaitable));
  if (ec) co_return;
  spdlog::info("signal {}: draining (up to {:.1f} s for {} in-flight generations)", sig,
               st.config.drain_timeout, st.inflight.load());
  st.draining.store(true);
  boost::system::error_code ignore;
  acceptor.close(ignore);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(st.config.drain_timeout));
  // Shutdown only: a coarse check every 20 ms is simpler than threading a completion signal
  // through every connection, and costs nothing while serving.
  asio::steady_timer t(ioc);
  while (st.inflight.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    t.expires_after(std::chrono::milliseconds(20));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  if (st.inflight.load() > 0) spdlog::warn("drain timeout: {} generations still running", st.inflight.load());
  ioc.stop();
}

}  // namespace

Status run_server(ServerState& st, const ModelLoader& load) {
  asio::io_context ioc(st.config.net_threads);
  tcp::acceptor acceptor(ioc);
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(st.config.host, ec);
  if (ec) return invalid_argument("--host: '" + st.config.host + "' is not an IP address");
  const tcp::endpoint ep(addr, uint16_t(st.config.port));
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return io_error("cannot listen on " + st.config.host + ":" + std::to_string(st.config.port) + ": " +
                    ec.message());
  const int port = acceptor.local_endpoint().port();
  spdlog::info("listening on http://{}:{} ({} net thread{}, {} worker thread{})", st.config.host, port,
               st.config.net_threads, st.config.net_threads == 1 ? "" : "s", st.config.worker_threads,
               st.config.worker_threads == 1 ? "" : "s");
  std::fprintf(stdout, "listening on %s:%d\n", st.config.host.c_str(), port);
  std::fflush(stdout);

  // Declared after ioc so that it is joined and destroyed first: its last completions are posted
  // to ioc's strands.
  asio::thread_pool workers(size_t(st.config.worker_threads));
  {
    // Names each worker "astrai-work" (bench serve tells threads apart by name); the latch keeps
    // one naming task per thread.
    auto named = std::make_shared<std::latch>(st.config.worker_threads);
    for (int i = 0; i < st.config.worker_threads; ++i)
      asio::post(workers, [named] {
        pthread_setname_np(pthread_self(), "astrai-work");
        named->arrive_and_wait();
      });
  }
  asio::co_spawn(ioc, accept_loop(ioc, acceptor, st, workers.get_executor()), asio::detached);
  // Destroying the last signal_set that holds a signal gives it back its default action
  // (termination). A second set, on an io_context that never runs, lives as long as the process and
  // keeps Asio's handler installed through the teardown below until SIG_IGN replaces it there: a
  // supervisor's repeated SIGTERM never meets the default action.
  static asio::io_context* const quiet = new asio::io_context;
  static asio::signal_set* const held = new asio::signal_set(*quiet, SIGINT, SIGTERM);
  (void)held;
  std::optional<asio::signal_set> signals(std::in_place, ioc, SIGINT, SIGTERM);
  asio::co_spawn(ioc, drain_on_signal(ioc, acceptor, st, *signals), asio::detached);

  // The model loads while /health already answers 503. If it fails to load the server stops and
  // run_server returns the error (a non-zero exit, as llama.cpp's server and vLLM do): a wrong
  // --model or --device ends the command at once instead of leaving a server that never gets ready.
  // Requests that arrive before the loop stops are answered 503 with the reason.
  Status load_status;  // the loader's result, read once the loader is joined
  std::thread loader([&] {
    Status s = load(st);
    load_status = s;
    if (s.ok()) {
      st.ready.store(true, std::memory_order_release);
      spdlog::info("model '{}' ready", st.model_name);
    } else {
      st.load_error = s.message();
      st.load_failed.store(true, std::memory_order_release);
      asio::post(ioc, [&] {
        boost::system::error_code ignore;
        acceptor.close(ignore);
        ioc.stop();
      });
    }
  });

  // Dedicated threads named "astrai-net" so their CPU time can be told apart (bench serve reads
  // /proc/<pid>/task/*/stat); the main thread only waits.
  std::vector<std::thread> threads;
  for (int i = 0; i < st.config.net_threads; ++i)
    threads.emplace_back([&] {
      pthread_setname_np(pthread_self(), "astrai-net");
      ioc.run();
    });
  for (auto& t : threads) t.join();
  workers.join();
  // Shutting down: further SIGINT/SIGTERM (e.g. a supervisor repeating its request) must not kill
  // the process half-way, so ignore them once the signal_set is gone (`held` above keeps Asio's
  // handler in place until then).
  signals.reset();
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  loader.join();
  // No more notify() calls after this; coroutine frames (and their Generations) die with ioc below.
  if (st.engine) st.engine->shutdown();
  if (!load_status.ok()) return {load_status.code(), std::string(kModelLoadFailed) + load_status.message()};
  spdlog::info("server stopped");
  return {};
}

}  // namespace astrai::net
