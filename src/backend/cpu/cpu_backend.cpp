#include "src/backend/cpu/cpu_backend.h"

#include <omp.h>

#include <cstring>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"
#include "src/core/threads.h"

// Declared here rather than taken from <cblas.h>: the cblas.h the build finds may be the netlib
// one, which does not declare OpenBLAS's extensions.
extern "C" void openblas_set_num_threads(int num_threads);

namespace astrai {
namespace {

class CpuBackend final : public Backend {
 public:
  // OpenBLAS single-threaded: linear() splits its GEMMs over OpenMP threads itself (see linear.cpp).
  explicit CpuBackend(int threads) : threads_(threads) { openblas_set_num_threads(1); }

  Device device() const override { return Device::cpu; }
  std::string name() const override {
    return "cpu (f32, OpenBLAS, " + std::to_string(threads_) + " threads)";
  }
  DType compute_dtype() const override { return DType::f32; }
  DType weight_dtype(DType stored) const override { return stored == DType::bf16 ? DType::bf16 : DType::f32; }

  Buffer alloc(size_t bytes) override { return Buffer::host(bytes); }
  void upload(Tensor dst, const void* host_src) override {
    ASTRAI_OP_CHECK(dst.is_contiguous(), "upload: destination must be contiguous");
    if (dst.nbytes()) std::memcpy(dst.data, host_src, dst.nbytes());
  }
  void download(void* host_dst, const Tensor& src) override {
    ASTRAI_OP_CHECK(src.is_contiguous(), "download: source must be contiguous");
    if (src.nbytes()) std::memcpy(host_dst, src.data, src.nbytes());
  }
  void synchronize() override {}

  void embedding(const Tensor& table, const Tensor& ids, Tensor out) override {
    use_thread_count();
    cpu::embedding(table, ids, out);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    use_thread_count();
    cpu::rms_norm(x, w, eps, out);
  }
  void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    use_thread_count();
    cpu::add_rms_norm(residual, x, w, eps, out);
  }
  void linear(const Tensor& x, const Weight& w, const Tensor* bias, Tensor out) override {
    use_thread_count();
    cpu::linear(x, w, bias, out);
  }
  void rope(Tensor x, const Tensor& positions, const Tensor& cos_sin) override {
    use_thread_count();
    cpu::rope(x, positions, cos_sin);
  }
  void swiglu(const Tensor& gate, const Tensor& up, Tensor out) override {
    use_thread_count();
    cpu::swiglu(gate, up, out);
  }
  void add(const Tensor& a, const Tensor& b, Tensor out) override {
    use_thread_count();
    cpu::add(a, b, out);
  }
  void kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache,
                Tensor v_cache) override {
    use_thread_count();
    cpu::kv_store(k, v, slots, k_cache, v_cache);
  }
  void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const AttentionBatch& batch, float scale, Tensor out) override {
    use_thread_count();
    cpu::paged_attention(q, k_cache, v_cache, batch, scale, out);
  }
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) override {
    use_thread_count();
    cpu::gather_rows(x, rows, out);
  }
  void take_tokens(Tensor ids, const Tensor& moves, const Tensor& draws) override {
    cpu::take_tokens(ids, moves, draws);
  }
  void convert(const Tensor& src, Tensor dst) override {
    use_thread_count();
    cpu::convert(src, dst);
  }
  void dequantize(const Tensor& q, const Tensor& scale, int64_t block_rows, int64_t block_cols,
                  Tensor out) override {
    use_thread_count();
    cpu::dequantize(q, scale, block_rows, block_cols, out);
  }
  void sample(const SampleBatch& batch) override {
    use_thread_count();
    cpu::sample(batch);
  }
  size_t sample_workspace_bytes(int, int) const override { return 0; }  // per-thread host scratch

  bool supports_training() const override { return true; }
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha, float beta,
            Tensor c) override {
    use_thread_count();
    cpu::gemm(a, trans_a, b, trans_b, alpha, beta, c);
  }
  void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, Tensor dw,
                       const Tensor* dbias) override {
    use_thread_count();
    cpu::linear_backward(dy, x, w, dx, dw, dbias);
  }
  void rms_norm_train(const Tensor& x, const Tensor& w, float eps, Tensor out, Tensor rstd) override {
    use_thread_count();
    cpu::rms_norm_train(x, w, eps, out, rstd);
  }
  void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor dx,
                         Tensor dw, bool accumulate) override {
    use_thread_count();
    cpu::rms_norm_backward(dy, x, w, rstd, dx, dw, accumulate);
  }
  void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor dtable) override {
    use_thread_count();
    cpu::embedding_backward(dout, ids, dtable);
  }
  void rope_backward(Tensor dx, const Tensor& positions, const Tensor& cos_sin) override {
    use_thread_count();
    cpu::rope_backward(dx, positions, cos_sin);
  }
  void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor dgate,
                       Tensor dup) override {
    use_thread_count();
    cpu::swiglu_backward(dout, gate, up, dgate, dup);
  }
  void attention_train(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_begin, float scale,
                       Tensor out, Tensor lse) override {
    use_thread_count();
    cpu::attention_train(q, k, v, kv_begin, scale, out, lse);
  }
  void attention_train_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& kv_begin, const Tensor& out, const Tensor& lse, float scale,
                                Tensor dq, Tensor dk, Tensor dv) override {
    use_thread_count();
    cpu::attention_train_backward(dout, q, k, v, kv_begin, out, lse, scale, dq, dk, dv);
  }
  void cross_entropy(const Tensor& logits, const Tensor& targets, float label_smoothing, float grad_scale,
                     Tensor losses, Tensor dlogits) override {
    use_thread_count();
    cpu::cross_entropy(logits, targets, label_smoothing, grad_scale, losses, dlogits);
  }
  void zero(Tensor x) override {
    if (x.nbytes()) std::memset(x.data, 0, x.nbytes());
  }
  void adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWStep& s) override {
    use_thread_count();
    cpu::adamw(p, g, m, v, s);
  }
  double sum_squares(const std::vector<Tensor>& xs) override {
    use_thread_count();
    return cpu::sum_squares(xs);
  }

 private:
  // OpenMP's thread count (nthreads-var) belongs to each thread, not the process: a constructor's
  // omp_set_num_threads reaches only the thread that makes the backend, and the ops run on others
  // (the engine's step loop, training ranks), whose teams would be of every core. Every op sets it
  // on the thread that calls it, once per thread (the check is a thread-local read). Chosen over a
  // num_threads clause on each parallel region, which would thread the count through every cpu::
  // function, and over saving and restoring it around each op: the thread that runs a backend's
  // ops wants that count for its own OpenMP work too.
  void use_thread_count() const {
    if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
  }

  int threads_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads > 0 ? threads : num_threads());
}

}  // namespace astrai
