// The decoder forward against the float64 PyTorch reference (tests/model/reference.py) on random
// weights: logits at every position of a 200+ token prompt within 1e-4 relative error per row,
// computed three ways over a random (non-contiguous) page table:
//   - one full prefill,
//   - token by token through the KV cache (decode),
//   - random prefill chunks, two sequences packed into the same batches.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

#include "model/forward_util.h"
#include "src/backend/backend.h"
#include "src/model/config.h"
#include "src/model/model.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

constexpr double kTol = 1e-4;

void check_against_reference(const ModelConfig& cfg, DType file_dtype) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " architecture " << cfg.architecture);
  std::mt19937_64 rng(seed);
  TempDir dir("fwd");
  write_random_model(dir.path(), cfg, seed, file_dtype);

  const std::vector<int32_t> a =
      random_ids(rng, std::uniform_int_distribution<int64_t>(200, 260)(rng), cfg.vocab_size);
  const std::vector<int32_t> b =
      random_ids(rng, std::uniform_int_distribution<int64_t>(20, 70)(rng), cfg.vocab_size);
  const int64_t V = cfg.vocab_size;
  const auto refs = reference_logits(dir.path(), {a, b}, V);
  const std::vector<double>&ref_a = refs[0], &ref_b = refs[1];
  REQUIRE(ref_a.size() == a.size() * size_t(V));

  auto backend = make_backend(BackendOptions{}).value();
  auto model = Model::load(dir.path(), *backend).value();
  const int page_size = std::vector<int>{16, 7, 1}[std::uniform_int_distribution<size_t>(0, 2)(rng)];
  INFO("page_size " << page_size);
  const int num_pages = int((a.size() + b.size()) / size_t(page_size)) + 8;
  KvCache kv = model->allocate_kv(num_pages, page_size);
  const int64_t na = int64_t(a.size()), nb = int64_t(b.size());

  {  // one full prefill
    auto pages = random_pages({na}, page_size, num_pages, rng);
    auto got = run_forward(*model, make_batch({{&a, &pages[0], 0, na}}), kv);
    INFO("full prefill");
    CHECK(max_row_rel_error(got, ref_a, V) <= kTol);
  }
  {  // decode: one token per step, each reading all earlier K/V back from the cache
    auto pages = random_pages({na}, page_size, num_pages, rng);
    std::vector<float> got;
    for (int64_t p = 0; p < na; ++p) {
      auto row = run_forward(*model, make_batch({{&a, &pages[0], p, p + 1}}), kv);
      got.insert(got.end(), row.begin(), row.end());
    }
    INFO("token by token");
    CHECK(max_row_rel_error(got, ref_a, V) <= kTol);
  }
  {  // random chunks, both sequences in each batch while both have tokens left
    auto pages = random_pages({na, nb}, page_size, num_pages, rng);
    std::vector<float> got_a, got_b;
    int64_t pa = 0, pb = 0;
    std::uniform_int_distribution<int64_t> chunk(1, 40);
    while (pa < na || pb < nb) {
      std::vector<Chunk> chunks;
      const int64_t ea = std::min(na, pa + chunk(rng)), eb = std::min(nb, pb + chunk(rng));
      const bool b_first = rng() % 2;
      if (b_first && pb < nb) chunks.push_back({&b, &pages[1], pb, eb});
      if (pa < na) chunks.push_back({&a, &pages[0], pa, ea});
      if (!b_first && pb < nb) chunks.push_back({&b, &pages[1], pb, eb});
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
    INFO("random chunks, two sequences per batch");
    CHECK(max_row_rel_error(got_a, ref_a, V) <= kTol);
    CHECK(max_row_rel_error(got_b, ref_b, V) <= kTol);
  }
}

ModelConfig qwen2_style() {
  ModelConfig c;
  c.architecture = "Qwen2ForCausalLM";
  c.model_type = "qwen2";
  c.vocab_size = 257;
  c.hidden_size = 64;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 1;  // GQA 4
  c.head_dim = 16;
  c.intermediate_size = 136;
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 512;
  return c;
}

// Llama 3 rope scaling with a short original context so that the head's frequencies fall in all
// three bands (scaled, blended, kept); q/k/v/o biases; weights stored as bf16.
ModelConfig llama3_scaled() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 200;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 96;
  c.attention_bias = true;
  c.o_proj_bias = true;
  c.rope_theta = 10000.0;
  c.rope_scaling.type = RopeScaling::Type::llama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 2048;
  return c;
}

// Mistral with linear rope scaling, weights stored as f16.
ModelConfig mistral_linear() {
  ModelConfig c;
  c.architecture = "MistralForCausalLM";
  c.model_type = "mistral";
  c.vocab_size = 211;
  c.hidden_size = 48;
  c.num_layers = 2;
  c.num_heads = 6;
  c.num_kv_heads = 3;
  c.head_dim = 8;
  c.intermediate_size = 80;
  c.rope_theta = 10000.0;
  c.rope_scaling.type = RopeScaling::Type::linear;
  c.rope_scaling.factor = 4.0;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 4096;
  return c;
}

// Qwen3 with YaRN over a short original context, so that the ramp runs inside the head's
// frequencies (dims 0-5 of 16 blend) and the prompt (200-260 tokens) reaches past
// max_position_embeddings into the context YaRN opens (80 x 4 = 320 positions).
ModelConfig qwen3_yarn() {
  ModelConfig c = qwen3_style_config();
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 160;
  c.rope_scaling.type = RopeScaling::Type::yarn;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 80;
  return c;
}

// DeepSeek-style YaRN: the attention factor as the ratio of two mscale terms, other rotation
// bounds, no rounding of the ramp's ends, the ramp over max_position_embeddings.
ModelConfig llama_yarn_mscale() {
  ModelConfig c = llama3_scaled();
  c.rope_scaling = RopeScaling{};
  c.rope_scaling.type = RopeScaling::Type::yarn;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_position_embeddings = 0;
  c.rope_scaling.beta_fast = 16.0;
  c.rope_scaling.beta_slow = 2.0;
  c.rope_scaling.mscale = 0.6;
  c.rope_scaling.mscale_all_dim = 1.3;
  c.rope_scaling.truncate = false;
  c.max_position_embeddings = 100;
  return c;
}

}  // namespace

TEST_CASE("forward of the tiny preset matches the PyTorch reference (prefill, decode, chunks)",
          "[integration]") {
  check_against_reference(preset_config("tiny").value(), DType::f32);
}

TEST_CASE("forward of a Qwen3-style model (qk-norm, head_dim != hidden/heads) matches the reference",
          "[integration]") {
  check_against_reference(qwen3_style_config(), DType::f32);
}

TEST_CASE("forward of a Qwen2-style model (q/k/v bias, GQA 4, tied) matches the reference", "[integration]") {
  check_against_reference(qwen2_style(), DType::f32);
}

TEST_CASE("forward with Llama-3 rope scaling, o_proj bias and bf16 weights matches the reference",
          "[integration][slow]") {
  check_against_reference(llama3_scaled(), DType::bf16);
}

TEST_CASE(
    "forward of a Qwen3 model with YaRN rope scaling past max_position_embeddings matches the reference",
    "[integration]") {
  const ModelConfig c = qwen3_yarn();
  REQUIRE(c.max_context() == 320);
  check_against_reference(c, DType::f32);
}

TEST_CASE(
    "forward with DeepSeek-style YaRN (mscale ratio, untruncated ramp) and bf16 weights matches the "
    "reference",
    "[integration][slow]") {
  const ModelConfig c = llama_yarn_mscale();
  REQUIRE(c.max_context() == 800);
  check_against_reference(c, DType::bf16);
}

TEST_CASE("forward of a Mistral model with linear rope scaling and f16 weights matches the reference",
          "[integration][slow]") {
  check_against_reference(mistral_linear(), DType::f16);
}

}  // namespace astrai::test
