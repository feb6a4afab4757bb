// The engine behind Engine: one step-loop thread that owns the model, the KV cache, the pool, the
// prefix cache and the scheduler. Other threads only push commands (submit, cancel) into its
// lock-free queue and read their requests' event rings.
//
// Each turn of the loop (run()) is five parts, one file each, in the order of SGLang's event loop:
//   receive         step_loop.cpp         commands: new requests into the scheduler, cancels
//   schedule        scheduler.cpp         the step's plan: chunks of running and admitted sequences
//   build batch     batch_builder.cpp     the plan as forward inputs (ForwardBatch) and draws to make
//   run             step_runner.cpp       the forward on the backend, the draws from its logits
//   process output  output_processor.cpp  tokens, forks, finishes, events delivered to the rings
// The first three run on the host only; a device backend replaces nothing but the runner's insides.
//
// Overlapped (EngineOptions::overlap, a GPU's default), a turn launches step N + 1 before it reads
// step N's draws and processes them, so that the device never waits for the host between steps:
//   plan N+1 -> build -> forward N+1 -> start its draws -> read N's draws, process N -> commit N+1
// A sequence whose token step N drew has it in its tokens as a placeholder (Sequence::drawn), so
// plan N + 1 gives it its next row, and that row's forward takes the token from step N's output on
// the device (ForwardBatch::moves). Sequences whose next draw depends on the token's value on the
// host wait out one step instead: a request's first token when it forks n > 1 choices, penalties,
// structured output, and the last token before max_tokens or the context length. A stop token
// found in processing N ends its sequence; its row in N + 1 was computed for nothing and is
// dropped. Released pages are safe to hand out at once: every later use of them is a later launch
// on the same stream. Tasks live until no step in flight names them (Task::in_flight).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "sched/batch_builder.h"
#include "sched/kv_pool.h"
#include "sched/metrics.h"
#include "sched/output_processor.h"
#include "sched/radix_cache.h"
#include "sched/request_queue.h"
#include "sched/sampler.h"
#include "sched/scheduler.h"
#include "sched/sequence.h"
#include "sched/step_runner.h"
#include "src/core/status.h"
#include "src/engine/request.h"
#include "src/model/model.h"

namespace astrai {

struct StepProfile;

class StepLoop {
 public:
  // Starts the thread. make_step_loop() validates the options and sizes the cache first.
  StepLoop(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model, const EngineOptions& o,
           int max_model_len, int num_pages, KvCache kv);
  ~StepLoop();

  // Thread-safe. Fails fast: invalid_argument (bad prompt or params), resource_exhausted (queue full).
  Result<Stream> submit(Request r);
  void cancel(RequestId id);  // thread-safe; frees pages at the next step
  EngineStats stats() const { return metrics_.snapshot(); }
  const ModelConfig& model_config() const { return runner_.model().config(); }
  int max_model_len() const { return max_model_len_; }
  // Finishes every request still in flight as cancelled, refuses new ones, joins the thread.
  void shutdown();
  // Pool / cache consistency, checked on the loop's thread (tests).
  Status check_invariants();
  // Evicts every prefix-cache page that no running sequence uses, on the loop's thread between
  // steps, and returns how many pages went back to the pool. Every free page's memory then goes
  // back to the system (CPU backend; StepRunner::discard_pages), and malloc's free lists too, so
  // an idle server's footprint returns near a cold one's. Thread-safe; the gauges in stats() show
  // the result, and the memory is released, by the time it returns.
  int flush_prefix_cache();

  // Tests: pause() holds the loop before its next step until resume(), so that a scenario can
  // queue all its requests first and the first step sees every one of them, whatever the thread
  // timing. Commands are still taken while paused (submits queue up, cancels and checks run). Both
  // travel the command queue, in order with the submits around them.
  void pause() { push(Command::Kind::pause); }
  void resume() { push(Command::Kind::resume); }

 private:
  Status validate(const Request& r) const;
  void push(Command::Kind kind, RequestId id = 0);
  void run();
  void drain_commands();
  void apply_cancels();
  bool step();  // true: it ran a forward (and processed its output, or the previous step's)
  // The overlapped loop: reads the step in flight's draws and processes them (false: none), then
  // ends the sequences found out of memory meanwhile; draws_read, when given, gets the time the
  // draws were read.
  bool complete_in_flight(std::chrono::steady_clock::time_point* draws_read = nullptr);
  // After a failure: forgets the step in flight without reading it.
  void drop_in_flight();
  // Puts placeholders for the draws of the step just launched into the sequences that can run
  // ahead; the others sit out the next plan.
  void run_ahead(const StepPlan& plan, std::span<const SampleRow> rows);
  bool can_run_ahead(const Sequence& s) const;
  void finish_out_of_memory();  // out_of_memory_, with `length`
  void note_admitted(const StepPlan& plan, std::chrono::steady_clock::time_point now);
  void update_gauges();
  void deliver();     // the gauges, then the pending events to the rings and their consumers
  int flush_cache();  // flush_prefix_cache() on the loop's thread
  int pages_for(int tokens) const { return (tokens + opts_.page_size - 1) / opts_.page_size; }

  const EngineOptions opts_;
  const int max_model_len_;
  const int vocab_;
  StepRunner runner_;
  KvPool pool_;
  Metrics metrics_;
  std::unique_ptr<RadixCache> cache_;
  Scheduler scheduler_;
  BatchBuilder batch_builder_;
  CommandQueue queue_;

  std::atomic<uint64_t> next_id_{1};
  std::atomic<int> waiting_count_{0};
  std::atomic<int> active_submits_{0};
  std::atomic<bool> stopping_{false};   // no new submits
  std::atomic<bool> stop_loop_{false};  // the loop finishes everything as cancelled and exits
  std::mutex shutdown_mu_;
  bool joined_ = false;

  // Step-loop thread only.
  TaskMap tasks_;
  OutputProcessor output_;
  std::vector<RequestId> to_cancel_;
  std::vector<SampleResult> draws_;
  bool paused_ = false;
  const bool deliver_after_launch_;  // EngineOptions::deliver_after_launch, resolved
  bool delivery_due_ = false;        // a step's events wait for the next step's launch
  const bool overlap_;               // EngineOptions::overlap, resolved
  // The step launched and not processed yet (overlap_), and the sequences found out of memory
  // while it runs (they end after its tokens are read).
  struct InFlight {
    StepPlan plan;
    std::vector<SampleRow> rows;
  };
  std::optional<InFlight> in_flight_;
  std::vector<Sequence*> out_of_memory_;
  // ASTRAI_STEP_PROFILE=1: where a step's wall time goes (host phases against the wait for the
  // device's draws), logged every few thousand steps; null otherwise.
  std::unique_ptr<StepProfile> profile_;

  std::thread thread_;  // last: starts once everything above exists
};

// EngineOptions::max_batch_size where it is 0 (the device's default): 512 sequences a step on a GPU,
// 256 on the CPU.
int resolved_max_batch_size(const EngineOptions& o, bool gpu);
// EngineOptions::deliver_after_launch resolved for a device (gpu: it runs asynchronously).
bool resolved_deliver_after_launch(const EngineOptions& o, bool gpu);
// EngineOptions::overlap resolved for a device and a model (one that takes drawn tokens).
bool resolved_overlap(const EngineOptions& o, bool gpu, bool model_takes_drawn_tokens);

// Validates the options, sizes and allocates the KV cache, starts the thread.
Result<std::unique_ptr<StepLoop>> make_step_loop(std::unique_ptr<Backend> backend,
                                                 std::unique_ptr<Model> model, const EngineOptions& options);

}  // namespace astrai
