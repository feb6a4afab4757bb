// Latency histograms and HTTP counters measured on the net side (what a client sees), updated from
// any net thread with relaxed atomics and rendered by stats_routes as JSON and Prometheus text.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "src/engine/generation.h"

namespace astrai::net {

class Histogram {
 public:
  // Upper bounds in seconds (Prometheus `le`), cumulative on output.
  static constexpr std::array<double, 16> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                                     0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0, 120.0};
  void observe(double seconds);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return double(sum_us_.load(std::memory_order_relaxed)) * 1e-6; }
  uint64_t bucket(size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }  // not cumulative
  // Appends `name_bucket{le=..}`, `name_sum`, `name_count` lines (with HELP/TYPE).
  void write_prometheus(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};  // last: +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_us_{0};
};

// Also the observer of every generation the server runs (GenerationObserver's calls are relaxed
// atomic updates, safe from any net thread).
class ServerMetrics final : public GenerationObserver {
 public:
  void on_start() override;
  void on_token(bool first, double since) override;
  void on_end(bool complete, double seconds) override;

  Histogram ttft, itl, e2e;                // seconds, per generation / per streamed token gap
  std::atomic<uint64_t> http_requests{0};  // every routed request
  std::atomic<uint64_t> http_errors_4xx{0}, http_errors_5xx{0};
  std::atomic<uint64_t> rejected_overload{0};
  std::atomic<uint64_t> client_disconnects{0};
  std::atomic<int64_t> active_generations{0};
  std::atomic<int64_t> open_connections{0};
  std::atomic<uint64_t> streamed_tokens{0};
};

}  // namespace astrai::net
