// astrai bench linear [--shapes MxNxK,...] [--threads T] [--repeat N]
// The CPU backend's batch-invariant linear (out = x @ w^T, f32 x) on each instruction-set path this
// CPU has, with f32 weights and with bf16 weights (as a bf16 checkpoint's are kept), beside OpenBLAS's
// sgemm on the same operands in the same run (the reference: the GEMM it replaced, which is not
// batch-invariant). The weights are bf16 values, so both kinds hold the same numbers. Best of N calls
// each, interleaved; a table of ms, GFLOP/s and the time ratio to OpenBLAS, and one JSON line per
// shape. Each run's output is checked against the baseline path's bits with f32 weights (a mismatch
// fails the run: the paths and weight dtypes promise identical results).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "src/backend/cpu/ops.h"
#include "src/cli/commands.h"
#include "src/core/json_writer.h"

namespace astrai::cli {
namespace {

struct BenchLinearArgs {
  std::string shapes = "1x6144x1024,8x6144x1024,128x6144x1024,512x1024x3072";
  int threads = 1;
  int repeat = 5;
};

struct Shape {
  int64_t M, N, K;
};

std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    long long m = 0, n = 0, k = 0;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m < 1 || n < 1 || k < 1)
      throw Error(
          invalid_argument("--shapes: '" + item + "' is not MxNxK with positive sizes (e.g. 128x6144x1024)"));
    out.push_back({m, n, k});
    at = end + 1;
  }
  return out;
}

const char* path_name(cpu::Isa p) {
  switch (p) {
    case cpu::Isa::avx512: return "avx512";
    case cpu::Isa::avx2: return "avx2";
    case cpu::Isa::baseline: return "baseline";
    default: return "best";
  }
}

void run(const BenchLinearArgs& a) {
  const std::vector<Shape> shapes = parse_shapes(a.shapes);
  if (a.threads < 1) throw Error(invalid_argument("--threads must be at least 1"));
  omp_set_num_threads(a.threads);
  openblas_set_num_threads(a.threads);
  std::vector<cpu::Isa> paths;
  for (cpu::Isa p : {cpu::Isa::avx512, cpu::Isa::avx2, cpu::Isa::baseline})
    if (cpu::isa_available(p)) paths.push_back(p);
  std::printf("%-22s %-12s %10s %9s %10s\n", "M x N x K", "kernel", "ms", "GFLOP/s", "/ OpenBLAS");
  bool mismatch = false;
  for (const Shape& s : shapes) {
    std::mt19937 rng(uint32_t(s.M * 31 + s.N * 7 + s.K));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> x(size_t(s.M * s.K)), w(size_t(s.N * s.K)), out(size_t(s.M * s.N)), want(out.size());
    for (float& v : x) v = dist(rng);
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w16[i] = f32_to_bf16(dist(rng));
      w[i] = bf16_to_f32(w16[i]);
    }
    const Tensor xt(x.data(), DType::f32, {s.M, s.K}), wt(w.data(), DType::f32, {s.N, s.K}),
        wt16(w16.data(), DType::bf16, {s.N, s.K}), ot(out.data(), DType::f32, {s.M, s.N});
    cpu::linear(xt, wt, nullptr, Tensor(want.data(), DType::f32, {s.M, s.N}), cpu::Isa::baseline);
    const size_t runs = 2 * paths.size();      // each path with f32 weights, then bf16
    std::vector<double> best(runs + 1, 1e30);  // the paths, then OpenBLAS
    for (int r = 0; r < std::max(1, a.repeat); ++r) {
      for (size_t i = 0; i <= runs; ++i) {
        const auto t0 = BenchClock::now();
        if (i < runs)
          cpu::linear(xt, i < paths.size() ? wt : wt16, nullptr, ot, paths[i % paths.size()]);
        else
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(s.M), int(s.N), int(s.K), 1.0f, x.data(),
                      int(s.K), w.data(), int(s.K), 0.0f, out.data(), int(s.N));
        best[i] = std::min(best[i], seconds_since(t0));
        if (i < runs && std::memcmp(out.data(), want.data(), out.size() * sizeof(float)) != 0) {
          std::fprintf(
              stderr, "bench linear: path %s (%s weights) differs from the baseline path at %lldx%lldx%lld\n",
              path_name(paths[i % paths.size()]), i < paths.size() ? "f32" : "bf16", (long long)s.M,
              (long long)s.N, (long long)s.K);
          mismatch = true;
        }
      }
    }
    const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K), blas = best.back();
    const std::string shape = std::to_string(s.M) + " x " + std::to_string(s.N) + " x " + std::to_string(s.K);
    JsonWriter j;
    j.begin_object().key("bench").value("linear").key("M").value(s.M).key("N").value(s.N).key("K").value(s.K);
    j.key("threads").value(int64_t(a.threads)).key("openblas_ms").value(blas * 1e3);
    for (size_t i = 0; i <= runs; ++i) {
      const std::string name =
          i < runs ? std::string(path_name(paths[i % paths.size()])) + (i < paths.size() ? "" : "_bf16")
                   : "openblas";
      std::printf("%-22s %-12s %10.3f %9.1f %10.2f\n", shape.c_str(), name.c_str(), best[i] * 1e3,
                  flop / best[i] * 1e-9, best[i] / blas);
      if (i < runs) j.key(name + "_ms").value(best[i] * 1e3);
    }
    j.end_object();
    std::printf("%s\n", j.str().c_str());
  }
  if (mismatch)
    throw Error(
        internal_error("bench linear: the instruction-set paths or weight dtypes gave different bits"));
}

void register_bench_linear(CLI::App& app) {
  auto args = std::make_shared<BenchLinearArgs>();
  CLI::App* sub =
      bench_command(app)->add_subcommand("linear",
                                         "The CPU's batch-invariant linear on each instruction-set path, f32 "
                                         "and bf16 weights, beside OpenBLAS's sgemm");
  sub->add_option("--shapes", args->shapes, "Comma-separated MxNxK (x [M, K] times w [N, K] transposed)")
      ->capture_default_str();
  sub->add_option("--threads", args->threads, "Threads for both kernels")->capture_default_str();
  sub->add_option("--repeat", args->repeat, "Calls per kernel and shape; the best is reported")
      ->capture_default_str();
  sub->callback([args] {
    run(*args);
    set_exit_code(0);
  });
}

}  // namespace

ASTRAI_REGISTER_COMMAND("bench-linear", register_bench_linear);

}  // namespace astrai::cli
