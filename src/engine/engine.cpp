#include "src/engine/engine.h"

#include "sched/step_loop.h"
#include "src/backend/backend.h"
#include "src/model/model.h"

namespace astrai {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "none";
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model,
                                               const EngineOptions& options) {
  return make_step_loop_engine(std::move(backend), std::move(model), options);
}

}  // namespace astrai
