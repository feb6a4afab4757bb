// The per-connection coroutine: read a request (with body limit and timeouts), route it, write the
// response or stream the generation, loop while keep-alive. Routes that take a body (tokenizing,
// template rendering, detokenizing: CPU work that grows with the request) run on `work`, the
// bounded worker pool, and the coroutine resumes on its own strand with the result; the cheap GET
// routes are answered in place. Asio header: include from server.cpp (and tests) only.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>

#include "net/http_types.h"
#include "net/server_state.h"

namespace astrai::net {

using WorkExecutor = boost::asio::thread_pool::executor_type;

// A parsed request as the routes see it (header names lower-cased); moves the body out of `req`.
HttpRequest to_plain(boost::beast::http::request<boost::beast::http::string_body>& req,
                     const std::string& peer);

boost::asio::awaitable<void> run_connection(boost::asio::ip::tcp::socket socket, ServerState& state,
                                            WorkExecutor work);

}  // namespace astrai::net
