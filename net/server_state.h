// What every route and connection shares: configuration, the engine and tokenizer once loaded,
// metrics, and the counters that drive overload answers and graceful drain.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "net/config.h"
#include "net/reasoning_parser.h"
#include "net/server_metrics.h"
#include "src/engine/engine.h"
#include "src/engine/sampling_defaults.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai::net {

// What goes before a loader's error, in the 503 answer while the server stays up and in the
// process's last "astrai: error: " line when it exits (bench serve reads it from there).
inline constexpr std::string_view kModelLoadFailed = "the model failed to load: ";

struct ServerState {
  ServeConfig config;
  std::string model_name;  // the name clients use ("model" field), set before ready
  // Written once by the loader thread before `ready` is released; read after acquiring it.
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  ReasoningParser reasoning = ReasoningParser::none;  // config.reasoning_parser, resolved at load
  SamplingDefaults sampling_defaults;                 // config.generation_config, read at load
  std::atomic<bool> ready{false};
  std::atomic<bool> load_failed{false};
  std::string load_error;  // written before load_failed is released

  std::atomic<bool> draining{false};
  std::atomic<int64_t> inflight{0};  // HTTP requests being answered + open WebSocket generations
  ServerMetrics metrics;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  // Test seam: called on the thread that is about to run a route (tests check which thread that is).
  std::function<void()> on_route;

  bool is_ready() const { return ready.load(std::memory_order_acquire); }
};

// RAII count of one in-flight generation, bounded by config.max_concurrent.
class GenerationSlot {
 public:
  GenerationSlot() = default;
  // Takes a slot, or returns an empty (invalid) one when max_concurrent are already taken.
  static GenerationSlot acquire(ServerState& s);
  GenerationSlot(GenerationSlot&& o) noexcept : state_(std::exchange(o.state_, nullptr)) {}
  GenerationSlot& operator=(GenerationSlot&& o) noexcept {
    release();
    state_ = std::exchange(o.state_, nullptr);
    return *this;
  }
  ~GenerationSlot() { release(); }
  explicit operator bool() const { return state_ != nullptr; }

 private:
  void release();
  ServerState* state_ = nullptr;
};

}  // namespace astrai::net
