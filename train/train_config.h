// train.yaml (contract.md, "Training"): every key, its default, its check, and the flag that
// overrides it (`--steps 20`, `--data.train f.jsonl`: the flag is the key's dotted path).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/status.h"

namespace astrai::train {

enum class Schedule { cosine, wsd, constant };
std::string_view schedule_name(Schedule s);

struct TrainConfig {
  std::string model;   // an HF model directory to start from ...
  std::string preset;  // ... or a preset (random init seeded by `seed`); exactly one of the two
  std::string data_train, data_valid;  // JSONL; valid is optional
  int64_t seq_len = 256;
  int64_t batch_size = 8;  // sequences per micro-batch of the whole group (split evenly over dp ranks)
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  int64_t steps = 1000;    // optimizer steps
  double lr = 3e-4, min_lr = 3e-5;
  int64_t warmup_steps = 50;
  Schedule schedule = Schedule::cosine;
  double decay_fraction = 0.2;  // wsd: the last fraction of the steps decays to min_lr
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global L2 norm; 0: no clipping
  uint64_t seed = 1234;
  std::string device = "auto";  // cpu | cuda | auto
  int64_t dp = 1;    // data-parallel ranks of this process (key dp or gpus): GPUs 0..dp-1, or the CPU threads
                     // split dp ways
  int64_t zero = 1;  // dp > 1: 1 shards AdamW's moments over the ranks (ZeRO-1), 0 replicates
  int64_t bucket_mb = 32;  // dp > 1: gradient buckets reduced during the backward; 0: after it
  // Several processes (one per host; src/dist/bootstrap.h): a world of nnodes * dp ranks.
  int64_t nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";  // node 0's address, as the other nodes reach it
  int64_t master_port = 29500;            // node 0 listens there for the bootstrap
  double node_timeout = 60;               // seconds the bootstrap waits for every node
  std::string out = "runs/demo";
  int64_t save_every = 100;  // 0: only the final checkpoint
  int64_t eval_every = 100;  // 0: never (without data.valid: never)
  int64_t eval_batches = 0;  // micro-batches of the valid split per evaluation; 0: all of it
  double label_smoothing = 0.0;

  // Every key with its current value, as JSON (saved in trainer_state.json).
  std::string to_json() const;
};

// One key of train.yaml: its dotted name (also the flag, with "--") and what it means.
struct ConfigKey {
  std::string_view name, help;
  std::string_view type;  // INT, FLOAT, TEXT, PATH or the choices: what --help shows
};
const std::vector<ConfigKey>& config_keys();

// `yaml_text` (the config file's contents; empty: defaults only), then `overrides` (key, value) in
// order, e.g. {"steps", "20"} from `--steps 20`. Unknown keys, values of the wrong type or out of
// range, and a missing model/preset or data.train are errors naming the key and `source`.
Result<TrainConfig> parse_train_config(std::string_view yaml_text, std::string_view source,
                                       const std::vector<std::pair<std::string, std::string>>& overrides);

}  // namespace astrai::train
