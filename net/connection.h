// The per-connection coroutine: read a request (with body limit and timeouts), route it, write the
// response or stream the generation, loop while keep-alive. Asio header: include from server.cpp only.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "net/server_state.h"

namespace astrai::net {

boost::asio::awaitable<void> run_connection(boost::asio::ip::tcp::socket socket, ServerState& state);

}  // namespace astrai::net
