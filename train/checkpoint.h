// Training checkpoints: OUT/step_NNNNNN/ is a Hugging Face model directory (config.json,
// model.safetensors with HF tensor names in f32, the tokenizer files of the model it started from)
// that `astrai serve --model` and transformers load as is, plus what resuming needs:
//   trainer_state.json      {"step", "data_cursor": {"epoch", "index"}, "rng": {"seed"},
//                            "optimizer": {"type": "adamw", "t", "beta1", "beta2", "eps"},
//                            "config": {train.yaml keys}}
//   optimizer.safetensors   "exp_avg.<param name>", "exp_avg_sq.<param name>" (f32)
// (The data order is a pure function of (seed, epoch), so the cursor and the seed are the whole
// random state; nothing else in a CPU step draws random numbers.)
// A checkpoint is written into OUT/.step_NNNNNN.tmp-PID and renamed into place when complete, so
// an interrupted write leaves no step_ directory; --resume only considers complete ones.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "src/core/status.h"
#include "src/model/config.h"
#include "src/model/safetensors.h"
#include "train/data.h"

namespace astrai::train {

struct TrainerState {
  int64_t step = 0;  // optimizer steps done
  DataCursor cursor;
  uint64_t seed = 0;
  int64_t adam_t = 0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  std::string config_json = "{}";
};

struct CheckpointContents {
  ModelConfig config;
  std::filesystem::path tokenizer_dir;  // tokenizer files are copied from here
  std::vector<TensorToWrite> weights;   // f32, HF names and shapes
  std::vector<TensorToWrite> moments;   // "exp_avg.NAME" / "exp_avg_sq.NAME"
  TrainerState state;
};

// "step_000100"
std::string checkpoint_name(int64_t step);

// Writes OUT/step_NNNNNN atomically (replacing an older checkpoint of the same step). Returns its path.
Result<std::filesystem::path> write_checkpoint(const std::filesystem::path& out, const CheckpointContents& c);

// The complete checkpoint of the highest step under out (nullopt when there is none).
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& out);

Result<TrainerState> read_trainer_state(const std::filesystem::path& checkpoint_dir);

// The tokenizer files a checkpoint carries over from its source model directory.
const std::vector<std::string>& tokenizer_file_names();

}  // namespace astrai::train
