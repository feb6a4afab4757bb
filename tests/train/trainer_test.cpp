// `astrai train` end to end on the tiny preset: exact resume (stop, SIGTERM, kill -9), learning on
// a small repeated text, SFT data, checkpoints the serving loader reads, and CLI errors.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <random>
#include <regex>
#include <sstream>

#include "model/forward_util.h"
#include "src/model/safetensors.h"
#include "tools/test_util.h"

namespace test = astrai::test;
namespace fs = std::filesystem;

namespace {

struct MetricLine {
  int64_t step = 0;
  std::string loss, lr, grad_norm, val_loss;  // as written: compared exactly
};

std::vector<MetricLine> read_metrics(const fs::path& file) {
  std::vector<MetricLine> out;
  std::istringstream ss(test::read_file(file));
  simdjson::dom::parser parser;
  for (std::string line; std::getline(ss, line);) {
    simdjson::dom::element doc = parser.parse(line);
    MetricLine m;
    m.step = doc["step"].get_int64();
    m.loss = simdjson::minify(doc["loss"]);
    m.lr = simdjson::minify(doc["lr"]);
    m.grad_norm = simdjson::minify(doc["grad_norm"]);
    double tps = 0;
    REQUIRE(doc["tokens_per_s"].get(tps) == simdjson::SUCCESS);
    simdjson::dom::element v;
    if (!doc["val_loss"].get(v)) m.val_loss = simdjson::minify(v);
    out.push_back(m);
  }
  return out;
}

// A few hundred words of seeded pseudo-English, one document per line.
std::string corpus(uint64_t seed, int docs) {
  static const char* words[] = {"the",   "cat",  "sat", "on",   "a",  "mat", "and",  "dog", "ran", "to",
                                "house", "with", "red", "door", "it", "was", "warm", "day", "in",  "May"};
  std::mt19937_64 rng(seed);
  std::string out;
  for (int d = 0; d < docs; ++d) {
    std::string text;
    const int n = 8 + int(rng() % 24);
    for (int i = 0; i < n; ++i) text += std::string(i ? " " : "") + words[rng() % 20];
    out += "{\"text\":\"" + text + ".\"}\n";
  }
  return out;
}

struct Run {
  const test::TempDir& dir;
  std::string common;  // flags every run of a test shares

  test::CommandResult train(const std::string& out, const std::string& flags) const {
    const std::string cmd = "ASTRAI_CACHE_DIR='" + (dir / "cache").string() + "' " + test::astrai_bin() +
                            " train --no-progress --threads 1 " + common + " --out '" + (dir / out).string() +
                            "' " + flags;
    return test::run_command(cmd);
  }
};

void require_same_run(const fs::path& a, const fs::path& b, int64_t steps) {
  const auto ma = read_metrics(a / "metrics.jsonl"), mb = read_metrics(b / "metrics.jsonl");
  REQUIRE(ma.size() == size_t(steps));
  REQUIRE(mb.size() == size_t(steps));
  for (size_t i = 0; i < ma.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(ma[i].step == int64_t(i) + 1);
    CHECK(mb[i].step == ma[i].step);
    CHECK(mb[i].loss == ma[i].loss);
    CHECK(mb[i].lr == ma[i].lr);
    CHECK(mb[i].grad_norm == ma[i].grad_norm);
    CHECK(mb[i].val_loss == ma[i].val_loss);
  }
  const std::string last =
      "step_" + std::string(6 - std::to_string(steps).size(), '0') + std::to_string(steps);
  CHECK(test::read_file(a / last / "model.safetensors") == test::read_file(b / last / "model.safetensors"));
  CHECK(test::read_file(a / last / "optimizer.safetensors") ==
        test::read_file(b / last / "optimizer.safetensors"));
}

// Every tensor of a checkpoint's model.safetensors (f32), in header order.
std::vector<float> checkpoint_weights(const fs::path& file) {
  const auto f = astrai::SafeTensorsFile::open(file).value();
  std::vector<float> out;
  for (const auto& t : f.tensors()) {
    REQUIRE(t.dtype == astrai::DType::f32);
    const auto* p = static_cast<const float*>(t.data);
    out.insert(out.end(), p, p + t.numel());
  }
  return out;
}

// Two runs that differ only in the order gradients were summed: equal to f32 rounding per step.
void require_close_run(const fs::path& a, const fs::path& b, int64_t steps) {
  const auto ma = read_metrics(a / "metrics.jsonl"), mb = read_metrics(b / "metrics.jsonl");
  REQUIRE(ma.size() == size_t(steps));
  REQUIRE(mb.size() == size_t(steps));
  for (size_t i = 0; i < ma.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(mb[i].step == ma[i].step);
    CHECK(std::stod(mb[i].loss) == Approx(std::stod(ma[i].loss)).epsilon(1e-5));
    CHECK(mb[i].lr == ma[i].lr);
    CHECK(std::stod(mb[i].grad_norm) == Approx(std::stod(ma[i].grad_norm)).epsilon(1e-4));
    REQUIRE(mb[i].val_loss.empty() == ma[i].val_loss.empty());
    if (!ma[i].val_loss.empty())
      CHECK(std::stod(mb[i].val_loss) == Approx(std::stod(ma[i].val_loss)).epsilon(1e-5));
  }
  const std::string last =
      "step_" + std::string(6 - std::to_string(steps).size(), '0') + std::to_string(steps);
  const auto wa = checkpoint_weights(a / last / "model.safetensors"),
             wb = checkpoint_weights(b / last / "model.safetensors");
  REQUIRE(wa.size() == wb.size());
  double d = 0, n = 0;
  for (size_t i = 0; i < wa.size(); ++i) {
    d += (double(wb[i]) - wa[i]) * (double(wb[i]) - wa[i]);
    n += double(wa[i]) * wa[i];
  }
  INFO("relative L2 of the final weights: " << std::sqrt(d / n));
  CHECK(std::sqrt(d / n) < 1e-5);
}

}  // namespace

TEST_CASE(
    "train --dp 2: dp 1's losses and weights with the same global batch; 10 steps + --resume + 10 == 20 "
    "straight; a dp 2 checkpoint resumes at dp 1",
    "[train][trainer][dp][threads]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  test::TempDir dir("dp_run");
  test::write_file(dir / "train.jsonl", corpus(seed, 60));
  test::write_file(dir / "valid.jsonl", corpus(seed + 1, 10));
  const Run run{dir, "--preset tiny --seed " + std::to_string(seed % 1000) + " --data.train '" +
                         (dir / "train.jsonl").string() + "' --data.valid '" +
                         (dir / "valid.jsonl").string() +
                         "' --seq_len 32 --batch_size 4 --grad_accum 2 --steps 20 --warmup_steps 3 --lr 1e-3"
                         " --min_lr 1e-4 --save_every 10 --eval_every 5"};
  // (A gentler lr than the resume test's: a loss spike, which 3e-3 gives the tiny model now and then,
  // magnifies the f32 rounding differences between the two summation orders beyond 1e-5.)
  auto one = run.train("one", "");
  INFO(one.err);
  REQUIRE(one.exit_code == 0);
  auto two = run.train("two", "--dp 2");
  INFO(two.err);
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.err, Catch::Contains("on dp 2 x cpu"));
  require_close_run(dir / "one", dir / "two", 20);
  // Resume at dp 2: bit for bit the straight dp 2 run (rank 0's checkpoint holds every rank's state).
  REQUIRE(run.train("resumed", "--dp 2 --stop-after 10").exit_code == 0);
  auto resumed = run.train("resumed", "--dp 2 --resume");
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  require_same_run(dir / "two", dir / "resumed", 20);
  // The checkpoint does not depend on dp: half at dp 2, half at dp 1 is still dp 1's run.
  REQUIRE(run.train("mixed", "--dp 2 --stop-after 10").exit_code == 0);
  REQUIRE(run.train("mixed", "--resume").exit_code == 0);
  require_close_run(dir / "one", dir / "mixed", 20);
}

TEST_CASE(
    "train --dp 2: --zero 1 == --zero 0 bit for bit, with buckets or not; checkpoints resume across zero and "
    "from dp 1 to dp 2 exactly",
    "[train][trainer][dp][zero][threads]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  test::TempDir dir("zero_run");
  test::write_file(dir / "train.jsonl", corpus(seed, 60));
  const Run run{dir, "--preset tiny --seed " + std::to_string(seed % 1000) + " --data.train '" +
                         (dir / "train.jsonl").string() +
                         "' --seq_len 32 --batch_size 4 --grad_accum 2 --steps 10 --warmup_steps 2 --lr 1e-3"
                         " --min_lr 1e-4 --save_every 5 --grad_clip 0.5"};
  auto sharded = run.train("sharded", "--dp 2 --zero 1");
  INFO(sharded.err);
  REQUIRE(sharded.exit_code == 0);
  REQUIRE(run.train("replicated", "--dp 2 --zero 0 --bucket_mb 0").exit_code == 0);
  require_same_run(dir / "sharded", dir / "replicated", 10);
  // The checkpoint holds every moment whatever zero: half sharded, half replicated is the same run.
  REQUIRE(run.train("switched", "--dp 2 --zero 1 --stop-after 5").exit_code == 0);
  REQUIRE(run.train("switched", "--dp 2 --zero 0 --resume").exit_code == 0);
  require_same_run(dir / "sharded", dir / "switched", 10);
  // A dp 1 checkpoint resumed at dp 2 continues the same way into sharded and replicated moments.
  for (const std::string out : {"from1_sharded", "from1_replicated"})
    REQUIRE(run.train(out, "--stop-after 5").exit_code == 0);
  REQUIRE(run.train("from1_sharded", "--dp 2 --zero 1 --resume").exit_code == 0);
  REQUIRE(run.train("from1_replicated", "--dp 2 --zero 0 --resume").exit_code == 0);
  require_same_run(dir / "from1_sharded", dir / "from1_replicated", 10);
  auto bad = run.train("bad", "--dp 2 --zero 2");
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.err, Catch::Contains("zero") && Catch::Contains("must be 0 or 1"));
}

TEST_CASE("train: 20 steps straight == 10 steps, stop, --resume, 10 more (losses and weights bit for bit)",
          "[train][trainer]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  test::TempDir dir("resume");
  test::write_file(dir / "train.jsonl", corpus(seed, 60));
  test::write_file(dir / "valid.jsonl", corpus(seed + 1, 10));
  const Run run{dir, "--preset tiny --seed " + std::to_string(seed % 1000) + " --data.train '" +
                         (dir / "train.jsonl").string() + "' --data.valid '" +
                         (dir / "valid.jsonl").string() +
                         "' --seq_len 32 --batch_size 2 --grad_accum 2 --steps 20 --warmup_steps 3 --lr 3e-3"
                         " --min_lr 3e-4 --save_every 10 --eval_every 5"};
  auto a = run.train("a", "");
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  auto b1 = run.train("b", "--stop-after 10");
  INFO(b1.err);
  REQUIRE(b1.exit_code == 0);
  CHECK(fs::exists(dir / "b" / "step_000010" / "trainer_state.json"));
  CHECK_FALSE(fs::exists(dir / "b" / "step_000020"));
  CHECK(read_metrics(dir / "b" / "metrics.jsonl").size() == 10);
  auto b2 = run.train("b", "--resume");
  INFO(b2.err);
  REQUIRE(b2.exit_code == 0);
  CHECK_THAT(b2.err, Catch::Contains("resuming from"));
  require_same_run(dir / "a", dir / "b", 20);
  // Evaluation happened on its steps only.
  const auto m = read_metrics(dir / "a" / "metrics.jsonl");
  for (const auto& l : m) CHECK(l.val_loss.empty() == (l.step % 5 != 0));
}

TEST_CASE(
    "train: SIGTERM checkpoints and exits 0, kill -9 loses only the steps since the last checkpoint; "
    "both resume to the straight run",
    "[train][trainer]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  test::TempDir dir("signals");
  test::write_file(dir / "train.jsonl", corpus(seed, 80));
  const Run run{dir,
                "--preset tiny --data.train '" + (dir / "train.jsonl").string() +
                    "' --seq_len 64 --batch_size 4 --steps 30 --warmup_steps 2 --lr 1e-3 --save_every 4"};
  REQUIRE(run.train("a", "").exit_code == 0);
  for (const char* sig : {"TERM", "KILL"}) {
    INFO("signal " << sig);
    const std::string out = std::string("b_") + sig;
    // Start a run, signal it once its metrics show 6 steps (whenever it gets the signal, the
    // resumed run must match: the verdict does not depend on the timing).
    const std::string cmd =
        "ASTRAI_CACHE_DIR='" + (dir / "cache").string() + "' " + test::astrai_bin() +
        " train --no-progress --threads 1 " + run.common + " --out '" + (dir / out).string() +
        "' & pid=$!; m='" + (dir / out / "metrics.jsonl").string() +
        "'; while kill -0 $pid 2>/dev/null && [ \"$(cat \"$m\" 2>/dev/null | wc -l)\" -lt 6 ]; "
        "do sleep 0.02; done; kill -" +
        sig + " $pid; wait $pid; echo \"rc=$?\"";
    auto r = test::run_command(cmd);
    INFO(r.err);
    const bool finished_first =
        r.out.find("rc=0") != std::string::npos && fs::exists(dir / out / "step_000030");
    if (std::string(sig) == "TERM") CHECK(r.out.find("rc=0") != std::string::npos);
    if (!finished_first && std::string(sig) == "TERM") {
      // The stop checkpoint is at the last step in metrics.jsonl.
      const auto m = read_metrics(dir / out / "metrics.jsonl");
      REQUIRE(!m.empty());
      CHECK(fs::exists(dir / out /
                       ("step_" + std::string(6 - std::to_string(m.back().step).size(), '0') +
                        std::to_string(m.back().step))));
    }
    auto resumed = run.train(out, "--resume");
    INFO(resumed.err);
    REQUIRE(resumed.exit_code == 0);
    require_same_run(dir / "a", dir / out, 30);
    // The resumed run removed any temp directory of a checkpoint write the kill interrupted.
    for (const auto& e : fs::directory_iterator(dir / out))
      CHECK(e.path().filename().string().rfind(".step_", 0) != 0);
  }
}

TEST_CASE("train: a Qwen3-style model directory (q/k norm, untied head) resumes exactly and stays loadable",
          "[train][trainer]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  test::TempDir dir("qwen3");
  astrai::ModelConfig config = test::qwen3_style_config();
  config.attention_bias = true;  // q/k/v/o biases get gradients and no weight decay
  config.o_proj_bias = true;
  test::write_random_model(dir / "model", config, seed, astrai::DType::f32, nullptr, true);
  test::write_file(dir / "train.jsonl", corpus(seed, 40));
  const Run run{dir, "--model '" + (dir / "model").string() + "' --data.train '" +
                         (dir / "train.jsonl").string() +
                         "' --seq_len 48 --batch_size 2 --steps 8 --warmup_steps 2 --lr 1e-3 --save_every 0"};
  auto a = run.train("a", "");
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  REQUIRE(run.train("b", "--stop-after 3").exit_code == 0);
  REQUIRE(run.train("b", "--resume").exit_code == 0);
  require_same_run(dir / "a", dir / "b", 8);
  const fs::path ckpt = dir / "a" / "step_000008";
  CHECK_THAT(test::read_file(ckpt / "config.json"), Catch::Contains("Qwen3ForCausalLM"));
  test::write_file(dir / "in.jsonl", "{\"text\":\"a short line to score\"}\n");
  auto s = test::run_command(test::astrai_bin() + " score --model '" + ckpt.string() + "' --input '" +
                             (dir / "in.jsonl").string() + "' --output '" + (dir / "s.jsonl").string() + "'");
  INFO(s.err);
  CHECK(s.exit_code == 0);
}

TEST_CASE("train: the loss falls on a small repeated text, and the checkpoint scores it better",
          "[train][trainer]") {
  test::TempDir dir("learn");
  std::string data;
  for (int i = 0; i < 40; ++i) data += "{\"text\":\"the quick brown fox jumps over the lazy dog.\"}\n";
  test::write_file(dir / "train.jsonl", data);
  const Run run{dir, "--preset tiny --data.train '" + (dir / "train.jsonl").string() + "' --data.valid '" +
                         (dir / "train.jsonl").string() +
                         "' --seq_len 64 --batch_size 4 --steps 40 --warmup_steps 5 --lr 5e-3 --min_lr 5e-4 "
                         "--schedule wsd --save_every 0 --eval_every 40"};
  auto r = run.train("o", "");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto m = read_metrics(dir / "o" / "metrics.jsonl");
  REQUIRE(m.size() == 40);
  const double first = std::stod(m.front().loss), last = std::stod(m.back().loss);
  INFO("loss " << first << " -> " << last);
  CHECK(first > 4.5);  // about ln(320) at random init
  CHECK(last < 1.5);
  REQUIRE(!m.back().val_loss.empty());
  CHECK(std::stod(m.back().val_loss) < 1.5);
  // Only the final checkpoint (save_every 0), and `astrai score` loads it.
  CHECK(fs::exists(dir / "o" / "step_000040" / "model.safetensors"));
  CHECK(std::distance(fs::directory_iterator(dir / "o"), fs::directory_iterator()) == 2);
  test::write_file(dir / "in.jsonl", "{\"text\":\"the quick brown fox jumps over the lazy dog.\"}\n");
  auto s = test::run_command(test::astrai_bin() + " score --model '" + (dir / "o" / "step_000040").string() +
                             "' --input '" + (dir / "in.jsonl").string() + "' --output '" +
                             (dir / "s.jsonl").string() + "'");
  INFO(s.err);
  REQUIRE(s.exit_code == 0);
  simdjson::dom::parser parser;
  const double nll = parser.parse(test::read_file(dir / "s.jsonl"))["nll"].get_double();
  CHECK(nll < 1.5);
}

TEST_CASE("train: SFT data trains on assistant turns", "[train][trainer]") {
  test::TempDir dir("sft");
  std::string data;
  for (int i = 0; i < 30; ++i)
    data += "{\"messages\":[{\"role\":\"user\",\"content\":\"What is " + std::to_string(i) +
            " plus one?\"},{\"role\":\"assistant\",\"content\":\"" + std::to_string(i + 1) + ".\"}]}\n";
  test::write_file(dir / "sft.jsonl", data);
  const Run run{dir, "--preset tiny --data.train '" + (dir / "sft.jsonl").string() +
                         "' --seq_len 48 --batch_size 2 --steps 4 --warmup_steps 1 --save_every 0"};
  auto r = run.train("o", "--resume");  // nothing to resume yet: starts from the beginning
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("no checkpoint under"));
  REQUIRE(read_metrics(dir / "o" / "metrics.jsonl").size() == 4);
  // Only assistant tokens carry a loss: "N.<|im_end|>\n", one token per byte and one for the tag:
  // 4 tokens for answers 1..9, 5 for 10..30.
  std::smatch sm;
  REQUIRE(std::regex_search(r.err, sm, std::regex(R"(data\.train (\d+) tokens \((\d+) with a loss\))")));
  const long all = std::stol(sm[1].str()), with_loss = std::stol(sm[2].str());
  CHECK(with_loss == 9 * 4 + 21 * 5);
  CHECK(all > 30 * 40);
}

TEST_CASE("train: bad configs fail with a message naming the key", "[train][trainer]") {
  test::TempDir dir("errors");
  test::write_file(dir / "train.jsonl", corpus(1, 20));
  test::write_file(dir / "bad.yaml", "preset: tiny\ndata:\n  train: x.jsonl\nwarmup: 3\n");
  const std::string base = "--preset tiny --data.train '" + (dir / "train.jsonl").string() + "' ";
  struct Case {
    std::string flags, expect;
  };
  const std::vector<Case> cases = {
      {"--config '" + (dir / "bad.yaml").string() + "'", "unknown key 'warmup'"},
      {base + "--steps ten", "--steps: 'ten' is not an integer"},
      {base + "--schedule linear", "--schedule: 'linear' must be one of cosine | wsd | constant"},
      {"--data.train '" + (dir / "train.jsonl").string() + "'", "model / preset: give exactly one"},
      {base + "--seq_len 5000", "seq_len: 5000 is longer than the model's context of 4096"},
      {base + "--seq_len 4000", "data.train:"},  // too few tokens for one window
      {"--preset tiny --data.train '" + (dir / "none.jsonl").string() + "'", "none.jsonl"},
      {base + "--batch_size 3 --dp 2", "batch_size / dp: batch_size 3 does not split evenly over dp 2"},
      {base + "--gpus 2 --dp 3", "dp / gpus: dp 3 and gpus 2 name the same setting"},
      {base + "--nnodes 2 --node-rank 2", "node_rank: 2 must be less than nnodes (2)"},
      {base + "--nnodes 2 --device cpu --master-addr 10.0.0.1",
       "the CPU backend has no transport between processes"},
  };
  const Run run{dir, ""};
  for (const Case& c : cases) {
    INFO(c.flags);
    auto r = run.train("o", c.flags);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(c.expect));
  }
  // A finished run's out is not reused silently.
  REQUIRE(run.train("done", base + "--steps 1 --seq_len 16 --batch_size 1").exit_code == 0);
  auto again = run.train("done", base + "--steps 1 --seq_len 16 --batch_size 1");
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.err, Catch::Contains("already holds checkpoints; pass --resume"));
  auto reseeded = run.train("done", base + "--steps 2 --seq_len 16 --batch_size 1 --resume --seed 99");
  CHECK(reseeded.exit_code == 1);
  CHECK_THAT(reseeded.err, Catch::Contains("seed: 99 differs from the checkpoint's 1234"));
}

TEST_CASE(
    "train: grad_accum weights micro-batches by targets (2 x 2 == 4 x 1), label_smoothing reaches the loss",
    "[train][trainer]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  test::TempDir dir("accum");
  // SFT lines have few targets per window and different counts per window, so a plain mean of the
  // micro-batch means would differ from the mean over all targets.
  std::string data;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 40; ++i)
    data += "{\"messages\":[{\"role\":\"user\",\"content\":\"" + std::string(1 + rng() % 30, 'q') +
            "\"},{\"role\":\"assistant\",\"content\":\"" + std::string(1 + rng() % 20, 'a') + "\"}]}\n";
  test::write_file(dir / "sft.jsonl", data);
  const Run run{dir, "--preset tiny --data.train '" + (dir / "sft.jsonl").string() +
                         "' --seq_len 32 --steps 1 --warmup_steps 1 --seed " + std::to_string(seed % 100000)};
  REQUIRE(run.train("accum", "--batch_size 2 --grad_accum 2").exit_code == 0);
  REQUIRE(run.train("whole", "--batch_size 4 --grad_accum 1").exit_code == 0);
  REQUIRE(run.train("smooth", "--batch_size 4 --grad_accum 1 --label_smoothing 0.2").exit_code == 0);
  const auto accum = read_metrics(dir / "accum" / "metrics.jsonl"),
             whole = read_metrics(dir / "whole" / "metrics.jsonl"),
             smooth = read_metrics(dir / "smooth" / "metrics.jsonl");
  REQUIRE(accum.size() == 1);
  REQUIRE(whole.size() == 1);
  REQUIRE(smooth.size() == 1);
  // Same four windows, summed in a different order: equal to f32 rounding.
  CHECK(std::stod(accum[0].loss) == Approx(std::stod(whole[0].loss)).epsilon(1e-5));
  CHECK(std::stod(accum[0].grad_norm) == Approx(std::stod(whole[0].grad_norm)).epsilon(1e-4));
  // Smoothing reaches the loss (its value is the model's business: train_model_test checks it).
  CHECK(smooth[0].loss != whole[0].loss);
}
