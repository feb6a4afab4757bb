#include "train/train_config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>

#include "src/core/json_writer.h"

namespace astrai::train {
namespace {

using Setter = std::function<Status(TrainConfig&, const std::string& value)>;

Status bad(std::string_view key, const std::string& value, std::string_view why) {
  return invalid_argument(std::string(key) + ": '" + value + "' " + std::string(why));
}

Result<int64_t> to_int(std::string_view key, const std::string& v) {
  int64_t out = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size()) return bad(key, v, "is not an integer");
  return out;
}

Result<double> to_float(std::string_view key, const std::string& v) {
  if (v.empty()) return bad(key, v, "is not a number");
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size() || !std::isfinite(d)) return bad(key, v, "is not a finite number");
  return d;
}

Setter int_key(int64_t TrainConfig::*field, std::string_view key, int64_t min) {
  return [=](TrainConfig& c, const std::string& v) -> Status {
    ASTRAI_ASSIGN_OR_RETURN(const int64_t x, to_int(key, v));
    if (x < min) return bad(key, v, "must be at least " + std::to_string(min));
    c.*field = x;
    return {};
  };
}

Setter float_key(double TrainConfig::*field, std::string_view key, double min, double max) {
  return [=](TrainConfig& c, const std::string& v) -> Status {
    ASTRAI_ASSIGN_OR_RETURN(const double x, to_float(key, v));
    if (x < min || x > max) {
      JsonWriter lo, hi;
      lo.value(min);
      hi.value(max);
      return bad(key, v, "must be in [" + lo.str() + ", " + hi.str() + "]");
    }
    c.*field = x;
    return {};
  };
}

Setter string_key(std::string TrainConfig::*field) {
  return [=](TrainConfig& c, const std::string& v) -> Status {
    c.*field = v;
    return {};
  };
}

Setter choice_key(std::string TrainConfig::*field, std::string_view key,
                  const std::vector<std::string>& choices) {
  return [=](TrainConfig& c, const std::string& v) -> Status {
    for (const auto& ch : choices)
      if (v == ch) {
        c.*field = v;
        return {};
      }
    std::string list;
    for (const auto& ch : choices) list += (list.empty() ? "" : " | ") + ch;
    return bad(key, v, "must be one of " + list);
  };
}

struct KeyDef {
  ConfigKey key;
  Setter set;
};

const std::vector<KeyDef>& key_defs() {
  static const std::vector<KeyDef> defs = [] {
    std::vector<KeyDef> d;
    auto add = [&](std::string_view name, std::string_view help, Setter s) {
      d.push_back({{name, help, "TEXT"}, std::move(s)});
    };
    auto typed = [&](std::string_view type) { d.back().key.type = type; };
    add("model", "Hugging Face model directory to start from (or: preset)", string_key(&TrainConfig::model));
    typed("PATH");
    add("preset", "Preset to initialise randomly, seeded by `seed` (tiny, llama-1b, ...)",
        string_key(&TrainConfig::preset));
    typed("NAME");
    add("data.train", "Training JSONL: {\"text\"} lines (pretraining) or {\"messages\"} lines (SFT)",
        string_key(&TrainConfig::data_train));
    typed("PATH");
    add("data.valid", "Validation JSONL (optional), same formats", string_key(&TrainConfig::data_valid));
    typed("PATH");
    add("seq_len", "Tokens per sequence", int_key(&TrainConfig::seq_len, "seq_len", 1));
    typed("INT");
    add("batch_size", "Sequences per micro-batch (of the whole group: dp ranks take batch_size / dp each)",
        int_key(&TrainConfig::batch_size, "batch_size", 1));
    typed("INT");
    add("grad_accum", "Micro-batches per optimizer step", int_key(&TrainConfig::grad_accum, "grad_accum", 1));
    typed("INT");
    add("steps", "Optimizer steps", int_key(&TrainConfig::steps, "steps", 1));
    typed("INT");
    add("lr", "Peak learning rate", float_key(&TrainConfig::lr, "lr", 0, 10));
    typed("FLOAT");
    add("min_lr", "Final learning rate of cosine / wsd", float_key(&TrainConfig::min_lr, "min_lr", 0, 10));
    typed("FLOAT");
    add("warmup_steps", "Linear warmup steps", int_key(&TrainConfig::warmup_steps, "warmup_steps", 0));
    typed("INT");
    add("schedule", "cosine | wsd | constant", [](TrainConfig& c, const std::string& v) -> Status {
      if (v == "cosine")
        c.schedule = Schedule::cosine;
      else if (v == "wsd")
        c.schedule = Schedule::wsd;
      else if (v == "constant")
        c.schedule = Schedule::constant;
      else
        return bad("schedule", v, "must be one of cosine | wsd | constant");
      return {};
    });
    typed("cosine|wsd|constant");
    add("decay_fraction", "wsd: fraction of the steps (at the end) that decay to min_lr",
        float_key(&TrainConfig::decay_fraction, "decay_fraction", 0, 1));
    typed("FLOAT");
    add("weight_decay", "AdamW decoupled weight decay (not on norms, embeddings, biases)",
        float_key(&TrainConfig::weight_decay, "weight_decay", 0, 10));
    typed("FLOAT");
    add("grad_clip", "Clip the global gradient L2 norm to this (0: off)",
        float_key(&TrainConfig::grad_clip, "grad_clip", 0, 1e30));
    typed("FLOAT");
    add("seed", "Seed of the preset init and the data shuffle",
        [](TrainConfig& c, const std::string& v) -> Status {
          uint64_t x = 0;
          const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
          if (ec != std::errc() || p != v.data() + v.size())
            return bad("seed", v, "is not a non-negative integer");
          c.seed = x;
          return {};
        });
    typed("UINT");
    add("device", "cpu | cuda | auto", choice_key(&TrainConfig::device, "device", {"cpu", "cuda", "auto"}));
    typed("cpu|cuda|auto");
    add("dp",
        "Data-parallel ranks: one per GPU (0..dp-1), or the CPU threads split between them; the same "
        "data in the same order as dp 1",
        int_key(&TrainConfig::dp, "dp", 1));
    typed("INT");
    add("zero",
        "dp > 1: 1 keeps each rank's share of AdamW's moments only (ZeRO-1: gradients reduce-scattered, "
        "weights all-gathered; within one process: over several nodes every rank keeps all of them), 0 every "
        "rank all of them; the same weights either way",
        [](TrainConfig& c, const std::string& v) -> Status {
          if (v != "0" && v != "1") return bad("zero", v, "must be 0 or 1");
          c.zero = v == "1";
          return {};
        });
    typed("0|1");
    add("bucket_mb",
        "dp > 1: MB of gradients per bucket, each reduced as soon as the backward has made it (overlapping "
        "the rest of the backward on GPUs); 0: all of them after the backward",
        int_key(&TrainConfig::bucket_mb, "bucket_mb", 0));
    typed("INT");
    add("gpus", "The contract's name for dp: the data-parallel ranks (GPUs) of this process",
        int_key(&TrainConfig::dp, "gpus", 1));
    typed("INT");
    add("nnodes", "Processes (hosts) of the run, each with `gpus` ranks: a world of nnodes x gpus",
        int_key(&TrainConfig::nnodes, "nnodes", 1));
    typed("INT");
    add("node_rank", "This process's node, 0..nnodes-1 (node 0 serves the bootstrap and writes the run)",
        int_key(&TrainConfig::node_rank, "node_rank", 0));
    typed("INT");
    add("master_addr", "Node 0's address, as every node reaches it", string_key(&TrainConfig::master_addr));
    typed("HOST");
    add("master_port", "The TCP port node 0 listens on for the bootstrap",
        int_key(&TrainConfig::master_port, "master_port", 1));
    typed("INT");
    add("node_timeout",
        "Seconds the bootstrap waits for every node (node 0) or for node 0 (the others); then the longest a "
        "node may send nothing (a stopped process) before every node fails the run",
        float_key(&TrainConfig::node_timeout, "node_timeout", 1e-3, 1e9));
    typed("FLOAT");
    add("out", "Run directory: checkpoints out/step_NNNNNN/, out/metrics.jsonl",
        string_key(&TrainConfig::out));
    typed("PATH");
    add("save_every", "Checkpoint every N steps (0: only at the end)",
        int_key(&TrainConfig::save_every, "save_every", 0));
    typed("INT");
    add("eval_every", "Validation loss every N steps (0: never)",
        int_key(&TrainConfig::eval_every, "eval_every", 0));
    typed("INT");
    add("eval_batches", "Micro-batches of data.valid per evaluation (0: all of it)",
        int_key(&TrainConfig::eval_batches, "eval_batches", 0));
    typed("INT");
    add("label_smoothing", "Cross-entropy label smoothing",
        float_key(&TrainConfig::label_smoothing, "label_smoothing", 0, 0.999));
    typed("FLOAT");
    return d;
  }();
  return defs;
}

const KeyDef* find_key(std::string_view name) {
  for (const KeyDef& d : key_defs())
    if (d.key.name == name) return &d;
  return nullptr;
}

// Flattens a YAML mapping into (dotted key, scalar) pairs in document order.
Status flatten(const YAML::Node& node, const std::string& prefix, std::string_view source,
               std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return invalid_argument(std::string(source) + ": keys must be strings");
    const std::string key = prefix + kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (v.IsMap()) {
      ASTRAI_RETURN_IF_ERROR(flatten(v, key + ".", source, out));
    } else if (v.IsNull()) {
      out.emplace_back(key, "");
    } else if (v.IsScalar()) {
      out.emplace_back(key, v.Scalar());
    } else {
      return invalid_argument(std::string(source) + ": " + key + ": expected a single value, not a list");
    }
  }
  return {};
}

std::string known_keys() {
  std::string s;
  for (const KeyDef& d : key_defs()) s += (s.empty() ? "" : ", ") + std::string(d.key.name);
  return s;
}

}  // namespace

std::string_view schedule_name(Schedule s) {
  switch (s) {
    case Schedule::cosine: return "cosine";
    case Schedule::wsd: return "wsd";
    case Schedule::constant: return "constant";
  }
  return "?";
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> k;
    for (const KeyDef& d : key_defs()) k.push_back(d.key);
    return k;
  }();
  return keys;
}

Result<TrainConfig> parse_train_config(std::string_view yaml_text, std::string_view source,
                                       const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::pair<std::string, std::string>> entries;
  if (!yaml_text.empty()) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(yaml_text));
    } catch (const YAML::Exception& e) {
      return invalid_argument(std::string(source) + ": line " + std::to_string(e.mark.line + 1) + ": " +
                              e.msg);
    }
    if (root.IsMap()) {
      ASTRAI_RETURN_IF_ERROR(flatten(root, "", source, entries));
    } else if (!root.IsNull()) {
      return invalid_argument(std::string(source) + ": expected a mapping of train.yaml keys");
    }
  }
  TrainConfig c;
  // dp and gpus are one setting under two names: both given must mean the same.
  std::optional<int64_t> dp_given, gpus_given;
  auto note = [&](const std::string& key) {
    if (key == "dp") dp_given = c.dp;
    if (key == "gpus") gpus_given = c.dp;
  };
  for (const auto& [key, value] : entries) {
    const KeyDef* d = find_key(key);
    if (!d)
      return invalid_argument(std::string(source) + ": unknown key '" + key + "' (keys: " + known_keys() +
                              ")");
    const Status s = d->set(c, value);
    if (!s.ok()) return invalid_argument(std::string(source) + ": " + s.message());
    note(key);
  }
  for (const auto& [key, value] : overrides) {
    const KeyDef* d = find_key(key);
    if (!d) return invalid_argument("unknown key '--" + key + "'");
    const Status s = d->set(c, value);
    if (!s.ok()) return invalid_argument("--" + s.message());
    note(key);
  }
  if (dp_given && gpus_given && *dp_given != *gpus_given)
    return invalid_argument(
        "dp / gpus: dp " + std::to_string(*dp_given) + " and gpus " + std::to_string(*gpus_given) +
        " name the same setting (the data-parallel ranks of this process); give one of them");
  if (c.master_port > 65535)
    return invalid_argument("master_port: " + std::to_string(c.master_port) + " must be in [1, 65535]");
  if (c.node_rank >= c.nnodes)
    return invalid_argument("node_rank: " + std::to_string(c.node_rank) + " must be less than nnodes (" +
                            std::to_string(c.nnodes) + ")");
  if (c.nnodes > 1 && c.master_addr.empty())
    return invalid_argument("master_addr: node 0's address is required with nnodes " +
                            std::to_string(c.nnodes));
  if (c.nnodes > 1 && c.device == "cpu")
    return invalid_argument("nnodes / device: the CPU backend has no transport between processes; nnodes " +
                            std::to_string(c.nnodes) + " needs device cuda (NCCL)");
  if (c.model.empty() == c.preset.empty())
    return invalid_argument("model / preset: give exactly one (a model directory or a preset name)");
  if (c.data_train.empty()) return invalid_argument("data.train: a training JSONL file is required");
  if (c.out.empty()) return invalid_argument("out: a run directory is required");
  // dp splits each micro-batch, so that dp 1 and dp N train on the same windows in the same order.
  if (c.nnodes == 1 && c.batch_size % c.dp != 0)
    return invalid_argument("batch_size / dp: batch_size " + std::to_string(c.batch_size) +
                            " does not split evenly over dp " + std::to_string(c.dp) +
                            " ranks (batch_size is the whole group's sequences per micro-batch; make it a "
                            "multiple of dp)");
  if (c.bucket_mb > 65536)
    return invalid_argument("bucket_mb: " + std::to_string(c.bucket_mb) + " is above 65536 (64 GB)");
  if (c.nnodes > 1 && c.batch_size % (c.dp * c.nnodes) != 0)
    return invalid_argument("batch_size / nnodes x gpus: batch_size " + std::to_string(c.batch_size) +
                            " does not split evenly over the world's " + std::to_string(c.dp * c.nnodes) +
                            " ranks (batch_size is the whole run's sequences per micro-batch; make it a "
                            "multiple of nnodes x gpus)");
  if (c.min_lr > c.lr && c.schedule != Schedule::constant)
    return invalid_argument("min_lr: " + std::to_string(c.min_lr) + " is above lr " + std::to_string(c.lr));
  return c;
}

std::string TrainConfig::to_json() const {
  JsonWriter w;
  w.begin_object();
  if (!model.empty()) w.key("model").value(model);
  if (!preset.empty()) w.key("preset").value(preset);
  w.key("data").begin_object().key("train").value(data_train);
  if (!data_valid.empty()) w.key("valid").value(data_valid);
  w.end_object();
  w.key("seq_len").value(seq_len).key("batch_size").value(batch_size).key("grad_accum").value(grad_accum);
  w.key("steps").value(steps).key("lr").value(lr).key("min_lr").value(min_lr);
  w.key("warmup_steps").value(warmup_steps).key("schedule").value(schedule_name(schedule));
  w.key("decay_fraction").value(decay_fraction).key("weight_decay").value(weight_decay);
  w.key("grad_clip").value(grad_clip).key("seed").value(seed).key("device").value(device);
  w.key("dp").value(dp).key("zero").value(zero).key("bucket_mb").value(bucket_mb);
  if (nnodes > 1) {
    w.key("nnodes").value(nnodes).key("node_rank").value(node_rank).key("master_addr").value(master_addr);
    w.key("master_port").value(master_port).key("node_timeout").value(node_timeout);
  }
  w.key("out").value(out).key("save_every").value(save_every).key("eval_every").value(eval_every);
  w.key("eval_batches").value(eval_batches).key("label_smoothing").value(label_smoothing);
  w.end_object();
  return w.take();
}

}  // namespace astrai::train
