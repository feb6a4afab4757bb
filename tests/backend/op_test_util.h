// Helpers for the backend op tests: random inputs, tensors on a backend's device (allocated and
// uploaded through the Backend interface so the same tests can run against the CUDA backend), and
// error measures against float64 reference loops.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "src/backend/backend.h"

namespace astrai::test {

struct Rng {
  explicit Rng(uint64_t seed) : gen(seed) {}
  std::mt19937_64 gen;
  float uniform(float lo = -1.0f, float hi = 1.0f) {
    return std::uniform_real_distribution<float>(lo, hi)(gen);
  }
  int randint(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }  // inclusive
  std::vector<float> vec(size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(-scale, scale);
    return v;
  }
};

// A tensor on the backend's device that owns its memory.
struct DeviceTensor {
  Buffer buf;
  Tensor t;
};

inline std::unique_ptr<Backend> cpu_backend() {
  return make_backend(BackendOptions{}).value();
}

template <typename T>
DeviceTensor to_device(Backend& be, const std::vector<T>& host, std::initializer_list<int64_t> dims,
                       DType dtype = sizeof(T) == 4 && std::is_floating_point_v<T> ? DType::f32
                                                                                   : DType::i32) {
  DeviceTensor d;
  d.buf = be.alloc(host.size() * sizeof(T));
  d.t = d.buf.as(dtype, dims);
  be.upload(d.t, host.data());
  return d;
}

inline DeviceTensor zeros(Backend& be, std::initializer_list<int64_t> dims, DType dtype = DType::f32) {
  DeviceTensor d;
  Tensor shape_only(nullptr, dtype, dims);
  d.buf = be.alloc(shape_only.nbytes());
  d.t = d.buf.as(dtype, dims);
  return d;
}

template <typename T = float>
std::vector<T> to_host(Backend& be, const Tensor& t) {
  std::vector<T> h(size_t(t.numel()));
  be.synchronize();
  be.download(h.data(), t);
  return h;
}

// max over i of |got - want| / (atol_scale + |want|) style checks are too loose near zero; the ops
// tests use a per-element bound |got - want| <= rtol * scale_i + atol with an op-specific scale_i.
inline double max_abs_diff(const std::vector<float>& got, const std::vector<double>& want) {
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(double(got[i]) - want[i]));
  return m;
}

// ||got - want|| / ||want|| over the whole vector.
inline double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace astrai::test
