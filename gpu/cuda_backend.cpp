#include "gpu/cuda_backend.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "gpu/check.h"
#include "gpu/decode_splits.h"
#include "gpu/device_info.h"
#include "gpu/gemm.h"
#include "gpu/graph.h"
#include "gpu/linear.h"
#include "gpu/nccl_communicator.h"
#include "gpu/op_times.h"
#include "gpu/ops.h"
#include "gpu/train_ops.h"
#include "src/core/out_of_memory.h"

namespace astrai::gpu {
namespace {

// Backend::prefetch's budget: 24 MB, or ASTRAI_L2_PREFETCH_MB megabytes (0 turns it off). On the
// H200 (50 MB of L2) 24 and 40 MB gained alike at decode batch 8; 48 MB was 4% slower at batch 1.
int64_t prefetch_budget() {
  const char* mb = std::getenv("ASTRAI_L2_PREFETCH_MB");
  return int64_t((mb && *mb ? std::atof(mb) : 24.0) * (1 << 20));
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    ASTRAI_CUDA_CHECK(cudaSetDevice(device_));
    cudaDeviceProp prop{};
    ASTRAI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    name_ = std::string("cuda:") + std::to_string(device_) + " (" + prop.name + ", sm_" +
            std::to_string(prop.major) + std::to_string(prop.minor) + ", bf16, cuBLASLt)";
    ASTRAI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ASTRAI_CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
    for (cudaEvent_t& e : download_done_)
      ASTRAI_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    ASTRAI_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    ASTRAI_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    ASTRAI_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    if (prop.major >= 9) prefetch_budget_ = prefetch_budget();
    probe_paged_attention();
    linear_ = std::make_unique<Linear>();
    gemm_ = std::make_unique<Gemm>();
  }
  ~CudaBackend() override {
    linear_.reset();
    gemm_.reset();
    cudaStreamSynchronize(stream_);
    cudaStreamSynchronize(side_);
    cudaEventDestroy(upload_done_);
    for (cudaEvent_t e : download_done_) cudaEventDestroy(e);
    cudaEventDestroy(fork_);
    cudaEventDestroy(join_);
    cudaStreamDestroy(side_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda; }
  std::string name() const override { return name_; }
  DType compute_dtype() const override { return DType::bf16; }
  // fp8 matrices stay fp8 where the loader is asked to keep them (LoadOptions::keep_fp8): the
  // decode GEMV reads them as they are; GEMMs of more rows widen them into linear's scratch.
  DType weight_dtype(DType stored) const override {
    return stored == DType::fp8_e4m3 ? DType::fp8_e4m3 : DType::bf16;
  }
  void prepare_weight(const Weight& w) override {
    enter();
    linear_->prepare(w);
  }

  int64_t memory_available() const override {
    size_t free_bytes = 0, total = 0;
    ASTRAI_CUDA_CHECK(cudaSetDevice(device_));
    ASTRAI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return int64_t(free_bytes);
  }

  // Zeroed on the stream, so the zeros are ordered before any later op or upload on it.
  Buffer alloc(size_t bytes) override {
    enter();
    void* p = nullptr;
    if (bytes > 0) {
      const cudaError_t err = cudaMalloc(&p, bytes);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // clear the sticky-free error state for the next call
        throw OutOfMemory("out of device memory: " + memory_size(bytes) + " asked of cuda:" +
                          std::to_string(device_) + ", " + memory_size(size_t(memory_available())) + " free");
      }
      ASTRAI_CUDA_CHECK(err);
      ASTRAI_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    }
    return Buffer(p, bytes, Device::cuda, [](void* q) {
      if (q) cudaFree(q);  // a deleter must not throw; cudaFree fails only on a dead context
    });
  }
  void upload(Tensor dst, const void* host_src) override {
    enter();
    ASTRAI_GPU_CHECK(dst.device == Device::cuda && dst.is_contiguous(),
                     "upload: destination must be a contiguous cuda tensor");
    if (dst.nbytes())
      ASTRAI_CUDA_CHECK(cudaMemcpyAsync(dst.data, host_src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
  }
  // Returns once the bytes are on the host (the CPU backend's contract): later host code reads them.
  void download(void* host_dst, const Tensor& src) override {
    enter();
    ASTRAI_GPU_CHECK(src.device == Device::cuda && src.is_contiguous(),
                     "download: source must be a contiguous cuda tensor");
    if (src.nbytes()) {
      ASTRAI_CUDA_CHECK(cudaMemcpyAsync(host_dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
      ASTRAI_CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (times_.enabled()) times_.harvest();
    }
  }
  void synchronize() override {
    enter();
    ASTRAI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (times_.enabled()) times_.harvest();
  }

  void embedding(const Tensor& table, const Tensor& ids, Tensor out) override {
    const Scope scope = enter("embedding");
    gpu::embedding(stream_, table, ids, out);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    const Scope scope = enter("rms_norm");
    gpu::rms_norm(stream_, x, w, eps, out);
  }
  void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    const Scope scope = enter("add_rms_norm");
    gpu::add_rms_norm(stream_, residual, x, w, eps, out);
  }
  void linear(const Tensor& x, const Weight& w, const Tensor* bias, Tensor out) override {
    const Scope scope = enter("linear");
    linear_->run(stream_, x, w, bias, out);
  }
  void rope(Tensor x, const Tensor& positions, const Tensor& cos_sin) override {
    const Scope scope = enter("rope");
    gpu::rope(stream_, x, positions, cos_sin);
  }
  void swiglu(const Tensor& gate, const Tensor& up, Tensor out) override {
    const Scope scope = enter("swiglu");
    gpu::swiglu(stream_, gate, up, out);
  }
  void add(const Tensor& a, const Tensor& b, Tensor out) override {
    const Scope scope = enter("add");
    gpu::add(stream_, a, b, out);
  }
  void kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache,
                Tensor v_cache) override {
    const Scope scope = enter("kv_store");
    gpu::kv_store(stream_, k, v, slots, k_cache, v_cache);
  }
  void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const AttentionBatch& batch, float scale, Tensor out) override {
    const Scope scope = enter("paged_attention");
    gpu::paged_attention(stream_, q, k_cache, v_cache, batch, scale, out,
                         capture_scratch_ ? *capture_scratch_ : attention_scratch_);
  }
  // Fused forward ops (backend.h): one kernel where the defaults launch several.
  void rope_kv_store(Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm, const Tensor* k_norm,
                     float eps, const Tensor& positions, const Tensor& cos_sin, const Tensor& slots,
                     Tensor k_cache, Tensor v_cache) override {
    const Scope scope = enter("rope_kv_store");
    gpu::rope_kv_store(stream_, q, k, v, q_norm, k_norm, eps, positions, cos_sin, slots, k_cache, v_cache);
  }
  void rope_attention(Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm, const Tensor* k_norm,
                      float eps, const Tensor& positions, const Tensor& cos_sin, const Tensor& slots,
                      Tensor k_cache, Tensor v_cache, const AttentionBatch& batch, float scale,
                      Tensor out) override {
    const Scope scope = enter("rope_attention");
    gpu::rope_attention(stream_, q, k, v, q_norm, k_norm, eps, positions, cos_sin, slots, k_cache, v_cache,
                        batch, scale, out, capture_scratch_ ? *capture_scratch_ : attention_scratch_);
  }
  void add_rms_norm_linear(const Tensor& residual, const Tensor& x, const Tensor& norm_w, float eps,
                           Tensor residual_out, Tensor h, const Weight& w, const Tensor* bias,
                           Tensor out) override {
    const Scope scope = enter("add_rms_norm_linear");
    linear_->run_add_norm(stream_, residual, x, norm_w, eps, residual_out, h, w, bias, out);
  }
  void add_rms_norm_mlp(const Tensor& residual, const Tensor& x, const Tensor& norm_w, float eps,
                        Tensor residual_out, Tensor h, const Weight& w_gate_up, Tensor gate_up, Tensor act,
                        const Weight& w_down, Tensor out) override {
    const Scope scope = enter("add_rms_norm_mlp");
    linear_->run_mlp(stream_, residual, x, norm_w, eps, residual_out, h, w_gate_up, gate_up, act, w_down,
                     out);
  }
  // Decode-sized steps of 2 rows or more (the GEMV's rows): on the H200 it gained 3-5% at batch 8
  // and lost 4-11% at batch 32 and 64 (docs/performance.md). At batch 1 the GEMVs do not wait for
  // bytes L2 could hold, and the branch cost its step time: the graph's kernels then ran 10 us
  // longer, and 10 us passed between its first two kernels (a kernel timeline, llama-1b: 0.6%
  // a step; the twenty-third session). And only into a graph being
  // captured, where its launches cost the host nothing per step: an eager decode step is bound by
  // the host's launches, which it would lengthen. It goes on a second stream that waits for the ops
  // so far, so the kernels after them do not wait for it: a branch of the graph, joined at the
  // capture's end.
  void prefetch(std::span<const Tensor* const> next, int64_t rows) override {
    if (prefetch_budget_ <= 0 || next.empty() || rows < 2 || rows > kGemvMaxRows || !capture_scratch_) return;
    enter();
    check_prefetch(next);  // before the fork: a throw must leave no forked stream in the capture
    ASTRAI_CUDA_CHECK(cudaEventRecord(fork_, stream_));
    ASTRAI_CUDA_CHECK(cudaStreamWaitEvent(side_, fork_));
    gpu::prefetch_l2(side_, next, prefetch_budget_);
    side_in_capture_ = true;
  }
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) override {
    const Scope scope = enter("gather_rows");
    gpu::gather_rows(stream_, x, rows, out);
  }
  void take_tokens(Tensor ids, const Tensor& moves, const Tensor& draws) override {
    const Scope scope = enter("take_tokens");
    gpu::take_tokens(stream_, ids, moves, draws);
  }
  void convert(const Tensor& src, Tensor dst) override {
    const Scope scope = enter("convert");
    gpu::convert(stream_, src, dst);
  }
  void dequantize(const Tensor& q, const Tensor& scale, int64_t block_rows, int64_t block_cols,
                  Tensor out) override {
    const Scope scope = enter("dequantize");
    gpu::dequantize(stream_, q, scale, block_rows, block_cols, out);
  }
  void sample(const SampleBatch& batch) override {
    const Scope scope = enter("sample");
    gpu::sample(stream_, batch);
  }
  size_t sample_workspace_bytes(int rows, int vocab) const override {
    return gpu::sample_workspace_bytes(rows, vocab);
  }

  // ---- training ops (gpu/train_ops.h) ----
  bool supports_training() const override { return true; }
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha, float beta,
            Tensor c) override {
    const Scope scope = enter("gemm");
    gemm_->run(stream_, a, trans_a, b, trans_b, alpha, beta, c);
  }
  // Without a bias, one GEMM that reads the residual as its C (beta = 1) and writes out.
  void linear_residual(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& residual,
                       Tensor out) override {
    const Scope scope = enter("linear_residual");
    if (bias || x.dtype != out.dtype) {
      linear_->run(stream_, x, w, bias, out);
      gpu::add(stream_, residual, out, out);
      return;
    }
    gemm_->run(stream_, x, false, w, true, 1.0f, 1.0f, out, &residual);
  }
  // dx = dy w, dw += dy^T x (f32 dw from bf16 operands), dbias += column sums of dy. An f32 dy with
  // bf16 x (the loss's logit gradient) is rounded to bf16 for the GEMMs (cuBLASLt multiplies one
  // dtype); the bias gradient sums it unrounded.
  void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, Tensor dw,
                       const Tensor* dbias) override {
    const Scope scope = enter("linear_backward");
    Tensor g = dy;
    if (dy.dtype != x.dtype) {
      ASTRAI_GPU_CHECK(dy.ndim == 2 && dy.is_contiguous(),
                       "linear_backward: a converted dy must be contiguous");
      g = Tensor(dy_scratch_.ensure(size_t(dy.numel()) * dtype_size(x.dtype)), x.dtype,
                 {dy.shape[0], dy.shape[1]}, Device::cuda);
      gpu::convert(stream_, dy, g);
    }
    if (dx) gemm_->run(stream_, g, false, w, false, 1.0f, 0.0f, *dx);
    gemm_->run(stream_, g, true, x, false, 1.0f, 1.0f, dw);
    if (dbias) gpu::column_sum(stream_, dy, *dbias, reduce_scratch_);
  }
  void rms_norm_train(const Tensor& x, const Tensor& w, float eps, Tensor out, Tensor rstd) override {
    const Scope scope = enter("rms_norm_train");
    gpu::rms_norm_train(stream_, x, w, eps, out, rstd);
  }
  void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor dx,
                         Tensor dw, bool accumulate) override {
    const Scope scope = enter("rms_norm_backward");
    gpu::rms_norm_backward(stream_, dy, x, w, rstd, dx, dw, accumulate, reduce_scratch_);
  }
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor dtable) override {
    const Scope scope = enter("embedding_backward");
    gpu::embedding_backward(stream_, dout, ids, dtable, reduce_scratch_);
  }
  void rope_backward(Tensor dx, const Tensor& positions, const Tensor& cos_sin) override {
    const Scope scope = enter("rope_backward");
    gpu::rope_backward(stream_, dx, positions, cos_sin);
  }
  void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor dgate,
                       Tensor dup) override {
    const Scope scope = enter("swiglu_backward");
    gpu::swiglu_backward(stream_, dout, gate, up, dgate, dup);
  }
  void attention_train(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_begin, float scale,
                       Tensor out, Tensor lse) override {
    const Scope scope = enter("attention_train");
    gpu::attention_train(stream_, q, k, v, kv_begin, scale, out, lse);
  }
  void attention_train_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& kv_begin, const Tensor& out, const Tensor& lse, float scale,
                                Tensor dq, Tensor dk, Tensor dv) override {
    const Scope scope = enter("attention_train_backward");
    gpu::attention_train_backward(stream_, dout, q, k, v, kv_begin, out, lse, scale, dq, dk, dv,
                                  reduce_scratch_);
  }
  void cross_entropy(const Tensor& logits, const Tensor& targets, float label_smoothing, float grad_scale,
                     Tensor losses, Tensor dlogits) override {
    const Scope scope = enter("cross_entropy");
    gpu::cross_entropy(stream_, logits, targets, label_smoothing, grad_scale, losses, dlogits);
  }
  void zero(Tensor x) override {
    enter();
    ASTRAI_GPU_CHECK(x.device == Device::cuda && x.is_contiguous(),
                     "zero: x must be a contiguous cuda tensor");
    if (x.nbytes()) ASTRAI_CUDA_CHECK(cudaMemsetAsync(x.data, 0, x.nbytes(), stream_));
  }
  void adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWStep& s) override {
    const Scope scope = enter("adamw");
    gpu::adamw(stream_, p, g, m, v, s);
  }
  double sum_squares(const std::vector<Tensor>& xs) override {
    enter();
    const double s = gpu::sum_squares(stream_, xs, reduce_scratch_);
    if (times_.enabled()) times_.harvest();
    return s;
  }

  // ---- static step inputs and step graphs ----
  Buffer alloc_host_pinned(size_t bytes) override {
    enter();
    void* p = nullptr;
    if (bytes > 0) {
      const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw OutOfMemory("out of pinned host memory: " + memory_size(bytes) + " asked");
      }
      ASTRAI_CUDA_CHECK(err);
      std::memset(p, 0, bytes);
    }
    return Buffer(p, bytes, Device::cpu, [](void* q) {
      if (q) cudaFreeHost(q);
    });
  }
  void upload_async(Tensor dst, const void* host_src) override {
    enter();
    ASTRAI_GPU_CHECK(dst.device == Device::cuda && dst.is_contiguous(),
                     "upload_async: destination must be a contiguous cuda tensor");
    if (!dst.nbytes()) return;
    ASTRAI_CUDA_CHECK(cudaMemcpyAsync(dst.data, host_src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    ASTRAI_CUDA_CHECK(cudaEventRecord(upload_done_, stream_));
  }
  void wait_uploads() override {
    enter();
    ASTRAI_CUDA_CHECK(cudaEventSynchronize(upload_done_));  // at once if nothing was recorded
  }
  uint64_t download_async(void* host_dst, const Tensor& src) override {
    enter();
    ASTRAI_GPU_CHECK(src.device == Device::cuda && src.is_contiguous(),
                     "download_async: source must be a contiguous cuda tensor");
    const uint64_t ticket = downloads_++;
    if (src.nbytes())
      ASTRAI_CUDA_CHECK(cudaMemcpyAsync(host_dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    ASTRAI_CUDA_CHECK(cudaEventRecord(download_done_[ticket % kDownloadsInFlight], stream_));
    return ticket;
  }
  void wait_download(uint64_t ticket) override {
    enter();
    ASTRAI_GPU_CHECK(ticket < downloads_ && downloads_ - ticket <= uint64_t(kDownloadsInFlight),
                     "wait_download: ticket " + std::to_string(ticket) + " is not outstanding");
    ASTRAI_CUDA_CHECK(cudaEventSynchronize(download_done_[ticket % kDownloadsInFlight]));
  }
  bool supports_graphs() const override { return true; }
  std::vector<int> decode_kv_bounds() const override { return {kDecodeShortKeys, kDecodeLongKeys}; }
  void profile_range(bool on) override {
    enter();
    ASTRAI_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the range holds exactly what was launched in it
    ASTRAI_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
  }
  cudaStream_t stream() const { return stream_; }
  int device_index() const { return device_; }
  std::unique_ptr<StepGraph> capture(const std::function<void()>& body) override {
    enter();
    // A graph keeps the scratch addresses it was captured with, so each graph gets its own split-KV
    // scratch, owned by the graph: eager steps that grow theirs cannot free it under it. (It is
    // allocated at the capture's first attention; every layer needs the same size, so it never
    // grows, which would free memory, during the capture.)
    auto scratch = std::make_unique<Scratch>();
    capture_scratch_ = scratch.get();
    struct Reset {
      Scratch*& s;
      ~Reset() { s = nullptr; }
    } reset{capture_scratch_};
    side_in_capture_ = false;
    return capture_graph(
        stream_,
        [&] {
          body();
          if (side_in_capture_) {  // a capture must end with every stream it forked joined
            ASTRAI_CUDA_CHECK(cudaEventRecord(join_, side_));
            ASTRAI_CUDA_CHECK(cudaStreamWaitEvent(stream_, join_));
            side_in_capture_ = false;
          }
        },
        std::move(scratch));
  }

 private:
  // Brackets one op: GPU timing when ASTRAI_CUDA_OP_TIMES is set (see op_times.h).
  class Scope {
   public:
    Scope(OpTimes* t, cudaStream_t s) : times_(t), stream_(s) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() {
      if (times_) times_->end(stream_);
    }

   private:
    OpTimes* times_;
    cudaStream_t stream_;
  };

  // The CUDA runtime's current device is per host thread, and the engine calls from its own thread.
  void enter() const { ASTRAI_CUDA_CHECK(cudaSetDevice(device_)); }
  Scope enter(const char* op) {
    enter();
    // Event timing is not recorded into graphs: a replayed step counts as no op.
    if (!times_.enabled() || capture_scratch_) return Scope(nullptr, stream_);
    times_.begin(stream_, op);
    return Scope(&times_, stream_);
  }

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Linear> linear_;
  std::unique_ptr<Gemm> gemm_;
  Scratch dy_scratch_, reduce_scratch_;  // training: a bf16 copy of an f32 dy; gradient partial sums
  OpTimes times_;
  Scratch attention_scratch_;
  cudaEvent_t upload_done_ = nullptr;
  cudaEvent_t download_done_[kDownloadsInFlight] = {};  // download_async's, by ticket % kDownloadsInFlight
  uint64_t downloads_ = 0;                              // tickets issued
  Scratch* capture_scratch_ = nullptr;                  // set while capture() runs its body
  // prefetch's stream and the events that fork it from stream_ and join it back in a capture.
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  bool side_in_capture_ = false;  // the capture running has forked side_
  int64_t prefetch_budget_ = 0;   // bytes a prefetch asks L2 for (0: prefetch does nothing)
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options) {
  const int n = device_count();
  if (n == 0)
    return unsupported(
        "device 'cuda' requested but no CUDA GPU is visible (no driver or no device); use --device cpu");
  if (options.gpu_index < 0 || options.gpu_index >= n)
    return invalid_argument("GPU index " + std::to_string(options.gpu_index) +
                            " out of range: " + std::to_string(n) + " GPU(s) visible");
  try {
    return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(options.gpu_index));
  } catch (const Error& e) {
    return e.status();
  }
}

CudaBackendStream cuda_backend_stream(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (!cuda) return {};
  return {cuda->stream(), cuda->device_index()};
}

bool register_cuda_backend() {
  if (device_count() == 0) return false;
  register_backend_factory(Device::cuda, make_cuda_backend);
  register_nccl_communicator();
  return true;
}

}  // namespace astrai::gpu
