// Helpers for step-loop tests: loops over the fake model or a model directory, collecting a
// stream's events.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "fake_model.h"
#include "sched/step_loop.h"

namespace astrai::test {

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;  // per choice
  std::vector<FinishReason> finish;          // per choice
  std::vector<std::vector<float>> logprobs;
  int events = 0;
};

// Blocks until every choice of the stream finished; checks each choice's events are well formed
// (tokens, then exactly one finish event, nothing after it).
Outcome collect(Stream& s, int n = 1);
inline Outcome collect(Stream&& s, int n = 1) {
  return collect(s, n);
}

struct FakeLoop {
  std::unique_ptr<StepLoop> loop;
  FakeModel* model = nullptr;  // owned by the loop
};
FakeLoop make_fake_loop(const EngineOptions& o, const FakeModelOptions& fo = {});

// A step loop over a model directory (tools/model_dirs.h) on the CPU.
std::unique_ptr<StepLoop> make_loop(const std::filesystem::path& dir, const EngineOptions& o);

// A sampled (temperature > 0) continuation under FakeModel's logits with the engine's sampler and
// the request's seed: the reference for seeded sampling.
std::vector<int32_t> fake_sampled(const std::vector<int32_t>& prompt, int vocab, const SamplingParams& p,
                                  uint64_t seed, int choice, int max_tokens);

}  // namespace astrai::test
