// Fault injection for the tensor-parallel tests (tests/model, tests/engine).
#pragma once

#include <memory>
#include <string>

#include "src/backend/backend.h"
#include "src/core/status.h"

namespace astrai::test {

// A CPU backend whose linear() throws once `fail_after` more calls have run (negative: never), to
// make one rank fail in the middle of a step.
class FailingBackend final : public Backend {
 public:
  FailingBackend() : in_(make_backend(BackendOptions{}).value()) {}
  int fail_after = -1;

  Device device() const override { return in_->device(); }
  std::string name() const override { return "failing " + in_->name(); }
  DType compute_dtype() const override { return in_->compute_dtype(); }
  Buffer alloc(size_t n) override { return in_->alloc(n); }
  void upload(Tensor d, const void* s) override { in_->upload(d, s); }
  void download(void* d, const Tensor& s) override { in_->download(d, s); }
  void synchronize() override { in_->synchronize(); }
  void embedding(const Tensor& t, const Tensor& i, Tensor o) override { in_->embedding(t, i, o); }
  void rms_norm(const Tensor& x, const Tensor& w, float e, Tensor o) override { in_->rms_norm(x, w, e, o); }
  void add_rms_norm(Tensor r, const Tensor& x, const Tensor& w, float e, Tensor o) override {
    in_->add_rms_norm(r, x, w, e, o);
  }
  void linear(const Tensor& x, const Weight& w, const Tensor* b, Tensor o) override {
    if (fail_after >= 0 && fail_after-- == 0) throw Error(internal_error("injected failure in linear"));
    in_->linear(x, w, b, o);
  }
  void rope(Tensor x, const Tensor& p, const Tensor& cs) override { in_->rope(x, p, cs); }
  void swiglu(const Tensor& g, const Tensor& u, Tensor o) override { in_->swiglu(g, u, o); }
  void add(const Tensor& a, const Tensor& b, Tensor o) override { in_->add(a, b, o); }
  void kv_store(const Tensor& k, const Tensor& v, const Tensor& s, Tensor kc, Tensor vc) override {
    in_->kv_store(k, v, s, kc, vc);
  }
  void paged_attention(const Tensor& q, const Tensor& kc, const Tensor& vc, const AttentionBatch& b, float sc,
                       Tensor o) override {
    in_->paged_attention(q, kc, vc, b, sc, o);
  }
  void gather_rows(const Tensor& x, const Tensor& r, Tensor o) override { in_->gather_rows(x, r, o); }
  void convert(const Tensor& s, Tensor d) override { in_->convert(s, d); }

 private:
  std::unique_ptr<Backend> in_;
};

}  // namespace astrai::test
