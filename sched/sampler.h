// Token sampling on the host from one row of f32 logits.
//
// Order of operations (the way HF transformers' logits processors and vLLM apply them):
//   1. logit_bias: logits[t] += bias[t]
//   2. repetition penalty p over tokens seen in the prompt or the output (CTRL paper, as HF):
//        logit > 0 ? logit / p : logit * p
//      frequency / presence penalties over output tokens only (OpenAI's definition):
//        logit -= frequency * count_out[t] + presence * (count_out[t] > 0)
//   3. temperature == 0: greedy argmax (lowest id on ties). Otherwise logits / temperature, softmax,
//      then top-k (k most likely), top-p (smallest most-likely set with mass >= p, renormalised after
//      top-k), min-p (drop tokens whose probability is below min_p * max probability).
//   4. The draw: one uniform u in [0,1) from a counter-based generator keyed by
//      (seed, choice, token index), so a request's tokens do not depend on what else is in the batch
//      or on the order rows are processed; the token is the first candidate (most likely first,
//      ties by id) whose cumulative probability exceeds u.
// Logprobs are those of the model's raw distribution (log_softmax of the unprocessed logits).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "src/engine/request.h"

namespace astrai {

// What the penalties need to know about a sequence.
struct PenaltyState {
  std::unordered_set<int32_t> prompt_tokens;
  std::unordered_map<int32_t, int32_t> output_counts;
  void add_output(int32_t t) { ++output_counts[t]; }
};

bool needs_penalties(const SamplingParams& p);

// Steps 1-2 in place.
void apply_bias_and_penalties(std::span<float> logits, const SamplingParams& p, const PenaltyState* state);

struct Candidate {
  int32_t token;
  double prob;
};
// Step 3 for temperature > 0: the surviving tokens, most likely first (ties by id), probabilities
// renormalised to sum 1.
std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SamplingParams& p);

// The uniform draw in [0, 1) for (seed, choice, index).
double counter_uniform(uint64_t seed, uint64_t choice, uint64_t index);

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;
};

// The whole pipeline on one row. `scratch` avoids reallocating per token.
SampleResult sample_row(std::span<const float> raw_logits, const SamplingParams& p, const PenaltyState* state,
                        uint64_t seed, int choice, int index, std::vector<float>& scratch);

}  // namespace astrai
