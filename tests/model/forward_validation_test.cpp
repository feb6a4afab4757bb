// Model::forward rejects malformed batches with an invalid_argument error naming the problem, and
// the workspace copes with batches that shrink and grow between steps.
#include <catch2/catch.hpp>
#include <random>

#include "model/forward_util.h"
#include "tools/test_util.h"

namespace astrai::test {

TEST_CASE("forward rejects a malformed batch with an error instead of touching memory", "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("val");
  const ModelConfig cfg = preset_config("tiny").value();
  write_random_model(dir.path(), cfg, seed);
  auto backend = make_backend(BackendOptions{}).value();
  auto model = Model::load(dir.path(), *backend).value();
  KvCache kv = model->allocate_kv(4, 16);
  const auto ids = random_ids(rng, 20, cfg.vocab_size);
  auto pages = random_pages({20}, 16, 4, rng);
  const ForwardBatch good = make_batch({{&ids, &pages[0], 0, 20}});
  REQUIRE(model->forward(good, kv).ok());

  auto expect_error = [&](ForwardBatch b, const std::string& needle) {
    Result<Tensor> r = model->forward(b, kv);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::invalid_argument);
    CHECK_THAT(r.status().message(), Catch::Contains(needle));
  };
  ForwardBatch b = good;
  b.tokens[3] = int32_t(cfg.vocab_size);
  expect_error(b, "vocabulary");
  b = good;
  b.positions[5] += 1;
  expect_error(b, "position");
  b = good;
  b.slots[0] = 4 * 16;
  expect_error(b, "slot");
  b = good;
  b.slots[1] = b.slots[2];  // inside the cache but not where the page table puts position 1
  expect_error(b, "slot");
  b = good;
  b.page_table[0] = 4;
  expect_error(b, "page");
  b = good;
  b.logit_rows.push_back(20);
  expect_error(b, "logit row");
  b = good;
  b.kv_len[0] = 10;  // shorter than the 20 query rows
  expect_error(b, "kv_len");
  b = good;
  b.q_start.back() = 19;
  expect_error(b, "q_start");
}

TEST_CASE("forward gives the same logits for a row whether the workspace grew or shrank around it",
          "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir dir("ws");
  const ModelConfig cfg = preset_config("tiny").value();
  write_random_model(dir.path(), cfg, seed);
  auto backend = make_backend(BackendOptions{}).value();
  auto model = Model::load(dir.path(), *backend).value();
  KvCache kv = model->allocate_kv(64, 16);
  const auto ids = random_ids(rng, 300, cfg.vocab_size);
  auto pages = random_pages({300, 300, 300}, 16, 64, rng);
  // The first 8 tokens alone (small workspace), then all 300 (grows), then the 8 again (reuse).
  const auto small1 = run_forward(*model, make_batch({{&ids, &pages[0], 0, 8}}), kv);
  const auto big = run_forward(*model, make_batch({{&ids, &pages[1], 0, 300}}), kv);
  const auto small2 = run_forward(*model, make_batch({{&ids, &pages[2], 0, 8}}), kv);
  REQUIRE(small1.size() == small2.size());
  for (size_t i = 0; i < small1.size(); ++i) {
    REQUIRE(small1[i] == small2[i]);
    REQUIRE(std::abs(big[i] - small1[i]) <= 1e-4f * (1.0f + std::abs(small1[i])));
  }
}

}  // namespace astrai::test
