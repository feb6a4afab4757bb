// Run: one step's forward on the backend, then the draws from its logits by the backend's sample op
// (only the sampled ids and the logprobs asked for come back to the host). The runner
// owns the backend, the model and its KV cache; it knows nothing of requests, sequences or pages
// beyond what the ForwardBatch and the SampleRows say (sched/batch_builder.h).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "sched/batch_builder.h"
#include "sched/sampler.h"
#include "src/backend/backend.h"
#include "src/core/status.h"
#include "src/core/tensor.h"
#include "src/model/model.h"

namespace astrai {

class StepRunner {
 public:
  StepRunner(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model, KvCache kv);

  const Model& model() const { return *model_; }

  // Stores the batch's K/V in the cache and computes the logits of its logit rows. A forward that
  // fails (or throws) is an error with the reason; the logits are then unusable.
  Status forward(const ForwardBatch& batch);

  // The draws of every row from the last forward's logits (row r is logit row r), rows in order
  // and each row's choices in order: draws holds sum(num_choices) results afterwards. A row with a
  // matcher draws only from the tokens its grammar allows (SampleBatch::mask).
  void sample(std::span<const SampleRow> rows, std::vector<SampleResult>& draws);

  // Gives the memory of these KV pages (ids the pool holds free) back to the system: every whole
  // OS page they cover in a host cache (discard_host_pages); a GPU's preallocated pool stays. Their
  // contents are gone (zeros); a page is written before it is read once the pool hands it out again.
  void discard_pages(std::span<const int32_t> pages);

 private:
  // Fills host_mask_ for the step's rows; false when no row is constrained (no mask at all).
  bool fill_masks(std::span<const SampleRow> rows);

  std::unique_ptr<Backend> backend_;  // before model_: the model uses it
  std::unique_ptr<Model> model_;
  KvCache kv_;
  const int vocab_;
  Tensor logits_;  // the last forward's [R, vocab], on the backend's device
  SamplePacker packer_;
  // The op's inputs (rows, then edits) and outputs. On a device they live in device buffers, grown
  // to the largest step seen (so no allocation once warm), filled by one upload and read back by one
  // download; on the CPU the op reads and writes the host vectors directly.
  std::vector<int32_t> host_in_, host_out_;
  Buffer dev_in_, dev_out_, workspace_;
  // Structured output: one allowed-token bit set per logits row ([rows, ceil(vocab / 32)] words),
  // filled only in steps with a constrained row (the others' rows allow every token).
  std::vector<uint32_t> host_mask_;
  Buffer dev_mask_;
};

}  // namespace astrai
