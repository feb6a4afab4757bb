// Training over several nodes (train/trainer.cpp with nnodes 2, src/dist/bootstrap.h) on the CPU:
// two threads stand in for two processes, each running run_training with its own node_rank, its own
// bootstrap link over localhost and its own out. The CPU backend has no transport between processes
// (astrai refuses nnodes > 1 on the CPU), so this test registers a test double for one: the two
// "nodes" take their ranks' slices of one in-process CPU group of the world's size (what NCCL's
// ncclCommInitRank gives on GPUs). Everything else is the real path: the bootstrap and its
// fingerprint check, the step's agreement and loss sums over the link, the stop agreement, the
// closing barrier, and only node 0 writing. A verdict never depends on thread timing: every wait is a
// collective both nodes reach.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <catch2/catch.hpp>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <utility>

#include "src/core/threads.h"
#include "src/dist/bootstrap.h"
#include "src/dist/communicator.h"
#include "src/model/config.h"
#include "src/model/model_init.h"
#include "src/model/safetensors.h"
#include "tools/test_util.h"
#include "train/data_parallel.h"
#include "train/plot.h"
#include "train/trainer.h"

namespace astrai::test {
namespace {

namespace fs = std::filesystem;
using Overrides = std::vector<std::pair<std::string, std::string>>;

// The test double: node 0's id names a world; every node takes its ranks out of it.
void register_shared_memory_transport() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct Worlds {
      std::mutex mu;
      std::map<std::string, std::vector<std::unique_ptr<Communicator>>> by_id;
      uint64_t next = 0;
    };
    static Worlds worlds;
    WorldTransport t;
    t.make_id = []() -> Result<std::vector<uint8_t>> {
      std::lock_guard lock(worlds.mu);
      const uint64_t n = ++worlds.next;
      return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&n),
                                  reinterpret_cast<const uint8_t*>(&n) + 8);
    };
    t.make_communicators = [](std::span<Backend* const> backends, std::span<const uint8_t> id, int world,
                              int first) -> Result<std::vector<std::unique_ptr<Communicator>>> {
      std::lock_guard lock(worlds.mu);
      auto& w = worlds.by_id[std::string(id.begin(), id.end())];
      if (w.empty()) w = make_cpu_communicators(world);
      std::vector<std::unique_ptr<Communicator>> mine;
      for (size_t i = 0; i < backends.size(); ++i) mine.push_back(std::move(w[size_t(first) + i]));
      return mine;
    };
    register_world_transport(Device::cpu, t);
  });
}

int free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::address_v4::loopback(), 0});
  return a.local_endpoint().port();
}

std::string corpus(uint64_t seed, int docs) {
  static const char* words[] = {"the", "cat", "sat", "on", "a",   "mat",
                                "and", "dog", "ran", "to", "red", "door"};
  std::mt19937_64 rng(seed);
  std::string out;
  for (int d = 0; d < docs; ++d) {
    std::string s;
    for (int i = 0, n = 8 + int(rng() % 30); i < n; ++i) s += (i ? " " : "") + std::string(words[rng() % 12]);
    out += "{\"text\":\"" + s + ".\"}\n";
  }
  return out;
}

// The text of every `"key":value` of a JSONL file, in order (numbers as written: exact).
std::vector<std::string> json_field_values(const fs::path& file, const std::string& key) {
  const std::string text = read_file(file), k = "\"" + key + "\":";
  std::vector<std::string> out;
  for (size_t at = text.find(k); at != std::string::npos; at = text.find(k, at + 1)) {
    const size_t b = at + k.size(), e = text.find_first_of(",}", b);
    out.push_back(text.substr(b, e - b));
  }
  return out;
}

// One thread per rank and per node: the runs compare bit for bit only at the same thread count.
struct OneThread {
  int before = num_threads();
  OneThread() { set_num_threads(1); }
  ~OneThread() { set_num_threads(before); }
};

train::TrainRunOptions options(const TempDir& dir, const std::string& out, Overrides extra) {
  // A model directory of the test's own: the two nodes must not race to create a shared preset's.
  if (!fs::exists(dir / "model" / "config.json")) {
    InitOptions init;
    init.seed = 11;
    check(init_model_dir("tiny", dir / "model", init));
  }
  Overrides o{{"model", (dir / "model").string()},
              {"data.train", (dir / "train.jsonl").string()},
              {"data.valid", (dir / "valid.jsonl").string()},
              {"seq_len", "16"},
              {"batch_size", "4"},
              {"grad_accum", "2"},
              {"steps", "6"},
              {"warmup_steps", "1"},
              {"lr", "3e-3"},
              {"save_every", "3"},
              {"eval_every", "3"},
              {"out", (dir / out).string()}};
  o.insert(o.end(), extra.begin(), extra.end());
  train::TrainRunOptions r;
  r.config = train::parse_train_config("", "", o).value();
  r.config.device = "cpu";  // after the parse, which refuses nnodes > 1 on the CPU (no real transport)
  r.progress = false;
  r.data_cache = dir / ("cache-" + out);
  return r;
}

// Runs node 0 and node 1 at once, each on its own thread.
std::pair<Result<train::TrainSummary>, Result<train::TrainSummary>> run_two_nodes(const TempDir& dir,
                                                                                  const std::string& tag,
                                                                                  Overrides extra0,
                                                                                  Overrides extra1) {
  register_shared_memory_transport();
  const std::string port = std::to_string(free_port());
  auto node = [&](int r, Overrides extra) {
    extra.insert(
        extra.end(),
        {{"nnodes", "2"}, {"node_rank", std::to_string(r)}, {"master_port", port}, {"node_timeout", "20"}});
    return options(dir, tag + std::to_string(r), extra);
  };
  auto o0 = node(0, std::move(extra0)), o1 = node(1, std::move(extra1));
  auto f1 = std::async(std::launch::async, [&] { return train::run_training(o1); });
  auto r0 = train::run_training(o0);
  return {std::move(r0), f1.get()};
}

}  // namespace

TEST_CASE("train: two nodes of one rank each train exactly as one process with dp 2",
          "[train][nodes][threads]") {
  const OneThread one;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("nodes");
  write_file(dir / "train.jsonl", corpus(seed, 80));
  write_file(dir / "valid.jsonl", corpus(seed + 1, 10));
  const Overrides seed_key{{"seed", std::to_string(seed % 1000)}};

  Overrides dp2 = seed_key;
  dp2.push_back({"dp", "2"});
  const train::TrainSummary one_process = train::run_training(options(dir, "dp2", dp2)).value();

  auto [n0, n1] = run_two_nodes(dir, "node", seed_key, seed_key);
  REQUIRE(n0.ok());
  REQUIRE(n1.ok());
  CHECK(n0->last_step == 6);
  CHECK(n1->last_step == 6);
  CHECK(n0->last_loss == one_process.last_loss);
  CHECK(n1->last_loss == one_process.last_loss);  // node 1 knows the whole world's loss too
  CHECK(n1->last_val_loss == one_process.last_val_loss);

  const auto a = train::read_metrics(dir / "dp2" / "metrics.jsonl").value();
  const auto b = train::read_metrics(dir / "node0" / "metrics.jsonl").value();
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == 6);
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(b[i].loss == a[i].loss);
    CHECK(b[i].val_loss == a[i].val_loss);
  }
  CHECK(json_field_values(dir / "node0" / "metrics.jsonl", "grad_norm") ==
        json_field_values(dir / "dp2" / "metrics.jsonl", "grad_norm"));
  for (const char* f : {"step_000003/model.safetensors", "step_000006/model.safetensors",
                        "step_000006/optimizer.safetensors"}) {
    INFO(f);
    CHECK(read_file(dir / "node0" / f) == read_file(dir / "dp2" / f));
  }
  // Node 1 writes nothing: no out, no metrics, no checkpoint.
  CHECK_FALSE(fs::exists(dir / "node1"));
  CHECK(n1->checkpoint.empty());
}

TEST_CASE("train: a stop on node 1 stops both nodes after the same step and node 0 checkpoints it",
          "[train][nodes][threads]") {
  TempDir dir("nodes-stop");
  write_file(dir / "train.jsonl", corpus(3, 60));
  write_file(dir / "valid.jsonl", corpus(4, 10));
  register_shared_memory_transport();
  const std::string port = std::to_string(free_port());
  auto node = [&](int r) {
    return options(
        dir, "n" + std::to_string(r),
        {{"nnodes", "2"}, {"node_rank", std::to_string(r)}, {"master_port", port}, {"steps", "50"}});
  };
  auto o0 = node(0), o1 = node(1);
  o1.stop_after = 2;  // as SIGTERM on node 1 after its second step would
  auto f1 = std::async(std::launch::async, [&] { return train::run_training(o1); });
  auto r0 = train::run_training(o0);
  auto r1 = f1.get();
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());
  CHECK(r0->stopped);
  CHECK(r1->stopped);
  CHECK(r0->last_step == 2);
  CHECK(r1->last_step == 2);
  CHECK(r0->checkpoint == dir / "n0" / "step_000002");
  CHECK(fs::exists(dir / "n0" / "step_000002" / "model.safetensors"));
  CHECK(train::read_metrics(dir / "n0" / "metrics.jsonl").value().size() == 2);
  CHECK_FALSE(fs::exists(dir / "n1"));
}

TEST_CASE("train: nodes with different data or keys fail at the bootstrap on both nodes",
          "[train][nodes][threads]") {
  TempDir dir("nodes-mismatch");
  write_file(dir / "train.jsonl", corpus(5, 60));
  write_file(dir / "valid.jsonl", corpus(6, 10));
  write_file(dir / "other.jsonl", corpus(7, 60));
  for (const Overrides& node1 :
       {Overrides{{"data.train", (dir / "other.jsonl").string()}}, Overrides{{"lr", "1e-3"}}}) {
    INFO(node1[0].first);
    auto [r0, r1] = run_two_nodes(dir, node1[0].first == "lr" ? "lr" : "data", {}, node1);
    REQUIRE_FALSE(r0.ok());
    REQUIRE_FALSE(r1.ok());
    CHECK_THAT(r0.status().message(), Catch::Contains("runs another config or other data than node 0"));
    CHECK_THAT(r1.status().message(), Catch::Contains("refused the run") &&
                                          Catch::Contains("runs another config or other data than node 0"));
  }
}

TEST_CASE("train: a node lost between steps fails the other node's next step with the loss, not a hang",
          "[train][nodes][threads]") {
  TempDir dir("nodes-lost");
  InitOptions init;
  init.seed = 5;
  check(init_model_dir("tiny", dir / "model", init));
  const ModelConfig config = ModelConfig::load(dir / "model").value();
  const WeightStore weights = WeightStore::open(dir / "model").value();
  register_shared_memory_transport();
  const int port = free_port();
  auto create = [&](int r) {
    train::DataParallelOptions o;
    o.device = "cpu";
    o.cpu_threads = 1;
    o.nodes.nnodes = 2;
    o.nodes.node_rank = r;
    o.nodes.master_port = port;
    o.nodes.timeout_s = 20;
    o.fingerprint = "fp";
    return train::DataParallelGroup::create(config, weights, o);
  };
  auto f1 = std::async(std::launch::async, [&] { return create(1); });
  auto g0 = create(0).value();
  auto g1 = f1.get().value();
  CHECK(g0->world_size() == 2);
  CHECK(g1->first_rank() == 1);
  // Two rows, one per node; every target counts.
  train::TrainBatch b;
  b.batch = 2;
  b.seq_len = 4;
  for (int i = 0; i < 8; ++i) {
    b.tokens.push_back(i + 1);
    b.targets.push_back(i + 2);
    b.positions.push_back(i % 4);
    b.doc_start.push_back(0);
  }
  auto s1 = std::async(std::launch::async, [&] { return g1->step(std::span(&b, 1), 1e-3, 1.0); });
  const auto s0 = g0->step(std::span(&b, 1), 1e-3, 1.0);
  REQUIRE(s0.ok());
  REQUIRE(s1.get().ok());
  g1.reset();  // node 1's process ends: its connection closes
  const auto t0 = std::chrono::steady_clock::now();
  const auto after = g0->step(std::span(&b, 1), 1e-3, 1.0);
  REQUIRE_FALSE(after.ok());
  CHECK_THAT(after.status().message(), Catch::Contains("lost node 1 (127.0.0.1)"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  // And every later call fails the same way.
  CHECK_FALSE(g0->step(std::span(&b, 1), 1e-3, 1.0).ok());
}

}  // namespace astrai::test
