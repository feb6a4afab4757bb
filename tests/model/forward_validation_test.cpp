// Model::forward rejects malformed batches with an invalid_argument error naming the problem, and
// the workspace copes with batches that shrink and grow between steps.
#include <catch2/catch.hpp>
#include <random>

#include "model/forward_util.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

// The tiny preset with random weights on the CPU backend.
struct TinyModel {
  TempDir dir;
  ModelConfig cfg = preset_config("tiny").value();
  std::unique_ptr<Backend> backend = make_backend(BackendOptions{}).value();
  std::unique_ptr<Model> model;
  TinyModel(const std::string& name, uint64_t seed) : dir(name) {
    write_random_model(dir.path(), cfg, seed);
    model = Model::load(dir.path(), *backend).value();
  }
};

// The model refuses the batch: invalid_argument, the message naming the problem.
void refused(Model& model, const ForwardBatch& b, KvCache& kv, const std::string& needle) {
  Result<Tensor> r = model.forward(b, kv);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::invalid_argument);
  CHECK_THAT(r.status().message(), Catch::Contains(needle));
}

}  // namespace

TEST_CASE("forward rejects a malformed batch with an error instead of touching memory", "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TinyModel tiny("val", seed);
  const ModelConfig& cfg = tiny.cfg;
  auto& model = tiny.model;
  KvCache kv = model->allocate_kv(4, 16);
  const auto ids = random_ids(rng, 20, cfg.vocab_size);
  auto pages = random_pages({20}, 16, 4, rng);
  const ForwardBatch good = make_batch({{&ids, &pages[0], 0, 20}});
  REQUIRE(model->forward(good, kv).ok());

  auto expect_error = [&](const ForwardBatch& x, const std::string& needle) {
    refused(*model, x, kv, needle);
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
  TinyModel tiny("ws", seed);
  const ModelConfig& cfg = tiny.cfg;
  auto& model = tiny.model;
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

// The overlapped step loop's batches: a row whose token is a placeholder takes it from the previous
// step's draws on the device (ForwardBatch::moves), and computes exactly what the token in place does.
TEST_CASE("a row that takes a drawn token computes what the token in place does; bad moves are refused",
          "[integration]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TinyModel tiny("moves", seed);
  const ModelConfig& cfg = tiny.cfg;
  auto& model = tiny.model;
  Backend& backend = *tiny.backend;
  REQUIRE(model->takes_drawn_tokens());
  KvCache kv = model->allocate_kv(16, 16);
  const auto a = random_ids(rng, 30, cfg.vocab_size), b = random_ids(rng, 21, cfg.vocab_size);
  auto pages = random_pages({30, 21}, 16, 16, rng);
  // Prompts first, then one decode row each (the last token of each sequence).
  REQUIRE(model->forward(make_batch({{&a, &pages[0], 0, 29}, {&b, &pages[1], 0, 20}}), kv).ok());
  const ForwardBatch plain = make_batch({{&a, &pages[0], 29, 30}, {&b, &pages[1], 20, 21}});
  const auto want = run_forward(*model, plain, kv);
  // The draws of a "previous step": 5 draws of 3 words, the two tokens at draws 3 and 1.
  std::vector<int32_t> draws_host(15);
  for (auto& d : draws_host) d = int32_t(rng() % uint64_t(cfg.vocab_size));
  draws_host[9] = a[29];
  draws_host[3] = b[20];
  Buffer draws_buf = backend.alloc(draws_host.size() * 4);
  const Tensor draws = draws_buf.as(DType::i32, {5, 3});
  backend.upload(draws, draws_host.data());
  ForwardBatch moved = plain;
  moved.tokens = {-1, -1};
  moved.moves = {0, 3, 1, 1};
  moved.draws = draws;
  CHECK(run_forward(*model, moved, kv) == want);  // the same bits

  auto expect_error = [&](const ForwardBatch& x, const std::string& needle) {
    refused(*model, x, kv, needle);
  };
  ForwardBatch x = moved;
  x.moves = {0, 3, 1};
  expect_error(x, "pairs");
  x = moved;
  x.moves = {1, 3, 0, 1};
  expect_error(x, "increasing");
  x = moved;
  x.moves = {0, 5, 1, 1};
  expect_error(x, "draw 5 outside");
  x = moved;
  x.moves = {0, 3};  // row 1 keeps its placeholder
  expect_error(x, "vocabulary");
  x = moved;
  x.draws = Tensor();
  expect_error(x, "draws tensor");
}

}  // namespace astrai::test
