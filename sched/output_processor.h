// Process output: a step's draws become token events. Forks a request's other choices at its first
// token, applies stop ids, max_tokens and the context length, finishes choices (releasing their
// pages through the scheduler) and requests (metrics), and delivers the events to the requests'
// rings once per step. Step-loop thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sched/batch_builder.h"
#include "sched/metrics.h"
#include "sched/sampler.h"
#include "sched/scheduler.h"
#include "sched/sequence.h"
#include "src/engine/request.h"

namespace astrai {

class OutputProcessor {
 public:
  // `tasks`: the requests in flight (owned by the step loop; delivered requests are erased from it
  // here). `waiting_count`: requests counted against max_queue, decremented when one finishes
  // before it was ever admitted. `model_stop`: the model's eos / stop ids.
  OutputProcessor(Scheduler& scheduler, Metrics& metrics, TaskMap& tasks, std::atomic<int>& waiting_count,
                  int max_model_len, std::unordered_set<int32_t> model_stop);

  // The step's draws (StepRunner::sample) for the plan's chunks that wanted logits, in order. A
  // sequence that ended while the step ran (the overlapped loop) only loses its drawn placeholder.
  void process(const StepPlan& plan, std::span<const SampleRow> rows, std::span<const SampleResult> draws);

  // Ends one choice (no-op when it already ended); `ev` may carry its last token. When it was the
  // request's last open choice, the request is done and leaves `tasks` once its events are delivered.
  void finish(Sequence& s, FinishReason reason, TokenEvent ev = {}, const std::string& error = {});
  void cancel(Task& t);  // every open choice of t ends as cancelled

  // Pushes this step's events out: one wake-up (and Request::notify) per request that got events,
  // retrying requests whose ring was full; drops requests that are done, fully delivered and in no
  // step still running (Task::in_flight).
  void deliver();
  bool has_backlog() const { return !backlog_.empty(); }
  // Shutdown: cancels everything, delivers what fits and closes every stream (its consumer then
  // reads the rest from the overflow itself).
  void close_all();

 private:
  void handle_token(Sequence& s, const SampleResult& r);
  void fork(Task& t, Sequence& s0, std::span<const SampleResult> draws);
  void emit(Task& t, TokenEvent ev);
  bool is_stop(const Task& t, int32_t token) const;

  Scheduler& scheduler_;
  Metrics& metrics_;
  TaskMap& tasks_;
  std::atomic<int>& waiting_count_;
  const int max_model_len_;
  const std::unordered_set<int32_t> model_stop_;

  std::vector<Task*> touched_;         // tasks with events pushed this step
  std::unordered_set<Task*> backlog_;  // tasks whose ring was full: retry every step
  std::vector<RequestId> completed_;   // tasks to drop once their events are delivered
};

}  // namespace astrai
