#include "src/model/tp_model.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <string>

#include "src/dist/communicator.h"
#include "src/dist/rank_threads.h"
#include "src/model/shard.h"
#include "src/model/weights.h"

namespace astrai {
namespace {

class TpModel final : public Model {
 public:
  TpModel(const ModelConfig& cfg, Backend& rank0, std::vector<std::unique_ptr<Backend>> others,
          std::vector<std::unique_ptr<Communicator>> comms)
      : cfg_(cfg),
        rank0_(rank0),
        others_(std::move(others)),
        comms_(std::move(comms)),
        threads_(int(comms_.size())) {
    shards_.resize(comms_.size());
  }

  Backend& rank_backend(int r) const { return r == 0 ? rank0_ : *others_[size_t(r - 1)]; }
  int world() const { return int(comms_.size()); }

  // Runs fn on every rank at once (run_on_ranks: a failing rank aborts the group rather than leave
  // the others waiting); a group whose device collectives were aborted fails every later call.
  Status on_all_ranks(const std::function<Status(int)>& fn) {
    if (!dead_.ok()) return dead_;
    return run_on_ranks(
        threads_, comms_, "tensor-parallel", &dead_,
        [](int r, const Status& s) {
          spdlog::error("tensor-parallel rank {} failed in the middle of a step: {}", r, s.message());
        },
        fn);
  }

  Status load(const WeightRefs& refs, const LoadOptions& options) {
    return on_all_ranks([&](int r) -> Status {
      ShardSpec spec{r, world(), comms_[size_t(r)].get()};
      ASTRAI_ASSIGN_OR_RETURN(shards_[size_t(r)], make_shard(cfg_, refs, rank_backend(r), spec, options));
      return {};
    });
  }

  const ModelConfig& config() const override { return cfg_; }
  Backend& backend() const override { return rank0_; }

  // Per device: what one rank's cache takes of its device's memory (the step loop sizes the cache
  // from rank 0's free memory; the ranks are alike). On the CPU all ranks share the host's memory.
  size_t kv_bytes_per_page(int page_size) const override {
    const size_t one = shards_[0]->kv_bytes_per_page(page_size);
    return rank0_.device() == Device::cpu ? one * size_t(world()) : one;
  }
  KvCache allocate_kv(int num_pages, int page_size) const override {
    KvCache kv;
    kv.num_pages = num_pages;
    kv.scratch_page = num_pages;
    kv.page_size = page_size;
    kv.num_kv_heads = int(cfg_.num_kv_heads);
    kv.head_dim = int(cfg_.head_dim);
    kv.dtype = rank0_.compute_dtype();
    kv.device = rank0_.device();
    for (const auto& s : shards_) kv.shards.push_back(s->allocate_kv(num_pages, page_size));
    return kv;
  }

  Result<Tensor> forward(const ForwardBatch& b, KvCache& kv) override {
    if (int(kv.shards.size()) != world())
      return invalid_argument("forward batch: the KV cache was not allocated for this tensor-parallel model");
    // The draws live on one rank's device (takes_drawn_tokens() is false here).
    if (!b.moves.empty()) return invalid_argument("forward batch: a tensor-parallel model takes no moves");
    Tensor logits;
    ASTRAI_RETURN_IF_ERROR(on_all_ranks([&](int r) -> Status {
      ASTRAI_ASSIGN_OR_RETURN(Tensor t, shards_[size_t(r)]->forward(b, kv.shards[size_t(r)]));
      if (r == 0) logits = t;
      return {};
    }));
    return logits;
  }

  Status reserve_steps(const StepLimits& limits) override {
    return on_all_ranks([&](int r) { return shards_[size_t(r)]->reserve_steps(limits); });
  }
  Result<int> capture_decode_graphs(KvCache& kv) override {
    if (int(kv.shards.size()) != world())
      return invalid_argument("the KV cache was not allocated for this tensor-parallel model");
    int captured = 0;
    ASTRAI_RETURN_IF_ERROR(on_all_ranks([&](int r) -> Status {
      ASTRAI_ASSIGN_OR_RETURN(int n, shards_[size_t(r)]->capture_decode_graphs(kv.shards[size_t(r)]));
      if (r == 0) captured = n;
      return {};
    }));
    return captured;
  }

  // Rank 0's (the largest: it alone holds an untied LM head): what one device reads per step.
  size_t weight_bytes() const override { return shards_[0]->weight_bytes(); }
  void for_each_weight(const std::function<void(const Tensor&)>& fn) const override {
    for (const auto& s : shards_) s->for_each_weight(fn);
  }

 private:
  ModelConfig cfg_;
  Backend& rank0_;
  // Destroyed in reverse: the threads first, then the shards (their graphs and buffers), then the
  // communicators and the backends they run on.
  std::vector<std::unique_ptr<Backend>> others_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<Model>> shards_;
  Status dead_;  // set once the device collectives were aborted: every later call fails with it
  RankThreads threads_;
};

}  // namespace

Result<std::unique_ptr<Model>> make_tensor_parallel(const ModelConfig& config, const WeightStore& weights,
                                                    Backend& rank0,
                                                    std::vector<std::unique_ptr<Backend>> others,
                                                    const LoadOptions& options) {
  if (others.empty()) return Model::from_config(config, weights, rank0, options);
  ASTRAI_RETURN_IF_ERROR(config.validate());
  const int world = int(others.size()) + 1;
  ASTRAI_RETURN_IF_ERROR(shard_config(config, world).status());
  ASTRAI_ASSIGN_OR_RETURN(WeightRefs refs, resolve_weights(config, weights));
  std::vector<Backend*> ranks{&rank0};
  for (const auto& b : others) ranks.push_back(b.get());
  ASTRAI_ASSIGN_OR_RETURN(auto comms, make_communicators(ranks));
  const auto t0 = std::chrono::steady_clock::now();
  auto model = std::make_unique<TpModel>(config, rank0, std::move(others), std::move(comms));
  ASTRAI_RETURN_IF_ERROR(model->load(refs, options));
  if (options.verbose)
    spdlog::info(
        "loaded {} ({} layers) in {} tensor-parallel shards, {:.1f} MB of weights on rank 0 ({}), in {:.2f} "
        "s",
        config.architecture, config.num_layers, world, double(model->weight_bytes()) / 1e6, rank0.name(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return std::unique_ptr<Model>(std::move(model));
}

Result<std::unique_ptr<Model>> load_tensor_parallel(const std::filesystem::path& dir, Backend& rank0,
                                                    std::vector<std::unique_ptr<Backend>> others,
                                                    const LoadOptions& options) {
  ASTRAI_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir));
  ASTRAI_ASSIGN_OR_RETURN(WeightStore store, WeightStore::open(dir));
  return make_tensor_parallel(config, store, rank0, std::move(others), options);
}

}  // namespace astrai
