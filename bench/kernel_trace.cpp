// libastrai_kernel_trace.so: the kernel timeline of any CUDA program, kernels of CUDA graphs included,
// as the device ran them (no replay, no cache flush): where a step's time goes between and inside
// kernels, which ncu's kernel-alone timings cannot show. Loaded by the CUDA driver at start-up through
// the injection hook, it records each kernel's start and end (CUPTI's activity API) and, at exit,
// writes those between the program's cudaProfilerStart and cudaProfilerStop calls (every kernel when
// it makes none) as CSV:
//   CUDA_INJECTION64_PATH=/path/libastrai_kernel_trace.so ASTRAI_KERNEL_TRACE=out.csv PROGRAM ...
//   range,start_ns,end_ns,stream,graph_node,name     (range: which profiler range, from 0)
// tests/gpu/kernel_timeline.py condenses it (busy time, gaps, time by kind of kernel); `astrai bench
// decode --profile-step N` and bench/torch_decode.py --profile-step each put one step in a range.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRow {
  uint64_t start = 0, end = 0;
  uint32_t stream = 0;
  uint64_t graph_node = 0;
  std::string name;
};

std::mutex mu;
std::vector<KernelRow> kernels;
// Profiler ranges as [start, end) timestamps; an open range's end is UINT64_MAX.
std::vector<std::pair<uint64_t, uint64_t>> ranges;

constexpr size_t kBufferBytes = size_t(8) << 20;

void report(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, s ? s : "unknown error");
}

std::string demangled(const char* name) {
  if (!name) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<KernelRow> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    got.push_back({k->start, k->end, k->streamId, k->graphNodeId, demangled(k->name)});
  }
  std::free(buffer);
  const std::lock_guard<std::mutex> lock(mu);
  kernels.insert(kernels.end(), got.begin(), got.end());
}

// cudaProfilerStart opens a range once it has returned; cudaProfilerStop closes it as it is called.
void CUPTIAPI on_api(void*, CUpti_CallbackDomain, CUpti_CallbackId id, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  const std::lock_guard<std::mutex> lock(mu);
  if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000 && cb->callbackSite == CUPTI_API_EXIT)
    ranges.emplace_back(now, UINT64_MAX);
  else if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000 && cb->callbackSite == CUPTI_API_ENTER &&
           !ranges.empty() && ranges.back().second == UINT64_MAX)
    ranges.back().second = now;
}

void write_trace() {
  report(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  const char* path = std::getenv("ASTRAI_KERNEL_TRACE");
  {
    // A helper process that initialised CUDA but ran nothing (a compile worker) leaves the file alone.
    const std::lock_guard<std::mutex> lock(mu);
    if (kernels.empty()) return;
  }
  std::FILE* f = path && *path ? std::fopen(path, "w") : stderr;
  if (!f) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path);
    return;
  }
  const std::lock_guard<std::mutex> lock(mu);
  std::sort(kernels.begin(), kernels.end(),
            [](const KernelRow& a, const KernelRow& b) { return a.start < b.start; });
  std::fprintf(f, "range,start_ns,end_ns,stream,graph_node,name\n");
  size_t written = 0;
  for (const KernelRow& k : kernels) {
    int range = ranges.empty() ? 0 : -1;
    for (size_t r = 0; r < ranges.size() && range < 0; ++r)
      if (k.start >= ranges[r].first && k.start < ranges[r].second) range = int(r);
    if (range < 0) continue;
    std::string name = k.name;
    std::replace(name.begin(), name.end(), '"', '\'');
    std::fprintf(f, "%d,%llu,%llu,%u,%llu,\"%s\"\n", range, (unsigned long long)k.start,
                 (unsigned long long)k.end, k.stream, (unsigned long long)k.graph_node, name.c_str());
    ++written;
  }
  if (f != stderr) std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu of %zu kernels in %zu profiler ranges written to %s\n", written,
               kernels.size(), ranges.size(), path && *path ? path : "stderr");
}

}  // namespace

// The CUDA driver calls this once, at initialisation, in a library named by CUDA_INJECTION64_PATH.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  report(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
         "cuptiActivityRegisterCallbacks");
  report(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
  CUpti_SubscriberHandle subscriber = nullptr;
  report(cuptiSubscribe(&subscriber, on_api, nullptr), "cuptiSubscribe");
  report(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                             CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000),
         "cuptiEnableCallback(cudaProfilerStart)");
  report(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                             CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000),
         "cuptiEnableCallback(cudaProfilerStop)");
  std::atexit(write_trace);
  return 1;
}
