// The training loop of `astrai train`: per optimizer step, grad_accum micro-batches of
// forward + backward (token-weighted: every target of the step counts once), global grad-norm
// clipping, one AdamW step at the schedule's learning rate; a line of out/metrics.jsonl per step,
// evaluation on data.valid every eval_every steps, a checkpoint every save_every steps and at the
// end. A stop request (SIGTERM / SIGINT in `astrai train`) finishes the current step, writes a
// checkpoint and returns normally.
//
// dp > 1 (train/data_parallel.h): dp replicas, one per GPU (or CPU thread share), each micro-batch
// split by rows over them and the gradients summed before the step; the losses, token counts and
// tokens/s in metrics.jsonl are the whole group's, and rank 0 writes the checkpoints. The global
// batch does not depend on dp: dp 1 and dp N train on the same windows in the same order, with the
// same loss normalisation, so their losses differ only by the summation order of the gradients.
//
// Exact resume: everything a step depends on is in the checkpoint (f32 weights, AdamW moments and
// step count, the data cursor; the shuffle is a function of (seed, epoch)), and the CPU ops are
// deterministic for a given thread count, so N steps straight and k steps + --resume + N - k steps
// give the same losses and the same weights bit for bit. On the GPU (--device cuda, or auto with a
// GPU) the f32 master weights, gradients and AdamW moments live on the device; its ops use no
// atomics and fixed reduction orders, so resume gives the same losses there too. On --resume, metrics.jsonl
// lines after the checkpoint's step (written before a kill) are dropped and written again.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "src/core/status.h"
#include "train/train_config.h"

namespace astrai::train {

struct TrainRunOptions {
  TrainConfig config;
  bool resume = false;               // continue from the newest complete checkpoint under config.out
  bool progress = true;              // progress bar on stderr
  int64_t stop_after = 0;            // > 0: stop (checkpoint, return) after this many steps of this run
  std::filesystem::path data_cache;  // empty: data_cache_dir()
  const std::atomic<bool>* stop_requested = nullptr;
};

struct TrainSummary {
  int64_t first_step = 0, last_step = 0;  // optimizer steps done before / after this run
  double last_loss = 0;
  std::optional<double> last_val_loss;
  std::filesystem::path checkpoint;  // the last one written
  bool stopped = false;              // by a stop request or stop_after
  double seconds = 0;
};

Result<TrainSummary> run_training(const TrainRunOptions& options);

}  // namespace astrai::train
