#include "sched/step_runner.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

namespace astrai {

StepRunner::StepRunner(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model, KvCache kv)
    : backend_(std::move(backend)),
      model_(std::move(model)),
      kv_(std::move(kv)),
      vocab_(int(model_->config().vocab_size)) {}

Status StepRunner::forward(const ForwardBatch& batch) {
  Result<Tensor> logits = [&]() -> Result<Tensor> {
    try {
      return model_->forward(batch, kv_);
    } catch (const std::exception& e) {
      return internal_error(std::string("forward failed: ") + e.what());
    }
  }();
  if (!logits.ok()) return logits.status();
  logits_ = logits.value();
  return {};
}

namespace {

// buf holds at least `bytes` (grown, never shrunk, so a warm step loop does not allocate).
void ensure(Backend& be, Buffer& buf, size_t bytes) {
  if (buf.size() < bytes) buf = be.alloc(std::max(bytes, buf.size() * 2));
}

}  // namespace

bool StepRunner::fill_masks(std::span<const SampleRow> rows) {
  bool any = false;
  for (const SampleRow& r : rows) any = any || r.matcher;
  if (!any) return false;
  const int64_t words = (int64_t(vocab_) + 31) / 32;
  host_mask_.resize(rows.size() * size_t(words));
  for (size_t r = 0; r < rows.size(); ++r) {
    uint32_t* row = host_mask_.data() + r * size_t(words);
    if (!rows[r].matcher) {
      std::fill(row, row + words, ~0u);
      continue;
    }
    static const std::vector<int32_t> kNone;
    const std::vector<int32_t>& stop = rows[r].stop_ids ? *rows[r].stop_ids : kNone;
    if (rows[r].matcher->fill_mask(row, words, stop) == 0) {
      // No token continues the text (the grammar needs bytes no token has, or ignore_eos at a
      // complete text): let the choice end at an end-of-sequence id rather than draw from nothing.
      for (int32_t t : model_->config().eos_token_ids)
        if (t >= 0 && t < vocab_) row[t >> 5] |= 1u << (t & 31);
    }
  }
  return true;
}

void StepRunner::sample(std::span<const SampleRow> rows, std::vector<SampleResult>& draws) {
  draws.clear();
  if (rows.empty()) return;
  packer_.clear();
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampleRow& row = rows[r];
    packer_.add(int(r), *row.params, row.penalties, row.seed, row.choice, row.num_choices, row.index);
  }
  Backend& be = model_->backend();
  const int64_t R = int64_t(packer_.rows().size()), E = int64_t(packer_.edits().size());
  const int words = packer_.out_words();
  host_in_.resize(size_t(R * kSampleRowWords + E * kSampleEditWords));
  std::memcpy(host_in_.data(), packer_.rows().data(), size_t(R) * sizeof(SampleRowParams));
  // No edits (no penalties, bias or masks): edits().data() may be null, which memcpy may not be given.
  if (E > 0)
    std::memcpy(host_in_.data() + R * kSampleRowWords, packer_.edits().data(),
                size_t(E) * sizeof(SampleEdit));
  host_out_.resize(size_t(R * words));

  int32_t* in = host_in_.data();
  int32_t* out = host_out_.data();
  const bool on_host = be.device() == Device::cpu;
  if (!on_host) {
    ensure(be, dev_in_, host_in_.size() * 4);
    ensure(be, dev_out_, host_out_.size() * 4);
    ensure(be, workspace_, be.sample_workspace_bytes(int(R), vocab_));
    be.upload(dev_in_.as(DType::i32, {int64_t(host_in_.size())}), host_in_.data());
    in = static_cast<int32_t*>(dev_in_.data());
    out = static_cast<int32_t*>(dev_out_.data());
  }
  SampleBatch b;
  b.logits = logits_;
  b.rows = Tensor(in, DType::i32, {R, kSampleRowWords}, be.device());
  if (E > 0) b.edits = Tensor(in + R * kSampleRowWords, DType::i32, {E, kSampleEditWords}, be.device());
  b.out = Tensor(out, DType::i32, {R, words}, be.device());
  if (!on_host) b.workspace = workspace_.as(DType::i32, {int64_t(workspace_.size() / 4)});
  if (fill_masks(rows)) {
    const int64_t words = (int64_t(vocab_) + 31) / 32;
    void* mask = host_mask_.data();
    if (!on_host) {
      ensure(be, dev_mask_, host_mask_.size() * 4);
      be.upload(dev_mask_.as(DType::i32, {int64_t(host_mask_.size())}), host_mask_.data());
      mask = dev_mask_.data();
    }
    b.mask = Tensor(mask, DType::i32, {int64_t(rows.size()), words}, be.device());
  }
  b.max_top_logprobs = packer_.max_top_logprobs();
  be.sample(b);
  if (!on_host) be.download(host_out_.data(), b.out);
  draws.reserve(size_t(R));
  for (int64_t r = 0; r < R; ++r) {
    draws.push_back(packer_.result(host_out_, size_t(r), vocab_));
    // A token outside the vocabulary is a backend bug; the step loop fails the step's requests.
    if (draws.back().token < 0 || draws.back().token >= vocab_)
      throw Error(internal_error("sample op returned token " + std::to_string(draws.back().token) +
                                 " outside the vocabulary of " + std::to_string(vocab_)));
  }
}

}  // namespace astrai
