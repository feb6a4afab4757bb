// Which thread runs a route (issue 12): requests with a body are worked out on the worker pool, so a
// long tokenization or template render never holds up the connection's network thread.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/connection.h"

using namespace astrai::net;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

struct RouteThreads {
  std::mutex mu;
  std::vector<std::thread::id> seen;
};

// Serves one connection in this process (a model-less ServerState: POST routes answer 503, which is
// enough, since the route still runs) and returns the raw response to `request`, plus the ids of the
// network thread and of each thread that ran a route.
std::string serve_one(const std::string& request, std::thread::id& net_thread, RouteThreads& routes) {
  ServerState st;
  st.config.access_log = false;
  st.on_route = [&] {
    std::lock_guard lock(routes.mu);
    routes.seen.push_back(std::this_thread::get_id());
  };
  asio::io_context ioc;
  asio::thread_pool workers(2);
  tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket client(ioc);
  client.connect(acceptor.local_endpoint());
  tcp::socket server_side(asio::make_strand(ioc));
  acceptor.accept(server_side);
  asio::co_spawn(server_side.get_executor(),
                 run_connection(std::move(server_side), st, workers.get_executor()), asio::detached);
  std::thread net([&] {
    net_thread = std::this_thread::get_id();
    ioc.run();  // returns when the connection has ended
  });
  asio::write(client, asio::buffer(request));
  std::string reply;
  boost::system::error_code ec;
  asio::read(client, asio::dynamic_buffer(reply), ec);  // until the server closes (Connection: close)
  net.join();
  workers.join();
  return reply;
}

}  // namespace

TEST_CASE("requests with a body are routed on the worker pool, GET routes on the network thread", "[unit]") {
  std::thread::id net_thread;
  RouteThreads routes;
  const std::string body = R"({"text":"hello"})";
  const std::string reply =
      serve_one("POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body +
                    "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                net_thread, routes);
  // Both answered: 503, the model is not loaded (the route ran).
  CHECK(reply.rfind("HTTP/1.1 503", 0) == 0);
  CHECK(reply.find("HTTP/1.1 503", 1) != std::string::npos);
  REQUIRE(routes.seen.size() == 2);
  CHECK(routes.seen[0] != net_thread);  // POST /tokenize: a worker
  CHECK(routes.seen[0] != std::this_thread::get_id());
  CHECK(routes.seen[1] == net_thread);  // GET /health: in place
}
