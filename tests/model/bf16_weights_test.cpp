// A bf16 checkpoint on the CPU: its matrices (linear weights, the embedding) stay bf16 there
// (Backend::weight_dtype) and widen as the kernels read them, so its logits are, bit for bit, those
// of an f32 checkpoint holding the same values, with about half the weight memory.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "model/forward_util.h"
#include "src/backend/backend.h"
#include "src/model/model.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

// One prefill of a, decode steps of a, and a batch of b's chunk beside a's next tokens: the
// logits of every row, concatenated.
std::vector<float> logits_of(Model& model, const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                             uint64_t seed) {
  std::mt19937_64 rng(seed);  // the same pages for both models
  const int page_size = 16, num_pages = 64;
  KvCache kv = model.allocate_kv(num_pages, page_size);
  const int64_t na = int64_t(a.size()), nb = int64_t(b.size());
  auto pages = random_pages({na, nb}, page_size, num_pages, rng);
  std::vector<float> all = run_forward(model, make_batch({{&a, &pages[0], 0, na - 4}}), kv);
  for (int64_t p = na - 4; p < na - 2; ++p) {
    const auto row = run_forward(model, make_batch({{&a, &pages[0], p, p + 1}}), kv);
    all.insert(all.end(), row.begin(), row.end());
  }
  const auto mixed =
      run_forward(model, make_batch({{&a, &pages[0], na - 2, na}, {&b, &pages[1], 0, nb}}), kv);
  all.insert(all.end(), mixed.begin(), mixed.end());
  return all;
}

void check_bf16_matches_f32_copy(const ModelConfig& cfg) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " architecture " << cfg.architecture);
  TempDir d16("bf16w"), d32("f32w");
  write_random_model(d16.path(), cfg, seed, DType::bf16);
  write_random_model(d32.path(), cfg, seed, DType::f32, nullptr, false, /*bf16_values=*/true);
  std::mt19937_64 rng(seed);
  const auto a = random_ids(rng, std::uniform_int_distribution<int64_t>(40, 120)(rng), cfg.vocab_size);
  const auto b = random_ids(rng, std::uniform_int_distribution<int64_t>(5, 30)(rng), cfg.vocab_size);

  auto backend = make_backend(BackendOptions{}).value();
  REQUIRE(backend->device() == Device::cpu);
  auto m16 = Model::load(d16.path(), *backend).value();
  auto m32 = Model::load(d32.path(), *backend).value();
  // Every matrix of the bf16 checkpoint is kept in bf16; vectors (norms, biases) in f32.
  int matrices = 0;
  m16->for_each_weight([&](const Tensor& t) {
    INFO("weight " << t.shape_str());
    CHECK(t.dtype == (t.ndim == 2 ? DType::bf16 : DType::f32));
    matrices += t.ndim == 2;
  });
  CHECK(matrices >= 1 + 4 * int(cfg.num_layers));
  CHECK(m16->weight_bytes() < m32->weight_bytes() * 55 / 100);

  const auto got = logits_of(*m16, a, b, seed), want = logits_of(*m32, a, b, seed);
  REQUIRE(got.size() == want.size());
  REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("a bf16 checkpoint on the cpu keeps bf16 matrices and gives its f32 copy's logits bit for bit",
          "[unit]") {
  check_bf16_matches_f32_copy(qwen3_style_config());  // qk-norm, untied head
  check_bf16_matches_f32_copy(gqa4_bias_config());    // q/k/v biases, GQA 4:1
  check_bf16_matches_f32_copy(preset_config("tiny").value());
}

}  // namespace astrai::test
