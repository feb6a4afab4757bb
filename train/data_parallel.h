// Data-parallel training in one process: dp replicas of a TrainModel started from the same weights,
// one rank per thread (src/dist/rank_threads.h), each with its own backend (GPU r, or the CPU with
// its share of the threads) and its own AdamW.
//
// One optimizer step (step()): every micro-batch of the step (B rows: the group's batch_size) is
// split by rows, rank r taking rows [r B/dp, (r+1) B/dp). With T the number of targets of the whole
// step over every rank, rank r accumulates d(sum of its targets' losses / T)/d(param)
// (forward_backward with scale n_r / T), so the sum over the ranks is dp 1's gradient of the mean
// loss over the step's targets. The ranks then agree that every forward/backward succeeded (a rank
// that failed must not leave the others waiting in a collective) and sum the flat f32 gradient
// buffer over the ranks. dp 1 has no communicator and no collective, and computes exactly what a
// lone TrainModel + AdamW does.
//
// Shards (dp > 1). The flat layout of N elements is cut into W slices of S elements (W the world's
// ranks over every node; S a multiple of kShardAlign, as large as fits) and a tail of the last
// N - W S (< W kShardAlign) elements. The global gradient norm is sqrt(sum over the ranks in rank
// order of the squares of slice r, plus the squares of the tail): with zero every rank computes its
// own slice's and the tail's and they exchange the first in rank order, without it every rank adds
// every slice's in the same order (the same f64 sum on every rank, whichever the mode or layout).
//   zero 0 (replicated): the gradients are all-reduced; every rank keeps AdamW's moments of every
//     element and runs the same update on the same bits.
//   zero 1 (ZeRO-1): rank r keeps the moments of slice r and the tail only (8 bytes per parameter
//     / dp, plus the tail); the gradients are reduce-scattered (slice r summed onto rank r) and the
//     tail all-reduced; rank r updates its slice and the tail, and an all-gather of the slices
//     brings every rank the updated master weights. The f32 master weights stay whole on every rank.
// Both sum each element in rank order on the CPU group, and AdamW is element-wise, so zero 0 and 1
// give the same bits there (on NCCL: within its reduction order).
//
// Buckets (bucket_bytes > 0): the last micro-batch's backward reports where its gradients become
// final (TrainModel::set_grad_ready_hook: from the end of the layout, layer by layer), and each
// bucket of about bucket_bytes (cut at the slice boundaries too) is reduced as soon as it is whole:
// all-reduced (zero 0, the tail), or reduced onto the slice's rank (zero 1). On a GPU the bucket
// collectives run on a side stream that waits for the backward queued so far (Communicator::
// fork_side), overlapping the rest of the backward; on the CPU group at once, at the same points.
// The ranks agree before the first bucket. The same per-element sums as without buckets, so the
// same bits on the CPU.
//
// Checkpoints save the moments of every element whatever dp and zero (read_moments gathers the
// shards), so a run resumes at another dp or zero.
//
// A rank that throws (a device failure in the middle of a step) aborts the host group, so that no
// rank waits in a host-side collective for it, and stops the device collectives (ncclCommAbort);
// a group whose device collectives were aborted fails every later call.
//
// Several processes (nodes, src/dist/bootstrap.h): with options.nodes.nnodes > 1 this process holds
// global ranks [node_rank * dp, (node_rank + 1) * dp) of a world of nnodes * dp. Every node reads
// the same data, and split() gives each local rank its global rank's rows, so the run equals one
// process with dp = the world size. The bootstrap hands every node NCCL's unique id; the ranks'
// all-reduce spans the world (NCCL); the host-side collectives between the nodes (the step's agree,
// the loss sums) go over the bootstrap's link, on rank 0's thread, after the local ranks agreed. A
// lost node aborts this node's NCCL communicators (from the link's thread) and fails the step with
// the link's error. The CPU backend has no transport between processes: nnodes > 1 is an error there.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/backend/backend.h"
#include "src/core/status.h"
#include "src/dist/bootstrap.h"
#include "src/model/config.h"
#include "src/model/safetensors.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace astrai {
class Communicator;
class RankThreads;
}  // namespace astrai

namespace astrai::train {

struct DataParallelOptions {
  int dp = 1;
  std::string device = "auto";  // cpu | cuda | auto (the GPU when its backend can train, else the CPU)
  // CPU: the threads of the whole group (0: num_threads()); each rank gets max(1, threads / dp).
  int cpu_threads = 0;
  AdamWOptions adamw;
  bool zero = true;  // dp > 1 in one process: shard AdamW's moments (ZeRO-1), see above; off with nnodes > 1
  int64_t bucket_bytes = int64_t(32) << 20;  // dp > 1: gradient bucket size; 0: reduce after the backward
  // nnodes > 1: this process is node node_rank of a run over several (dp ranks each).
  NodeOptions nodes;
  std::string fingerprint;  // the run's config and data: the bootstrap checks every node has the same
};

// What one optimizer step did, over the whole group.
struct StepResult {
  double loss_sum = 0;   // the sum over the step's targets of their cross-entropy
  int64_t targets = 0;   // 0: the step had no target and changed nothing
  double grad_norm = 0;  // global L2 norm of the summed gradient, before clipping
};

// Rows [begin, end) of a batch.
TrainBatch batch_rows(const TrainBatch& b, int begin, int end);

class DataParallelGroup {
 public:
  static Result<std::unique_ptr<DataParallelGroup>> create(const ModelConfig& config,
                                                           const WeightStore& weights,
                                                           const DataParallelOptions& options);
  ~DataParallelGroup();

  int size() const { return int(ranks_.size()); }
  Device device() const;
  // The ranks of every node, and this node's first global rank.
  int world_size() const { return world_; }
  int first_rank() const { return first_rank_; }
  // The link to the other nodes; null with nnodes 1.
  NodeLink* nodes() const { return link_.get(); }
  static constexpr int64_t kShardAlign = 64;  // elements: slices start on 256-byte boundaries

  // Rank r's replica, backend and optimizer (rank 0's weights are what checkpoints save; with zero,
  // each rank's optimizer holds its shard of the moments: read_moments has them all).
  TrainModel& model(int rank = 0) const { return *ranks_[size_t(rank)].model; }
  Backend& backend(int rank = 0) const { return *ranks_[size_t(rank)].backend; }
  AdamW& optimizer(int rank = 0) const { return *ranks_[size_t(rank)].opt; }

  // One optimizer step over `micro` (the step's micro-batches, each of a multiple of size() rows) at
  // learning rate lr. A step without a single target changes nothing (no update, no AdamW step).
  Result<StepResult> step(std::span<const TrainBatch> micro, double lr, double max_grad_norm,
                          const LossOptions& loss = {});

  // Forward only over one batch split as step() splits it: {sum of its targets' losses, targets}.
  Result<std::pair<double, int64_t>> loss_sum(const TrainBatch& batch, const LossOptions& loss = {});

  // AdamW's first and second moments of every element of the flat parameter layout
  // (TrainModel::flat_values(): params() in order), copied to the host from the ranks that hold them.
  Status read_moments(std::vector<float>& exp_avg, std::vector<float>& exp_avg_sq);
  // Sets them on every rank (each its shard) and every rank's AdamW step count.
  Status write_moments(std::span<const float> exp_avg, std::span<const float> exp_avg_sq,
                       int64_t steps_taken);

  bool zero() const { return zero_; }
  // Slice r of the flat layout ({0, N} with dp 1) and the tail every rank holds (empty with dp 1).
  ElementRange slice(int rank) const;
  ElementRange tail() const;
  // The gradient buckets in the order they are reduced (empty: after the backward, all at once).
  size_t num_buckets() const { return buckets_.size(); }

  // Waits for every rank's device to finish what was queued (the last AdamW update of a step).
  Status synchronize();

  // Runs fn(rank) on every rank at once, each on its rank's thread; the first failure is returned
  // once every rank has left (see above for what a failure does to the group).
  Status on_all_ranks(const std::function<Status(int)>& fn);

 private:
  struct Rank {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<TrainModel> model;
    std::unique_ptr<AdamW> opt;
  };
  DataParallelGroup() = default;
  // A range of the gradients reduced as one collective: onto rank `owner`, or all-reduced (-1).
  struct Bucket {
    ElementRange range;
    int owner = -1;
  };
  // Splits each batch of `in` into size() row blocks: parts_[r][i] is rank r's block of in[i].
  Status split(std::span<const TrainBatch> in);
  // Rank r's share of step(): its micro-batches' forward/backward, the agreement, the gradient
  // reduction, the global norm, its AdamW update and (zero) the all-gather. Returns the norm.
  Result<double> rank_step(int r, double total, double lr, double max_grad_norm, const LossOptions& loss,
                           double& loss_sum);
  void reduce(Communicator& c, const Tensor& grads, const Bucket& b);
  std::vector<Bucket> make_buckets(int64_t elems) const;
  // On every local rank after their agree: every node's agreement (rank 0 asks the link).
  Status agree_across_nodes(int r, const Status& mine);
  // The sum of every global rank's value, in global rank order.
  Result<double> sum_over_nodes(std::span<const double> mine);

  // Destroyed in reverse: the threads first, then the communicators, then the ranks' models and
  // optimizers before their backends.
  std::vector<Rank> ranks_;
  std::vector<std::unique_ptr<Communicator>> comms_;  // empty with dp 1
  std::unique_ptr<RankThreads> threads_;
  std::vector<std::vector<TrainBatch>> parts_;
  Status dead_;  // set once the device collectives were aborted
  bool zero_ = false;
  int64_t numel_ = 0, slice_ = 0;  // elements of the flat layout, of each rank's slice
  std::vector<Bucket> buckets_;
  int world_ = 1, first_rank_ = 0;
  Status node_status_;  // agree_across_nodes: written by rank 0 before a local barrier
  // Last: destroyed first, so that its on_lost (which aborts comms_) cannot outlive them.
  std::unique_ptr<NodeLink> link_;
};

}  // namespace astrai::train
