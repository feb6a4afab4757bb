#include "src/dist/bootstrap.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <bit>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "src/dist/communicator.h"

namespace astrai {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr uint32_t kMagic = 0x4E545341;  // the bytes "ASTN"
constexpr uint16_t kVersion = 2;         // 2: heartbeats
constexpr uint32_t kMaxBody = 1u << 20;  // every message is small: an id, a fingerprint, a few numbers
constexpr size_t kHeader = 12;

enum class Frame : uint16_t { hello = 1, welcome = 2, reject = 3, round = 4, abort = 5, heartbeat = 6 };

struct Message {
  Frame type = Frame::round;
  std::string body;
};

void put(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
}
uint64_t get(std::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(s[at + size_t(i)])) << (8 * i);
  return v;
}

std::string frame(Frame t, std::string_view body) {
  std::string s;
  put(s, kMagic, 4);
  put(s, kVersion, 2);
  put(s, uint16_t(t), 2);
  put(s, body.size(), 4);
  s += body;
  return s;
}

// Throws Error on a frame that is not ours (another program on the port, another build of astrai)
// and boost::system::system_error when the connection fails.
asio::awaitable<Message> read_message(tcp::socket& sock) {
  std::array<char, kHeader> h{};
  co_await asio::async_read(sock, asio::buffer(h), asio::use_awaitable);
  const std::string_view hv(h.data(), h.size());
  if (get(hv, 0, 4) != kMagic)
    throw Error(invalid_argument("it is not an astrai train node (its first bytes are not the bootstrap's)"));
  if (const uint64_t v = get(hv, 4, 2); v != kVersion)
    throw Error(invalid_argument("it speaks bootstrap protocol version " + std::to_string(v) +
                                 ", this binary version " + std::to_string(kVersion) +
                                 " (run the same astrai build on every node)"));
  const uint64_t len = get(hv, 8, 4);
  if (len > kMaxBody) throw Error(invalid_argument("it sent a message of " + std::to_string(len) + " bytes"));
  Message m{Frame(get(hv, 6, 2)), std::string(size_t(len), '\0')};
  if (len > 0) co_await asio::async_read(sock, asio::buffer(m.body), asio::use_awaitable);
  co_return m;
}

std::string what(const std::exception& e) {
  if (auto* se = dynamic_cast<const boost::system::system_error*>(&e)) return se->code().message();
  return e.what();
}

// A collective's parts: u32 count, then u32 length + bytes per part.
std::string encode_parts(const std::vector<std::string>& parts) {
  std::string s;
  put(s, parts.size(), 4);
  for (const std::string& p : parts) {
    put(s, p.size(), 4);
    s += p;
  }
  return s;
}
Result<std::vector<std::string>> decode_parts(std::string_view s, int expected) {
  auto bad = [] { return internal_error("node 0 sent a malformed collective answer"); };
  if (s.size() < 4 || int64_t(get(s, 0, 4)) != expected) return bad();
  std::vector<std::string> out;
  size_t at = 4;
  for (int i = 0; i < expected; ++i) {
    if (s.size() < at + 4) return bad();
    const size_t len = size_t(get(s, at, 4));
    at += 4;
    if (s.size() < at + len) return bad();
    out.emplace_back(s.substr(at, len));
    at += len;
  }
  return out;
}

void tune(tcp::socket& s) {
  boost::system::error_code ec;
  s.set_option(tcp::no_delay(true), ec);
  s.set_option(asio::socket_base::keep_alive(true), ec);
  // A host that vanishes without closing its connections (power, network) is noticed in about 25 s
  // instead of the kernel's default two hours: by keepalive probes while the link is idle, and by
  // the user timeout while a message of ours waits for an acknowledgement.
  const int idle = 10, interval = 5, count = 3, unacked_ms = 30000;
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_USER_TIMEOUT, &unacked_ms, sizeof unacked_ms);
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

Status validate_node_options(const NodeOptions& o) {
  if (o.nnodes < 1)
    return invalid_argument("nnodes: must be at least 1 (got " + std::to_string(o.nnodes) + ")");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    return invalid_argument("node_rank: " + std::to_string(o.node_rank) + " must be in [0, nnodes) = [0, " +
                            std::to_string(o.nnodes) + ")");
  if (o.master_port < 1 || o.master_port > 65535)
    return invalid_argument("master_port: " + std::to_string(o.master_port) + " must be in [1, 65535]");
  if (o.master_addr.empty()) return invalid_argument("master_addr: the address of node 0 is required");
  if (!(o.timeout_s > 0)) return invalid_argument("node_timeout: must be more than 0 seconds");
  if (!(o.silence_s >= 0)) return invalid_argument("silence_s: must be 0 (node_timeout) or more seconds");
  return {};
}

// ---- the link --------------------------------------------------------------------------------------

struct Peer {
  Peer(tcp::socket s, int n, std::string w) : sock(std::move(s)), node(n), where(std::move(w)) {}
  tcp::socket sock;
  int node;
  std::string where;  // "node 2 (10.0.0.3)"
  // Under Impl::mu: the collective answers received, and whether the connection has ended.
  std::deque<std::string> inbox;
  bool gone = false;
  // On the link's thread only: frames waiting to be written (one async_write at a time per socket).
  std::deque<std::pair<std::string, std::promise<Status>*>> out;
  bool writing = false;
  std::chrono::steady_clock::time_point heard = std::chrono::steady_clock::now();  // its last frame
};

struct NodeLink::Impl {
  NodeOptions o;
  asio::io_context io;
  std::vector<std::unique_ptr<Peer>> peers;  // node 0: nodes 1..n-1; node r > 0: node 0
  std::vector<uint8_t> id;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
  asio::steady_timer exit_timer{io};

  mutable std::mutex mu;
  std::condition_variable cv;
  Status lost;                                 // under mu: the first loss
  bool closing = false;                        // under mu
  std::function<void(const Status&)> on_lost;  // under mu

  ~Impl() {
    {
      std::lock_guard lock(mu);
      closing = true;
    }
    io.stop();
    if (thread.joinable()) thread.join();
    boost::system::error_code ec;
    for (auto& p : peers) p->sock.close(ec);
  }

  // ---- the link's thread ----
  asio::awaitable<void> read_loop(Peer& p) {
    Status why;
    try {
      for (;;) {
        Message m = co_await read_message(p.sock);
        p.heard = std::chrono::steady_clock::now();
        if (m.type == Frame::heartbeat) continue;
        if (m.type == Frame::round) {
          std::lock_guard lock(mu);
          p.inbox.push_back(std::move(m.body));
          cv.notify_all();
          continue;
        }
        why = m.type == Frame::abort ? Status(ErrorCode::io, "node 0 ended the run: " + m.body)
                                     : internal_error(p.where + " sent an unexpected message");
        break;
      }
    } catch (const std::exception& e) {
      why = Status(ErrorCode::io, "lost " + p.where + ": its connection ended (" + what(e) +
                                      "): the process exited or was killed, or its host is unreachable");
    }
    lose(p, why);
  }

  void lose(Peer& p, const Status& why) {
    std::function<void(const Status&)> fn;
    {
      std::lock_guard lock(mu);
      p.gone = true;
      cv.notify_all();
      if (closing || !lost.ok()) return;
      lost = why;
      fn = on_lost;
    }
    if (o.node_rank == 0)
      for (auto& q : peers)
        if (q.get() != &p) enqueue(*q, frame(Frame::abort, why.message()), nullptr);
    if (fn) fn(why);
    if (o.exit_after_loss_s > 0) {
      exit_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(o.exit_after_loss_s)));
      exit_timer.async_wait([msg = why.message(), s = o.exit_after_loss_s](boost::system::error_code ec) {
        if (ec) return;
        std::fprintf(stderr, "error: %s (still running %s s later: exiting)\n", msg.c_str(),
                     seconds_str(s).c_str());
        std::fflush(stderr);
        std::_Exit(1);
      });
    }
  }

  // A process that is stopped (SIGSTOP, a debugger) or frozen keeps its connections open, and the
  // kernel keeps acknowledging what is sent to it: only its silence gives it away. Every node sends
  // a heartbeat to each peer several times per silence limit from this thread, which runs whatever
  // the node's ranks are doing (a long checkpoint write, a collective on the device), so a peer
  // that sends nothing for the limit is lost like one whose connection ended: every collective in
  // flight or to come fails naming it, on_lost aborts the device collectives that wait for it, and
  // node 0 tells the other nodes.
  asio::awaitable<void> watch() {
    const double limit = o.silence_s > 0 ? o.silence_s : o.timeout_s;
    const auto tick = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(std::min(1.0, limit / 4)));
    const auto silence =
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limit));
    asio::steady_timer timer(io);
    for (;;) {
      {
        std::lock_guard lock(mu);
        if (closing || !lost.ok()) co_return;
      }
      const auto now = std::chrono::steady_clock::now();
      for (auto& p : peers) {
        if (now - p->heard > silence) {
          lose(*p, Status(ErrorCode::io, "lost " + p->where + ": nothing heard from it for " +
                                             seconds_str(limit) +
                                             " s (node_timeout): its process is stopped or hung"));
          co_return;
        }
        // A frame still being written tells the peer as much; heartbeats must not pile up behind it.
        if (!p->writing) enqueue(*p, frame(Frame::heartbeat, ""), nullptr);
      }
      timer.expires_after(tick);
      co_await timer.async_wait(asio::use_awaitable);
    }
  }

  void enqueue(Peer& p, std::string bytes, std::promise<Status>* done) {
    p.out.emplace_back(std::move(bytes), done);
    if (p.writing) return;
    p.writing = true;
    asio::co_spawn(io, drain(p), asio::detached);
  }

  asio::awaitable<void> drain(Peer& p) {
    while (!p.out.empty()) {
      auto [bytes, done] = std::move(p.out.front());
      p.out.pop_front();
      Status s;
      try {
        co_await asio::async_write(p.sock, asio::buffer(bytes), asio::use_awaitable);
      } catch (const std::exception& e) {
        s = Status(ErrorCode::io, "cannot send to " + p.where + ": " + what(e));
      }
      if (done) done->set_value(s);
    }
    p.writing = false;
  }

  // ---- the caller's thread ----
  Status send(Peer& p, std::string bytes) {
    std::promise<Status> done;
    std::future<Status> f = done.get_future();
    asio::post(io, [&] { enqueue(p, std::move(bytes), &done); });
    Status s = f.get();
    if (!s.ok()) {
      std::lock_guard lock(mu);
      if (!lost.ok()) return lost;
    }
    return s;
  }

  Result<std::string> receive(Peer& p) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !lost.ok() || !p.inbox.empty() || p.gone; });
    if (!lost.ok()) return lost;
    if (p.inbox.empty())
      return Status(ErrorCode::io, p.where + " left before the run's last collective (it ended without one)");
    std::string s = std::move(p.inbox.front());
    p.inbox.pop_front();
    return s;
  }
};

NodeLink::NodeLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NodeLink::~NodeLink() = default;

int NodeLink::nnodes() const {
  return impl_->o.nnodes;
}
int NodeLink::node_rank() const {
  return impl_->o.node_rank;
}
const std::vector<uint8_t>& NodeLink::id() const {
  return impl_->id;
}

Status NodeLink::status() const {
  std::lock_guard lock(impl_->mu);
  return impl_->lost;
}

void NodeLink::on_lost(std::function<void(const Status&)> fn) {
  Status already;
  {
    std::lock_guard lock(impl_->mu);
    impl_->on_lost = std::move(fn);
    already = impl_->lost;
  }
  // Only this thread writes on_lost; the link's thread copies it under the lock.
  if (!already.ok() && impl_->on_lost) impl_->on_lost(already);
}

// ---- the bootstrap ---------------------------------------------------------------------------------

namespace {

std::string hello_body(int node_rank, int64_t world_size, std::string_view fingerprint) {
  std::string s;
  put(s, uint64_t(node_rank), 4);
  put(s, uint64_t(world_size), 8);
  s += fingerprint;
  return s;
}

// Node 0's side: who has joined so far (for the timeout's message).
struct Joining {
  std::map<int, std::unique_ptr<Peer>> joined;
};

// Node 0 refuses the run: every node that joined hears why.
void reject_all(Joining& j, const std::string& why) {
  const std::string f = frame(Frame::reject, why);
  boost::system::error_code ec;
  for (auto& [r, p] : j.joined) asio::write(p->sock, asio::buffer(f), ec);
}

asio::awaitable<Status> accept_nodes(NodeLink::Impl& L, tcp::acceptor& acc, Joining& j, int64_t world_size,
                                     std::string fingerprint) {
  const NodeOptions& o = L.o;
  while (int(j.joined.size()) < o.nnodes - 1) {
    tcp::socket s(L.io);
    co_await acc.async_accept(s, asio::use_awaitable);
    boost::system::error_code ec;
    const tcp::endpoint ep = s.remote_endpoint(ec);
    const std::string from = ec ? std::string("a peer") : ep.address().to_string();
    Message m;
    Status bad;
    try {
      m = co_await read_message(s);
      if (m.type != Frame::hello) throw Error(invalid_argument("its first message is not a hello"));
    } catch (const std::exception& e) {
      bad = invalid_argument("master_port " + std::to_string(o.master_port) + ": a connection from " + from +
                             " failed the bootstrap: " + what(e));
    }
    int r = -1;
    if (bad.ok()) {
      if (m.body.size() < 12) {
        bad = invalid_argument("a connection from " + from + " sent a malformed hello");
      } else {
        r = int(get(m.body, 0, 4));
        const int64_t w = int64_t(get(m.body, 4, 8));
        const std::string_view fp = std::string_view(m.body).substr(12);
        const std::string who = "node " + std::to_string(r) + " (" + from + ")";
        if (r < 1 || r >= o.nnodes)
          bad = invalid_argument(who + " has node_rank " + std::to_string(r) +
                                 ", outside [1, nnodes) = [1, " + std::to_string(o.nnodes) + ")");
        else if (j.joined.count(r))
          bad = invalid_argument(who + ": node_rank " + std::to_string(r) + " was already taken by " +
                                 j.joined[r]->where + " (every node needs its own node_rank)");
        else if (w != world_size)
          bad = invalid_argument(who + " counts a world of " + std::to_string(w) + " ranks, node 0 counts " +
                                 std::to_string(world_size) +
                                 " (nnodes x gpus must be the same on every node)");
        else if (fp != fingerprint)
          bad =
              invalid_argument(who + " runs another config or other data than node 0 (fingerprint " +
                               std::string(fp) + " vs " + fingerprint +
                               "): every node must train the same model on the same data with the same keys");
      }
    }
    if (!bad.ok()) {
      const std::string f = frame(Frame::reject, bad.message());
      asio::write(s, asio::buffer(f), ec);
      reject_all(j, bad.message());
      co_return bad;
    }
    j.joined[r] = std::make_unique<Peer>(std::move(s), r, "node " + std::to_string(r) + " (" + from + ")");
  }
  const std::string welcome(L.id.begin(), L.id.end());
  for (auto& [r, p] : j.joined)
    co_await asio::async_write(p->sock, asio::buffer(frame(Frame::welcome, welcome)), asio::use_awaitable);
  co_return Status();
}

struct Joiner {
  std::optional<tcp::socket> sock;
  bool connected = false;
  std::string last_error = "no attempt yet";
};

asio::awaitable<Status> join_master(NodeLink::Impl& L, Joiner& j, int64_t world_size,
                                    std::string fingerprint) {
  const NodeOptions& o = L.o;
  tcp::resolver resolver(L.io);
  asio::steady_timer pause(L.io);
  const std::string master = o.master_addr + ":" + std::to_string(o.master_port);
  for (;;) {
    j.sock.emplace(L.io);
    try {
      auto endpoints =
          co_await resolver.async_resolve(o.master_addr, std::to_string(o.master_port), asio::use_awaitable);
      co_await asio::async_connect(*j.sock, endpoints, asio::use_awaitable);
      break;
    } catch (const std::exception& e) {
      j.last_error = what(e);
    }
    // Node 0 may not be listening yet: the nodes of a run start in any order.
    pause.expires_after(std::chrono::milliseconds(200));
    co_await pause.async_wait(asio::use_awaitable);
  }
  j.connected = true;
  Message m;
  try {
    co_await asio::async_write(
        *j.sock, asio::buffer(frame(Frame::hello, hello_body(o.node_rank, world_size, fingerprint))),
        asio::use_awaitable);
    m = co_await read_message(*j.sock);
  } catch (const std::exception& e) {
    co_return Status(ErrorCode::io, "the bootstrap with node 0 at " + master + " failed: " + what(e));
  }
  if (m.type == Frame::reject)
    co_return invalid_argument("node 0 (" + master + ") refused the run: " + m.body);
  if (m.type != Frame::welcome)
    co_return internal_error("node 0 (" + master + ") answered the hello with an unexpected message");
  L.id.assign(m.body.begin(), m.body.end());
  co_return Status();
}

// Runs `task` on L.io for at most the timeout; nullopt when it did not finish in time.
std::optional<Status> run_bootstrap(NodeLink::Impl& L, asio::awaitable<Status> task) {
  std::optional<Status> result;
  asio::co_spawn(L.io, std::move(task), [&](const std::exception_ptr& e, Status s) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        s = Status(ErrorCode::io, "bootstrap: " + what(ex));
      }
    }
    result = std::move(s);
  });
  L.io.run_for(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(L.o.timeout_s)));
  L.io.stop();
  return result;
}

}  // namespace

Result<std::unique_ptr<NodeLink>> NodeLink::connect(const NodeOptions& o, int64_t world_size,
                                                    std::string_view fingerprint,
                                                    std::span<const uint8_t> id) {
  ASTRAI_RETURN_IF_ERROR(validate_node_options(o));
  auto L = std::make_unique<Impl>();
  L->o = o;
  const std::string timeout = seconds_str(o.timeout_s) + " s";
  const std::string port = std::to_string(o.master_port);
  if (o.nnodes > 1 && o.node_rank == 0) {
    L->id.assign(id.begin(), id.end());
    tcp::acceptor acc(L->io);
    boost::system::error_code ec;
    acc.open(tcp::v4(), ec);
    if (!ec) acc.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc.bind(tcp::endpoint(asio::ip::address_v4::any(), uint16_t(o.master_port)), ec);
    if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return Status(ErrorCode::io, "master_port " + port + ": node 0 cannot listen on it: " + ec.message() +
                                       " (another run or program holds it? pick another --master-port)");
    Joining j;
    const std::optional<Status> s =
        run_bootstrap(*L, accept_nodes(*L, acc, j, world_size, std::string(fingerprint)));
    if (!s) {
      std::string have = "0";
      for (auto& [r, p] : j.joined) have += ", " + std::to_string(r);
      const std::string why = "only nodes " + have + " of nnodes " + std::to_string(o.nnodes) +
                              " joined on master_port " + port + " within " + timeout +
                              " (start every node with --nnodes " + std::to_string(o.nnodes) +
                              " --master-addr <node 0's address> --master-port " + port + ")";
      reject_all(j, why);
      return Status(ErrorCode::io, why);
    }
    ASTRAI_RETURN_IF_ERROR(*s);
    for (auto& [r, p] : j.joined) L->peers.push_back(std::move(p));
  } else if (o.nnodes > 1) {
    Joiner j;
    const std::optional<Status> s =
        run_bootstrap(*L, join_master(*L, j, world_size, std::string(fingerprint)));
    const std::string master = o.master_addr + ":" + port;
    if (!s && !j.connected)
      return Status(ErrorCode::io, "no node 0 at " + master + " within " + timeout +
                                       " (last attempt: " + j.last_error +
                                       "); start node 0 with the same --master-addr and --master-port");
    if (!s)
      return Status(ErrorCode::io, "node 0 at " + master + " did not start the run within " + timeout +
                                       ": not every node of nnodes " + std::to_string(o.nnodes) + " joined");
    ASTRAI_RETURN_IF_ERROR(*s);
    L->peers.push_back(std::make_unique<Peer>(std::move(*j.sock), 0, "node 0 (" + master + ")"));
  } else {
    L->id.assign(id.begin(), id.end());
  }
  L->io.restart();
  for (auto& p : L->peers) {
    tune(p->sock);
    p->heard = std::chrono::steady_clock::now();
    asio::co_spawn(L->io, L->read_loop(*p), asio::detached);
  }
  if (!L->peers.empty()) asio::co_spawn(L->io, L->watch(), asio::detached);
  L->work.emplace(L->io.get_executor());
  Impl* raw = L.get();
  L->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<NodeLink>(new NodeLink(std::move(L)));
}

// ---- collectives -----------------------------------------------------------------------------------

Result<std::vector<std::string>> NodeLink::all_gather(std::string_view mine) {
  Impl& L = *impl_;
  if (L.o.nnodes == 1) return std::vector<std::string>{std::string(mine)};
  ASTRAI_RETURN_IF_ERROR(status());
  if (L.o.node_rank > 0) {
    Peer& master = *L.peers[0];
    ASTRAI_RETURN_IF_ERROR(L.send(master, frame(Frame::round, mine)));
    ASTRAI_ASSIGN_OR_RETURN(const std::string all, L.receive(master));
    return decode_parts(all, L.o.nnodes);
  }
  std::vector<std::string> parts{std::string(mine)};
  for (auto& p : L.peers) {
    ASTRAI_ASSIGN_OR_RETURN(std::string part, L.receive(*p));
    parts.push_back(std::move(part));
  }
  const std::string answer = frame(Frame::round, encode_parts(parts));
  for (auto& p : L.peers) ASTRAI_RETURN_IF_ERROR(L.send(*p, answer));
  return parts;
}

Status NodeLink::agree(const Status& mine) {
  std::string m;
  put(m, uint64_t(mine.code()), 4);
  m += mine.message();
  ASTRAI_ASSIGN_OR_RETURN(const std::vector<std::string> all, all_gather(m));
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() < 4) return internal_error("a node sent a malformed status");
    const auto code = ErrorCode(int(get(all[r], 0, 4)));
    if (code == ErrorCode::ok) continue;
    if (int(r) == node_rank()) return mine;
    return Status(code, "node " + std::to_string(r) + ": " + all[r].substr(4));
  }
  return {};
}

Result<std::vector<double>> NodeLink::gather_doubles(std::span<const double> mine) {
  std::string m;
  for (double d : mine) put(m, std::bit_cast<uint64_t>(d), 8);
  ASTRAI_ASSIGN_OR_RETURN(const std::vector<std::string> all, all_gather(m));
  std::vector<double> out;
  for (const std::string& part : all) {
    if (part.size() % 8 != 0) return internal_error("a node sent a malformed list of numbers");
    for (size_t at = 0; at < part.size(); at += 8) out.push_back(std::bit_cast<double>(get(part, at, 8)));
  }
  return out;
}

Result<bool> NodeLink::any(bool mine) {
  ASTRAI_ASSIGN_OR_RETURN(const std::vector<std::string> all, all_gather(mine ? "1" : "0"));
  for (const std::string& s : all)
    if (s == "1") return true;
  return false;
}

Status NodeLink::barrier() {
  return all_gather("").status();
}

Status NodeLink::close() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->closing = true;
  }
  return barrier();
}

// ---- transports ------------------------------------------------------------------------------------

namespace {
std::mutex transports_mu;
std::map<Device, WorldTransport>& transports() {
  static std::map<Device, WorldTransport> t;
  return t;
}
}  // namespace

void register_world_transport(Device device, WorldTransport transport) {
  std::lock_guard lock(transports_mu);
  transports()[device] = std::move(transport);
}

Result<WorldTransport> world_transport(Device device) {
  std::lock_guard lock(transports_mu);
  auto it = transports().find(device);
  if (it != transports().end()) return it->second;
  if (device == Device::cpu)
    return unsupported(
        "nnodes > 1: the CPU backend has no transport between processes; training over several nodes "
        "needs device cuda (NCCL)");
  return unsupported("nnodes > 1 on this device needs NCCL, which this build does not have");
}

}  // namespace astrai
