// Shared by the fp8 checkpoint tests on the CPU (tests/model/fp8_weights_test.cpp) and on the GPU
// (tests/gpu/fp8_weights_test.cpp): an fp8 checkpoint against the f32 one holding its widened values.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "model/forward_util.h"
#include "model/tp_greedy.h"
#include "src/backend/backend.h"
#include "src/model/model.h"
#include "tools/test_util.h"

namespace astrai::test {

// Two prompts of random tokens, the first's prefill cut in two, over random pages.
struct Prompts {
  std::vector<std::vector<int32_t>> seqs;
  int64_t cut = 0;
  int num_pages = 0;
  std::vector<SeqPages> pages;
};

inline Prompts draw_prompts(const ModelConfig& cfg, std::mt19937_64& rng, int steps) {
  Prompts p;
  const int64_t na = std::uniform_int_distribution<int64_t>(20, 60)(rng);
  const int64_t nb = std::uniform_int_distribution<int64_t>(5, 30)(rng);
  p.cut = std::uniform_int_distribution<int64_t>(1, na - 1)(rng);
  p.seqs = {random_ids(rng, na, cfg.vocab_size), random_ids(rng, nb, cfg.vocab_size)};
  p.num_pages = int((na + nb + 2 * steps) / 16) + 8;
  p.pages = random_pages({na + steps + 1, nb + steps + 1}, 16, p.num_pages, rng);
  return p;
}

inline std::vector<float> all_logits(const GreedyRun& run) {
  std::vector<float> out;
  for (const auto& l : run.logits) out.insert(out.end(), l.begin(), l.end());
  return out;
}

// Loads an fp8 copy of a random checkpoint (under `options`) and its widened f32 copy on backends
// from `make` and requires the same logits, bit for bit, through a chunked prefill and greedy
// decode steps.
inline void check_fp8_matches_widened(const ModelConfig& cfg, const Fp8Layout& layout,
                                      const std::function<std::unique_ptr<Backend>()>& make,
                                      const std::string& quantization_config = "",
                                      const LoadOptions& options = {}) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " architecture " << cfg.architecture << " blocks " << layout.block_rows << " x "
               << layout.block_cols);
  TempDir src("f32w"), fp8("fp8w"), wide("widew");
  write_random_model(src.path(), cfg, seed);
  write_fp8_model(src.path(), fp8.path(), wide.path(), layout, seed, quantization_config);
  std::mt19937_64 rng(seed);
  const int steps = 4;
  const Prompts p = draw_prompts(cfg, rng, steps);

  auto backend = make();
  auto m8 = Model::load(fp8.path(), *backend, options);
  REQUIRE(m8.ok());
  auto mw = Model::load(wide.path(), *backend).value();
  CHECK_FALSE(m8.value()->config().quantization.method.empty());
  // The widened matrices take what the f32 checkpoint's take on this backend.
  CHECK(m8.value()->weight_bytes() == mw->weight_bytes());
  const auto got = all_logits(greedy(*m8.value(), p.seqs, p.cut, steps, p.pages, p.num_pages));
  const auto want = all_logits(greedy(*mw, p.seqs, p.cut, steps, p.pages, p.num_pages));
  REQUIRE(got.size() == want.size());
  REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
}

// Loads an fp8 copy of a random checkpoint with LoadOptions::keep_fp8 on a backend from `make` and
// requires its logits within bf16 tolerance (row-wise relative error <= 3e-2, as the GPU forward
// tests) of the widened f32 copy's on the CPU: a full prefill (on a GPU, GEMMs over the widened
// matrices), token by token (the decode GEMV over the fp8 bytes), and two sequences a token each
// per step. The kept model holds fewer weight bytes than the widened one on the same backend.
inline void check_fp8_kept(const ModelConfig& cfg, const Fp8Layout& layout,
                           const std::function<std::unique_ptr<Backend>()>& make) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " architecture " << cfg.architecture << " blocks " << layout.block_rows << " x "
               << layout.block_cols);
  TempDir src("f32w"), fp8("fp8w"), wide("widew");
  write_random_model(src.path(), cfg, seed);
  write_fp8_model(src.path(), fp8.path(), wide.path(), layout, seed);
  std::mt19937_64 rng(seed);
  const int64_t V = cfg.vocab_size;
  const std::vector<int32_t> a = random_ids(rng, std::uniform_int_distribution<int64_t>(20, 60)(rng), V);
  const std::vector<int32_t> b = random_ids(rng, std::uniform_int_distribution<int64_t>(5, 20)(rng), V);
  const int64_t na = int64_t(a.size()), nb = int64_t(b.size());
  const int num_pages = int((na + nb) / 16) + 8;
  auto pages = random_pages({na, nb}, 16, num_pages, rng);

  std::vector<double> ref_a, ref_b;
  {
    auto cpu = make_backend(BackendOptions{}).value();
    auto model = Model::load(wide.path(), *cpu).value();
    KvCache kv = model->allocate_kv(num_pages, 16);
    for (float v : run_forward(*model, make_batch({{&a, &pages[0], 0, na}}), kv)) ref_a.push_back(v);
    for (float v : run_forward(*model, make_batch({{&b, &pages[1], 0, nb}}), kv)) ref_b.push_back(v);
  }
  auto backend = make();
  LoadOptions keep;
  keep.keep_fp8 = true;
  auto model = Model::load(fp8.path(), *backend, keep).value();
  CHECK(model->weight_bytes() < Model::load(wide.path(), *backend).value()->weight_bytes());
  KvCache kv = model->allocate_kv(num_pages, 16);
  const double prefill =
      max_row_rel_error(run_forward(*model, make_batch({{&a, &pages[0], 0, na}}), kv), ref_a, V);
  std::vector<float> one_a, two_a, two_b;
  for (int64_t p = 0; p < na; ++p) {
    auto row = run_forward(*model, make_batch({{&a, &pages[0], p, p + 1}}), kv);
    one_a.insert(one_a.end(), row.begin(), row.end());
  }
  for (int64_t p = 0; p < na; ++p) {  // b's tokens beside a's while b has them
    std::vector<Chunk> chunks{{&a, &pages[0], p, p + 1}};
    if (p < nb) chunks.push_back({&b, &pages[1], p, p + 1});
    auto rows = run_forward(*model, make_batch(chunks), kv);
    two_a.insert(two_a.end(), rows.begin(), rows.begin() + V);
    two_b.insert(two_b.end(), rows.begin() + V, rows.end());
  }
  const double one = max_row_rel_error(one_a, ref_a, V);
  const double two = std::max(max_row_rel_error(two_a, ref_a, V), max_row_rel_error(two_b, ref_b, V));
  INFO("max row rel error: prefill " << prefill << ", token by token " << one << ", two a step " << two);
  CHECK(prefill <= 3e-2);
  CHECK(one <= 3e-2);
  CHECK(two <= 3e-2);
}

}  // namespace astrai::test
