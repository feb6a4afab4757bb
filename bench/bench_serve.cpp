// astrai bench serve: a Beast load generator against a real `astrai serve` child process.
// For each concurrency level C it keeps C streaming chat requests in flight (each client reuses its
// keep-alive connection) and measures requests/s, TTFT and inter-token latency (client side, per SSE
// event), plus the server's CPU time per streamed token: all threads, and the network threads alone
// (those named "astrai-net", read from /proc/<pid>/task/*/stat), which is the net layer's own cost.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "net/server_state.h"
#include "src/cli/commands.h"
#include "src/core/json_writer.h"

namespace astrai::cli {
namespace {
namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct BenchServeArgs {
  std::string model = "tiny";  // preset name or model directory
  std::vector<int> levels = {1, 16, 64, 256};
  int max_tokens = 32;
  int requests_per_level = 0;  // 0: max(2 * C, 16)
  double level_seconds = 60;   // no new requests after this long
  int threads = 0;
  int prompt_tokens = 0;   // > 0: /v1/completions with a distinct prompt of this many random token ids
  std::string server_log;  // keep the server's log (at info level) here; "": a temporary file at warn
  std::vector<std::string> server_options;  // "key=value": `--key value` on the server's command line
};

struct Sample {
  double ttft_ms = -1;
  std::vector<double> itl_ms;
  int tokens = 0;
  bool ok = false;
  std::string error;  // !ok: the server's status and answer, or why the reply never ended
};

// ---- the server child ---------------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int port = 0;
};

// Why a server that exited did: the text of its last "astrai: error: " line in `log` (its stderr),
// without the net::kModelLoadFailed it puts before a loader's error; empty if none.
std::string exit_reason(const std::filesystem::path& log) {
  std::ifstream f(log);
  std::string reason;
  for (std::string line; std::getline(f, line);)
    if (line.rfind("astrai: error: ", 0) == 0) reason = line.substr(15);
  if (reason.starts_with(net::kModelLoadFailed)) reason = reason.substr(net::kModelLoadFailed.size());
  return reason;
}

Child start_server(const BenchServeArgs& a, const std::filesystem::path& log) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  // The child's stdout and stderr go to files (a pipe left unread could block or kill it); a kept
  // log (--server-log) takes both, in order.
  const std::string out_path = a.server_log.empty() ? log.string() + ".out" : log.string();
  // Emptied before the child starts, as the port is read from it below: a log an earlier run left at
  // the same path (--server-log) would otherwise give that run's port until the child truncates it.
  { std::ofstream truncate(out_path, std::ios::trunc); }
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    const int err = a.server_log.empty() ? ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) : out;
    ::dup2(out, 1);
    ::dup2(err, 2);
    const bool dir = std::filesystem::is_directory(a.model);
    std::vector<std::string> args = {self,           "serve",       dir ? "--model" : "--preset",
                                     a.model,        "--port",      "0",
                                     "--access-log", "false",       "--max-concurrent",
                                     "100000",       "--log-level", a.server_log.empty() ? "warn" : "info"};
    if (a.threads > 0) args.insert(args.end(), {"--threads", std::to_string(a.threads)});
    for (const std::string& kv : a.server_options) {
      const size_t eq = kv.find('=');
      args.push_back("--" + kv.substr(0, eq));
      if (eq != std::string::npos) args.push_back(kv.substr(eq + 1));
    }
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(self.c_str(), argv.data());
    ::_exit(127);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    std::ifstream f(out_path);
    std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t at = out.find("listening on ");
    const size_t nl = at == std::string::npos ? at : out.find('\n', at);
    if (nl != std::string::npos) {
      c.port = std::stoi(out.substr(out.rfind(':', nl) + 1));
      return c;
    }
    int st = 0;
    if (::waitpid(c.pid, &st, WNOHANG) == c.pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(c.pid, SIGKILL);
  const std::string reason = exit_reason(log);
  throw Error(io_error("astrai serve did not start" + (reason.empty() ? "" : ": " + reason) + "; see " +
                       log.string()));
}

// CPU seconds (utime + stime) of the process, and of its threads named "astrai-net".
std::pair<double, double> cpu_seconds(pid_t pid) {
  const double tick = double(::sysconf(_SC_CLK_TCK));
  auto parse = [&](const std::filesystem::path& stat, std::string* comm) {
    std::ifstream f(stat);
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t open = s.find('('), close = s.rfind(')');
    if (open == std::string::npos || close == std::string::npos) return 0.0;
    if (comm) *comm = s.substr(open + 1, close - open - 1);
    std::istringstream rest(s.substr(close + 2));
    std::string field;
    double ut = 0, st = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) ut = std::stod(field);
      if (i == 15) st = std::stod(field);
    }
    return (ut + st) / tick;
  };
  const double all = parse("/proc/" + std::to_string(pid) + "/stat", nullptr);
  double net = 0;
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::string comm;
    const double v = parse(t.path() / "stat", &comm);
    if (comm == "astrai-net") net += v;
  }
  return {all, net};
}

// ---- the client ---------------------------------------------------------------------------------

// A reply's head, once `buf` holds all of it: its status code and where its body starts, and the
// body's length when it has a Content-Length (an error answer; a stream is chunked).
struct ReplyHead {
  int status = 0;
  size_t body = std::string::npos;  // npos: the head is not all in yet
  size_t length = std::string::npos;
};

ReplyHead reply_head(const std::string& buf) {
  ReplyHead h;
  const size_t end = buf.find("\r\n\r\n");
  if (end == std::string::npos) return h;
  h.body = end + 4;
  if (buf.rfind("HTTP/1.1 ", 0) == 0) h.status = std::atoi(buf.c_str() + 9);
  std::string head = buf.substr(0, end);
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (const size_t cl = head.find("\r\ncontent-length:"); cl != std::string::npos)
    h.length = size_t(std::strtoull(head.c_str() + cl + 17, nullptr, 10));
  return h;
}

// make_request(r): the HTTP request of this client's r-th request.
asio::awaitable<void> client(int port, std::function<std::string(int)> make_request, int count,
                             Clock::time_point stop_at, std::vector<Sample>& out) {
  auto ex = co_await asio::this_coro::executor;
  tcp::socket sock(ex);
  auto [cec] = co_await sock.async_connect(tcp::endpoint(asio::ip::address_v4::loopback(), uint16_t(port)),
                                           asio::as_tuple(asio::use_awaitable));
  if (cec) co_return;
  sock.set_option(tcp::no_delay(true));
  std::string buf;
  char chunk[16384];
  for (int r = 0; r < count && Clock::now() < stop_at; ++r) {
    Sample s;
    const std::string request = make_request(r);
    const auto t0 = Clock::now();
    auto last = t0;
    auto [wec, wn] =
        co_await asio::async_write(sock, asio::buffer(request), asio::as_tuple(asio::use_awaitable));
    (void)wn;
    if (wec) break;
    buf.clear();
    size_t scanned = 0;
    bool done = false;
    ReplyHead head;
    while (!done) {
      auto [rec, n] = co_await sock.async_read_some(asio::buffer(chunk), asio::as_tuple(asio::use_awaitable));
      if (rec) break;
      buf.append(chunk, n);
      const auto now = Clock::now();
      if (head.body == std::string::npos) head = reply_head(buf);
      if (head.body == std::string::npos) continue;
      // An answer other than a stream (an error: 400 for a prompt the server cannot hold, 429, 503)
      // is a failed request, with the server's words; the connection stays open for the next one.
      if (head.status != 200) {
        if (head.length == std::string::npos || buf.size() >= head.body + head.length) {
          s.error = "HTTP " + std::to_string(head.status) + ": " + buf.substr(head.body, 300);
          done = true;
        }
        continue;
      }
      // Complete SSE events since the last scan; each content event is one arrival.
      for (size_t end; (end = buf.find("\n\n", scanned)) != std::string::npos; scanned = end + 2) {
        const size_t data = buf.find("data: ", scanned);
        if (data == std::string::npos || data > end) continue;
        const std::string_view ev(buf.data() + data, end - data);
        if (ev == "data: [DONE]") continue;
        const size_t usage = ev.find("\"completion_tokens\":");
        if (usage != std::string::npos) s.tokens = std::atoi(ev.data() + usage + 20);
        // Token-id prompts ask for logprobs: a chunk then carries one logprob per token it brings
        // (text or not), and each is an arrival (the first after the chunk's gap, the rest at 0 ms).
        // Otherwise a chat chunk's content, or a completion chunk's text, that is not empty is one.
        int arrivals = 0;
        if (const size_t lp = ev.find("\"token_logprobs\":["); lp != std::string::npos) {
          const size_t open = lp + 18, close = ev.find(']', open);
          if (close != std::string::npos && close > open)
            arrivals = 1 + int(std::count(ev.begin() + open, ev.begin() + close, ','));
        } else if ((ev.find("\"content\":\"") != std::string::npos &&
                    ev.find("\"content\":\"\"") == std::string::npos) ||
                   (ev.find("\"text\":\"") != std::string::npos &&
                    ev.find("\"text\":\"\"") == std::string::npos)) {
          arrivals = 1;
        }
        for (int k = 0; k < arrivals; ++k) {
          if (s.ttft_ms < 0)
            s.ttft_ms = std::chrono::duration<double, std::milli>(now - t0).count();
          else
            s.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
          last = now;
        }
      }
      if (buf.size() >= 5 && buf.compare(buf.size() - 5, 5, "0\r\n\r\n") == 0 &&
          buf.find("[DONE]") != std::string::npos)
        done = true;
    }
    if (!done) {  // the server closed the connection before the reply ended
      s.error = "the connection ended before the reply did (" + std::to_string(buf.size()) + " bytes in)";
      out.push_back(std::move(s));
      break;
    }
    s.ok = head.status == 200;
    out.push_back(std::move(s));
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(std::lround(p / 100.0 * double(v.size() - 1))));
  return v[i];
}

void run(const BenchServeArgs& a) {
  const std::filesystem::path log = a.server_log.empty()
                                        ? std::filesystem::temp_directory_path() /
                                              ("astrai-bench-serve-" + std::to_string(::getpid()) + ".log")
                                        : std::filesystem::path(a.server_log);
  Child child = start_server(a, log);
  // Wait for /health 200 (bounded: 120 s).
  {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    bool ok = false, exited = false;
    // exited: the server ended before it was ready, as it does when the model fails to load (with the
    // reason on its stderr): no point waiting on.
    while (!ok && !exited && Clock::now() < deadline) {
      asio::io_context ioc;
      tcp::socket s(ioc);
      boost::system::error_code ec;
      s.connect(tcp::endpoint(asio::ip::address_v4::loopback(), uint16_t(child.port)), ec);
      if (!ec) {
        const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        asio::write(s, asio::buffer(req), ec);
        std::string reply;
        char b[4096];
        for (size_t n; (n = s.read_some(asio::buffer(b), ec)) > 0 || !ec;) reply.append(b, n);
        ok = reply.rfind("HTTP/1.1 200", 0) == 0;
      }
      int st = 0;
      exited = !ok && ::waitpid(child.pid, &st, WNOHANG) == child.pid;
      if (!ok && !exited) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!ok) {
      if (!exited) ::kill(child.pid, SIGKILL);
      const std::string reason = exited ? exit_reason(log) : "";
      if (!reason.empty()) throw Error(io_error("astrai serve could not load the model: " + reason));
      throw Error(io_error(std::string(exited ? "astrai serve exited before it was ready"
                                              : "astrai serve never became ready") +
                           "; see " + log.string()));
    }
  }

  // Prompts of random token ids below 256 (inside every tokenizer's vocabulary: the server refuses
  // ids past it), distinct per request so that the prefix cache does not skip their prefill.
  auto http = [](const std::string& path, const std::string& body) {
    return "POST " + path +
           " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  const std::string tail =
      "\"max_tokens\":" + std::to_string(a.max_tokens) +
      ",\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
  const std::string chat_request =
      http("/v1/chat/completions",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"Write a story about a lighthouse.\"}]," + tail);
  auto make_request = [&](uint64_t key) {
    if (a.prompt_tokens <= 0) return std::string(chat_request);  // a copy per request
    std::mt19937_64 rng(key);
    std::string body = "{\"prompt\":[";
    for (int i = 0; i < a.prompt_tokens; ++i) body += (i ? "," : "") + std::to_string(rng() % 256);
    // logprobs 0: every token gets a chunk of its own, with its logprob, even when it has no text
    // yet (a random model's ids often have none), so TTFT and ITL time tokens, not text.
    return http("/v1/completions", body + "],\"logprobs\":0," + tail);
  };

  JsonWriter json;
  json.begin_object()
      .key("bench")
      .value("serve")
      .key("model")
      .value(a.model)
      .key("max_tokens")
      .value(a.max_tokens)
      .key("prompt_tokens")
      .value(a.prompt_tokens);
  json.key("levels").begin_array();
  std::string run_error;  // the first failed request's reason
  bool any_done = false;
  std::printf("%6s %9s %8s %9s %9s %8s %8s %9s %12s %12s\n", "conc", "requests", "req/s", "ttft_p50",
              "ttft_p99", "itl_p50", "itl_p99", "tok/s", "cpu_us/tok", "net_us/tok");
  for (int c : a.levels) {
    const int total = a.requests_per_level > 0 ? a.requests_per_level : std::max(2 * c, 16);
    const int per_client = (total + c - 1) / c;
    std::vector<std::vector<Sample>> samples(static_cast<size_t>(c));
    asio::io_context ioc;
    const auto t0 = Clock::now();
    const auto stop_at =
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.level_seconds));
    const auto cpu0 = cpu_seconds(child.pid);
    for (int i = 0; i < c; ++i) {
      // Every request of the run gets its own key: (level, client, request).
      auto make = [&make_request, c, i](int r) {
        return make_request((uint64_t(c) << 40) ^ (uint64_t(i) << 20) ^ uint64_t(r));
      };
      asio::co_spawn(ioc, client(child.port, make, per_client, stop_at, samples[size_t(i)]), asio::detached);
    }
    ioc.run();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto cpu1 = cpu_seconds(child.pid);
    std::vector<double> ttft, itl;
    int done = 0, failed = 0;
    std::string first_error;
    long tokens = 0;
    for (const auto& v : samples)
      for (const auto& s : v) {
        if (!s.ok) {
          if (failed++ == 0) first_error = s.error;
          continue;
        }
        ++done;
        tokens += s.tokens;
        if (s.ttft_ms >= 0) ttft.push_back(s.ttft_ms);
        itl.insert(itl.end(), s.itl_ms.begin(), s.itl_ms.end());
      }
    const double cpu_per_tok = tokens ? (cpu1.first - cpu0.first) / double(tokens) * 1e6 : 0;
    const double net_per_tok = tokens ? (cpu1.second - cpu0.second) / double(tokens) * 1e6 : 0;
    std::printf("%6d %9d %8.2f %9.1f %9.1f %8.2f %8.2f %9.1f %12.1f %12.1f\n", c, done, done / wall,
                percentile(ttft, 50), percentile(ttft, 99), percentile(itl, 50), percentile(itl, 99),
                double(tokens) / wall, cpu_per_tok, net_per_tok);
    std::fflush(stdout);
    json.begin_object().key("concurrency").value(c).key("requests").value(done).key("failed").value(failed);
    json.key("tokens").value(int64_t(tokens));
    json.key("requests_per_s").value(done / wall).key("tokens_per_s").value(double(tokens) / wall);
    json.key("ttft_ms_p50").value(percentile(ttft, 50)).key("ttft_ms_p99").value(percentile(ttft, 99));
    json.key("itl_ms_p50").value(percentile(itl, 50)).key("itl_ms_p99").value(percentile(itl, 99));
    json.key("token_events").value(int64_t(ttft.size() + itl.size()));  // the arrivals timed above
    json.key("server_cpu_us_per_token").value(cpu_per_tok).key("net_cpu_us_per_token").value(net_per_tok);
    json.end_object();
    if (failed > 0) {
      std::fprintf(stderr, "bench serve: %d of %d requests failed at concurrency %d; the first: %s\n", failed,
                   failed + done, c, first_error.c_str());
      if (run_error.empty()) run_error = first_error;
    }
    any_done = any_done || done > 0;
  }
  json.end_array().end_object();
  std::printf("%s\n", json.str().c_str());
  ::kill(child.pid, SIGTERM);
  int st = 0;
  ::waitpid(child.pid, &st, 0);
  std::error_code ec;
  if (a.server_log.empty()) {
    std::filesystem::remove(log, ec);
    std::filesystem::remove(log.string() + ".out", ec);
  }
  // Figures from no request at all measure nothing: that is an error, with the server's reason.
  if (!any_done && !run_error.empty()) throw Error(io_error("every request failed; the first: " + run_error));
}

void register_bench_serve(CLI::App& app) {
  auto args = std::make_shared<BenchServeArgs>();
  CLI::App* sub = bench_command(app)->add_subcommand(
      "serve", "Load-test astrai serve: req/s, TTFT, ITL at several concurrencies, server CPU per token");
  sub->add_option("--model", args->model, "Preset name or model directory")->capture_default_str();
  sub->add_option("--concurrency", args->levels, "Concurrency levels")->delimiter(',')->capture_default_str();
  sub->add_option("--max-tokens", args->max_tokens, "Tokens per request (ignore_eos)")->capture_default_str();
  sub->add_option(
         "--prompt-tokens", args->prompt_tokens,
         "Prompt of this many random token ids per request, through /v1/completions with logprobs 0, so "
         "that every token is timed (0: a short chat prompt)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  sub->add_option(
      "--server-log", args->server_log,
      "Keep the server's log (info level) in this file; default: a temporary file at warn level, removed");
  sub->add_option(
      "--server-option", args->server_options,
      "KEY=VALUE: pass --KEY VALUE to the server (repeatable), e.g. --server-option max-batch-size=512");
  sub->add_option("--requests", args->requests_per_level, "Requests per level (0: max(2*C, 16))");
  sub->add_option("--level-seconds", args->level_seconds, "Time bound per level")->capture_default_str();
  sub->add_option("--threads", args->threads, "Server compute threads (0: all cores)");
  sub->callback([args] {
    run(*args);
    set_exit_code(0);
  });
}

}  // namespace

ASTRAI_REGISTER_COMMAND("bench-serve", register_bench_serve);

}  // namespace astrai::cli
