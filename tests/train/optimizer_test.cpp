#include "train/optimizer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <numbers>
#include <random>

#include "tools/test_util.h"

using namespace astrai::train;
namespace test = astrai::test;
using astrai::Backend;
using astrai::DType;
using astrai::Tensor;

namespace {

// A parameter over host vectors (the CPU backend's tensors are host memory).
Param host_param(std::vector<float>& value, std::vector<float>& grad, bool decay) {
  Param p;
  p.shape = {int64_t(value.size())};
  p.value = Tensor(value.data(), DType::f32, {int64_t(value.size())});
  p.grad = Tensor(grad.data(), DType::f32, {int64_t(grad.size())});
  p.decay = decay;
  return p;
}

std::unique_ptr<Backend> cpu() {
  return astrai::make_backend(astrai::BackendOptions{}).value();
}

TrainConfig schedule_config(Schedule s) {
  TrainConfig c;
  c.schedule = s;
  c.steps = 100;
  c.warmup_steps = 10;
  c.lr = 1e-3;
  c.min_lr = 1e-4;
  c.decay_fraction = 0.2;
  return c;
}

void write_floats(const std::filesystem::path& p, const std::vector<float>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
}

std::vector<float> read_floats(const std::filesystem::path& p, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
  REQUIRE(f.gcount() == std::streamsize(n * sizeof(float)));
  return v;
}

// torch.optim.AdamW in float64, with clip_grad_norm_ and a per-step learning rate: the reference.
const char* kTorchAdamW = R"(
import sys, numpy as np, torch
d, n0, n1, steps, max_norm, wd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
lrs = [float(x) for x in sys.argv[7].split(',')]
f = lambda name: torch.from_numpy(np.fromfile(d + '/' + name, dtype=np.float32).astype(np.float64))
p0 = torch.nn.Parameter(f('p0')); p1 = torch.nn.Parameter(f('p1'))
g0 = f('g0').view(steps, n0); g1 = f('g1').view(steps, n1)
opt = torch.optim.AdamW([{'params': [p0], 'weight_decay': wd}, {'params': [p1], 'weight_decay': 0.0}],
                        lr=lrs[0], betas=(0.9, 0.95), eps=1e-8)
norms = []
for s in range(steps):
    p0.grad = g0[s].clone(); p1.grad = g1[s].clone()
    norms.append(float(torch.nn.utils.clip_grad_norm_([p0, p1], max_norm) if max_norm > 0 else 0))
    for g in opt.param_groups: g['lr'] = lrs[s]
    opt.step()
p0.detach().numpy().astype(np.float32).tofile(d + '/out0')
p1.detach().numpy().astype(np.float32).tofile(d + '/out1')
np.array(norms, dtype=np.float64).tofile(d + '/norms')
)";

}  // namespace

TEST_CASE("schedule: warmup is linear from lr/W to lr", "[train][optimizer]") {
  for (Schedule s : {Schedule::cosine, Schedule::wsd, Schedule::constant}) {
    const TrainConfig c = schedule_config(s);
    CHECK(learning_rate(c, 0) == Approx(1e-4));
    CHECK(learning_rate(c, 4) == Approx(5e-4));
    CHECK(learning_rate(c, 9) == Approx(1e-3));
  }
}

TEST_CASE("schedule: cosine falls from lr to min_lr after warmup", "[train][optimizer]") {
  const TrainConfig c = schedule_config(Schedule::cosine);
  CHECK(learning_rate(c, 10) == Approx(1e-3));
  CHECK(learning_rate(c, 55) == Approx(1e-4 + 0.5 * 9e-4));  // halfway: p = 45 / 90
  const double p = 89.0 / 90.0;
  CHECK(learning_rate(c, 99) == Approx(1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::numbers::pi * p))));
  for (int64_t s = 11; s < 100; ++s) CHECK(learning_rate(c, s) < learning_rate(c, s - 1));
}

TEST_CASE("schedule: wsd is flat, then decays linearly over the last fraction", "[train][optimizer]") {
  const TrainConfig c = schedule_config(Schedule::wsd);
  for (int64_t s = 10; s <= 80; ++s) CHECK(learning_rate(c, s) == 1e-3);
  CHECK(learning_rate(c, 90) == Approx(1e-3 + (1e-4 - 1e-3) * 0.5));
  CHECK(learning_rate(c, 99) == Approx(1e-3 + (1e-4 - 1e-3) * 19.0 / 20.0));
}

TEST_CASE("schedule: constant stays at lr", "[train][optimizer]") {
  const TrainConfig c = schedule_config(Schedule::constant);
  for (int64_t s = 10; s < 100; ++s) CHECK(learning_rate(c, s) == 1e-3);
}

TEST_CASE("clip_scale follows clip_grad_norm_", "[train][optimizer]") {
  CHECK(clip_scale(0.5, 1.0) == 1.0);
  CHECK(clip_scale(4.0, 1.0) == Approx(1.0 / (4.0 + 1e-6)));
  CHECK(clip_scale(4.0, 0.0) == 1.0);
}

TEST_CASE("AdamW matches torch.optim.AdamW (float64) with clipping, decay groups and a schedule",
          "[train][optimizer]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n0 = 1000, n1 = 37, steps = 6;
  const double max_norm = 5.0, wd = 0.1;
  std::vector<float> p0(n0), p1(n1), g0(size_t(n0 * steps)), g1(size_t(n1 * steps));
  for (float& x : p0) x = normal(rng);
  for (float& x : p1) x = normal(rng);
  // Gradients of varying size, so some steps clip and some do not.
  for (int64_t s = 0; s < steps; ++s) {
    const float scale = s % 2 ? 0.01f : 1.0f;
    for (int64_t i = 0; i < n0; ++i) g0[size_t(s * n0 + i)] = scale * normal(rng);
    for (int64_t i = 0; i < n1; ++i) g1[size_t(s * n1 + i)] = scale * normal(rng);
  }
  TrainConfig sc = schedule_config(Schedule::cosine);
  sc.steps = steps;
  sc.warmup_steps = 2;
  std::vector<double> lrs;
  std::string lr_arg;
  for (int64_t s = 0; s < steps; ++s) {
    lrs.push_back(learning_rate(sc, s));
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%.17g", s ? "," : "", lrs.back());
    lr_arg += buf;
  }

  test::TempDir dir("adamw");
  write_floats(dir / "p0", p0);
  write_floats(dir / "p1", p1);
  write_floats(dir / "g0", g0);
  write_floats(dir / "g1", g1);
  test::write_file(dir / "ref.py", kTorchAdamW);

  const auto be = cpu();
  AdamW opt(*be, AdamWOptions{0.9, 0.95, 1e-8, wd});
  std::vector<float> grad0(static_cast<size_t>(n0)), grad1(static_cast<size_t>(n1));
  const std::vector<Param> spans = {host_param(p0, grad0, true), host_param(p1, grad1, false)};
  opt.init(spans);
  std::vector<double> norms;
  for (int64_t s = 0; s < steps; ++s) {
    std::copy_n(g0.begin() + s * n0, n0, grad0.begin());
    std::copy_n(g1.begin() + s * n1, n1, grad1.begin());
    norms.push_back(opt.step(spans, lrs[size_t(s)], max_norm));
  }
  CHECK(opt.steps_taken() == steps);

  const auto r = test::run_command(test::python3() + " " + (dir / "ref.py").string() + " " +
                                   dir.path().string() + " " + std::to_string(n0) + " " + std::to_string(n1) +
                                   " " + std::to_string(steps) + " 5.0 0.1 " + lr_arg);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<float> want0 = read_floats(dir / "out0", size_t(n0)),
                           want1 = read_floats(dir / "out1", size_t(n1));
  std::vector<double> want_norms(static_cast<size_t>(steps));
  {
    std::ifstream f(dir / "norms", std::ios::binary);
    f.read(reinterpret_cast<char*>(want_norms.data()), std::streamsize(steps * 8));
  }
  bool clipped = false, unclipped = false;
  for (int64_t s = 0; s < steps; ++s) {
    CHECK(norms[size_t(s)] == Approx(want_norms[size_t(s)]).epsilon(1e-6));
    (norms[size_t(s)] > max_norm ? clipped : unclipped) = true;
  }
  CHECK(clipped);
  CHECK(unclipped);
  // f32 against float64: each update moves a parameter by about lr; 1e-5 absolute is ~1% of the
  // total movement and far below it.
  double worst = 0;
  for (int64_t i = 0; i < n0; ++i)
    worst = std::max(worst, double(std::abs(p0[size_t(i)] - want0[size_t(i)])));
  for (int64_t i = 0; i < n1; ++i)
    worst = std::max(worst, double(std::abs(p1[size_t(i)] - want1[size_t(i)])));
  INFO("max abs difference " << worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("AdamW: no decay where decay is off, decoupled decay where on (zero gradient)",
          "[train][optimizer]") {
  std::vector<float> a = {2.0f}, b = {2.0f}, g = {0.0f};
  std::vector<float> g2 = g;
  const std::vector<Param> spans = {host_param(a, g, true), host_param(b, g2, false)};
  const auto be = cpu();
  AdamW opt(*be, AdamWOptions{0.9, 0.95, 1e-8, 0.5});
  opt.init(spans);
  opt.step(spans, 0.1, 0.0);
  CHECK(a[0] == Approx(2.0 * (1 - 0.1 * 0.5)));
  CHECK(b[0] == 2.0f);
}
