#include "net/server_metrics.h"

#include <cstdio>

namespace astrai::net {

void Histogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(uint64_t(seconds > 0 ? seconds * 1e6 : 0), std::memory_order_relaxed);
}

void Histogram::write_prometheus(std::string& out, const std::string& name, const std::string& help) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  char line[256];
  uint64_t cum = 0;
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cum += bucket(i);
    if (i < kBounds.size())
      std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name.c_str(), kBounds[i],
                    static_cast<unsigned long long>(cum));
    else
      std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name.c_str(),
                    static_cast<unsigned long long>(cum));
    out += line;
  }
  // Count is the +Inf bucket so the exposition stays consistent even while observe() races.
  std::snprintf(line, sizeof line, "%s_sum %.6f\n%s_count %llu\n", name.c_str(), sum(), name.c_str(),
                static_cast<unsigned long long>(cum));
  out += line;
}

void ServerMetrics::on_start() {
  active_generations.fetch_add(1, std::memory_order_relaxed);
}

void ServerMetrics::on_token(bool first, double since) {
  (first ? ttft : itl).observe(since);
  streamed_tokens.fetch_add(1, std::memory_order_relaxed);
}

void ServerMetrics::on_end(bool complete, double seconds) {
  active_generations.fetch_sub(1, std::memory_order_relaxed);
  if (complete) e2e.observe(seconds);
}

}  // namespace astrai::net
