// The engine behind Engine: one step-loop thread that owns the model, the KV cache, the pool, the
// prefix cache and the scheduler. Other threads only push commands (submit, cancel) into its
// lock-free queue and read their requests' event rings.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sched/kv_pool.h"
#include "sched/metrics.h"
#include "sched/radix_cache.h"
#include "sched/request_queue.h"
#include "sched/sampler.h"
#include "sched/scheduler.h"
#include "sched/sequence.h"
#include "src/engine/request.h"
#include "src/model/model.h"

namespace astrai {

class StepLoop {
 public:
  StepLoop(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model, const EngineOptions& o,
                 int max_model_len, int num_pages, KvCache kv)
      : backend_(std::move(backend)),
        model_(std::move(model)),
        opts_(o),
        max_model_len_(max_model_len),
        vocab_(int(model_->config().vocab_size)),
        kv_(std::move(kv)),
        pool_(num_pages),
        cache_(o.prefix_cache ? std::make_unique<RadixCache>(pool_, o.page_size) : nullptr),
        scheduler_(SchedulerConfig{o.page_size, o.max_prefill_tokens, o.max_batch_size,
                                   std::max(1, num_pages / 100)},
                   pool_, cache_.get(), metrics_) {
    for (int32_t t : model_->config().eos_token_ids) model_stop_.insert(t);
    for (int32_t t : o.stop_ids) model_stop_.insert(t);
    metrics_.set_gauges(0, 0, uint64_t(num_pages), 0, 0, o.page_size);
    thread_ = std::thread([this] { run(); });
  }

  ~StepLoop() { shutdown(); }

  Result<Stream> submit(Request r);
  void cancel(RequestId id) {
    auto c = std::make_unique<Command>();
    c->kind = Command::Kind::cancel;
    c->id = id;
    queue_.push(std::move(c));
  }
  EngineStats stats() const { return metrics_.snapshot(); }
  const ModelConfig& model_config() const { return model_->config(); }
  void shutdown();
  Status check_invariants();

 private:
  Status validate(const Request& r) const;
  void run();
  void drain_commands();
  void step();
  void sample_chunk(const Chunk& c, const float* row);
  void fork(Task& t, Sequence& s0, const float* row);
  void handle_token(Sequence& s, const SampleResult& r);
  void finish_seq(Sequence& s, FinishReason reason, TokenEvent ev = {}, const std::string& error = {});
  void cancel_task(Task& t);
  void emit(Task& t, TokenEvent ev);
  void deliver();
  void close_all();
  bool is_stop(const Task& t, int32_t token) const;
  void update_gauges() {
    metrics_.set_gauges(scheduler_.num_running(), scheduler_.num_waiting(), uint64_t(pool_.num_pages()),
                        uint64_t(pool_.num_used()), cache_ ? uint64_t(cache_->cached_pages()) : 0,
                        opts_.page_size);
  }
  int pages_for(int tokens) const { return (tokens + opts_.page_size - 1) / opts_.page_size; }

  using Clock = std::chrono::steady_clock;

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  const EngineOptions opts_;
  const int max_model_len_;
  const int vocab_;
  KvCache kv_;
  KvPool pool_;
  Metrics metrics_;
  std::unique_ptr<RadixCache> cache_;
  Scheduler scheduler_;
  CommandQueue queue_;
  std::unordered_set<int32_t> model_stop_;

  std::thread thread_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int> waiting_count_{0};
  std::atomic<int> active_submits_{0};
  std::atomic<bool> stopping_{false};   // no new submits
  std::atomic<bool> stop_loop_{false};  // the loop finishes everything as cancelled and exits
  std::mutex shutdown_mu_;
  bool joined_ = false;

  // Step-loop thread only.
  std::unordered_map<RequestId, std::unique_ptr<Task>> tasks_;
  std::vector<Task*> touched_;         // tasks with events pushed this step
  std::unordered_set<Task*> backlog_;  // tasks whose ring was full: retry every step
  std::vector<RequestId> completed_;   // tasks to drop once their events are delivered
  std::vector<RequestId> to_cancel_;
  ForwardBatch batch_;
  std::vector<float> host_logits_, scratch_;
};

// Validates the options, sizes and allocates the KV cache, starts the thread.
Result<std::unique_ptr<StepLoop>> make_step_loop(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model,
                                                 const EngineOptions& options);

}  // namespace astrai
