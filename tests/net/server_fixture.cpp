#include "net/server_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tools/test_util.h"

namespace astrai::test {
using namespace std::chrono;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string dechunk(const std::string& body) {
  std::string out;
  size_t i = 0;
  while (i < body.size()) {
    const size_t eol = body.find("\r\n", i);
    if (eol == std::string::npos) break;
    const size_t len = std::stoul(body.substr(i, eol - i), nullptr, 16);
    if (len == 0) break;
    out += body.substr(eol + 2, len);
    i = eol + 2 + len + 2;
  }
  return out;
}

HttpReply parse_reply(const std::string& raw) {
  HttpReply r;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
  r.status = std::stoi(raw.substr(9, 3));
  r.headers = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  std::string lower = r.headers;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") != std::string::npos) r.body = dechunk(r.body);
  return r;
}

}  // namespace

std::string ServerProcess::device() const {
  // "model DIR on cuda:0 (...)" / "model DIR on cpu (...)", on stdout.
  const std::string out = read_all(log_path_ + ".out");
  const size_t model = out.find("] model ");
  if (model == std::string::npos) return {};
  const size_t on = out.find(" on ", model);
  const size_t eol = out.find('\n', model);
  if (on == std::string::npos || on > eol) return {};
  const size_t end = out.find_first_of(": \n", on + 4);
  return out.substr(on + 4, end - on - 4);
}

std::vector<std::string> serve_test_args() {
  std::vector<std::string> args;
  if (const char* more = std::getenv("ASTRAI_TEST_SERVE_ARGS")) {
    std::istringstream in(more);
    for (std::string a; in >> a;) args.push_back(a);
  }
  return args;
}

ServerProcess::ServerProcess(const std::vector<std::string>& extra_args, bool tiny_preset, bool wait_ready) {
  static int counter = 0;
  const char* tmp = std::getenv("ASTRAI_TEST_TMP");
  std::filesystem::create_directories(tmp ? tmp : "/tmp");
  log_path_ = std::string(tmp ? tmp : "/tmp") + "/serve-" + std::to_string(::getpid()) + "-" +
              std::to_string(counter++) + ".log";
  const std::string port_file = log_path_ + ".out";
  std::vector<std::string> args = {astrai_bin(), "serve", "--host",    "127.0.0.1",
                                   "--port",     "0",     "--threads", "1"};
  if (tiny_preset) args.insert(args.end(), {"--preset", "tiny"});
  const std::vector<std::string> more = serve_test_args();
  args.insert(args.end(), more.begin(), more.end());
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    const int out = ::open(port_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // The server prints "listening on 127.0.0.1:PORT" once bound; then /health turns 200 when loaded.
  const auto deadline = steady_clock::now() + seconds(60);
  while (steady_clock::now() < deadline && port_ == 0) {
    const std::string out = read_all(port_file);
    const size_t at = out.find("listening on 127.0.0.1:");
    if (at != std::string::npos && out.find('\n', at) != std::string::npos)
      port_ = std::stoi(out.substr(at + std::strlen("listening on 127.0.0.1:")));
    if (!alive()) throw std::runtime_error("astrai serve exited early: " + read_all(log_path_));
    std::this_thread::sleep_for(milliseconds(20));
  }
  if (port_ == 0) throw std::runtime_error("astrai serve did not start: " + read_all(log_path_));
  if (!wait_ready) return;
  while (steady_clock::now() < deadline) {
    if (http(port_, "GET", "/health").status == 200) return;
    if (!alive()) throw std::runtime_error("astrai serve exited: " + read_all(log_path_));
    std::this_thread::sleep_for(milliseconds(50));
  }
  throw std::runtime_error("astrai serve never became healthy: " + read_all(log_path_));
}

bool ServerProcess::alive() const {
  if (reaped_) return false;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return false;
  }
  return true;
}

int ServerProcess::terminate(seconds wait) {
  if (!alive()) return status_;
  ::kill(pid_, SIGTERM);
  const auto deadline = steady_clock::now() + wait;
  while (steady_clock::now() < deadline) {
    if (!alive()) return status_;
    std::this_thread::sleep_for(milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  while (alive()) std::this_thread::sleep_for(milliseconds(20));
  return -1;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) terminate(seconds(10));
  std::error_code ec;
  // ASTRAI_KEEP_TMP keeps both: the log (stderr) and the .out file (stdout, where the server's
  // own log lines go after its port).
  if (std::getenv("ASTRAI_KEEP_TMP")) return;
  std::filesystem::remove(log_path_ + ".out", ec);
  std::filesystem::remove(log_path_, ec);
}

HttpReply raw_exchange(int port, const std::string& bytes, milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  HttpReply r;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return r;
  }
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer (413) and close before reading everything
    sent += size_t(n);
  }
  std::string raw;
  const auto deadline = steady_clock::now() + timeout;
  bool closed = false;
  while (steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int left = int(duration_cast<milliseconds>(deadline - steady_clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) break;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  r = parse_reply(raw);
  r.closed = closed;
  return r;
}

HttpReply http(int port, const std::string& method, const std::string& path, const std::string& body,
               const std::vector<std::string>& headers) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (!body.empty() || method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  return raw_exchange(port, req);
}

int run_node(const std::string& script, const std::vector<std::string>& args, std::string& out) {
  std::string cmd = "node '" + (source_dir() / "tests" / "net" / script).string() + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  const CommandResult r = run_command(cmd);
  out = r.out + r.err;
  return r.exit_code;
}

}  // namespace astrai::test
