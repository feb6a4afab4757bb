#include "step_loop_fixture.h"

#include <catch2/catch.hpp>

#include "sched/sampler.h"
#include "src/core/status.h"
#include "tools/model_dirs.h"

namespace astrai::test {

Outcome collect(Stream& s, int n) {
  Outcome o;
  o.tokens.resize(size_t(n));
  o.logprobs.resize(size_t(n));
  o.finish.assign(size_t(n), FinishReason::none);
  TokenEvent ev;
  while (s.wait(ev)) {
    ++o.events;
    REQUIRE(ev.choice >= 0);
    REQUIRE(ev.choice < n);
    REQUIRE(o.finish[size_t(ev.choice)] == FinishReason::none);  // nothing after a finish
    if (ev.token >= 0) {
      o.tokens[size_t(ev.choice)].push_back(ev.token);
      o.logprobs[size_t(ev.choice)].push_back(ev.logprob);
    }
    o.finish[size_t(ev.choice)] = ev.finish;
  }
  CHECK(s.done());
  for (auto f : o.finish) CHECK(f != FinishReason::none);
  return o;
}

FakeLoop make_fake_loop(const EngineOptions& o, const FakeModelOptions& fo) {
  auto model = std::make_unique<FakeModel>(fo);
  FakeLoop fl;
  fl.model = model.get();
  auto l = make_step_loop(nullptr, std::move(model), o);
  REQUIRE(l.ok());
  fl.loop = std::move(l).value();
  return fl;
}

std::unique_ptr<StepLoop> make_loop(const std::filesystem::path& dir, const EngineOptions& o) {
  auto lm = load_model(dir);
  return make_step_loop(std::move(lm.backend), std::move(lm.model), o).value();
}

std::vector<int32_t> fake_sampled(const std::vector<int32_t>& prompt, int vocab, const SamplingParams& p,
                                  uint64_t seed, int choice, int max_tokens) {
  std::vector<int32_t> hist = prompt, out;
  std::vector<float> l(static_cast<size_t>(vocab)), scratch;
  for (int i = 0; i < max_tokens; ++i) {
    FakeModel::logits_for(hist, vocab, l.data());
    const auto r = sample_row(l, p, nullptr, seed, choice, i, scratch);
    out.push_back(r.token);
    hist.push_back(r.token);
  }
  return out;
}

}  // namespace astrai::test
