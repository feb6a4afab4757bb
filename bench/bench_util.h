// Small pieces the bench subcommands share.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/engine/loader.h"

namespace astrai::cli {

using BenchClock = std::chrono::steady_clock;

inline double seconds_since(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

// "1,8,32" -> {1, 8, 32}; every entry a positive integer (the error names `option`).
std::vector<int> parse_int_list(const std::string& s, const std::string& option);

// The model a bench runs: exactly one of --model DIR or --preset NAME (a preset's weights drawn from
// `seed`), on common.device (cuda or cpu; otherwise cuda when this build has it), over `tp` ranks.
LoadedModel load_bench_model(const CommonOptions& common, const std::string& model, const std::string& preset,
                             uint64_t seed, int tp);

}  // namespace astrai::cli
