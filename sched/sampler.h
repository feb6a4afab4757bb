// Token sampling: the semantics of the backend's sample op (src/backend/backend.h), the per-sequence
// state the penalties read, and the packing of a step's draws into the op's inputs.
//
// Order of operations (the way HF transformers' logits processors and vLLM apply them):
//   1. logit_bias: logits[t] += bias[t]; before min_tokens, the stop ids' logits become -infinity
//   2. repetition penalty p over tokens seen in the prompt or the output (CTRL paper, as HF):
//        logit > 0 ? logit / p : logit * p
//      frequency / presence penalties over output tokens only (OpenAI's definition):
//        logit -= frequency * count_out[t] + presence * (count_out[t] > 0)
//   3. temperature == 0: greedy argmax (lowest id on ties). Otherwise logits / temperature, softmax,
//      then top-k (k most likely), top-p (smallest most-likely set with mass >= p, renormalised after
//      top-k), min-p (drop tokens whose probability is below min_p * max probability).
//   4. The draw: one uniform u in [0,1) from a counter-based generator keyed by
//      (seed, choice, token index), so a request's draws do not depend on what else is in the batch
//      or on the order rows are processed (its tokens then depend on its logits alone, which the
//      CPU backend keeps batch-invariant: docs/architecture.md, "What a seed promises"); the token
//      is the first candidate (most likely first, ties by id) whose cumulative probability exceeds u;
//      when nothing truncates (no top-k below the candidates' count, top-p 1, min-p 0) the walk is in
//      token id order instead (the same distribution, no sort; backend.h, "sampling").
// Logprobs are those of the model's raw distribution (log_softmax of the unprocessed logits).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "src/backend/backend.h"
#include "src/backend/cpu/ops.h"
#include "src/backend/sample_math.h"  // counter_uniform
#include "src/engine/request.h"

namespace astrai {

// What the penalties need to know about a sequence.
struct PenaltyState {
  std::unordered_set<int32_t> prompt_tokens;
  std::unordered_map<int32_t, int32_t> output_counts;
  void add_output(int32_t t) { ++output_counts[t]; }
};

bool needs_penalties(const SamplingParams& p);

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;
};

// A step's draws as the sample op's inputs: one SampleRowParams per draw and the edit entries
// (logit bias, then one penalty entry per token the sequence has seen) of each logits row, shared
// by the draws of that row. Host work is proportional to the bias list and the sequences' seen
// tokens, never to the vocabulary. The vectors are reused from step to step.
class SamplePacker {
 public:
  void clear();
  // The draws for choices [choice, choice + num_choices) at token index `index` from logits row
  // `src_row`; `banned` tokens (min_tokens' stop ids) get a bias of -infinity after logit_bias.
  void add(int src_row, const SamplingParams& p, const PenaltyState* penalties, uint64_t seed, int choice,
           int num_choices, int index, std::span<const int32_t> banned = {});
  std::span<const SampleRowParams> rows() const { return rows_; }
  std::span<const SampleEdit> edits() const { return edits_; }
  int max_top_logprobs() const { return max_top_; }
  int out_words() const { return sample_out_words(max_top_); }
  // Draw r's result from the op's output (out: [rows, out_words()] words) for a vocabulary of `vocab`.
  SampleResult result(std::span<const int32_t> out, size_t r, int64_t vocab) const;

 private:
  std::vector<SampleRowParams> rows_;
  std::vector<SampleEdit> edits_;
  int max_top_ = 0;
};

// The op on one host row through the CPU backend's code (tests and host-side references):
// steps 1-2 in place ...
void apply_bias_and_penalties(std::span<float> logits, const SamplingParams& p, const PenaltyState* state);
// ... step 3 for temperature > 0: the surviving tokens, most likely first (ties by id),
// probabilities renormalised to sum 1 ...
using Candidate = cpu::SampleCandidate;
std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SamplingParams& p);
// ... and the whole pipeline for draw (seed, choice, index). `scratch` is unused (the op keeps its own).
SampleResult sample_row(std::span<const float> raw_logits, const SamplingParams& p, const PenaltyState* state,
                        uint64_t seed, int choice, int index, std::vector<float>& scratch);

}  // namespace astrai
