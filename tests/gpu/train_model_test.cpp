// Training on the CUDA backend (bf16 compute, f32 master weights and gradients) against the CPU
// backend (f32) on the same random bf16 weights and batch: the loss and every parameter's gradient
// of the tiny preset and a Qwen3-style model (q/k norm, GQA, untied head), each also with head_dim
// 64 / 128 (the tensor-core attention), with packed documents and ignored targets. Tolerance per parameter
// ||g_gpu - g_cpu|| / ||g_cpu|| <= 5e-2: bf16 activations round each op's output to 2^-9 relative, a few
// dozen ops deep forward and back. Then `astrai train --device cuda` resumes with identical losses (20 steps
// vs 10 + --resume + 10). Skips itself (with a warning) without a GPU.
#include "train/train_model.h"

#include <simdjson.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "gpu/cuda_backend.h"
#include "model/forward_util.h"
#include "src/backend/backend.h"
#include "src/model/config.h"
#include "src/model/safetensors.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

using train::kIgnore;
using train::TrainBatch;
using train::TrainModel;

constexpr double kGradTol = 5e-2;

// B rows of T tokens, each row split into up to three documents; a fifth of the targets ignored.
TrainBatch random_batch(std::mt19937_64& rng, int B, int T, int64_t vocab) {
  TrainBatch b;
  b.batch = B;
  b.seq_len = T;
  std::uniform_int_distribution<int32_t> tok(0, int32_t(vocab) - 1);
  for (int r = 0; r < B; ++r) {
    const int cut1 = std::uniform_int_distribution<int>(1, T)(rng),
              cut2 = std::uniform_int_distribution<int>(cut1, T)(rng);
    for (int t = 0; t < T; ++t) {
      const int start = t < cut1 ? 0 : t < cut2 ? cut1 : cut2;
      b.tokens.push_back(tok(rng));
      b.targets.push_back(rng() % 5 == 0 ? kIgnore : tok(rng));
      b.positions.push_back(t - start);
      b.doc_start.push_back(start);
    }
  }
  return b;
}

std::vector<float> grad_of(Backend& be, const train::Param& p) {
  std::vector<float> g(size_t(p.grad.numel()));
  be.synchronize();
  be.download(g.data(), p.grad);
  return g;
}

void check_gradients(const ModelConfig& cfg, const char* what) {
  if (!gpu::register_cuda_backend()) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO(what << ", seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("gputrain");
  write_random_model(dir.path(), cfg, seed, DType::bf16);
  const WeightStore store = WeightStore::open(dir.path()).value();
  auto cpu = make_backend(BackendOptions{}).value();
  auto gpu = make_backend(BackendOptions{Device::cuda, 0, 0}).value();
  REQUIRE(gpu->supports_training());
  auto mc = TrainModel::create(cfg, store, *cpu).value();
  auto mg = TrainModel::create(cfg, store, *gpu).value();
  const TrainBatch b = random_batch(rng, 2, 100, cfg.vocab_size);
  const train::LossOptions lo{0.1f, 37};  // label smoothing, chunks that split the rows
  const float lc = mc->forward_backward(b, 1.0f, lo).value();
  const float lg = mg->forward_backward(b, 1.0f, lo).value();
  std::printf("%s: loss cpu %.6f gpu %.6f\n", what, lc, lg);
  CHECK(std::abs(lg - lc) <= 1e-2 * std::abs(lc));
  auto& pc = mc->params();
  auto& pg = mg->params();
  REQUIRE(pc.size() == pg.size());
  double worst = 0;
  for (size_t i = 0; i < pc.size(); ++i) {
    const std::vector<float> gc = grad_of(*cpu, pc[i]), gg = grad_of(*gpu, pg[i]);
    double num = 0, den = 0;
    for (size_t k = 0; k < gc.size(); ++k) {
      REQUIRE(std::isfinite(gg[k]));
      num += (double(gg[k]) - gc[k]) * (double(gg[k]) - gc[k]);
      den += double(gc[k]) * gc[k];
    }
    const double e = std::sqrt(num / std::max(den, 1e-300));
    worst = std::max(worst, e);
    INFO(pc[i].name << ": relative L2 error " << e);
    CHECK(e <= kGradTol);
  }
  std::printf("%s: worst parameter gradient rel l2 %.3g over %zu tensors\n", what, worst, pc.size());
  // The GPU step is deterministic: the same batch from zero gives the same bits.
  const std::vector<float> first = grad_of(*gpu, pg[0]);
  mg->zero_grad();
  CHECK(mg->forward_backward(b, 1.0f, lo).value() == lg);
  CHECK(grad_of(*gpu, pg[0]) == first);
}

TEST_CASE("cuda TrainModel gradients match the cpu's: tiny preset", "[gpu]") {
  check_gradients(preset_config("tiny").value(), "tiny preset");
}

TEST_CASE("cuda TrainModel gradients match the cpu's: Qwen3-style (q/k norm, GQA, untied head)", "[gpu]") {
  ModelConfig c = qwen3_style_config();
  c.tie_word_embeddings = false;
  check_gradients(c, "Qwen3-style");
}

// head_dim 64 and 128 with bf16: the tensor-core attention kernels (the two above take the
// CUDA-core ones, head_dim 32).
TEST_CASE("cuda TrainModel gradients match the cpu's: head_dim 64 and 128 (tensor-core attention)", "[gpu]") {
  ModelConfig a = preset_config("tiny").value();
  a.head_dim = 64;
  check_gradients(a, "tiny, head_dim 64");
  ModelConfig b = qwen3_style_config();
  b.head_dim = 128;
  b.tie_word_embeddings = false;
  check_gradients(b, "Qwen3-style, head_dim 128");
}

std::vector<std::string> losses(const std::filesystem::path& metrics) {
  std::vector<std::string> out;
  std::istringstream ss(read_file(metrics));
  simdjson::dom::parser parser;
  for (std::string line; std::getline(ss, line);) {
    simdjson::dom::element doc = parser.parse(line);
    out.push_back(std::string(simdjson::minify(doc["loss"])) + " " +
                  std::string(simdjson::minify(doc["grad_norm"])));
  }
  return out;
}

TEST_CASE("astrai train --device cuda: 20 steps == 10 steps + --resume + 10 (identical losses)", "[gpu]") {
  if (!gpu::register_cuda_backend()) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("gpuresume");
  std::string text;
  std::mt19937_64 rng(seed);
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to"};
  for (int d = 0; d < 60; ++d) {
    std::string line;
    for (int i = 0; i < 12 + int(rng() % 20); ++i) line += std::string(i ? " " : "") + words[rng() % 10];
    text += "{\"text\":\"" + line + ".\"}\n";
  }
  write_file(dir / "train.jsonl", text);
  const std::string common =
      "ASTRAI_CACHE_DIR='" + (dir / "cache").string() + "' " + astrai_bin() +
      " train --no-progress --device cuda --preset tiny --seed " + std::to_string(seed % 1000) +
      " --data.train '" + (dir / "train.jsonl").string() +
      "' --seq_len 64 --batch_size 2 --grad_accum 2 --steps 20 --warmup_steps 3 --lr 3e-3 "
      "--save_every 10 --out '";
  auto a = run_command(common + (dir / "a").string() + "'");
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  CHECK_THAT(a.err, Catch::Contains("on cuda"));
  REQUIRE(run_command(common + (dir / "b").string() + "' --stop-after 10").exit_code == 0);
  auto b = run_command(common + (dir / "b").string() + "' --resume");
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  const auto la = losses(dir / "a" / "metrics.jsonl"), lb = losses(dir / "b" / "metrics.jsonl");
  REQUIRE(la.size() == 20);
  CHECK(la == lb);
  std::printf("gpu resume: step 1 %s, step 20 %s (both runs)\n", la.front().c_str(), la.back().c_str());
}

}  // namespace
}  // namespace astrai::test
