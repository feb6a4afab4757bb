// What cuBLASLt's heuristic offers for the decode-step GEMMs of a large batch, and what each
// candidate costs inside a CUDA graph: its split of K, its reduction scheme, the workspace it asks
// for, and the graph nodes a launch records (a memset node, for the counters or the output of an
// in-place split-K reduction, is a node of its own, and in a step's graph costs a few microseconds
// before the GEMM starts). The plan is gpu/linear.cpp's: row-major out[M, N] = x[M, K] w[N, K]^T as
// column-major D[N, M] = W^T X, bf16 in and out, f32 compute. CUDA and cuBLASLt only:
//
//   nvcc -O3 -std=c++17 -I. -gencode=arch=compute_90a,code=sm_90a bench/gemm_candidates_bench.cu \
//        -lcublasLt -o gemm_candidates_bench
//   ./gemm_candidates_bench [M ...]     (default M: 464, the qwen3-8b serve's decode steps)
//
// For each shape (qwen3-8b's qkv, o, gate_up, down) it prints, per candidate in the heuristic's
// order: the kernel's split of K and reduction scheme, its workspace, the kinds of the nodes one
// launch puts in a graph, and the median time of a graph of 20 launches per launch, each launch on
// its own copy of the weights (the copies together larger than L2); "mask" then repeats the first
// candidate of the heuristic asked without in-place reductions.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.cuh"

namespace {

#define CKL(call)                                                                        \
  do {                                                                                   \
    cublasStatus_t s_ = (call);                                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                   \
      std::fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #call, int(s_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

constexpr size_t kWorkspace = size_t(32) << 20;  // gpu/linear.cpp's kCublasWorkspaceBytes or more
constexpr int kLaunches = 20;

struct Shape {
  const char* name;
  int n, k;
};

uint32_t algo_config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS)
    return 0;
  return v;
}

const char* node_kind(cudaGraphNodeType t) {
  switch (t) {
    case cudaGraphNodeTypeKernel: return "kernel";
    case cudaGraphNodeTypeMemset: return "memset";
    case cudaGraphNodeTypeMemcpy: return "memcpy";
    default: return "other";
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ms;
  for (int i = 1; i < argc; ++i) ms.push_back(std::atoi(argv[i]));
  if (ms.empty()) ms = {464};
  const Shape shapes[] = {
      {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}};
  cublasLtHandle_t lt;
  CKL(cublasLtCreate(&lt));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  void* ws = nullptr;
  CK(cudaMalloc(&ws, kWorkspace));
  for (int M : ms)
    for (const Shape& s : shapes) {
      const size_t wbytes = size_t(s.n) * s.k * 2,
                   copies = std::max<size_t>(2, (size_t(256) << 20) / wbytes + 1);
      void *w = nullptr, *x = nullptr, *d = nullptr;
      CK(cudaMalloc(&w, wbytes * copies));
      CK(cudaMalloc(&x, size_t(M) * s.k * 2));
      CK(cudaMalloc(&d, size_t(M) * s.n * 2));
      CK(cudaMemset(w, 0, wbytes * copies));
      CK(cudaMemset(x, 0, size_t(M) * s.k * 2));
      cublasLtMatmulDesc_t op;
      CKL(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
      CKL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
      CKL(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
      cublasLtMatrixLayout_t a, b, c;
      CKL(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, s.k, s.n, s.k));
      CKL(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, s.k, M, s.k));
      CKL(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, s.n, M, s.n));
      auto candidates = [&](uint32_t mask, int want) {
        cublasLtMatmulPreference_t pref;
        CKL(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t wsb = kWorkspace;
        CKL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                                 sizeof(wsb)));
        CKL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
                                                 sizeof(mask)));
        std::vector<cublasLtMatmulHeuristicResult_t> r(static_cast<size_t>(want));
        int found = 0;
        CKL(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, want, r.data(), &found));
        cublasLtMatmulPreferenceDestroy(pref);
        r.resize(size_t(found));
        return r;
      };
      auto report = [&](const char* tag, int i, const cublasLtMatmulHeuristicResult_t& h) {
        const float alpha = 1.0f, beta = 0.0f;
        auto launch = [&](int j) {
          CKL(cublasLtMatmul(lt, op, &alpha, static_cast<char*>(w) + (size_t(j) % copies) * wbytes, a, x, b,
                             &beta, d, c, d, c, &h.algo, ws, kWorkspace, st));
        };
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        launch(0);
        CK(cudaStreamEndCapture(st, &g));
        size_t count = 0;
        CK(cudaGraphGetNodes(g, nullptr, &count));
        std::vector<cudaGraphNode_t> nodes(count);
        CK(cudaGraphGetNodes(g, nodes.data(), &count));
        std::string kinds;
        for (cudaGraphNode_t nd : nodes) {
          cudaGraphNodeType ty;
          CK(cudaGraphNodeGetType(nd, &ty));
          kinds += std::string(kinds.empty() ? "" : "+") + node_kind(ty);
        }
        CK(cudaGraphDestroy(g));
        const double us = astrai::bench::graph_median_ms(
                              st,
                              [&] {
                                for (int j = 0; j < kLaunches; ++j) launch(j);
                              },
                              20) *
                          1000.0 / kLaunches;
        const double tflops = 2.0 * M * double(s.n) * s.k / (us * 1e-6) / 1e12;
        std::printf(
            "%4d %-8s %-5s %2d  splitk %2u  reduction %u  workspace %9zu  nodes %-14s %8.2f us %6.1f "
            "TFLOP/s\n",
            M, s.name, tag, i, algo_config(h.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
            algo_config(h.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), h.workspaceSize, kinds.c_str(), us,
            tflops);
      };
      const auto all = candidates(CUBLASLT_REDUCTION_SCHEME_MASK, 8);
      for (size_t i = 0; i < all.size(); ++i) report("heur", int(i), all[i]);
      const auto masked =
          candidates(CUBLASLT_REDUCTION_SCHEME_MASK & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE), 1);
      if (!masked.empty()) report("mask", 0, masked[0]);
      cublasLtMatrixLayoutDestroy(a);
      cublasLtMatrixLayoutDestroy(b);
      cublasLtMatrixLayoutDestroy(c);
      cublasLtMatmulDescDestroy(op);
      CK(cudaFree(w));
      CK(cudaFree(x));
      CK(cudaFree(d));
    }
  CK(cudaFree(ws));
  cublasLtDestroy(lt);
  return 0;
}
