// ASTRAI_CUDA_OP_TIMES=1: the GPU time of each op family (CUDA events around every op on the
// backend's stream), summed and printed to stderr when the backend is destroyed. A diagnostic for
// finding where a step's device time goes; off, it costs one branch per op.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <vector>

namespace astrai::gpu {

class OpTimes {
 public:
  OpTimes();
  ~OpTimes();
  OpTimes(const OpTimes&) = delete;
  OpTimes& operator=(const OpTimes&) = delete;

  bool enabled() const { return enabled_; }
  // Records the start / end of op `name` on `stream`.
  void begin(cudaStream_t stream, const char* name);
  void end(cudaStream_t stream);
  // Folds every finished pair into the totals (call after the stream was synchronized).
  void harvest();

 private:
  struct Pending {
    const char* name;
    cudaEvent_t start, stop;
  };
  cudaEvent_t take();
  bool enabled_ = false;
  std::vector<cudaEvent_t> free_;
  std::vector<Pending> pending_;
  std::map<std::string, std::pair<double, long>> totals_;  // ms, calls
};

}  // namespace astrai::gpu
