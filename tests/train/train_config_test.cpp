#include "train/train_config.h"

#include <catch2/catch.hpp>

using astrai::train::parse_train_config;
using astrai::train::Schedule;
using Overrides = std::vector<std::pair<std::string, std::string>>;

namespace {
const char* kContractYaml = R"(model: path/to/hf_dir
data:
  train: train.jsonl
  valid: valid.jsonl
seq_len: 256
batch_size: 8
grad_accum: 1
steps: 1000
lr: 3.0e-4
min_lr: 3.0e-5
warmup_steps: 50
schedule: cosine
weight_decay: 0.1
grad_clip: 1.0
seed: 1234
device: auto
out: runs/demo
save_every: 100
eval_every: 100
)";
}

TEST_CASE("train config: the contract's example parses to its values", "[train][config]") {
  auto c = parse_train_config(kContractYaml, "train.yaml", {});
  REQUIRE(c.ok());
  CHECK(c->model == "path/to/hf_dir");
  CHECK(c->preset.empty());
  CHECK(c->data_train == "train.jsonl");
  CHECK(c->data_valid == "valid.jsonl");
  CHECK(c->seq_len == 256);
  CHECK(c->batch_size == 8);
  CHECK(c->steps == 1000);
  CHECK(c->lr == 3.0e-4);
  CHECK(c->min_lr == 3.0e-5);
  CHECK(c->warmup_steps == 50);
  CHECK(c->schedule == Schedule::cosine);
  CHECK(c->weight_decay == 0.1);
  CHECK(c->grad_clip == 1.0);
  CHECK(c->seed == 1234);
  CHECK(c->device == "auto");
  CHECK(c->out == "runs/demo");
  CHECK(c->save_every == 100);
  CHECK(c->eval_every == 100);
}

TEST_CASE("train config: YAML 1.2 floats without a dot parse (3e-4)", "[train][config]") {
  auto c = parse_train_config("preset: tiny\ndata: {train: a.jsonl}\nlr: 3e-4\nmin_lr: 1e-5\n", "t.yaml", {});
  REQUIRE(c.ok());
  CHECK(c->lr == 3e-4);
  CHECK(c->min_lr == 1e-5);
}

TEST_CASE("train config: flags override the file, dotted keys included", "[train][config]") {
  auto c = parse_train_config(kContractYaml, "train.yaml",
                              Overrides{{"steps", "20"},
                                        {"data.train", "f.jsonl"},
                                        {"schedule", "wsd"},
                                        {"label_smoothing", "0.1"},
                                        {"data.valid", ""}});
  REQUIRE(c.ok());
  CHECK(c->steps == 20);
  CHECK(c->data_train == "f.jsonl");
  CHECK(c->data_valid.empty());
  CHECK(c->schedule == Schedule::wsd);
  CHECK(c->label_smoothing == 0.1);
  CHECK(c->lr == 3.0e-4);  // untouched
}

TEST_CASE("train config: dp defaults to 1 and keeps batch_size the whole group's", "[train][config]") {
  auto one = parse_train_config(kContractYaml, "train.yaml", {});
  REQUIRE(one.ok());
  CHECK(one->dp == 1);
  auto two = parse_train_config(kContractYaml + std::string("dp: 2\n"), "train.yaml", Overrides{{"dp", "4"}});
  REQUIRE(two.ok());
  CHECK(two->dp == 4);
  CHECK(two->batch_size == 8);
  CHECK_THAT(two->to_json(), Catch::Contains("\"dp\":4"));
}

TEST_CASE("train config: zero defaults to 1 and bucket_mb to 32; both take flags", "[train][config]") {
  auto c = parse_train_config(kContractYaml, "train.yaml", {});
  REQUIRE(c.ok());
  CHECK(c->zero == 1);
  CHECK(c->bucket_mb == 32);
  auto d = parse_train_config(kContractYaml + std::string("zero: 1\nbucket_mb: 8\n"), "train.yaml",
                              Overrides{{"zero", "0"}, {"bucket_mb", "0"}});
  REQUIRE(d.ok());
  CHECK(d->zero == 0);
  CHECK(d->bucket_mb == 0);
  CHECK_THAT(d->to_json(), Catch::Contains("\"zero\":0,\"bucket_mb\":0"));
}

TEST_CASE("train config: gpus is dp's other name; the node keys default to one node like torchrun",
          "[train][config]") {
  auto c = parse_train_config(kContractYaml + std::string("gpus: 2\n"), "train.yaml", {});
  REQUIRE(c.ok());
  CHECK(c->dp == 2);
  CHECK(c->nnodes == 1);
  CHECK(c->node_rank == 0);
  CHECK(c->master_addr == "127.0.0.1");
  CHECK(c->master_port == 29500);
  CHECK(c->node_timeout == 60);
  // Both names given with the same value is no conflict.
  auto same =
      parse_train_config(kContractYaml + std::string("dp: 4\n"), "train.yaml", Overrides{{"gpus", "4"}});
  REQUIRE(same.ok());
  CHECK(same->dp == 4);
  auto nodes = parse_train_config(kContractYaml, "train.yaml",
                                  Overrides{{"gpus", "2"},
                                            {"nnodes", "2"},
                                            {"node_rank", "1"},
                                            {"master_addr", "10.0.0.1"},
                                            {"master_port", "29501"}});
  REQUIRE(nodes.ok());
  CHECK(nodes->nnodes == 2);
  CHECK(nodes->node_rank == 1);
  CHECK_THAT(nodes->to_json(),
             Catch::Contains(R"("nnodes":2,"node_rank":1,"master_addr":"10.0.0.1","master_port":29501)"));
}

TEST_CASE("train config: flags alone make a config", "[train][config]") {
  auto c = parse_train_config("", "", Overrides{{"preset", "tiny"}, {"data.train", "t.jsonl"}, {"out", "o"}});
  REQUIRE(c.ok());
  CHECK(c->preset == "tiny");
  CHECK(c->seq_len == 256);  // the documented default
}

TEST_CASE("train config: errors name the key", "[train][config]") {
  struct Case {
    std::string yaml;
    Overrides flags;
    std::string expect;
  };
  const std::string base = "preset: tiny\ndata:\n  train: t.jsonl\n";
  const std::vector<Case> cases = {
      {base + "stepz: 3\n", {}, "unknown key 'stepz'"},
      {base + "seq_len: abc\n", {}, "seq_len: 'abc' is not an integer"},
      {base + "seq_len: 0\n", {}, "seq_len: '0' must be at least 1"},
      {base + "lr: fast\n", {}, "lr: 'fast' is not a finite number"},
      {base + "schedule: linear\n", {}, "schedule: 'linear' must be one of cosine | wsd | constant"},
      {base + "device: tpu\n", {}, "device: 'tpu' must be one of cpu | cuda | auto"},
      {base + "steps: [1, 2]\n", {}, "steps: expected a single value"},
      {base + "label_smoothing: 1.5\n", {}, "label_smoothing: '1.5' must be in"},
      {base, {{"batch_size", "-1"}}, "--batch_size: '-1' must be at least 1"},
      {base, {{"data.tests", "x"}}, "unknown key '--data.tests'"},
      {base + "model: m\n", {}, "model / preset: give exactly one"},
      {"preset: tiny\n", {}, "data.train: a training JSONL file is required"},
      {base + "lr: 1e-4\nmin_lr: 1e-3\n", {}, "min_lr:"},
      {"a: [unclosed\n", {}, "t.yaml: line"},
      {"- 1\n- 2\n", {}, "expected a mapping"},
      {base + "dp: 0\n", {}, "dp: '0' must be at least 1"},
      {base + "zero: 2\n", {}, "zero: '2' must be 0 or 1"},
      {base + "zero: yes\n", {}, "zero: 'yes' must be 0 or 1"},
      {base + "bucket_mb: -1\n", {}, "bucket_mb: '-1' must be at least 0"},
      {base + "bucket_mb: 70000\n", {}, "bucket_mb: 70000 is above 65536"},
      {base + "batch_size: 6\n",
       {{"dp", "4"}},
       "batch_size / dp: batch_size 6 does not split evenly over dp 4"},
      {base + "dp: 2\n", {{"gpus", "4"}}, "dp / gpus: dp 2 and gpus 4 name the same setting"},
      {base + "gpus: 0\n", {}, "gpus: '0' must be at least 1"},
      {base + "nnodes: 0\n", {}, "nnodes: '0' must be at least 1"},
      {base + "nnodes: 2\n", {{"node_rank", "2"}}, "node_rank: 2 must be less than nnodes (2)"},
      {base + "node_rank: -1\n", {}, "node_rank: '-1' must be at least 0"},
      {base + "master_port: 70000\n", {}, "master_port: 70000 must be in [1, 65535]"},
      {base + "master_port: 0\n", {}, "master_port: '0' must be at least 1"},
      {base + "node_timeout: 0\n", {}, "node_timeout: '0' must be in"},
      {base + "nnodes: 2\nmaster_addr: ''\n", {}, "master_addr: node 0's address is required"},
      {base + "nnodes: 2\ndevice: cpu\n", {}, "the CPU backend has no transport between processes"},
      {base + "batch_size: 6\nnnodes: 2\n",
       {{"gpus", "2"}},
       "batch_size / nnodes x gpus: batch_size 6 does not split evenly over the world's 4 ranks"},
  };
  for (const Case& k : cases) {
    INFO(k.yaml);
    auto c = parse_train_config(k.yaml, "t.yaml", k.flags);
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.status().message(), Catch::Contains(k.expect));
  }
}

TEST_CASE("train config: to_json names every key", "[train][config]") {
  auto c = parse_train_config(kContractYaml, "train.yaml", {});
  REQUIRE(c.ok());
  const std::string j = c->to_json();
  for (const auto& k : astrai::train::config_keys()) {
    std::string name(k.name);
    // gpus is saved as dp; the node keys only for a run over several nodes (below).
    if (name == "preset" || name.rfind("data.", 0) == 0 || name == "gpus") continue;
    if (name == "nnodes" || name == "node_rank" || name.rfind("master_", 0) == 0 || name == "node_timeout") {
      CHECK_THAT(j, !Catch::Contains("\"" + name + "\":"));
      continue;
    }
    CHECK_THAT(j, Catch::Contains("\"" + name + "\":"));
  }
  CHECK_THAT(j, Catch::Contains(R"("data":{"train":"train.jsonl","valid":"valid.jsonl"})"));
}
