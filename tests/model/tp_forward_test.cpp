// Tensor-parallel forward (src/model/tp_model.h, src/model/shard.h) on the CPU backend with the
// in-process group: TP = 2 and 4 give TP = 1's logits (f32, row-wise relative error < 1e-4: only
// the order of the sums over heads and MLP columns changes) through a chunked prefill and greedy
// decode steps of two sequences over a paged cache, and the same greedy tokens; the slicing math
// on its own; clear errors for sizes the rank count does not divide.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

#include "model/forward_util.h"
#include "model/tp_greedy.h"
#include "src/dist/communicator.h"
#include "src/model/shard.h"
#include "src/model/tp_model.h"
#include "tools/failing_backend.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

constexpr double kTol = 1e-4;

std::vector<std::unique_ptr<Backend>> cpu_backends(int n) {
  std::vector<std::unique_ptr<Backend>> out;
  for (int r = 0; r < n; ++r) out.push_back(make_backend(BackendOptions{}).value());
  return out;
}

void check_tp_matches_single(const ModelConfig& cfg, const std::vector<int>& worlds) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << " architecture " << cfg.architecture);
  std::mt19937_64 rng(seed);
  TempDir dir("tp");
  write_random_model(dir.path(), cfg, seed);
  const int64_t V = cfg.vocab_size;
  const int64_t na = std::uniform_int_distribution<int64_t>(20, 70)(rng);
  const int64_t nb = std::uniform_int_distribution<int64_t>(5, 40)(rng);
  const int64_t cut = std::uniform_int_distribution<int64_t>(1, na - 1)(rng);
  const int steps = 6;
  const std::vector<std::vector<int32_t>> prompts{random_ids(rng, na, V), random_ids(rng, nb, V)};
  const int num_pages = int((na + nb + 2 * steps) / 16) + 8;
  const auto pages = random_pages({na + steps + 1, nb + steps + 1}, 16, num_pages, rng);

  WeightStore store = WeightStore::open(dir.path()).value();
  auto be0 = make_backend(BackendOptions{}).value();
  auto single = make_tensor_parallel(cfg, store, *be0, {}).value();
  const GreedyRun want = greedy(*single, prompts, cut, steps, pages, num_pages);

  for (int world : worlds) {
    INFO("tp " << world);
    auto rank0 = make_backend(BackendOptions{}).value();
    auto tp = make_tensor_parallel(cfg, store, *rank0, cpu_backends(world - 1)).value();
    const GreedyRun got = greedy(*tp, prompts, cut, steps, pages, num_pages);
    // Greedy tokens equal (random weights keep the top two logits far apart next to 1e-6 noise).
    REQUIRE(got.seqs == want.seqs);
    REQUIRE(got.logits.size() == want.logits.size());
    for (size_t s = 0; s < want.logits.size(); ++s) {
      INFO("step " << s);
      const std::vector<double> ref(want.logits[s].begin(), want.logits[s].end());
      CHECK(max_row_rel_error(got.logits[s], ref, V) < kTol);
    }
  }
}

SafeTensor host_tensor(std::vector<float>& data, std::vector<int64_t> shape) {
  SafeTensor t;
  t.name = "w";
  t.dtype = DType::f32;
  t.shape = std::move(shape);
  t.data = data.data();
  t.nbytes = data.size() * sizeof(float);
  return t;
}

}  // namespace

TEST_CASE("tensor-parallel tiny llama gives the single-device logits and greedy tokens",
          "[integration][threads]") {
  check_tp_matches_single(preset_config("tiny").value(), {2});
}

TEST_CASE("tensor-parallel qwen3-style model gives the single-device logits and greedy tokens",
          "[integration][threads]") {
  check_tp_matches_single(qwen3_style_config(), {2});
}

TEST_CASE("tensor-parallel with biases on every projection matches at 2 and 4 ranks",
          "[integration][threads]") {
  // Four KV heads so that four ranks divide them; o_proj's bias is added once (by rank 0).
  ModelConfig c = preset_config("tiny").value();
  c.num_kv_heads = 4;
  c.attention_bias = true;
  c.o_proj_bias = true;
  c.tie_word_embeddings = false;
  check_tp_matches_single(c, {2, 4});
}

TEST_CASE("shard slices take a rank's rows and columns of a weight", "[unit]") {
  // w[r][c] = 10 r + c, 4 x 6.
  std::vector<float> data;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) data.push_back(float(10 * r + c));
  const SafeTensor w = host_tensor(data, {4, 6});
  const TensorSlice rows = slice_rows(w, 2, 4);
  REQUIRE(rows.view.shape == std::vector<int64_t>{2, 6});
  REQUIRE(rows.view.nbytes == 12 * sizeof(float));
  CHECK(rows.gathered.empty());  // a view into the file
  const float* rp = static_cast<const float*>(rows.view.data);
  for (int i = 0; i < 12; ++i) {
    const int row = 2 + i / 6, col = i % 6;  // rows 2..3 of the 4 x 6 matrix w[r][c] = 10 r + c
    CHECK(rp[i] == float(10 * row + col));
  }
  const TensorSlice cols = slice_cols(w, 3, 6);
  REQUIRE(cols.view.shape == std::vector<int64_t>{4, 3});
  REQUIRE(cols.view.nbytes == 12 * sizeof(float));
  const float* cp = static_cast<const float*>(cols.view.data);
  for (int i = 0; i < 12; ++i) {
    const int row = i / 3, col = 3 + i % 3;  // columns 3..5
    CHECK(cp[i] == float(10 * row + col));
  }
  std::vector<float> bias{0, 1, 2, 3, 4, 5};
  const TensorSlice b = slice_rows(host_tensor(bias, {6}), 4, 6);
  REQUIRE(b.view.shape == std::vector<int64_t>{2});
  CHECK(static_cast<const float*>(b.view.data)[0] == 4.f);
  CHECK(static_cast<const float*>(b.view.data)[1] == 5.f);
}

TEST_CASE("shard_config divides heads, KV heads and the MLP, or says which does not divide", "[unit]") {
  ModelConfig c = preset_config("tiny").value();  // 4 heads, 2 KV heads, intermediate 256
  const ModelConfig half = shard_config(c, 2).value();
  CHECK(half.num_heads == 2);
  CHECK(half.num_kv_heads == 1);
  CHECK(half.intermediate_size == 128);
  CHECK(half.hidden_size == c.hidden_size);
  CHECK(half.head_dim == c.head_dim);
  CHECK_THAT(shard_config(c, 3).status().message(),
             Catch::Contains("attention heads (4) is not divisible by 3"));
  CHECK_THAT(shard_config(c, 4).status().message(), Catch::Contains("KV heads (2) is not divisible by 4"));
  c.num_kv_heads = 4;
  c.intermediate_size = 258;
  CHECK_THAT(shard_config(c, 4).status().message(), Catch::Contains("intermediate size (258)"));
  CHECK(shard_config(c, 0).status().code() == ErrorCode::invalid_argument);
}

TEST_CASE("a tensor-parallel load the sizes do not divide is an error before any weight moves",
          "[integration]") {
  TempDir dir("tpbad");
  const ModelConfig cfg = preset_config("tiny").value();
  write_random_model(dir.path(), cfg, 1);
  auto rank0 = make_backend(BackendOptions{}).value();
  auto r = load_tensor_parallel(dir.path(), *rank0, cpu_backends(2));  // 3 ranks, 4 heads
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::invalid_argument);
  CHECK_THAT(r.status().message(), Catch::Contains("--tp 3"));
}

TEST_CASE("a tensor-parallel model rejects a bad batch on every rank and keeps working",
          "[integration][threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("tpval");
  const ModelConfig cfg = preset_config("tiny").value();
  write_random_model(dir.path(), cfg, seed);
  auto rank0 = make_backend(BackendOptions{}).value();
  auto tp = load_tensor_parallel(dir.path(), *rank0, cpu_backends(1)).value();
  KvCache kv = tp->allocate_kv(4, 16);
  REQUIRE(kv.shards.size() == 2);
  CHECK(kv.shards[0].num_kv_heads == 1);
  const auto ids = random_ids(rng, 20, cfg.vocab_size);
  auto pages = random_pages({20}, 16, 4, rng);
  ForwardBatch bad = make_batch({{&ids, &pages[0], 0, 20}});
  bad.tokens[3] = int32_t(cfg.vocab_size);
  Result<Tensor> r = tp->forward(bad, kv);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("vocabulary"));
  KvCache plain;
  CHECK_FALSE(tp->forward(make_batch({{&ids, &pages[0], 0, 20}}), plain).ok());  // not this model's cache
  CHECK(tp->forward(make_batch({{&ids, &pages[0], 0, 20}}), kv).ok());
}

}  // namespace astrai::test

namespace astrai::test {

TEST_CASE("a rank that fails in the middle of a step fails the step without a hang, and the group recovers",
          "[integration][threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("tpfail");
  const ModelConfig cfg = preset_config("tiny").value();
  write_random_model(dir.path(), cfg, seed);
  auto rank0 = make_backend(BackendOptions{}).value();
  auto failing = std::make_unique<FailingBackend>();
  FailingBackend* rank1 = failing.get();
  std::vector<std::unique_ptr<Backend>> others;
  others.push_back(std::move(failing));
  auto tp = load_tensor_parallel(dir.path(), *rank0, std::move(others)).value();
  KvCache kv = tp->allocate_kv(4, 16);
  const auto ids = random_ids(rng, 20, cfg.vocab_size);
  auto pages = random_pages({20}, 16, 4, rng);
  const ForwardBatch batch = make_batch({{&ids, &pages[0], 0, 20}});
  const std::vector<float> want = run_forward(*tp, batch, kv);
  // Layer 0 runs qkv, o, [all-reduce], gate_up: rank 1 stops there, while rank 0 goes on to wait in
  // the all-reduce after down for it.
  rank1->fail_after = 2;
  Result<Tensor> r = tp->forward(batch, kv);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("injected failure"));
  CHECK(run_forward(*tp, batch, kv) == want);
}

}  // namespace astrai::test
