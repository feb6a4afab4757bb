// Standalone GPU check and timing of the training step's element-wise CUDA ops (cross_entropy with
// a bf16 or in-place dlogits, adamw, convert f32 -> bf16, rms_norm_backward with its partial sums,
// swiglu, swiglu_backward, rope), against float64 host references on fresh random inputs, then
// timed at the llama-1b batch-8 x 2k shapes. Needs only CUDA (no Boost, OpenBLAS): built with nvcc
// from gpu/ and src/core, src/backend/rows.cpp. Exit code 1 on a mismatch.
//   nvcc -O3 -std=c++20 -I. -arch=sm_90a bench/train_fuse_check.cu gpu/cross_entropy.cu ...
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpu/check.h"
#include "gpu/ops.h"
#include "gpu/train_ops.h"
#include "src/core/dtype.h"

using namespace astrai;

namespace {

std::mt19937_64 rng(std::random_device{}());
int failures = 0;

std::vector<float> rand_vec(size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Dev(size_t b) : bytes(b) { ASTRAI_CUDA_CHECK(cudaMalloc(&p, b)); }
  ~Dev() { cudaFree(p); }
  Dev(Dev&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev& operator=(Dev&&) = delete;
  Tensor t(DType dt, std::initializer_list<int64_t> dims) const { return Tensor(p, dt, dims, Device::cuda); }
};

// Uploads host values as dt (rounding host in place to what the device holds).
Dev upload(std::vector<float>& host, DType dt) {
  Dev d(host.size() * dtype_size(dt));
  if (dt == DType::bf16) {
    std::vector<uint16_t> h(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      h[i] = f32_to_bf16(host[i]);
      host[i] = bf16_to_f32(h[i]);
    }
    ASTRAI_CUDA_CHECK(cudaMemcpy(d.p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  } else {
    ASTRAI_CUDA_CHECK(cudaMemcpy(d.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  }
  return d;
}
Dev upload_i32(const std::vector<int32_t>& host) {
  Dev d(host.size() * 4);
  ASTRAI_CUDA_CHECK(cudaMemcpy(d.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  return d;
}
std::vector<float> download(const Dev& d, DType dt, size_t n) {
  std::vector<float> out(n);
  if (dt == DType::bf16) {
    std::vector<uint16_t> h(n);
    ASTRAI_CUDA_CHECK(cudaMemcpy(h.data(), d.p, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
  } else {
    ASTRAI_CUDA_CHECK(cudaMemcpy(out.data(), d.p, n * 4, cudaMemcpyDeviceToHost));
  }
  return out;
}

// ||got - want|| / ||want|| against tol; also every value finite.
void expect(const char* what, const std::vector<float>& got, const std::vector<double>& want, double tol) {
  double num = 0, den = 0;
  bool finite = true;
  for (size_t i = 0; i < got.size(); ++i) {
    finite = finite && std::isfinite(got[i]);
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  const double e = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool ok = finite && e <= tol;
  std::printf("  %-44s rel l2 %.2e (tol %.0e) %s\n", what, e, tol, ok ? "ok" : "FAIL");
  if (!ok) ++failures;
}

void check_cross_entropy(int64_t R, int64_t V, float e) {
  auto z = rand_vec(size_t(R * V), 8.0f);
  std::vector<int32_t> y(static_cast<size_t>(R));
  for (auto& t : y) t = rng() % 6 == 0 ? -100 : int32_t(rng() % uint64_t(V));
  std::vector<double> want_loss(static_cast<size_t>(R)), want_dz(static_cast<size_t>(R * V));
  const float gs = 0.37f;
  for (int64_t r = 0; r < R; ++r) {
    if (y[r] == -100) continue;
    double m = -1e300, s = 0, mean = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, double(z[r * V + j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(z[r * V + j] - m), mean += z[r * V + j] / double(V);
    const double lse = m + std::log(s);
    want_loss[r] = (1 - e) * (lse - z[r * V + y[r]]) + e * (lse - mean);
    for (int64_t j = 0; j < V; ++j)
      want_dz[r * V + j] = gs * (std::exp(z[r * V + j] - lse) - (1 - e) * (j == y[r]) - e / double(V));
  }
  Dev zd = upload(z, DType::f32), yd = upload_i32(y), ld(size_t(R) * 4), dzd(size_t(R * V) * 2);
  gpu::cross_entropy(nullptr, zd.t(DType::f32, {R, V}), yd.t(DType::i32, {R}), e, gs, ld.t(DType::f32, {R}),
                     dzd.t(DType::bf16, {R, V}));
  char what[96];
  std::snprintf(what, sizeof what, "cross_entropy R %ld V %ld e %.1f loss", long(R), long(V), e);
  expect(what, download(ld, DType::f32, size_t(R)), want_loss, 1e-5);
  expect("  bf16 dz apart", download(dzd, DType::bf16, size_t(R * V)), want_dz, 1e-2);
  expect("  logits untouched", download(zd, DType::f32, size_t(R * V)),
         std::vector<double>(z.begin(), z.end()), 0);
  gpu::cross_entropy(nullptr, zd.t(DType::f32, {R, V}), yd.t(DType::i32, {R}), e, gs, ld.t(DType::f32, {R}),
                     zd.t(DType::f32, {R, V}));
  expect("  f32 dz in place", download(zd, DType::f32, size_t(R * V)), want_dz, 1e-5);
}

void check_adamw(int64_t n, int64_t skip) {
  auto p = rand_vec(static_cast<size_t>(n)), g = rand_vec(static_cast<size_t>(n)),
       m = rand_vec(size_t(n), 0.1f), v = rand_vec(size_t(n), 0.01f);
  for (float& x : v) x = std::abs(x);
  AdamWStep s;
  s.lr = 1e-3f, s.weight_decay = 0.1f, s.grad_scale = 0.5f, s.t = 7;
  Dev pd = upload(p, DType::f32), gd = upload(g, DType::f32), md = upload(m, DType::f32),
      vd = upload(v, DType::f32);
  const int64_t k = n - skip;
  auto at = [&](const Dev& d) {
    return Tensor(static_cast<float*>(d.p) + skip, DType::f32, {k}, Device::cuda);
  };
  gpu::adamw(nullptr, at(pd), at(gd), at(md), at(vd), s);
  std::vector<double> wp(p.begin(), p.end()), wm(m.begin(), m.end()), wv(v.begin(), v.end());
  const double bc1 = 1 - std::pow(double(s.beta1), s.t), bc2 = 1 - std::pow(double(s.beta2), s.t);
  for (int64_t i = skip; i < n; ++i) {
    const double gi = double(g[i]) * s.grad_scale;
    wm[i] = s.beta1 * wm[i] + (1 - s.beta1) * gi;
    wv[i] = s.beta2 * wv[i] + (1 - s.beta2) * gi * gi;
    wp[i] =
        wp[i] * (1 - double(s.lr) * s.weight_decay) - s.lr * (wm[i] / bc1) / (std::sqrt(wv[i] / bc2) + s.eps);
  }
  char what[96];
  std::snprintf(what, sizeof what, "adamw n %ld from element %ld: p", long(n), long(skip));
  expect(what, download(pd, DType::f32, size_t(n)), wp, 1e-5);
  expect("  m", download(md, DType::f32, size_t(n)), wm, 1e-5);
  expect("  v", download(vd, DType::f32, size_t(n)), wv, 1e-5);
}

void check_convert(int64_t n) {
  auto x = rand_vec(size_t(n), 100.0f);
  Dev xd = upload(x, DType::f32), yd(size_t(n) * 2);
  gpu::convert(nullptr, xd.t(DType::f32, {n}), yd.t(DType::bf16, {n}));
  const auto got = download(yd, DType::bf16, size_t(n));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += got[i] != bf16_to_f32(f32_to_bf16(x[i]));
  std::printf("  convert f32 -> bf16 n %-8ld %ld elements differ from the host rounding %s\n", long(n),
              long(bad), bad ? "FAIL" : "ok");
  if (bad) ++failures;
}

void check_rms_norm_backward(int64_t R, int64_t D) {
  auto x = rand_vec(size_t(R * D), 3.0f), w = rand_vec(static_cast<size_t>(D)), dy = rand_vec(size_t(R * D)),
       dx0 = rand_vec(size_t(R * D)), dw0 = rand_vec(static_cast<size_t>(D));
  Dev xd = upload(x, DType::bf16), wd = upload(w, DType::bf16), dyd = upload(dy, DType::bf16),
      dxd = upload(dx0, DType::bf16), dwd = upload(dw0, DType::f32);
  std::vector<float> rstd(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(x[r * D + i]) * x[r * D + i];
    rstd[r] = float(1.0 / std::sqrt(ss / double(D) + 1e-5));
  }
  Dev rd = upload(rstd, DType::f32);
  gpu::Scratch scratch;
  gpu::rms_norm_backward(nullptr, dyd.t(DType::bf16, {R, D}), xd.t(DType::bf16, {R, D}),
                         wd.t(DType::bf16, {D}), rd.t(DType::f32, {R}), dxd.t(DType::bf16, {R, D}),
                         dwd.t(DType::f32, {D}), true, scratch);
  std::vector<double> wdx(dx0.begin(), dx0.end()), wdw(dw0.begin(), dw0.end());
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0;
    for (int64_t i = 0; i < D; ++i) mean += double(dy[r * D + i]) * w[i] * x[r * D + i] * rstd[r] / double(D);
    for (int64_t i = 0; i < D; ++i) {
      const double xh = double(x[r * D + i]) * rstd[r];
      wdx[r * D + i] += rstd[r] * (double(dy[r * D + i]) * w[i] - xh * mean);
      wdw[i] += dy[r * D + i] * xh;
    }
  }
  char what[96];
  std::snprintf(what, sizeof what, "rms_norm_backward R %ld D %ld: dx (accumulated)", long(R), long(D));
  expect(what, download(dxd, DType::bf16, size_t(R * D)), wdx, 1e-2);
  expect("  dw", download(dwd, DType::f32, size_t(D)), wdw, 2e-3);
}

// Mean time of fn over reps launches (after one warm-up), in microseconds.
template <typename F>
double time_us(F fn, int reps = 20) {
  fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) fn();
  cudaEventRecord(b);
  ASTRAI_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  ASTRAI_CUDA_CHECK(cudaGetLastError());
  return 1000.0 * ms / reps;
}

void timings() {
  const int64_t N = 16384, H = 2048, F = 8192, V = 128256, R = 2093;
  std::printf("timings at llama-1b, batch 8 x 2048 (us per call; GB/s of the bytes each must move):\n");
  {
    Dev z(size_t(R * V) * 4), dz(size_t(R * V) * 2), y(size_t(R) * 4), l(size_t(R) * 4);
    ASTRAI_CUDA_CHECK(cudaMemset(z.p, 0, z.bytes));
    ASTRAI_CUDA_CHECK(cudaMemset(y.p, 0, y.bytes));
    const double us = time_us([&] {
      gpu::cross_entropy(nullptr, z.t(DType::f32, {R, V}), y.t(DType::i32, {R}), 0.0f, 1.0f,
                         l.t(DType::f32, {R}), dz.t(DType::bf16, {R, V}));
    });
    std::printf(
        "  cross_entropy [%ld, %ld] -> bf16 dz  %8.1f us  %6.0f GB/s (R2: 1657 us in place + a convert)\n",
        long(R), long(V), us, double(R * V) * 10 / us / 1e3);
  }
  {
    const int64_t n = 2048 * 8192;
    Dev p(n * 4), g(n * 4), m(n * 4), v(n * 4);
    for (Dev* d : {&p, &g, &m, &v}) ASTRAI_CUDA_CHECK(cudaMemset(d->p, 0, d->bytes));
    AdamWStep s;
    s.t = 3;
    const double us = time_us([&] {
      gpu::adamw(nullptr, p.t(DType::f32, {n}), g.t(DType::f32, {n}), m.t(DType::f32, {n}),
                 v.t(DType::f32, {n}), s);
    });
    std::printf("  adamw %ld elements                  %8.1f us  %6.0f GB/s\n", long(n), us,
                double(n) * 28 / us / 1e3);
  }
  {
    const int64_t n = 1235800000 / 4;
    Dev x(n * 4), y(n * 2);
    ASTRAI_CUDA_CHECK(cudaMemset(x.p, 0, x.bytes));
    const double us = time_us([&] { gpu::convert(nullptr, x.t(DType::f32, {n}), y.t(DType::bf16, {n})); });
    std::printf("  convert %ld f32 -> bf16         %8.1f us  %6.0f GB/s\n", long(n), us,
                double(n) * 6 / us / 1e3);
  }
  {
    Dev x(N * H * 2), w(H * 2), dy(N * H * 2), dx(N * H * 2), r(N * 4), dw(H * 4);
    for (Dev* d : {&x, &w, &dy, &dx, &r, &dw}) ASTRAI_CUDA_CHECK(cudaMemset(d->p, 0, d->bytes));
    gpu::Scratch scratch;
    const double us = time_us([&] {
      gpu::rms_norm_backward(nullptr, dy.t(DType::bf16, {N, H}), x.t(DType::bf16, {N, H}),
                             w.t(DType::bf16, {H}), r.t(DType::f32, {N}), dx.t(DType::bf16, {N, H}),
                             dw.t(DType::f32, {H}), true, scratch);
    });
    std::printf("  rms_norm_backward [%ld, %ld]        %8.1f us  %6.0f GB/s (R2: 199 us)\n", long(N), long(H),
                us, double(N * H) * 8 / us / 1e3);
  }
  {
    Dev gu(N * 2 * F * 2), act(N * F * 2), dgu(N * 2 * F * 2);
    ASTRAI_CUDA_CHECK(cudaMemset(gu.p, 0, gu.bytes));
    Tensor g = gu.t(DType::bf16, {N, F}), u = g;
    g.stride = u.stride = {2 * F, 1, 0, 0};
    u.data = static_cast<char*>(gu.p) + F * 2;
    Tensor dg = g, du = u;
    dg.data = dgu.p;
    du.data = static_cast<char*>(dgu.p) + F * 2;
    const double us = time_us([&] { gpu::swiglu(nullptr, g, u, act.t(DType::bf16, {N, F})); });
    std::printf("  swiglu [%ld, %ld]                   %8.1f us  %6.0f GB/s (R2: 237 us)\n", long(N), long(F),
                us, double(N * F) * 6 / us / 1e3);
    const double us2 = time_us([&] {
      gpu::swiglu_backward(nullptr, act.t(DType::bf16, {N, F}), g, u, dg, du);
    });
    std::printf("  swiglu_backward [%ld, %ld]          %8.1f us  %6.0f GB/s (R2: 337 us)\n", long(N), long(F),
                us2, double(N * F) * 10 / us2 / 1e3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::printf("checks (fresh random inputs vs float64 host references):\n");
    for (float e : {0.0f, 0.1f}) {
      check_cross_entropy(int64_t(rng() % 40 + 1), 4 * int64_t(rng() % 3000 + 1), e);
      check_cross_entropy(int64_t(rng() % 40 + 1), int64_t(rng() % 5000 + 2), e);
    }
    check_cross_entropy(3, 128256, 0.0f);
    check_adamw(int64_t(rng() % 300000 + 2), 0);
    check_adamw(int64_t(rng() % 300000 + 2), 1);
    check_convert(int64_t(rng() % 5000 + 1));
    check_convert(4 * int64_t(rng() % 5000 + 1));
    check_rms_norm_backward(int64_t(rng() % 3000 + 1), 2048);
    check_rms_norm_backward(int64_t(rng() % 400 + 1), 8 * int64_t(rng() % 130 + 2) + 3);
    if (!(argc > 1 && std::string(argv[1]) == "--check-only")) timings();
  } catch (const std::exception& ex) {
    std::printf("ERROR: %s\n", ex.what());
    return 2;
  }
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "all checks passed", failures);
  return failures ? 1 : 0;
}
