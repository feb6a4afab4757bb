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
  void sample(std::span<const SampleRow> rows, std::vector<SampleResult>& draws) {
    start_sample(rows);
    finish_sample(draws);
  }
  // The same in two halves, so that the overlapped step loop can launch the next step in between:
  // start_sample enqueues the op on the last forward's logits and the copy of its output to the
  // host and returns; finish_sample waits for the oldest started one and reads its draws (the rows
  // given to start_sample need not outlive it). At most two may be started and not finished.
  void start_sample(std::span<const SampleRow> rows);
  void finish_sample(std::vector<SampleResult>& draws);
  // Forgets the started ops without reading them (after a failed step), once the device is done.
  void drop_samples();
  int samples_started() const { return started_; }
  // The last started op's output on the backend's device, i32 [draws, W] with each draw's token in
  // column 0: where the next forward takes tokens the host has not read yet (ForwardBatch::moves).
  // Valid until the second start_sample after it.
  Tensor last_draws() const { return slots_[1 - next_].out; }

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
  // One sample op's inputs (rows, then edits) and output, two of them taken in turn (one op may
  // still run while the next starts). On a device they live in device buffers, grown to the
  // largest step seen (so no allocation once warm), filled by one upload from page-locked host
  // memory and read back by one download into page-locked host memory (no pageable copy in the
  // step's stream); on the CPU the op reads and writes host memory directly. A slot's host_in is
  // rewritten only once finish_sample has waited for its download, which follows its upload.
  struct Slot {
    SamplePacker packer;
    Buffer host_in, host_out, dev_in, dev_out;
    Tensor out;           // the op's output: [draws, words] in dev_out (the host_out on the CPU)
    uint64_t ticket = 0;  // download_async's, on a device
  };
  Slot slots_[2];
  int next_ = 0;  // the slot start_sample takes next; the oldest started one is next_ when two are
  int started_ = 0;
  Buffer workspace_;
  // Structured output: one allowed-token bit set per logits row ([rows, ceil(vocab / 32)] words),
  // filled only in steps with a constrained row (the others' rows allow every token).
  std::vector<uint32_t> host_mask_;
  Buffer dev_mask_;
};

}  // namespace astrai
