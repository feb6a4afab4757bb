// The engine behind Engine: one step-loop thread that owns the model, the KV cache, the pool, the
// prefix cache and the scheduler. Other threads only push commands (submit, cancel) into its
// lock-free queue and read their requests' event rings.
#pragma once

#include <memory>

#include "src/engine/engine.h"

namespace astrai {

Result<std::unique_ptr<Engine>> make_step_loop_engine(std::unique_ptr<Backend> backend,
                                                      std::unique_ptr<Model> model,
                                                      const EngineOptions& options);

}  // namespace astrai
