// Engine facade: load a model, submit requests from any thread, read token events as they come.
// The step loop (sched/) runs on its own thread; this header is all that net/ and the CLI see.
// Nothing here includes Asio: the network side is woken through Request::notify.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/core/status.h"
#include "src/engine/request.h"
#include "src/model/config.h"

namespace astrai {

class Tokenizer;
class Model;
class Backend;

class StepLoop;  // sched/step_loop.h

// A thin facade over the step loop (sched/), so that net/ and the CLI depend on this header only.
class Engine {
 public:
  // Takes ownership of backend + model; starts the step-loop thread.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Backend> backend,
                                                std::unique_ptr<Model> model, const EngineOptions& options);
  ~Engine();  // shutdown()

  // Thread-safe. Fails fast: invalid_argument (empty / too long prompt, bad params),
  // resource_exhausted (queue full).
  Result<Stream> submit(Request request);
  void cancel(RequestId id);  // thread-safe; frees pages at the next step
  EngineStats stats() const;
  const ModelConfig& model_config() const;
  // The longest sequence a request may reach: --max-model-len, else the model's context
  // (ModelConfig::max_context()).
  int64_t max_model_len() const;
  // Finishes every request still in flight as cancelled, refuses new ones, joins the step loop.
  void shutdown();
  // Runs the KV pool / prefix cache consistency checks on the step-loop thread and returns the first
  // violation (tests): every page is free, cached or held by a live sequence, with the exact count.
  Status check_invariants();
  // Evicts every prefix-cache page that no running request uses (the admin route POST
  // /flush_cache); returns how many pages went back to the pool. Thread-safe.
  int flush_prefix_cache();

 private:
  explicit Engine(std::unique_ptr<StepLoop> loop);
  std::unique_ptr<StepLoop> loop_;
};

}  // namespace astrai
