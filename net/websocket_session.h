// /v1/ws: one WebSocket per connection, several generations multiplexed on it (see
// websocket_frames.h for the frames). One coroutine owns the socket and the running generations: a
// reader and a writer (which also pumps the generations) joined with `&&`, on the connection's
// strand. Asio header: include from connection.cpp only.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "net/server_state.h"

namespace astrai::net {

// `work` is the worker pool that turns generate frames into jobs (template rendering, tokenizing).
boost::asio::awaitable<void> run_websocket_session(
    boost::beast::tcp_stream stream, boost::beast::http::request<boost::beast::http::string_body> req,
    ServerState& state, boost::asio::thread_pool::executor_type work);

}  // namespace astrai::net
