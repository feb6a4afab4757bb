// The Engine facade (src/engine/engine.h) over the real tiny model: what net/ and the CLI call.
// The step loop's behaviour itself is tested in tests/sched.
#include "src/engine/engine.h"

#include <catch2/catch.hpp>

#include "src/backend/backend.h"
#include "src/model/model.h"
#include "tools/model_dirs.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

TEST_CASE("engine create rejects bad options with invalid_argument", "[integration]") {
  const auto dir = model_dir("tiny");
  auto with = [&](auto edit) {
    EngineOptions o;
    o.max_pages = 64;
    edit(o);
    auto lm = load_model(dir);
    return Engine::create(std::move(lm.backend), std::move(lm.model), o).status();
  };
  CHECK(with([](EngineOptions& o) { o.page_size = 0; }).code() == ErrorCode::invalid_argument);
  CHECK(with([](EngineOptions& o) { o.max_batch_size = -1; }).code() == ErrorCode::invalid_argument);
  CHECK(with([](EngineOptions& o) { o.max_model_len = 1 << 30; }).code() == ErrorCode::invalid_argument);
  CHECK(Engine::create(nullptr, nullptr, EngineOptions{}).status().code() == ErrorCode::invalid_argument);
}

TEST_CASE("engine's max_model_len is --max-model-len, else the model's context", "[integration]") {
  const auto dir = model_dir("tiny");
  auto make = [&](int max_model_len) {
    EngineOptions o;
    o.max_pages = 64;
    o.max_model_len = max_model_len;
    auto lm = load_model(dir);
    return Engine::create(std::move(lm.backend), std::move(lm.model), o).value();
  };
  auto whole = make(0);
  CHECK(whole->max_model_len() == whole->model_config().max_context());
  auto short_one = make(24);
  CHECK(short_one->max_model_len() == 24);
  // A prompt that reaches it is refused, one below it runs to the end of the context.
  Request r;
  r.prompt = std::vector<int32_t>(24, 7);
  r.max_tokens = 100;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  CHECK(short_one->submit(r).status().code() == ErrorCode::invalid_argument);
  r.prompt.resize(20);
  Stream s = short_one->submit(r).value();
  TokenEvent ev;
  int generated = 0;
  while (s.wait(ev))
    if (ev.token >= 0) ++generated;
  CHECK(generated == 4);
}

TEST_CASE("engine serves a greedy request, reports stats and shuts down", "[integration]") {
  const auto dir = model_dir("tiny");
  auto ref = load_model(dir);
  EngineOptions o;
  o.page_size = 16;
  o.max_pages = 64;
  auto lm = load_model(dir);
  auto engine = Engine::create(std::move(lm.backend), std::move(lm.model), o).value();
  CHECK(engine->model_config().vocab_size == ref.model->config().vocab_size);
  Request r;
  r.prompt = {5, 17, 99, 3, 250, 42};
  r.max_tokens = 6;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  Stream s = engine->submit(r).value();
  std::vector<int32_t> got;
  TokenEvent ev;
  FinishReason finish = FinishReason::none;
  while (s.wait(ev)) {
    if (ev.token >= 0) got.push_back(ev.token);
    finish = ev.finish;
  }
  CHECK(got == full_forward_greedy(*ref.model, r.prompt, 6));
  CHECK(finish == FinishReason::length);
  REQUIRE(engine->check_invariants().ok());
  const EngineStats st = engine->stats();
  CHECK(st.finished == 1);
  CHECK(st.generated_tokens == 6);
  CHECK(st.kv_pages_total == 64);
  engine->shutdown();
  CHECK(engine->submit(r).status().code() == ErrorCode::cancelled);
}
