// A deterministic stand-in for Model, for scheduler tests that must not depend on the real forward.
//
// Its "K/V" per slot is the token id (k) and position + 1 (v). forward() stores each token of the
// batch in its slot, then for every logit row reads the sequence's whole history back out of the
// pages named by the batch's page table (checking every position was written where expected) and
// returns logits that are a hash of that history. So any mistake in page tables, slots, positions,
// chunking, prefix reuse or preemption changes the logits and shows up as a different output.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/backend/backend.h"
#include "src/backend/cpu/ops.h"
#include "src/model/model.h"

namespace astrai::test {

// A backend that implements nothing (the fake model's logits are already on the host).
class NullBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  std::string name() const override { return "null"; }
  DType compute_dtype() const override { return DType::f32; }
  Buffer alloc(size_t bytes) override { return Buffer::host(bytes); }
  void upload(Tensor, const void*) override { fail(); }
  void download(void*, const Tensor&) override { fail(); }
  void synchronize() override {}
  void embedding(const Tensor&, const Tensor&, Tensor) override { fail(); }
  void rms_norm(const Tensor&, const Tensor&, float, Tensor) override { fail(); }
  void add_rms_norm(Tensor, const Tensor&, const Tensor&, float, Tensor) override { fail(); }
  void linear(const Tensor&, const Weight&, const Tensor*, Tensor) override { fail(); }
  void rope(Tensor, const Tensor&, const Tensor&) override { fail(); }
  void swiglu(const Tensor&, const Tensor&, Tensor) override { fail(); }
  void add(const Tensor&, const Tensor&, Tensor) override { fail(); }
  void kv_store(const Tensor&, const Tensor&, const Tensor&, Tensor, Tensor) override { fail(); }
  void paged_attention(const Tensor&, const Tensor&, const Tensor&, const AttentionBatch&, float,
                       Tensor) override {
    fail();
  }
  void gather_rows(const Tensor&, const Tensor&, Tensor) override { fail(); }
  void convert(const Tensor&, Tensor) override { fail(); }
  // The fake logits are host memory: the step runner samples them with the CPU backend's op.
  void sample(const SampleBatch& batch) override { cpu::sample(batch); }
  size_t sample_workspace_bytes(int, int) const override { return 0; }

 private:
  [[noreturn]] static void fail();
};

struct FakeModelOptions {
  int vocab = 50;
  int max_position_embeddings = 4096;
  std::vector<int32_t> eos_ids = {};
};

class FakeModel final : public Model {
 public:
  explicit FakeModel(const FakeModelOptions& o = {});
  const ModelConfig& config() const override { return cfg_; }
  Backend& backend() const override { return backend_; }
  size_t kv_bytes_per_page(int page_size) const override { return size_t(page_size) * 8; }
  KvCache allocate_kv(int num_pages, int page_size) const override;
  Result<Tensor> forward(const ForwardBatch& batch, KvCache& kv) override;
  bool takes_drawn_tokens() const override { return true; }
  size_t weight_bytes() const override { return 0; }
  void for_each_weight(const std::function<void(const Tensor&)>&) const override {}

  // What forward() returns for a sequence whose tokens so far are `history` (the reference).
  static void logits_for(const std::vector<int32_t>& history, int vocab, float* out);

  // Observations for tests (read from other threads).
  std::atomic<int> forward_calls{0};
  std::atomic<int> max_tokens_per_step{0};
  std::atomic<int> max_seqs_per_step{0};
  std::atomic<int> moves_taken{0};  // rows whose token came from the previous step's draws
  // Tests that must act while a request is still running slow each forward down by this much.
  std::atomic<int> delay_us{0};

 private:
  ModelConfig cfg_;
  mutable NullBackend backend_;
  std::vector<float> logits_;
  std::vector<int32_t> tokens_;  // the batch's tokens with the moves applied
};

// Greedy continuation of `prompt` under FakeModel's logits (the reference decode); the first
// `min_tokens` tokens are the most likely that are not stop ids.
std::vector<int32_t> fake_greedy(const std::vector<int32_t>& prompt, int vocab, int max_tokens,
                                 const std::vector<int32_t>& stop_ids, bool* stopped = nullptr,
                                 int min_tokens = 0);

}  // namespace astrai::test
