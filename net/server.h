// `astrai serve`: listens at once (so /health can answer 503 while the model loads), loads the
// model on another thread, serves until SIGTERM/SIGINT, then drains: stop accepting, let in-flight
// generations finish for up to drain_timeout, exit.
#pragma once

#include <functional>

#include "net/server_state.h"
#include "src/core/status.h"

namespace astrai::net {

// load fills state.tokenizer, state.engine and state.model_name (or returns why it could not).
using ModelLoader = std::function<Status(ServerState&)>;

// Blocks until shutdown. Returns an error only when the server could not start (bad address, port in use).
Status run_server(ServerState& state, const ModelLoader& load);

}  // namespace astrai::net
