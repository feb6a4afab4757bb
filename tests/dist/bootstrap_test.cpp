// The bootstrap between the nodes of a training run (src/dist/bootstrap.h), on localhost: each
// "node" is a thread with its own NodeLink (its own io_context and sockets), as separate processes
// would have. Nodes start in any order (the others retry connecting), so no verdict depends on which
// thread gets where first; the only waits are the links' own timeouts.
#include "src/dist/bootstrap.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tools/test_util.h"

namespace astrai::test {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// A port nothing listens on right now (the kernel's choice for port 0).
int free_port() {
  asio::io_context io;
  tcp::acceptor a(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  return a.local_endpoint().port();
}

NodeOptions node(int nnodes, int rank, int port, double timeout_s = 20) {
  NodeOptions o;
  o.nnodes = nnodes;
  o.node_rank = rank;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.timeout_s = timeout_s;
  return o;
}

std::vector<uint8_t> random_id(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> id(128);
  for (auto& b : id) b = uint8_t(rng());
  return id;
}

// Connects `n` nodes at once (node r on its own thread); per node: its link or its error.
std::vector<Result<std::unique_ptr<NodeLink>>> connect_all(const std::vector<NodeOptions>& opts,
                                                           const std::vector<int64_t>& world,
                                                           const std::vector<std::string>& fingerprint,
                                                           const std::vector<uint8_t>& id) {
  std::vector<std::future<Result<std::unique_ptr<NodeLink>>>> f;
  for (size_t i = 0; i < opts.size(); ++i)
    f.push_back(std::async(std::launch::async, [&, i] {
      return NodeLink::connect(
          opts[i], world[i], fingerprint[i],
          opts[i].node_rank == 0 ? std::span<const uint8_t>(id) : std::span<const uint8_t>());
    }));
  std::vector<Result<std::unique_ptr<NodeLink>>> out;
  for (auto& x : f) out.push_back(x.get());
  return out;
}

// Runs fn(node) for every link at once and joins.
template <typename F>
void on_nodes(std::vector<Result<std::unique_ptr<NodeLink>>>& links, F fn) {
  std::vector<std::thread> t;
  for (size_t i = 0; i < links.size(); ++i) t.emplace_back([&, i] { fn(int(i), *links[i].value()); });
  for (auto& th : t) th.join();
}

// A node in a process of its own (this test binary running the hidden case below), which the test
// can stop with SIGSTOP as a frozen host would be: its connection stays open and its kernel keeps
// acknowledging. It joins, meets the others in a barrier, sleeps `pause_s`, meets them in a second
// barrier, then sleeps until it is killed. Killed (and reaped) when the test ends, whatever happens.
constexpr const char* kChildCase = "a node process for the tests that stop one";
constexpr const char* kChildEnv = "ASTRAI_TEST_STOPPED_NODE";

struct NodeProcess {
  pid_t pid = -1;
  NodeProcess(int nnodes, int rank, int port, double silence_s, double pause_s) {
    std::ostringstream spec;
    spec << kChildEnv << "=" << nnodes << " " << rank << " " << port << " " << silence_s << " " << pause_s;
    const std::string env = spec.str(), self = "/proc/self/exe";
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) envp.push_back(*e);
    envp.push_back(const_cast<char*>(env.c_str()));
    envp.push_back(nullptr);
    char* argv[] = {const_cast<char*>(self.c_str()), const_cast<char*>(kChildCase), nullptr};
    REQUIRE(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()) == 0);
  }
  void stop() const { REQUIRE(kill(pid, SIGSTOP) == 0); }
  ~NodeProcess() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
  }
};

NodeOptions quick_silence(NodeOptions o, double silence_s) {
  o.silence_s = silence_s;
  return o;
}

}  // namespace

TEST_CASE("a node process for the tests that stop one", "[.]") {
  const char* spec = std::getenv(kChildEnv);
  if (!spec) return;  // run by hand: nothing to do
  int nnodes = 0, rank = 0, port = 0;
  double silence_s = 0, pause_s = 0;
  std::istringstream in(spec);
  in >> nnodes >> rank >> port >> silence_s >> pause_s;
  auto link = NodeLink::connect(quick_silence(node(nnodes, rank, port, 30), silence_s), nnodes, "fp",
                                rank == 0 ? random_id(11) : std::vector<uint8_t>());
  // Exit codes for a person reading a failed run; the test checks what the other nodes see.
  if (!link.ok()) std::_Exit(3);
  if (!link.value()->barrier().ok()) std::_Exit(4);
  std::this_thread::sleep_for(std::chrono::duration<double>(pause_s));
  if (!link.value()->barrier().ok()) std::_Exit(5);
  std::this_thread::sleep_for(std::chrono::seconds(120));
  std::_Exit(0);
}

TEST_CASE("every node receives node 0's id intact and the collectives agree", "[threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const auto id = random_id(seed);
  for (int n : {2, 3}) {
    const int port = free_port();
    std::vector<NodeOptions> opts;
    // Node 0 last: the others must retry until it listens.
    for (int r = n - 1; r >= 0; --r) opts.push_back(node(n, r, port));
    auto links = connect_all(opts, std::vector<int64_t>(size_t(n), 2 * n),
                             std::vector<std::string>(size_t(n), "fp"), id);
    for (auto& l : links) REQUIRE(l.ok());
    std::sort(links.begin(), links.end(),
              [](auto& a, auto& b) { return a.value()->node_rank() < b.value()->node_rank(); });
    for (int r = 0; r < n; ++r) {
      CHECK(links[size_t(r)].value()->node_rank() == r);
      CHECK(links[size_t(r)].value()->nnodes() == n);
      CHECK(links[size_t(r)].value()->id() == id);
    }
    std::vector<std::vector<double>> gathered(static_cast<size_t>(n));
    std::vector<Status> agreed(static_cast<size_t>(n)), ok_agreed(static_cast<size_t>(n));
    std::vector<int> any_false(static_cast<size_t>(n), -1), any_true(static_cast<size_t>(n), -1);
    on_nodes(links, [&](int r, NodeLink& l) {
      // Several rounds over the same connections, each a different collective.
      const std::vector<double> mine{double(r) + 0.5, -double(r)};
      gathered[size_t(r)] = l.gather_doubles(mine).value();
      ok_agreed[size_t(r)] = l.agree(Status());
      agreed[size_t(r)] = l.agree(r == n - 1 ? resource_exhausted("out of memory on this node") : Status());
      any_false[size_t(r)] = int(l.any(false).value());
      any_true[size_t(r)] = int(l.any(r == 1).value());
      check(l.barrier());
      check(l.close());
    });
    std::vector<double> want;
    for (int r = 0; r < n; ++r) want.insert(want.end(), {double(r) + 0.5, -double(r)});
    for (int r = 0; r < n; ++r) {
      INFO("node " << r);
      CHECK(gathered[size_t(r)] == want);
      CHECK(ok_agreed[size_t(r)].ok());
      CHECK(agreed[size_t(r)].code() == ErrorCode::resource_exhausted);
      if (r == n - 1)
        CHECK(agreed[size_t(r)].message() == "out of memory on this node");
      else
        CHECK(agreed[size_t(r)].message() ==
              "node " + std::to_string(n - 1) + ": out of memory on this node");
      CHECK(any_false[size_t(r)] == 0);
      CHECK(any_true[size_t(r)] == 1);
    }
  }
}

TEST_CASE("a node with another fingerprint fails the run on every node with both fingerprints named",
          "[threads]") {
  const int port = free_port();
  auto links = connect_all({node(2, 0, port), node(2, 1, port)}, {4, 4}, {"aaaa", "bbbb"}, random_id(1));
  for (int r = 0; r < 2; ++r) {
    INFO("node " << r);
    REQUIRE_FALSE(links[size_t(r)].ok());
    CHECK_THAT(links[size_t(r)].status().message(), Catch::Contains("another config or other data") &&
                                                        Catch::Contains("aaaa") && Catch::Contains("bbbb"));
  }
  CHECK_THAT(links[1].status().message(),
             Catch::Contains("node 0 (127.0.0.1:" + std::to_string(port) + ") refused"));
}

TEST_CASE("a node that counts another world size fails the run on every node", "[threads]") {
  const int port = free_port();
  auto links = connect_all({node(2, 0, port), node(2, 1, port)}, {4, 6}, {"fp", "fp"}, random_id(2));
  for (int r = 0; r < 2; ++r) {
    INFO("node " << r);
    REQUIRE_FALSE(links[size_t(r)].ok());
    CHECK_THAT(
        links[size_t(r)].status().message(),
        Catch::Contains("counts a world of 6 ranks, node 0 counts 4") && Catch::Contains("nnodes x gpus"));
  }
}

TEST_CASE("two nodes with the same node_rank fail the run", "[threads]") {
  const int port = free_port();
  auto links = connect_all({node(3, 0, port), node(3, 1, port), node(3, 1, port)}, {3, 3, 3},
                           {"fp", "fp", "fp"}, random_id(3));
  for (int r = 0; r < 3; ++r) {
    INFO("node " << r);
    REQUIRE_FALSE(links[size_t(r)].ok());
    CHECK_THAT(links[size_t(r)].status().message(), Catch::Contains("node_rank 1 was already taken"));
  }
}

TEST_CASE("node 0 on a port already in use fails at once naming the port", "[threads]") {
  asio::io_context io;
  tcp::acceptor busy(io, tcp::endpoint(asio::ip::address_v4::any(), 0));
  const int port = busy.local_endpoint().port();
  auto l = NodeLink::connect(node(2, 0, port), 2, "fp", random_id(4));
  REQUIRE_FALSE(l.ok());
  CHECK_THAT(l.status().message(), Catch::Contains("master_port " + std::to_string(port)) &&
                                       Catch::Contains("cannot listen") && Catch::Contains("--master-port"));
}

TEST_CASE("a node whose master never appears gives up after its timeout naming the address") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  auto l = NodeLink::connect(node(2, 1, port, 0.5), 2, "fp", {});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(l.ok());
  CHECK_THAT(l.status().message(), Catch::Contains("no node 0 at 127.0.0.1:" + std::to_string(port)) &&
                                       Catch::Contains("within 0.5 s") && Catch::Contains("refused"));
  CHECK(took >= 0.5);
  CHECK(took < 5);
}

TEST_CASE("node 0 whose other nodes never join gives up after its timeout naming who is missing") {
  const int port = free_port();
  auto l = NodeLink::connect(node(3, 0, port, 0.5), 3, "fp", random_id(5));
  REQUIRE_FALSE(l.ok());
  CHECK_THAT(l.status().message(), Catch::Contains("only nodes 0 of nnodes 3 joined on master_port " +
                                                   std::to_string(port) + " within 0.5 s"));
}

TEST_CASE("a connection that is not an astrai node fails node 0's bootstrap with a clear error",
          "[threads]") {
  const int port = free_port();
  std::thread stray([port] {
    asio::io_context io;
    for (int attempt = 0; attempt < 200; ++attempt) {
      tcp::socket s(io);
      boost::system::error_code ec;
      s.connect(tcp::endpoint(asio::ip::address_v4::loopback(), uint16_t(port)), ec);
      if (!ec) {
        asio::write(s, asio::buffer(std::string("GET / HTTP/1.1\r\n\r\n")), ec);
        char c;
        s.read_some(asio::buffer(&c, 1), ec);  // until node 0 closes it
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto l = NodeLink::connect(node(2, 0, port), 2, "fp", random_id(6));
  stray.join();
  REQUIRE_FALSE(l.ok());
  CHECK_THAT(l.status().message(),
             Catch::Contains("failed the bootstrap") && Catch::Contains("not an astrai train node"));
}

TEST_CASE("a node lost after the bootstrap fails the collectives of the others and calls on_lost",
          "[threads]") {
  const int port = free_port();
  auto links = connect_all({node(3, 0, port), node(3, 1, port), node(3, 2, port)}, {3, 3, 3},
                           {"fp", "fp", "fp"}, random_id(7));
  for (auto& l : links) REQUIRE(l.ok());
  std::vector<std::promise<std::string>> heard(3);
  for (int r : {0, 2})
    links[size_t(r)].value()->on_lost(
        [&heard, r](const Status& s) { heard[size_t(r)].set_value(s.message()); });
  // Node 1's process ends without close(): its connection closes.
  links[1].value().reset();
  for (int r : {0, 2}) {
    INFO("node " << r);
    auto f = heard[size_t(r)].get_future();
    REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    const std::string msg = f.get();
    CHECK_THAT(msg, Catch::Contains("lost node 1 (127.0.0.1)"));
    if (r == 2) CHECK_THAT(msg, Catch::StartsWith("node 0 ended the run"));
    const Status s = links[size_t(r)].value()->barrier();
    CHECK_FALSE(s.ok());
    CHECK(s.message() == msg);
  }
}

TEST_CASE("a node lost while the others wait in a collective wakes them with the error", "[threads]") {
  const int port = free_port();
  auto links = connect_all({node(2, 0, port), node(2, 1, port)}, {2, 2}, {"fp", "fp"}, random_id(8));
  for (auto& l : links) REQUIRE(l.ok());
  auto waiting = std::async(std::launch::async, [&] { return links[0].value()->agree(Status()); });
  links[1].value().reset();
  REQUIRE(waiting.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  const Status s = waiting.get();
  CHECK(s.code() == ErrorCode::io);
  CHECK_THAT(s.message(), Catch::Contains("lost node 1"));
}

TEST_CASE("a stopped node fails every other node's collective naming it; a silent but running one does not",
          "[threads]") {
  // Node 2 is a process of its own; nodes 0 and 1 are threads here. Node 2 sends nothing between its
  // two barriers for 2.5 times the silence limit: its heartbeats alone keep it in the run.
  const double silence_s = 2;
  const int port = free_port();
  NodeProcess child(3, 2, port, silence_s, 2.5 * silence_s);
  auto links = connect_all(
      {quick_silence(node(3, 0, port, 30), silence_s), quick_silence(node(3, 1, port, 30), silence_s)},
      {3, 3}, {"fp", "fp"}, random_id(11));
  for (auto& l : links) REQUIRE(l.ok());
  std::vector<Status> first(2), second(2), stopped(2);
  on_nodes(links, [&](int r, NodeLink& l) {
    first[size_t(r)] = l.barrier();
    second[size_t(r)] = l.barrier();
  });
  for (int r : {0, 1}) {
    INFO("node " << r);
    CHECK(first[size_t(r)].ok());
    CHECK(second[size_t(r)].ok());
  }
  child.stop();
  // Bounded: a watchdog that misses the stop fails the checks below instead of hanging the test
  // (killing the child then ends its connection, which wakes the barriers).
  auto f = std::async(std::launch::async, [&] {
    on_nodes(links, [&](int r, NodeLink& l) { stopped[size_t(r)] = l.barrier(); });
  });
  if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) kill(child.pid, SIGKILL);
  f.get();
  const std::string why =
      "lost node 2 (127.0.0.1): nothing heard from it for 2 s (node_timeout): its process is stopped or hung";
  CHECK(stopped[0].code() == ErrorCode::io);
  CHECK(stopped[0].message() == why);
  CHECK(stopped[1].message() == "node 0 ended the run: " + why);
  // Later collectives fail the same way.
  CHECK(links[0].value()->barrier().message() == why);
}

TEST_CASE("a stopped node 0 fails the other node's collective naming node 0", "[threads]") {
  const int port = free_port();
  NodeProcess child(2, 0, port, 1.5, 0);
  auto links = connect_all({quick_silence(node(2, 1, port, 30), 1.5)}, {2}, {"fp"}, {});
  REQUIRE(links[0].ok());
  NodeLink& l = *links[0].value();
  REQUIRE(l.barrier().ok());
  REQUIRE(l.barrier().ok());
  child.stop();
  auto f = std::async(std::launch::async, [&] { return l.barrier(); });
  if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) kill(child.pid, SIGKILL);
  const Status s = f.get();
  CHECK(s.code() == ErrorCode::io);
  CHECK(s.message() ==
        "lost node 0 (127.0.0.1:" + std::to_string(port) +
            "): nothing heard from it for 1.5 s (node_timeout): its process is stopped or hung");
}

TEST_CASE("node options are checked with errors naming the keys") {
  CHECK(validate_node_options(node(2, 1, 29500)).ok());
  CHECK(validate_node_options(node(1, 0, 29500)).ok());
  CHECK_THAT(validate_node_options(node(2, 2, 29500)).message(),
             Catch::Contains("node_rank: 2 must be in [0, nnodes) = [0, 2)"));
  CHECK_THAT(validate_node_options(node(2, -1, 29500)).message(), Catch::Contains("node_rank: -1"));
  CHECK_THAT(validate_node_options(node(0, 0, 29500)).message(),
             Catch::Contains("nnodes: must be at least 1"));
  CHECK_THAT(validate_node_options(node(2, 0, 0)).message(), Catch::Contains("master_port: 0"));
  CHECK_THAT(validate_node_options(node(2, 0, 70000)).message(), Catch::Contains("master_port: 70000"));
  NodeOptions o = node(2, 0, 29500);
  o.master_addr = "";
  CHECK_THAT(validate_node_options(o).message(), Catch::Contains("master_addr"));
  o = node(2, 0, 29500, 0);
  CHECK_THAT(validate_node_options(o).message(), Catch::Contains("node_timeout"));
  CHECK_THAT(validate_node_options(quick_silence(node(2, 0, 29500), -1)).message(),
             Catch::Contains("silence_s"));
}

TEST_CASE("one node is a link of one: its id, and collectives that return its own values") {
  const auto id = random_id(9);
  auto l = NodeLink::connect(node(1, 0, 29500), 1, "fp", id).value();
  CHECK(l->id() == id);
  CHECK(l->gather_doubles(std::vector<double>{1.5}).value() == std::vector<double>{1.5});
  CHECK(l->agree(invalid_argument("x")).message() == "x");
  CHECK(l->close().ok());
}

TEST_CASE("the CPU has no transport across processes") {
  auto t = world_transport(Device::cpu);
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.status().message(),
             Catch::Contains("CPU backend has no transport") && Catch::Contains("cuda"));
}

}  // namespace astrai::test
