// The real `astrai serve` over raw sockets and curl: framing, errors, bad input, limits, drain.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <random>
#include <regex>
#include <thread>

#include "net/shared_server.h"
#include "tools/test_util.h"

using namespace astrai::test;
using namespace std::chrono;

namespace {

const std::string kChat = R"({"messages":[{"role":"user","content":"hello there"}],"max_tokens":6})";

bool healthy(int port) {
  return http(port, "GET", "/health").status == 200;
}

std::string json_str(const std::string& body, const char* a, const char* b = nullptr) {
  simdjson::dom::parser p;
  auto el = p.parse(body);
  auto v = b ? el[a][b] : el[a];
  if (v.is_null()) return "null";
  return std::string(std::string_view(v));
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// Reads until `needle` appears, the peer closes, or the bound runs out.
std::string read_until(int fd, const std::string& needle, milliseconds bound = seconds(30)) {
  std::string got;
  const auto deadline = steady_clock::now() + bound;
  while (steady_clock::now() < deadline && got.find(needle) == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[8192];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

void send_all(int fd, const std::string& s) {
  REQUIRE(::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size()));
}

std::string post_request(const std::string& path, const std::string& body, bool keep_alive = false) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + (keep_alive ? "" : "Connection: close\r\n") + "\r\n" + body;
}

}  // namespace

TEST_CASE("health, models and the chat page answer", "[integration]") {
  auto& s = shared_server();
  auto h = http(s.port(), "GET", "/health");
  REQUIRE(h.status == 200);
  CHECK(json_str(h.body, "status") == "ok");
  auto m = http(s.port(), "GET", "/v1/models");
  REQUIRE(m.status == 200);
  simdjson::dom::parser p;
  CHECK(std::string_view(p.parse(m.body)["data"].at(0)["id"]) == "tiny-test");
  auto page = http(s.port(), "GET", "/");
  REQUIRE(page.status == 200);
  CHECK(page.headers.find("text/html") != std::string::npos);
  CHECK(page.body.find("/v1/chat/completions") != std::string::npos);
  CHECK(page.body.find("<script src") == std::string::npos);
  CHECK(page.body.find("cdn") == std::string::npos);
}

TEST_CASE("OpenAI SSE framing seen raw through curl", "[integration]") {
  auto& s = shared_server();
  const auto r = run_command(
      "curl -sS -N -i --max-time 60 -H 'Content-Type: application/json' -d '" +
      std::string(
          R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}})") +
      "' " + s.url() + "/v1/chat/completions");
  REQUIRE(r.exit_code == 0);
  const size_t split = r.out.find("\r\n\r\n");
  REQUIRE(split != std::string::npos);
  const std::string head = r.out.substr(0, split), body = r.out.substr(split + 4);
  CHECK(head.find("HTTP/1.1 200") == 0);
  CHECK(head.find("text/event-stream") != std::string::npos);
  // Every event: "data: <one line>\n\n"; the stream ends with [DONE].
  REQUIRE(body.size() > 14);
  CHECK(body.substr(body.size() - 14) == "data: [DONE]\n\n");
  size_t pos = 0, events = 0;
  simdjson::dom::parser p;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    const std::string ev = body.substr(pos, end - pos);
    REQUIRE(ev.rfind("data: ", 0) == 0);
    REQUIRE(ev.find('\n') == std::string::npos);
    const std::string data = ev.substr(6);
    if (data != "[DONE]") {
      auto obj = p.parse(data);
      CHECK(std::string_view(obj["object"]) == "chat.completion.chunk");
    }
    ++events;
    pos = end + 2;
  }
  CHECK(events >= 3);  // role chunk, finish chunk, usage chunk, [DONE]
}

TEST_CASE("Anthropic SSE framing: event lines match the data's type", "[integration]") {
  auto& s = shared_server();
  const auto r = run_command(
      "curl -sS -N --max-time 60 -H 'Content-Type: application/json' -d '" +
      std::string(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true})") + "' " +
      s.url() + "/v1/messages");
  REQUIRE(r.exit_code == 0);
  std::regex event_re("event: ([a-z_]+)\ndata: (\\{[^\n]*\\})\n\n");
  std::vector<std::string> names;
  simdjson::dom::parser p;
  size_t covered = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), event_re); it != std::sregex_iterator();
       ++it) {
    CHECK(size_t(it->position()) == covered);  // nothing between events
    covered = size_t(it->position() + it->length());
    names.push_back((*it)[1]);
    CHECK(std::string_view(p.parse(std::string((*it)[2]))["type"]) == names.back());
  }
  CHECK(covered == r.out.size());
  REQUIRE(names.size() >= 5);
  CHECK(names.front() == "message_start");
  CHECK(names[names.size() - 2] == "message_delta");
  CHECK(names.back() == "message_stop");
}

TEST_CASE("malformed JSON is a 400 and the server keeps serving", "[integration]") {
  auto& s = shared_server();
  for (const char* body : {"{\"messages\": [", "\x01\x02\x03", "[]", "{\"messages\": 3}"}) {
    auto r = http(s.port(), "POST", "/v1/chat/completions", body);
    CHECK(r.status == 400);
    CHECK(json_str(r.body, "error", "type") == "invalid_request_error");
  }
  auto a = http(s.port(), "POST", "/v1/messages", "{oops");
  CHECK(a.status == 400);
  CHECK(json_str(a.body, "type") == "error");
  CHECK(healthy(s.port()));
}

TEST_CASE("wrong field types are 400s naming the field", "[integration]") {
  auto& s = shared_server();
  auto r = http(s.port(), "POST", "/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})");
  CHECK(r.status == 400);
  CHECK(json_str(r.body, "error", "param") == "temperature");
  r = http(s.port(), "POST", "/v1/completions", R"({"prompt":{"a":1}})");
  CHECK(r.status == 400);
  CHECK(json_str(r.body, "error", "param") == "prompt");
  r = http(s.port(), "POST", "/v1/messages",
           R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"many"})");
  CHECK(r.status == 400);
  CHECK(json_str(r.body, "error", "message").find("max_tokens") != std::string::npos);
  CHECK(healthy(s.port()));
}

TEST_CASE("an unknown model is a 404", "[integration]") {
  auto& s = shared_server();
  auto r = http(s.port(), "POST", "/v1/chat/completions",
                R"({"model":"gpt-9","messages":[{"role":"user","content":"x"}]})");
  CHECK(r.status == 404);
  CHECK(json_str(r.body, "error", "code") == "model_not_found");
  r = http(s.port(), "POST", "/v1/messages",
           R"({"model":"claude-9","max_tokens":3,"messages":[{"role":"user","content":"x"}]})");
  CHECK(r.status == 404);
  CHECK(json_str(r.body, "error", "type") == "not_found_error");
}

TEST_CASE("a negative max_tokens is a 400", "[integration]") {
  auto& s = shared_server();
  for (const char* path : {"/v1/chat/completions", "/v1/messages"}) {
    auto r = http(s.port(), "POST", path, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-3})");
    CHECK(r.status == 400);
    CHECK(r.body.find("max_tokens") != std::string::npos);
  }
}

TEST_CASE("a body over --max-body is a 413 and the server keeps serving", "[integration]") {
  auto& s = shared_server();
  const std::string big = R"({"messages":[{"role":"user","content":")" + std::string(2 << 20, 'a') + "\"}]}";
  auto r = raw_exchange(s.port(), post_request("/v1/chat/completions", big));
  CHECK(r.status == 413);
  CHECK(json_str(r.body, "error", "message").find("max_body") != std::string::npos);
  // Also when the client announces the size first and waits (Expect: 100-continue).
  const auto c = run_command(
      "head -c 2000000 /dev/zero | tr '\\0' a | curl -sS -o /dev/null -w '%{http_code}' -H 'Content-Type: "
      "application/json' --data-binary @- " +
      s.url() + "/v1/chat/completions");
  CHECK(c.out == "413");
  CHECK(healthy(s.port()));
}

TEST_CASE("slowloris headers are cut off while other clients are served", "[integration]") {
  auto& s = shared_server();  // --header-timeout 2
  const int fd = connect_to(s.port());
  const std::string header = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  bool cut = false;
  // Trickle one byte per 100 ms for up to 30 s; the server must close the connection first.
  for (int i = 0; i < 300 && !cut; ++i) {
    const char ch = i < int(header.size()) ? header[size_t(i)] : 'a';
    if (::send(fd, &ch, 1, MSG_NOSIGNAL) != 1) cut = true;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0 || std::string(buf, size_t(n)).find("408") != std::string::npos) cut = true;
    }
    if (i == 5) CHECK(healthy(s.port()));  // others are served meanwhile
  }
  ::close(fd);
  CHECK(cut);
  CHECK(healthy(s.port()));
}

TEST_CASE("headers that stop arriving get a 408 in OpenAI's shape, then a close (issue 12)",
          "[integration]") {
  auto& s = shared_server();  // --header-timeout 2
  // (The client waits up to 30 s: a 408 and a close before that can only be the server's deadline.)
  auto r = raw_exchange(s.port(), "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Le", seconds(30));
  CHECK(r.status == 408);
  CHECK(r.closed);
  // The route is not known before the headers end: OpenAI's error shape.
  CHECK(json_str(r.body, "error", "type") == "invalid_request_error");
  CHECK(json_str(r.body, "error", "message").find("header_timeout") != std::string::npos);
  CHECK(r.headers.find("Connection: close") != std::string::npos);
  CHECK(healthy(s.port()));
}

TEST_CASE("a body that stops arriving gets a 408 in its route's shape, then a close (issue 12)",
          "[integration]") {
  auto& s = shared_server();  // --body-timeout 2
  const std::string partial = R"({"messages":[{"role":"user","content":"hel)";
  auto head = [&](const std::string& path) {
    return "POST " + path +
           " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" + partial;
  };
  auto a = raw_exchange(s.port(), head("/v1/messages"), seconds(30));
  CHECK(a.status == 408);
  CHECK(a.closed);
  CHECK(json_str(a.body, "type") == "error");
  CHECK(json_str(a.body, "error", "message").find("body_timeout") != std::string::npos);
  auto o = raw_exchange(s.port(), head("/v1/chat/completions"), seconds(30));
  CHECK(o.status == 408);
  CHECK(o.closed);
  CHECK(json_str(o.body, "error", "type") == "invalid_request_error");
  CHECK(json_str(o.body, "error", "message").find("body_timeout") != std::string::npos);
  CHECK(healthy(s.port()));
}

TEST_CASE("a streaming request over HTTP/1.0 is sent unframed and ends with the connection (issue 12)",
          "[integration]") {
  auto& s = shared_server();
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true})";
  // Keep-alive asked for or not: an unframed body can only end with the connection.
  for (const std::string connection : {"", "Connection: keep-alive\r\n"}) {
    const std::string req =
        "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n" + connection +
        "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    auto r = raw_exchange(s.port(), req, seconds(60));
    REQUIRE(r.status == 200);
    CHECK(r.closed);
    std::string lower = r.headers;
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    CHECK(lower.find("transfer-encoding") == std::string::npos);
    CHECK(lower.find("content-length") == std::string::npos);
    CHECK(lower.find("connection: close") != std::string::npos);
    // The body is the events themselves, no chunk sizes between them.
    CHECK(r.body.rfind("data: {", 0) == 0);
    REQUIRE(r.body.size() > 14);
    CHECK(r.body.substr(r.body.size() - 14) == "data: [DONE]\n\n");
    size_t events = 0;
    for (size_t pos = 0; pos < r.body.size();) {
      const size_t end = r.body.find("\n\n", pos);
      REQUIRE(end != std::string::npos);
      CHECK(r.body.compare(pos, 6, "data: ") == 0);
      pos = end + 2;
      ++events;
    }
    CHECK(events >= 3);
  }
  // A non-streaming HTTP/1.0 request keeps its Content-Length framing.
  const std::string plain = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3})";
  auto r = raw_exchange(s.port(),
                        "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Content-Length: " +
                            std::to_string(plain.size()) + "\r\n\r\n" + plain,
                        seconds(60));
  CHECK(r.status == 200);
  CHECK(r.headers.find("Content-Length: " + std::to_string(r.body.size())) != std::string::npos);
  CHECK(healthy(s.port()));
}

TEST_CASE("binary garbage on the socket gets a 400 and a close", "[integration]") {
  auto& s = shared_server();
  std::mt19937 rng{static_cast<uint32_t>(fresh_seed())};
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = char(rng());
  garbage[0] = '\x16';  // not a method token (it looks like a TLS handshake)
  auto r = raw_exchange(s.port(), garbage, seconds(10));
  CHECK(r.status == 400);
  CHECK(r.closed);
  CHECK(healthy(s.port()));
}

TEST_CASE("WebSocket garbage frames close the socket with 1002", "[integration]") {
  auto& s = shared_server();
  const int fd = connect_to(s.port());
  send_all(fd,
           "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
  const std::string hs = read_until(fd, "\r\n\r\n");
  REQUIRE(hs.find("101") != std::string::npos);
  // Reserved opcode 0xB, unmasked (clients must mask): a protocol violation.
  send_all(fd, std::string("\x8b\x05hello", 7));
  const std::string reply = read_until(fd, "\x03\xea", seconds(10));
  REQUIRE(reply.size() >= 4);
  CHECK(uint8_t(reply[0]) == 0x88);         // close frame
  CHECK(reply.substr(2, 2) == "\x03\xea");  // 1002 protocol error
  ::close(fd);
  CHECK(healthy(s.port()));
}

namespace {

int open_websocket(int port) {
  const int fd = connect_to(port);
  send_all(fd,
           "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
  const std::string hs = read_until(fd, "\r\n\r\n");
  REQUIRE(hs.find(" 101 ") != std::string::npos);
  return fd;
}

// Sends a masked close frame with this status code (its two code bytes in separate TCP segments when
// split) and returns the status code of the server's close frame (-1: none).
int close_answer(int port, uint32_t code, bool split) {
  const int fd = open_websocket(port);
  const uint8_t mask[4] = {0x37, 0xfa, 0x21, 0x3d};
  std::string frame = {char(0x88),
                       char(0x82),
                       char(mask[0]),
                       char(mask[1]),
                       char(mask[2]),
                       char(mask[3]),
                       char(uint8_t(code >> 8) ^ mask[0]),
                       char(uint8_t(code) ^ mask[1])};
  if (split) {
    send_all(fd, frame.substr(0, 7));
    std::this_thread::sleep_for(milliseconds(200));  // Beast reads the first part on its own
    send_all(fd, frame.substr(7));
  } else {
    send_all(fd, frame);
  }
  // The server ends the close handshake by closing the connection; its close frame is 0x88, the
  // length, then the code (2 bytes).
  std::string reply;
  char buf[256];
  for (pollfd p{fd, POLLIN, 0}; ::poll(&p, 1, 10000) > 0;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    reply.append(buf, size_t(n));
  }
  ::close(fd);
  const size_t at = reply.find('\x88');
  if (at == std::string::npos || reply.size() < at + 4) return -1;
  return int(uint8_t(reply[at + 2])) << 8 | int(uint8_t(reply[at + 3]));
}

}  // namespace

TEST_CASE("a WebSocket close code the RFC forbids is answered with 1002, an allowed one echoed (issue 12)",
          "[integration]") {
  auto& s = shared_server();
  for (const bool split : {false, true}) {
    INFO("code bytes in separate segments: " << split);
    for (const uint32_t code : {5000u, 5001u, 65535u, 1004u, 1005u, 1006u, 1015u, 999u, 0u, 2999u})
      CHECK(close_answer(s.port(), code, split) == 1002);
    for (const uint32_t code : {1000u, 1001u, 1011u, 3000u, 4999u})
      CHECK(close_answer(s.port(), code, split) == int(code));
  }
  CHECK(healthy(s.port()));
}

TEST_CASE("wrong routes and methods: 404 and 405", "[integration]") {
  auto& s = shared_server();
  CHECK(http(s.port(), "GET", "/v2/nothing").status == 404);
  auto r = http(s.port(), "GET", "/v1/chat/completions");
  CHECK(r.status == 405);
  CHECK(r.headers.find("Allow: POST") != std::string::npos);
}

TEST_CASE("tokenize, detokenize and apply-template agree with each other", "[integration]") {
  auto& s = shared_server();
  std::mt19937 rng{static_cast<uint32_t>(fresh_seed())};
  std::string text = "héllo ";
  for (int i = 0; i < 20; ++i) text += char('a' + rng() % 26);
  auto t = http(s.port(), "POST", "/tokenize", "{\"text\":\"" + text + "\"}");
  REQUIRE(t.status == 200);
  simdjson::dom::parser p;
  auto tok = p.parse(t.body);
  std::string ids = simdjson::minify(tok["tokens"]);
  auto d = http(s.port(), "POST", "/detokenize", "{\"tokens\":" + ids + "}");
  REQUIRE(d.status == 200);
  CHECK(json_str(d.body, "text") == text);
  auto a = http(s.port(), "POST", "/apply-template",
                R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true})");
  REQUIRE(a.status == 200);
  CHECK(json_str(a.body, "text").find("hi") != std::string::npos);
  auto bad = http(s.port(), "POST", "/detokenize", R"({"tokens":[-1]})");
  CHECK(bad.status == 400);
}

TEST_CASE("/metrics is valid Prometheus text (promtool) with latency histograms", "[integration]") {
  auto& s = shared_server();
  REQUIRE(http(s.port(), "POST", "/v1/chat/completions", kChat).status == 200);
  auto m = http(s.port(), "GET", "/metrics");
  REQUIRE(m.status == 200);
  TempDir dir("metrics");
  write_file(dir / "metrics.txt", m.body);
  const auto r = run_command("promtool check metrics < '" + (dir / "metrics.txt").string() + "'");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  for (const char* h : {"astrai_time_to_first_token_seconds", "astrai_inter_token_latency_seconds",
                        "astrai_e2e_request_latency_seconds"}) {
    CHECK(m.body.find(std::string("# TYPE ") + h + " histogram") != std::string::npos);
    CHECK(m.body.find(std::string(h) + "_bucket{le=\"+Inf\"}") != std::string::npos);
  }
  std::smatch match;
  REQUIRE(std::regex_search(m.body, match, std::regex("astrai_time_to_first_token_seconds_count ([0-9]+)")));
  CHECK(std::stoi(match[1]) >= 1);
}

TEST_CASE("/stats reports the contract's fields", "[integration]") {
  auto& s = shared_server();
  auto r = http(s.port(), "GET", "/stats");
  REQUIRE(r.status == 200);
  simdjson::dom::parser p;
  auto st = p.parse(r.body);
  for (const char* k : {"running", "waiting", "finished", "cancelled", "failed"})
    CHECK(st["requests"][k].is_uint64());
  for (const char* k : {"pages_total", "pages_used", "page_size"}) CHECK(st["kv"][k].is_uint64());
  for (const char* k : {"avg_ttft_ms", "p50_ttft_ms", "p99_ttft_ms", "avg_itl_ms", "p99_itl_ms",
                        "avg_decode_tps", "avg_e2e_latency_ms", "uptime_s"})
    CHECK(st[k].is_number());
  CHECK(st["prefix_cache"]["hit_rate"].is_number());
}

TEST_CASE("a client that disconnects mid-stream gets its request cancelled", "[integration]") {
  auto& s = shared_server();
  auto stats = [&] {
    simdjson::dom::parser p;
    auto r = http(s.port(), "GET", "/stats");
    auto e = p.parse(r.body);
    return std::pair<uint64_t, uint64_t>(uint64_t(e["requests"]["cancelled"]),
                                         uint64_t(e["requests"]["running"]));
  };
  const uint64_t cancelled_before = stats().first;
  const int fd = connect_to(s.port());
  send_all(
      fd,
      post_request(
          "/v1/chat/completions",
          R"({"messages":[{"role":"user","content":"go on"}],"max_tokens":2000,"ignore_eos":true,"stream":true})"));
  const std::string first = read_until(fd, "\"content\"");
  REQUIRE(first.find("200 OK") != std::string::npos);
  ::close(fd);
  std::pair<uint64_t, uint64_t> now{};
  for (int i = 0; i < 600; ++i) {  // bounded: 30 s
    now = stats();
    if (now.first > cancelled_before && now.second == 0) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  CHECK(now.first > cancelled_before);
  CHECK(now.second == 0);
}

TEST_CASE("queue-full 503s leave server.active_generations balanced (issue 12)", "[integration]") {
  ServerProcess s({"--max-batch-size", "1", "--max-queue", "1", "--access-log", "false"});
  auto server_stats = [&] {
    simdjson::dom::parser p;
    auto e = p.parse(http(s.port(), "GET", "/stats").body);
    return std::array<int64_t, 3>{int64_t(e["requests"]["running"]), int64_t(e["requests"]["waiting"]),
                                  int64_t(e["server"]["active_generations"])};
  };
  const std::string long_req =
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":4000,"ignore_eos":true,"stream":true})";
  // Polls /stats until {running, waiting} is `want` (bounded: 30 s).
  auto wait_for = [&](int64_t running, int64_t waiting) {
    std::array<int64_t, 3> now{};
    for (int i = 0; i < 600; ++i) {
      now = server_stats();
      if (now[0] == running && now[1] == waiting) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return now;
  };
  // One request runs (a batch holds one sequence; 4000 tokens take seconds) ...
  const int a = connect_to(s.port());
  send_all(a, post_request("/v1/chat/completions", long_req));
  REQUIRE(read_until(a, "data: ").find("200 OK") != std::string::npos);
  std::array<int64_t, 3> now = wait_for(1, 0);
  REQUIRE(now[0] == 1);
  // ... one waits in the engine's queue ...
  const int b = connect_to(s.port());
  send_all(b, post_request("/v1/chat/completions", long_req));
  now = wait_for(1, 1);
  REQUIRE(now[1] == 1);
  // ... so these find the queue full.
  for (int i = 0; i < 3; ++i) CHECK(http(s.port(), "POST", "/v1/chat/completions", kChat).status == 503);
  CHECK(server_stats()[2] == 2);
  ::close(a);
  ::close(b);
  now = wait_for(0, 0);
  for (int i = 0; i < 600 && now[2] != 0; ++i) {  // the connections notice a step later
    std::this_thread::sleep_for(milliseconds(50));
    now = server_stats();
  }
  CHECK(now[0] == 0);
  CHECK(now[1] == 0);
  CHECK(now[2] == 0);  // was -3 before: each 503 decremented a count it never incremented
}

TEST_CASE("serve.yaml settings apply and flags override them", "[integration]") {
  TempDir dir("yaml");
  write_file(dir / "serve.yaml", "served_model_name: from-yaml\napi_key: sekret\nmax_concurrent: 1\n");
  ServerProcess s({"--config", (dir / "serve.yaml").string(), "--served-model-name", "from-flag"});
  auto m = http(s.port(), "GET", "/v1/models", "", {"Authorization: Bearer sekret"});
  REQUIRE(m.status == 200);
  simdjson::dom::parser p;
  CHECK(std::string_view(p.parse(m.body)["data"].at(0)["id"]) == "from-flag");

  SECTION("the API key is required: Bearer or x-api-key, else 401") {
    CHECK(http(s.port(), "GET", "/v1/models").status == 401);
    CHECK(http(s.port(), "GET", "/v1/models", "", {"Authorization: Bearer wrong"}).status == 401);
    CHECK(http(s.port(), "GET", "/v1/models", "", {"x-api-key: sekret"}).status == 200);
    auto a = http(s.port(), "POST", "/v1/messages", "{}", {"x-api-key: nope"});
    CHECK(a.status == 401);
    CHECK(json_str(a.body, "error", "type") == "authentication_error");
    CHECK(http(s.port(), "GET", "/health").status == 200);  // liveness stays open
  }
  SECTION("POST /flush_cache needs the API key and empties the prefix cache (issue 12)") {
    const std::vector<std::string> key = {"Authorization: Bearer sekret"};
    CHECK(http(s.port(), "POST", "/flush_cache").status == 401);
    CHECK(http(s.port(), "GET", "/flush_cache", "", key).status == 405);
    // A prompt of a few pages, so that the finished request leaves pages in the prefix cache.
    std::string words;
    for (int i = 0; i < 200; ++i) words += "word" + std::to_string(i) + " ";
    REQUIRE(http(s.port(), "POST", "/v1/completions", R"({"prompt":")" + words + R"(","max_tokens":2})", key)
                .status == 200);
    simdjson::dom::parser p;
    auto stats = [&] {
      auto r = http(s.port(), "GET", "/stats", "", key);
      REQUIRE(r.status == 200);
      auto j = p.parse(r.body);
      return std::pair{uint64_t(j["kv"]["pages_used"]), uint64_t(j["prefix_cache"]["cached_pages"])};
    };
    const auto [used, cached] = stats();
    REQUIRE(cached > 0);
    CHECK(used == cached);
    auto f = http(s.port(), "POST", "/flush_cache", "", key);
    REQUIRE(f.status == 200);
    auto j = p.parse(f.body);
    CHECK(uint64_t(j["freed_pages"]) == cached);
    CHECK(uint64_t(j["cached_pages"]) == 0);
    CHECK(uint64_t(j["pages_used"]) == 0);
    CHECK(stats() == std::pair<uint64_t, uint64_t>{0, 0});
  }
  SECTION("past max_concurrent a request gets 429 with Retry-After at once") {
    const int fd = connect_to(s.port());
    std::string req =
        R"({"messages":[{"role":"user","content":"x"}],"max_tokens":3000,"ignore_eos":true,"stream":true})";
    send_all(fd,
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\nContent-Type: "
             "application/json\r\nContent-Length: " +
                 std::to_string(req.size()) + "\r\n\r\n" + req);
    REQUIRE(read_until(fd, "data: ").find("200 OK") != std::string::npos);
    auto r = http(s.port(), "POST", "/v1/chat/completions", kChat, {"Authorization: Bearer sekret"});
    CHECK(r.status == 429);
    CHECK(r.headers.find("Retry-After: ") != std::string::npos);
    ::close(fd);
  }
}

TEST_CASE("--template-max-steps bounds the model's chat template in the server", "[integration]") {
  // 200 messages cost the built-in template far more than 1,000 steps; the default budget (shared
  // server) renders them.
  std::string messages = "[";
  for (int i = 0; i < 200; ++i) messages += std::string(i ? "," : "") + R"({"role":"user","content":"m"})";
  const std::string body = R"({"messages":)" + messages + "]}";
  CHECK(http(shared_server().port(), "POST", "/apply-template", body).status == 200);
  ServerProcess s({"--template-max-steps", "1000"});
  auto r = http(s.port(), "POST", "/apply-template", body);
  CHECK(r.status == 400);
  CHECK(json_str(r.body, "error", "message").find("max_steps = 1000") != std::string::npos);
  // A short conversation still fits.
  CHECK(
      http(s.port(), "POST", "/apply-template", R"({"messages":[{"role":"user","content":"hi"}]})").status ==
      200);
  CHECK(s.terminate() == 0);
}

// `astrai serve` with a model that cannot load: the command ends with the reason and a non-zero exit
// (as llama.cpp's server and vLLM do), instead of a server that never gets ready.
TEST_CASE("a model that fails to load ends astrai serve with the reason and exit status 1", "[integration]") {
  TempDir dir("badmodel");
  write_file(dir / "config.json", "{not json");
  std::string serve = "timeout 60 " + astrai_bin() + " serve --host 127.0.0.1 --port 0 --threads 1";
  for (const std::string& arg : serve_test_args()) serve += " " + arg;  // as ServerProcess passes them
  {
    INFO("a directory whose config.json is not JSON");
    const CommandResult r = run_command(serve + " --model '" + dir.path().string() + "'");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("astrai: error: the model failed to load") != std::string::npos);
    CHECK(r.err.find(dir.path().string()) != std::string::npos);  // the reason names the file
  }
  {
    INFO("a --model that is neither a directory nor a preset");
    const CommandResult r = run_command(serve + " --model '" + (dir / "missing").string() + "'");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("no such directory and not a preset") != std::string::npos);
  }
}

TEST_CASE("a repeated SIGTERM neither cuts the drain short nor kills the server", "[integration]") {
  ServerProcess s;
  const int fd = connect_to(s.port());
  send_all(
      fd,
      post_request(
          "/v1/chat/completions",
          R"({"messages":[{"role":"user","content":"x"}],"max_tokens":40,"ignore_eos":true,"stream":true})"));
  REQUIRE(read_until(fd, "data: ").find("200 OK") != std::string::npos);
  ::kill(s.pid(), SIGTERM);
  ::kill(s.pid(), SIGTERM);
  const std::string rest = read_until(fd, "data: [DONE]");
  CHECK(rest.find("data: [DONE]") != std::string::npos);
  ::close(fd);
  for (int i = 0; i < 20 && s.alive(); ++i) {
    ::kill(s.pid(), SIGTERM);  // a supervisor repeating itself while the server shuts down
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(s.terminate() == 0);
}

TEST_CASE("SIGTERM lets an in-flight stream finish, then the server exits 0", "[integration]") {
  ServerProcess s;
  const int fd = connect_to(s.port());
  send_all(
      fd,
      post_request(
          "/v1/chat/completions",
          R"({"messages":[{"role":"user","content":"x"}],"max_tokens":40,"ignore_eos":true,"stream":true})"));
  REQUIRE(read_until(fd, "data: ").find("200 OK") != std::string::npos);
  ::kill(s.pid(), SIGTERM);
  const std::string rest = read_until(fd, "data: [DONE]");
  CHECK(rest.find("data: [DONE]") != std::string::npos);
  CHECK(rest.find("\"finish_reason\":\"length\"") != std::string::npos);
  ::close(fd);
  CHECK(s.terminate() == 0);
}
