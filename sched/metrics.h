// Metrics collector: written by the step-loop thread, read by Engine::stats() from any thread.
// One mutex guards everything; the step loop holds it for a few additions per step and readers
// for one snapshot, so it never waits on anything slow.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "src/engine/request.h"

namespace astrai {

// Mean over every sample; p50 / p99 over the most recent `window` samples (a ring), so a long-lived
// server reports current latencies in bounded memory.
class LatencyWindow {
 public:
  explicit LatencyWindow(size_t window = 8192) : window_(window) {}
  void add(double ms);
  LatencySummary summary() const;

 private:
  size_t window_;
  std::vector<double> ring_;
  size_t next_ = 0;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Nearest-rank percentile (q in [0, 1]) of unsorted samples; 0 when empty.
double percentile(std::vector<double> samples, double q);

// Milliseconds from a to b (the unit of every latency Metrics records).
inline double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

class Metrics {
 public:
  using Clock = std::chrono::steady_clock;
  Metrics();

  void record_ttft(double ms);
  void record_itl(double ms);
  void record_queue_wait(double ms);
  // A request ended: e2e latency and, for requests with >= 2 tokens, its decode speed.
  void record_finish(FinishReason reason, double e2e_ms, int completion_tokens, double decode_s);
  void record_prompt(uint64_t prompt_tokens);
  void record_generated(uint64_t n);
  void record_step(int batch_seqs, double step_s);
  void record_prefix_lookup(uint64_t looked_up_tokens, uint64_t hit_tokens);
  void record_preemption();
  // Gauges, set once per step.
  void set_gauges(uint64_t running, uint64_t waiting, uint64_t pages_total, uint64_t pages_used,
                  uint64_t cached_pages, int page_size);

  EngineStats snapshot() const;

 private:
  mutable std::mutex mu_;
  Clock::time_point start_;
  EngineStats s_;
  LatencyWindow ttft_, itl_, e2e_, queue_wait_;
  double decode_tps_sum_ = 0;
  uint64_t decode_tps_n_ = 0;
  double batch_sum_ = 0;
  double busy_s_ = 0;
  uint64_t lookup_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace astrai
