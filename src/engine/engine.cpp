#include "src/engine/engine.h"

#include "sched/step_loop.h"
#include "src/backend/backend.h"
#include "src/model/model.h"

namespace astrai {

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model,
                                               const EngineOptions& options) {
  ASTRAI_ASSIGN_OR_RETURN(auto loop, make_step_loop(std::move(backend), std::move(model), options));
  return std::unique_ptr<Engine>(new Engine(std::move(loop)));
}

Engine::Engine(std::unique_ptr<StepLoop> loop) : loop_(std::move(loop)) {}
Engine::~Engine() = default;  // ~StepLoop shuts down

Result<Stream> Engine::submit(Request request) {
  return loop_->submit(std::move(request));
}
void Engine::cancel(RequestId id) {
  loop_->cancel(id);
}
EngineStats Engine::stats() const {
  return loop_->stats();
}
const ModelConfig& Engine::model_config() const {
  return loop_->model_config();
}
int64_t Engine::max_model_len() const {
  return loop_->max_model_len();
}
void Engine::shutdown() {
  loop_->shutdown();
}
int Engine::flush_prefix_cache() {
  return loop_->flush_prefix_cache();
}

Status Engine::check_invariants() {
  return loop_->check_invariants();
}

}  // namespace astrai
