// Starts a real `astrai serve` process on a free loopback port for integration tests, plus a tiny
// blocking HTTP/1.1 client (raw sockets) for the cases real clients cannot express: garbage bytes,
// slowloris headers, oversized bodies.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace astrai::test {

// ASTRAI_TEST_SERVE_ARGS, whitespace-separated: more arguments for every server a test starts (e.g.
// "--device cuda" to run the server tests against the CUDA backend on a GPU machine).
std::vector<std::string> serve_test_args();

class ServerProcess {
 public:
  // extra_args are appended to `astrai serve [--preset tiny] --port 0 --host 127.0.0.1` and the
  // whitespace-separated ASTRAI_TEST_SERVE_ARGS. With wait_ready the constructor returns once
  // /health is 200, else once the port is known.
  explicit ServerProcess(const std::vector<std::string>& extra_args = {}, bool tiny_preset = true,
                         bool wait_ready = true);
  ~ServerProcess();  // SIGTERM (then SIGKILL after a while) if still running
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  bool alive() const;
  // Sends SIGTERM and waits (bounded); returns the exit status (or -1 on timeout / signal).
  int terminate(std::chrono::seconds wait = std::chrono::seconds(30));
  const std::string& log_path() const { return log_path_; }
  // The device its model runs on, as `astrai serve` logs it once loaded ("cpu", "cuda"); "" before.
  std::string device() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
  mutable int status_ = -1;
  mutable bool reaped_ = false;
};

struct HttpReply {
  int status = 0;       // 0: no response (connection closed or timed out)
  std::string headers;  // raw header block
  std::string body;     // de-chunked
  bool closed = false;  // the server closed the connection after the reply
};

// Sends raw bytes, reads until the server closes or timeout; parses one HTTP response if present.
HttpReply raw_exchange(int port, const std::string& bytes,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30));
// A normal request with Connection: close.
HttpReply http(int port, const std::string& method, const std::string& path, const std::string& body = "",
               const std::vector<std::string>& headers = {});

// Runs `node <script> <args>` from tests/net; returns exit code, stdout+stderr in out.
int run_node(const std::string& script, const std::vector<std::string>& args, std::string& out);

}  // namespace astrai::test
