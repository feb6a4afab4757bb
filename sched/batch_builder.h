// Build batch: one step's plan (sched/scheduler.h) becomes the forward's inputs and the list of
// draws to make from its logits. Host-side planning only: nothing here touches the model or the
// device, so a device backend can take the ForwardBatch as it is (flat int32 arrays, rebuilt into
// the same vectors every step) and copy it into pinned buffers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sched/sampler.h"
#include "sched/scheduler.h"
#include "src/engine/request.h"
#include "src/model/forward_batch.h"
#include "src/structured/token_grammar.h"

namespace astrai {

struct Sequence;

// One logits row and the draws to make from it. A request's first token is drawn for all n of its
// choices from the same row (choices 1..n-1 fork from choice 0 there, sharing its prompt); every
// other row is drawn once.
struct SampleRow {
  int logit_row = 0;  // the forward's logits row (Model::forward's logit_rows order)
  const SamplingParams* params = nullptr;
  const PenaltyState* penalties = nullptr;  // the sequence's (null: the request uses no penalties)
  uint64_t seed = 0;
  // Draws for choices [choice, choice + num_choices), each at token index `index` (the tokens the
  // choice generated so far: 0 for a first token).
  int choice = 0;
  int num_choices = 1;
  int index = 0;
  // Structured output: the sequence's matcher (null: unconstrained) and the stop ids its mask
  // allows where the text is complete.
  const structured::Matcher* matcher = nullptr;
  const std::vector<int32_t>* stop_ids = nullptr;
  // An unconstrained draw before the choice's min_tokens: the stop ids it may not take (a
  // constrained one leaves them out of its mask instead).
  const std::vector<int32_t>* banned = nullptr;
  // A prompt token's logprob (Request::prompt_logprobs) of `prompt_of`: the draw is forced to
  // `forced` (the mask allows it alone; greedy) and reports its raw logprob and alternatives.
  Sequence* prompt_of = nullptr;
  int32_t forced = -1;
};

class BatchBuilder {
 public:
  explicit BatchBuilder(int page_size) : forward_(page_size) {}

  // Packs the plan's chunks in plan order (chunk i is sequence i of the batch) and lists one
  // SampleRow per chunk that wants logits, in plan order, then one per prompt token whose logprob
  // a chunk with every row's logits (Chunk::all_logits) reports (advancing its sequence's
  // prompt_logprob_next). A chunk that ends at a token still on the device (Sequence::drawn) takes
  // it from `draws`, the output of the step in flight (StepRunner::last_draws).
  const ForwardBatch& build(const StepPlan& plan, const Tensor& draws = {});
  std::span<const SampleRow> samples() const { return samples_; }

 private:
  ForwardBatchBuilder forward_;
  std::vector<SampleRow> samples_;
  std::vector<SampleRow> prompt_rows_;  // this step's prompt logprob draws, before they join samples_
};

}  // namespace astrai
