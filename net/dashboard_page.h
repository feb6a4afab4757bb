// GET /dashboard: one self-contained HTML page (no external resources) that polls /stats and draws
// the last five minutes of throughput, TTFT and inter-token latency percentiles, running and waiting
// requests, batch size, KV pages and the prefix-cache hit rate.
#pragma once

#include <string_view>

namespace astrai::net {

std::string_view dashboard_page_html();

}  // namespace astrai::net
