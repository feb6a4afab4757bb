#include "src/backend/backend.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"

namespace astrai {
namespace {

struct FactoryRegistry {
  std::mutex mu;
  std::map<Device, BackendFactory> factories;
};

FactoryRegistry& registry() {
  static FactoryRegistry r;
  return r;
}

}  // namespace

int64_t Backend::memory_available() const {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream ss(line.substr(13));
      int64_t kb = 0;
      ss >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

// The fused forward ops' defaults: the unfused sequence each is defined as (backend.h).
void Backend::rope_kv_store(Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm, const Tensor* k_norm,
                            float eps, const Tensor& positions, const Tensor& cos_sin, const Tensor& slots,
                            Tensor k_cache, Tensor v_cache) {
  if (q_norm) {
    if (!k_norm) throw Error(internal_error("rope_kv_store: q_norm without k_norm"));
    rms_norm(q, *q_norm, eps, q);
    rms_norm(k, *k_norm, eps, k);
  }
  rope(q, positions, cos_sin);
  rope(k, positions, cos_sin);
  kv_store(k, v, slots, k_cache, v_cache);
}

void Backend::rope_attention(Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm, const Tensor* k_norm,
                             float eps, const Tensor& positions, const Tensor& cos_sin, const Tensor& slots,
                             Tensor k_cache, Tensor v_cache, const AttentionBatch& batch, float scale,
                             Tensor out) {
  rope_kv_store(q, k, v, q_norm, k_norm, eps, positions, cos_sin, slots, k_cache, v_cache);
  paged_attention(q, k_cache, v_cache, batch, scale, out);
}

void Backend::add_rms_norm_linear(const Tensor& residual, const Tensor& x, const Tensor& norm_w, float eps,
                                  Tensor residual_out, Tensor h, const Weight& w, const Tensor* bias,
                                  Tensor out) {
  add(residual, x, residual_out);
  rms_norm(residual_out, norm_w, eps, h);
  linear(h, w, bias, out);
}

void Backend::add_rms_norm_mlp(const Tensor& residual, const Tensor& x, const Tensor& norm_w, float eps,
                               Tensor residual_out, Tensor h, const Weight& w_gate_up, Tensor gate_up,
                               Tensor act, const Weight& w_down, Tensor out) {
  add_rms_norm_linear(residual, x, norm_w, eps, residual_out, h, w_gate_up, nullptr, gate_up);
  const int64_t F = act.shape[1];
  swiglu(gate_up.cols(0, F), gate_up.cols(F, 2 * F), act);
  linear(act, w_down, nullptr, out);
}

void Backend::linear_residual(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& residual,
                              Tensor out) {
  linear(x, w, bias, out);
  add(residual, out, out);
}

// The training ops' defaults: a backend that has not implemented them says so by name (and
// supports_training() lets callers such as TrainModel::create refuse before the first op).
bool Backend::supports_training() const {
  return false;
}

namespace {
[[noreturn]] void not_implemented(const Backend& be, const char* op) {
  throw Error(unsupported(std::string(op) + ": not implemented on the " + be.name() + " backend"));
}
}  // namespace

void Backend::gemm(const Tensor&, bool, const Tensor&, bool, float, float, Tensor) {
  not_implemented(*this, "gemm");
}
void Backend::linear_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor*, Tensor,
                              const Tensor*) {
  not_implemented(*this, "linear_backward");
}
void Backend::rms_norm_train(const Tensor&, const Tensor&, float, Tensor, Tensor) {
  not_implemented(*this, "rms_norm_train");
}
void Backend::rms_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor, Tensor,
                                bool) {
  not_implemented(*this, "rms_norm_backward");
}
void Backend::embedding_backward(const Tensor&, const Tensor&, Tensor) {
  not_implemented(*this, "embedding_backward");
}
void Backend::rope_backward(Tensor, const Tensor&, const Tensor&) {
  not_implemented(*this, "rope_backward");
}
void Backend::swiglu_backward(const Tensor&, const Tensor&, const Tensor&, Tensor, Tensor) {
  not_implemented(*this, "swiglu_backward");
}
void Backend::attention_train(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, Tensor,
                              Tensor) {
  not_implemented(*this, "attention_train");
}
void Backend::attention_train_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, const Tensor&, float, Tensor, Tensor,
                                       Tensor) {
  not_implemented(*this, "attention_train_backward");
}
void Backend::cross_entropy(const Tensor&, const Tensor&, float, float, Tensor, Tensor) {
  not_implemented(*this, "cross_entropy");
}
void Backend::zero(Tensor x) {
  const std::vector<char> zeros(std::min<size_t>(x.nbytes(), size_t(4) << 20), 0);
  Tensor bytes = x;
  bytes.dtype = DType::u8;
  bytes.ndim = 1;
  bytes.shape[0] = int64_t(x.nbytes());
  bytes.set_contiguous_strides();
  for (int64_t b = 0; b < bytes.shape[0]; b += int64_t(zeros.size()))
    upload(bytes.rows(b, std::min(bytes.shape[0], b + int64_t(zeros.size()))), zeros.data());
}
void Backend::adamw(Tensor, const Tensor&, Tensor, Tensor, const AdamWStep&) {
  not_implemented(*this, "adamw");
}
double Backend::sum_squares(const std::vector<Tensor>&) {
  not_implemented(*this, "sum_squares");
}

void register_backend_factory(Device device, BackendFactory factory) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.factories[device] = std::move(factory);
}

bool has_backend_factory(Device device) {
  if (device == Device::cpu) return true;
  auto& r = registry();
  std::lock_guard lock(r.mu);
  return r.factories.count(device) > 0;
}

Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options) {
  if (options.device == Device::cpu) return make_cpu_backend(options.threads);
  BackendFactory factory;
  {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    auto it = r.factories.find(options.device);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory)
    return unsupported(
        "device 'cuda' requested but no CUDA backend is available: this astrai was built without "
        "it (rebuild with -DASTRAI_CUDA=ON on a machine with nvcc) or no GPU is visible; use --device cpu");
  return factory(options);
}

}  // namespace astrai
