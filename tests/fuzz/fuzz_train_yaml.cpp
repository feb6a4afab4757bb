// train.yaml: any text is a training configuration or an error naming the key (never a crash or an
// uncaught yaml-cpp exception); an accepted configuration's values are within each key's documented
// range, and the JSON it saves in trainer_state.json (JSON is YAML) reads back to the same configuration.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto c = astrai::train::parse_train_config(text, "train.yaml", {});
  if (!c.ok()) {
    if (c.status().message().empty()) std::abort();
    return 0;
  }
  const auto finite_in = [](double x, double lo, double hi) {
    return std::isfinite(x) && x >= lo && x <= hi;
  };
  if (c->model.empty() == c->preset.empty() || c->data_train.empty() || c->out.empty() || c->seq_len < 1 ||
      c->batch_size < 1 || c->grad_accum < 1 || c->steps < 1 || c->warmup_steps < 0 || c->save_every < 0 ||
      c->eval_every < 0 || c->eval_batches < 0 || !finite_in(c->lr, 0, 10) || !finite_in(c->min_lr, 0, 10) ||
      !finite_in(c->decay_fraction, 0, 1) || !finite_in(c->weight_decay, 0, 10) ||
      !finite_in(c->grad_clip, 0, 1e30) || !finite_in(c->label_smoothing, 0, 0.999))
    std::abort();
  const std::string saved = c->to_json();
  const auto again = astrai::train::parse_train_config(saved, "trainer_state.json", {});
  if (!again.ok() || again->to_json() != saved) std::abort();
  return 0;
}
