#include "gpu/graph.h"

#include "gpu/check.h"

namespace astrai::gpu {
namespace {

class CudaStepGraph final : public Backend::StepGraph {
 public:
  CudaStepGraph(cudaGraphExec_t exec, cudaStream_t stream, std::unique_ptr<Scratch> scratch)
      : exec_(exec), stream_(stream), scratch_(std::move(scratch)) {}
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;
  ~CudaStepGraph() override { cudaGraphExecDestroy(exec_); }

  void replay() override { ASTRAI_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace

std::unique_ptr<Backend::StepGraph> capture_graph(cudaStream_t stream, const std::function<void()>& body,
                                                  std::unique_ptr<Scratch> scratch) {
  // Relaxed mode: the body may cudaMalloc (a graph's own scratch, allocated at its first use),
  // which the stricter modes forbid during a capture. It enqueues only on `stream` (a
  // non-blocking stream), so nothing else it could call would join the capture.
  ASTRAI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  cudaGraph_t graph = nullptr;
  try {
    body();
  } catch (...) {
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // the capture's error is the body's to report
    throw;
  }
  ASTRAI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  ASTRAI_CUDA_CHECK(err);
  return std::make_unique<CudaStepGraph>(exec, stream, std::move(scratch));
}

}  // namespace astrai::gpu
