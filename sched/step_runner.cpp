#include "sched/step_runner.h"

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

void StepRunner::sample(std::span<const SampleRow> rows, std::vector<SampleResult>& draws) {
  draws.clear();
  if (rows.empty()) return;
  const float* host = nullptr;
  if (logits_.device == Device::cpu) {
    host = logits_.ptr<float>();
  } else {
    host_logits_.resize(size_t(logits_.numel()));
    model_->backend().download(host_logits_.data(), logits_);
    host = host_logits_.data();
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampleRow& row = rows[r];
    const std::span<const float> logits(host + r * size_t(vocab_), size_t(vocab_));
    for (int c = row.choice; c < row.choice + row.num_choices; ++c)
      draws.push_back(sample_row(logits, *row.params, row.penalties, row.seed, c, row.index, scratch_));
  }
}

}  // namespace astrai
