// Small pieces the bench subcommands share.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace astrai::cli {

using BenchClock = std::chrono::steady_clock;

inline double seconds_since(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

// "1,8,32" -> {1, 8, 32}; every entry a positive integer (the error names `option`).
std::vector<int> parse_int_list(const std::string& s, const std::string& option);

}  // namespace astrai::cli
