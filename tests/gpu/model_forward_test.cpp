// The decoder forward on the CUDA backend (bf16) against the CPU backend (f32) on the same random
// bf16 weights: logits of a full prefill, of token-by-token decode through the paged cache, and of
// random chunks of two sequences packed into one batch, and of mixed steps (one sequence's decode
// row leading the other's prefill chunks), each within bf16 tolerance of the CPU's full-prefill
// logits. Skips itself (with a warning) without a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <random>

#include "gpu/cuda_backend.h"
#include "model/forward_util.h"
#include "src/backend/backend.h"
#include "src/model/config.h"
#include "src/model/model.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

// Row-wise ||gpu - cpu|| / ||cpu|| of the logits: bf16 activations round every op's output to an
// 8-bit significand (2^-9 relative), a few dozen roundings deep for these two-layer models.
constexpr double kTol = 3e-2;

std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

void check_gpu_against_cpu(const ModelConfig& cfg) {
  if (!gpu::register_cuda_backend()) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " architecture " << cfg.architecture);
  std::mt19937_64 rng(seed);
  TempDir dir("gpufwd");
  write_random_model(dir.path(), cfg, seed, DType::bf16);
  const int64_t V = cfg.vocab_size;
  const std::vector<int32_t> a = random_ids(rng, std::uniform_int_distribution<int64_t>(150, 260)(rng), V);
  const std::vector<int32_t> b = random_ids(rng, std::uniform_int_distribution<int64_t>(20, 70)(rng), V);
  const int64_t na = int64_t(a.size()), nb = int64_t(b.size());

  // The reference: the CPU backend's full prefills.
  std::vector<double> ref_a, ref_b;
  {
    auto cpu = make_backend(BackendOptions{}).value();
    auto model = Model::load(dir.path(), *cpu).value();
    KvCache kv = model->allocate_kv(int((na + nb) / 16) + 8, 16);
    std::mt19937_64 r2(seed);
    auto pages = random_pages({na, nb}, 16, int((na + nb) / 16) + 8, r2);
    ref_a = widen(run_forward(*model, make_batch({{&a, &pages[0], 0, na}}), kv));
    ref_b = widen(run_forward(*model, make_batch({{&b, &pages[1], 0, nb}}), kv));
  }

  auto gpu = make_backend(BackendOptions{Device::cuda, 0, 0}).value();
  REQUIRE(gpu->compute_dtype() == DType::bf16);
  auto model = Model::load(dir.path(), *gpu).value();
  const int page_size = std::vector<int>{16, 7, 1}[std::uniform_int_distribution<size_t>(0, 2)(rng)];
  INFO("page_size " << page_size);
  const int num_pages = int((na + nb) / page_size) + 8;
  KvCache kv = model->allocate_kv(num_pages, page_size);

  {  // one full prefill
    auto pages = random_pages({na}, page_size, num_pages, rng);
    const double err =
        max_row_rel_error(run_forward(*model, make_batch({{&a, &pages[0], 0, na}}), kv), ref_a, V);
    std::printf("%s gpu vs cpu, full prefill: max row rel error %.3g\n", cfg.architecture.c_str(), err);
    CHECK(err <= kTol);
  }
  {  // decode: one token per step through the cache
    auto pages = random_pages({na}, page_size, num_pages, rng);
    std::vector<float> got;
    for (int64_t p = 0; p < na; ++p) {
      auto row = run_forward(*model, make_batch({{&a, &pages[0], p, p + 1}}), kv);
      got.insert(got.end(), row.begin(), row.end());
    }
    const double err = max_row_rel_error(got, ref_a, V);
    std::printf("%s gpu vs cpu, token by token: max row rel error %.3g\n", cfg.architecture.c_str(), err);
    CHECK(err <= kTol);
  }
  {  // random chunks, both sequences in each batch while both have tokens left
    auto pages = random_pages({na, nb}, page_size, num_pages, rng);
    std::vector<float> got_a, got_b;
    int64_t pa = 0, pb = 0;
    std::uniform_int_distribution<int64_t> chunk(1, 40);
    while (pa < na || pb < nb) {
      std::vector<Chunk> chunks;
      const int64_t ea = std::min(na, pa + chunk(rng)), eb = std::min(nb, pb + chunk(rng));
      if (pb < nb) chunks.push_back({&b, &pages[1], pb, eb});
      if (pa < na) chunks.push_back({&a, &pages[0], pa, ea});
      auto got = run_forward(*model, make_batch(chunks), kv);
      size_t off = 0;
      for (const Chunk& c : chunks) {
        auto& dst = c.ids == &a ? got_a : got_b;
        const size_t n = size_t(c.p1 - c.p0) * size_t(V);
        dst.insert(dst.end(), got.begin() + long(off), got.begin() + long(off + n));
        off += n;
      }
      if (pa < na) pa = ea;
      if (pb < nb) pb = eb;
    }
    const double err = std::max(max_row_rel_error(got_a, ref_a, V), max_row_rel_error(got_b, ref_b, V));
    std::printf("%s gpu vs cpu, ragged chunks: max row rel error %.3g\n", cfg.architecture.c_str(), err);
    CHECK(err <= kTol);
  }
  {  // mixed steps as serving has them: b decodes one token per step (the leading sequence, which
     // the CUDA backend runs on its decode kernel) while a prefills in chunks of 16 or more
    auto pages = random_pages({na, nb}, page_size, num_pages, rng);
    std::vector<float> got_a;
    std::vector<float> got_b = run_forward(*model, make_batch({{&b, &pages[1], 0, 1}}), kv);
    int64_t pa = 0, pb = 1;
    std::uniform_int_distribution<int64_t> chunk(16, 48);
    while (pa < na) {
      const int64_t ea = std::min(na, pa + chunk(rng));
      std::vector<Chunk> chunks;
      if (pb < nb) chunks.push_back({&b, &pages[1], pb, pb + 1});
      chunks.push_back({&a, &pages[0], pa, ea});
      auto got = run_forward(*model, make_batch(chunks), kv);
      const size_t nb_rows = pb < nb ? size_t(V) : 0;
      got_b.insert(got_b.end(), got.begin(), got.begin() + long(nb_rows));
      got_a.insert(got_a.end(), got.begin() + long(nb_rows), got.end());
      pa = ea;
      if (pb < nb) ++pb;
    }
    for (; pb < nb; ++pb) {
      auto row = run_forward(*model, make_batch({{&b, &pages[1], pb, pb + 1}}), kv);
      got_b.insert(got_b.end(), row.begin(), row.end());
    }
    const double err = std::max(max_row_rel_error(got_a, ref_a, V), max_row_rel_error(got_b, ref_b, V));
    std::printf("%s gpu vs cpu, decode rows + chunks: max row rel error %.3g\n", cfg.architecture.c_str(),
                err);
    CHECK(err <= kTol);
  }
}

}  // namespace

TEST_CASE("forward of the tiny preset on cuda matches the cpu backend within bf16 tolerance", "[gpu]") {
  check_gpu_against_cpu(preset_config("tiny").value());
}

TEST_CASE("forward of a Qwen3-style model on cuda matches the cpu backend within bf16 tolerance", "[gpu]") {
  check_gpu_against_cpu(qwen3_style_config());
}

TEST_CASE("forward with head_dim 64, GQA 4 and q/k/v biases on cuda matches the cpu backend", "[gpu]") {
  check_gpu_against_cpu(gqa4_bias_config());  // the bias epilogue
}

}  // namespace astrai::test
