// Tensor parallelism over two GPUs through NCCL (src/model/tp_model.h): TP = 2 in bf16 against
// TP = 1 in bf16 and against the CPU's f32 TP = 1 (row-wise relative error of the logits within the
// bf16 tolerance of tests/gpu/model_forward_test.cpp), the same greedy tokens (a divergence is
// allowed only at a near-tie of TP = 1's logits, and printed), and decode steps replayed from CUDA
// graphs with the all-reduces captured inside equal to eager TP = 2 steps. Skips itself with fewer
// than two GPUs.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "gpu/cuda_backend.h"
#include "gpu/device_info.h"
#include "model/forward_util.h"
#include "model/tp_greedy.h"
#include "src/model/tp_model.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

constexpr double kTol = 3e-2;      // bf16 against f32 (tests/gpu/model_forward_test.cpp)
constexpr float kNearTie = 0.25f;  // top-two logit gap below which bf16 noise may flip a greedy pick

std::unique_ptr<Backend> gpu(int i) {
  BackendOptions o;
  o.device = Device::cuda;
  o.gpu_index = i;
  return make_backend(o).value();
}

// Index of the first step where the greedy tokens differ (-1: none), and TP = 1's top-two gap there.
std::pair<int, float> first_divergence(const GreedyRun& want, const GreedyRun& got, int64_t V) {
  for (size_t s = 0; s < 2; ++s)
    for (size_t i = 0; i < want.seqs[s].size(); ++i)
      if (want.seqs[s][i] != got.seqs[s][i]) {
        // Token i came from decode step i - prompt_len - 1, logits entry 2 + that, row s; the first
        // generated token came from a prefill step (its logits are compared within tolerance below).
        const int64_t step = int64_t(i) - int64_t(want.seqs[s].size()) + int64_t(want.logits.size());
        if (step < 2) return {int(i), -1.f};
        const auto& l = want.logits[size_t(step)];
        std::vector<float> row(l.begin() + int64_t(s) * V, l.begin() + int64_t(s + 1) * V);
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
        return {int(i), row[0] - row[1]};
      }
  return {-1, 0.f};
}

void check_tp2_on_gpus(const ModelConfig& cfg) {
  if (!gpu::register_cuda_backend() || gpu::device_count() < 2) {
    WARN("fewer than two CUDA GPUs visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " architecture " << cfg.architecture);
  std::mt19937_64 rng(seed);
  TempDir dir("tpgpu");
  write_random_model(dir.path(), cfg, seed, DType::bf16);
  const int64_t V = cfg.vocab_size;
  const int64_t na = std::uniform_int_distribution<int64_t>(60, 200)(rng);
  const int64_t nb = std::uniform_int_distribution<int64_t>(5, 60)(rng);
  const int64_t cut = std::uniform_int_distribution<int64_t>(1, na - 1)(rng);
  const int steps = 32;
  const std::vector<std::vector<int32_t>> prompts{random_ids(rng, na, V), random_ids(rng, nb, V)};
  const int num_pages = int((na + nb + 2 * steps) / 16) + 8;
  const auto pages = random_pages({na + steps + 1, nb + steps + 1}, 16, num_pages, rng);
  WeightStore store = WeightStore::open(dir.path()).value();

  auto cpu = make_backend(BackendOptions{}).value();
  auto ref_model = make_tensor_parallel(cfg, store, *cpu, {}).value();
  const GreedyRun ref = greedy(*ref_model, prompts, cut, steps, pages, num_pages);

  auto g0 = gpu(0);
  auto one = make_tensor_parallel(cfg, store, *g0, {}).value();
  const GreedyRun want = greedy(*one, prompts, cut, steps, pages, num_pages);

  auto r0 = gpu(0);
  std::vector<std::unique_ptr<Backend>> others;
  others.push_back(gpu(1));
  auto two = make_tensor_parallel(cfg, store, *r0, std::move(others)).value();
  const GreedyRun got = greedy(*two, prompts, cut, steps, pages, num_pages);

  // Logits compared on the TP = 1 run's inputs: compare only the steps before any divergence.
  const auto [div, gap] = first_divergence(want, got, V);
  std::printf("%s tp2 vs tp1 greedy: %s", cfg.architecture.c_str(), div < 0 ? "equal" : "diverge");
  if (div >= 0) std::printf(" at token %d (tp1 top-two gap %.4f)", div, gap);
  std::printf("\n");
  if (div >= 0) CHECK(gap < kNearTie);
  double e21 = 0, e2c = 0, e1c = 0;
  const size_t same_steps = div < 0 ? want.logits.size() : 2;  // the prefill steps at least
  for (size_t s = 0; s < same_steps; ++s) {
    const std::vector<double> w1(want.logits[s].begin(), want.logits[s].end());
    e21 = std::max(e21, max_row_rel_error(got.logits[s], w1, V));
    if (ref.seqs == want.seqs || s < 2) {
      const std::vector<double> wc(ref.logits[s].begin(), ref.logits[s].end());
      e2c = std::max(e2c, max_row_rel_error(got.logits[s], wc, V));
      e1c = std::max(e1c, max_row_rel_error(want.logits[s], wc, V));
    }
  }
  std::printf("%s max row rel error: tp2 vs tp1 %.3g, tp2 vs cpu %.3g, tp1 vs cpu %.3g (%zu steps)\n",
              cfg.architecture.c_str(), e21, e2c, e1c, same_steps);
  CHECK(e21 <= kTol);
  CHECK(e2c <= kTol);

  // Graphs: the same TP = 2 model with decode buckets, eager and then replayed from graphs.
  StepLimits limits;
  limits.max_seqs = 4;
  limits.max_tokens = int(na + nb);
  limits.max_model_len = int(na + steps + 8);
  REQUIRE(two->reserve_steps(limits).ok());
  KvCache kv_eager = two->allocate_kv(num_pages, 16);
  const GreedyRun eager = greedy(*two, kv_eager, prompts, cut, steps, pages);
  KvCache kv_graph = two->allocate_kv(num_pages, 16);
  const int captured = two->capture_decode_graphs(kv_graph).value();
  CHECK(captured > 0);
  const GreedyRun replayed = greedy(*two, kv_graph, prompts, cut, steps, pages);
  CHECK(replayed.seqs == eager.seqs);
  double eg = 0;
  bool bitwise = true;
  for (size_t s = 0; s < eager.logits.size(); ++s) {
    bitwise = bitwise && eager.logits[s] == replayed.logits[s];
    const std::vector<double> w(eager.logits[s].begin(), eager.logits[s].end());
    eg = std::max(eg, max_row_rel_error(replayed.logits[s], w, V));
  }
  std::printf("%s tp2 graphs (%d) vs eager: %s, max row rel error %.3g\n", cfg.architecture.c_str(), captured,
              bitwise ? "bit-identical" : "differ", eg);
  CHECK(eg <= 1e-3);
}

}  // namespace

TEST_CASE("tensor-parallel tiny llama on two GPUs matches one GPU within bf16 tolerance", "[gpu]") {
  check_tp2_on_gpus(preset_config("tiny").value());
}

TEST_CASE("tensor-parallel qwen3-style model on two GPUs matches one GPU within bf16 tolerance", "[gpu]") {
  check_tp2_on_gpus(qwen3_style_config());
}

TEST_CASE("tensor-parallel with GQA 4, head_dim 64 and biases on two GPUs matches one GPU", "[gpu]") {
  check_tp2_on_gpus(gqa4_bias_config());
}

// head_dim 128 needs the attention kernel's raised shared-memory limit, an attribute of each device:
// rank 1's device must get it too (it once did not, and qwen3-8b failed on --tp 2).
TEST_CASE("tensor-parallel with head_dim 128 on two GPUs matches one GPU", "[gpu]") {
  ModelConfig c = qwen3_style_config();
  c.head_dim = 128;
  check_tp2_on_gpus(c);
}

}  // namespace astrai::test
