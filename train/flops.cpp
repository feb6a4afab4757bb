#include "train/flops.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

namespace astrai::train {

double flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double H = double(c.hidden_size), F = double(c.intermediate_size);
  const double per_layer = H * double(c.q_dim() + 2 * c.kv_dim()) + double(c.q_dim()) * H + 3.0 * H * F;
  const double matmul = double(c.num_layers) * per_layer + double(c.vocab_size) * H;
  return 6.0 * matmul + 6.0 * double(c.num_layers) * double(c.q_dim()) * double(seq_len);
}

double measure_bf16_peak_tflops(Backend& be) {
  if (be.compute_dtype() != DType::bf16) return 0.0;
  const int64_t n = 8192;
  Buffer a = be.alloc(size_t(n * n) * 2), b = be.alloc(size_t(n * n) * 2), c = be.alloc(size_t(n * n) * 2);
  // Random values: zeros could take a faster path on some hardware.
  std::vector<uint16_t> host(size_t(n * n));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : host) x = f32_to_bf16(u(rng));
  const Tensor ta = a.as(DType::bf16, {n, n}), tb = b.as(DType::bf16, {n, n}), tc = c.as(DType::bf16, {n, n});
  be.upload(ta, host.data());
  be.upload(tb, host.data());
  be.gemm(ta, false, tb, true, 1.0f, 0.0f, tc);  // plan and warm up
  be.synchronize();
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) be.gemm(ta, false, tb, true, 1.0f, 0.0f, tc);
    be.synchronize();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10);
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e12;
}

}  // namespace astrai::train
