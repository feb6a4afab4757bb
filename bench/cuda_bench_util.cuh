// The harness the standalone CUDA benchmarks share (bench/train_attention_bench.cu,
// bench/prefill_attention_bench.cu, bench/gemv_bench.cu): a checked CUDA call, bf16 downloads, relative error
// against a float64 reference, and the median time of a callable (or of a CUDA graph of what it
// enqueues) over CUDA events. Needs only CUDA.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                                 \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace astrai::bench {

// Whether the command line holds `flag` (e.g. "--quick").
inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}

// x rounded to bf16 and back: the values the kernels see.
inline float bf(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

inline std::vector<float> download_bf16(const __nv_bfloat16* p, size_t count) {
  std::vector<__nv_bfloat16> tmp(count);
  CK(cudaMemcpy(tmp.data(), p, count * 2, cudaMemcpyDeviceToHost));
  std::vector<float> r(count);
  for (size_t i = 0; i < count; ++i) r[i] = __bfloat162float(tmp[i]);
  return r;
}

// ||a - ref|| / ||ref|| over the elements where pick(i); NaN anywhere reads as an error of inf.
template <typename Pick>
double rel_err(const std::vector<float>& a, const std::vector<double>& ref, Pick pick) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!pick(i)) continue;
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Median milliseconds of f() over reps runs (after one warm-up), CUDA events on `stream` (f's
// stream; the default stream unless given).
template <typename F>
double median_ms(F f, int reps, cudaStream_t stream = nullptr) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();  // warm-up
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a, stream));
    f();
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median milliseconds of one replay of a CUDA graph of what record() enqueues on `stream` (captured
// once), over reps replays (median_ms).
template <typename Record>
double graph_median_ms(cudaStream_t stream, Record record, int reps) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  record();
  CK(cudaStreamEndCapture(stream, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  const double ms = median_ms([&] { CK(cudaGraphLaunch(ge, stream)); }, reps, stream);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return ms;
}

}  // namespace astrai::bench
