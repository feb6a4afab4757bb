// The engine over a tensor-parallel model (tiny preset, --tp 2 on the CPU's in-process group) whose
// rank 1 fails in the middle of a forward: the request in that step finishes with an error that
// says why, nothing hangs, and the engine goes on serving the same output as before, then shuts
// down. The failure is injected by call count, not by time, so every run takes the same path.
#include <catch2/catch.hpp>

#include "src/engine/engine.h"
#include "src/model/tp_model.h"
#include "tools/failing_backend.h"
#include "tools/model_dirs.h"
#include "tools/test_util.h"

using namespace astrai;
using namespace astrai::test;

namespace {

struct Reply {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::none;
  std::string error;
};

Reply run(Engine& engine, const std::vector<int32_t>& prompt, int max_tokens) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  Stream s = engine.submit(r).value();
  Reply out;
  TokenEvent ev;
  while (s.wait(ev)) {
    REQUIRE(out.finish == FinishReason::none);  // nothing after the finish
    if (ev.token >= 0) out.tokens.push_back(ev.token);
    out.finish = ev.finish;
    out.error = ev.error;
  }
  return out;
}

}  // namespace

TEST_CASE("a tensor-parallel rank failing mid-forward fails its request, and the engine serves on",
          "[integration][threads]") {
  auto rank0 = make_backend(BackendOptions{}).value();
  auto failing = std::make_unique<FailingBackend>();
  FailingBackend* rank1 = failing.get();
  std::vector<std::unique_ptr<Backend>> others;
  others.push_back(std::move(failing));
  auto model = load_tensor_parallel(model_dir("tiny"), *rank0, std::move(others)).value();
  EngineOptions o;
  o.page_size = 16;
  o.max_pages = 64;
  o.prefix_cache = false;  // every request computes its prompt, so every one reaches the fault
  auto engine = Engine::create(std::move(rank0), std::move(model), o).value();

  const std::vector<int32_t> prompt = {5, 17, 99, 3, 250, 42, 7, 8, 9, 10};
  const Reply want = run(*engine, prompt, 12);
  REQUIRE(want.finish == FinishReason::length);
  REQUIRE(want.tokens.size() == 12);

  // Fails in the prefill: rank 1 stops after its second linear of layer 0, while rank 0 goes on to
  // wait for it in that layer's all-reduce.
  rank1->fail_after = 2;
  const Reply prefill = run(*engine, prompt, 12);
  CHECK(prefill.finish == FinishReason::error);
  CHECK_THAT(prefill.error, Catch::Contains("injected failure"));
  CHECK(prefill.tokens.empty());
  CHECK(run(*engine, prompt, 12).tokens == want.tokens);

  // Fails in a later decode step (40 linears: a few forwards in): the tokens sent before are right.
  rank1->fail_after = 40;
  const Reply decode = run(*engine, prompt, 12);
  CHECK(decode.finish == FinishReason::error);
  CHECK_THAT(decode.error, Catch::Contains("injected failure"));
  CHECK_FALSE(decode.tokens.empty());
  CHECK(decode.tokens.size() < want.tokens.size());
  CHECK(std::equal(decode.tokens.begin(), decode.tokens.end(), want.tokens.begin()));

  // Usable: the same output as before the faults, the pool consistent, the failures counted.
  CHECK(run(*engine, prompt, 12).tokens == want.tokens);
  REQUIRE(engine->check_invariants().ok());
  CHECK(engine->stats().failed == 2);
  CHECK(engine->stats().kv_pages_used == 0);
  engine->shutdown();
}
