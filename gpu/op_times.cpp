#include "gpu/op_times.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpu/check.h"

namespace astrai::gpu {

OpTimes::OpTimes() {
  const char* e = std::getenv("ASTRAI_CUDA_OP_TIMES");
  enabled_ = e && std::strcmp(e, "0") != 0;
}

OpTimes::~OpTimes() {
  if (!enabled_) return;
  harvest();
  std::vector<std::pair<std::string, std::pair<double, long>>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  double all = 0;
  for (const auto& r : rows) all += r.second.first;
  std::fprintf(stderr, "cuda op times (GPU, summed over the backend's life): %.3f ms\n", all);
  for (const auto& [name, t] : rows)
    std::fprintf(stderr, "  %-16s %10.3f ms %5.1f%% %8ld calls %9.2f us/call\n", name.c_str(), t.first,
                 all > 0 ? 100 * t.first / all : 0.0, t.second,
                 1e3 * t.first / double(std::max(1L, t.second)));
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t OpTimes::take() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  ASTRAI_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void OpTimes::begin(cudaStream_t stream, const char* name) {
  pending_.push_back({name, take(), nullptr});
  ASTRAI_CUDA_CHECK(cudaEventRecord(pending_.back().start, stream));
}

void OpTimes::end(cudaStream_t stream) {
  pending_.back().stop = take();
  ASTRAI_CUDA_CHECK(cudaEventRecord(pending_.back().stop, stream));
}

void OpTimes::harvest() {
  for (const Pending& p : pending_) {
    float ms = 0;
    if (p.stop && cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
      auto& t = totals_[p.name];
      t.first += ms;
      t.second += 1;
    }
    free_.push_back(p.start);
    if (p.stop) free_.push_back(p.stop);
  }
  pending_.clear();
}

}  // namespace astrai::gpu
