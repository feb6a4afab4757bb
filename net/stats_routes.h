// GET /stats (JSON) and GET /metrics (Prometheus text exposition format 0.0.4): the engine's
// figures plus the net side's own latency histograms and connection counters.
#pragma once

#include <string>

#include "net/server_state.h"

namespace astrai::net {

std::string stats_json(const ServerState& st);
std::string metrics_text(const ServerState& st);

}  // namespace astrai::net
