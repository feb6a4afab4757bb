#include "sched/sampler.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace astrai {

bool needs_penalties(const SamplingParams& p) {
  return p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f || p.repetition_penalty != 1.0f;
}

void SamplePacker::clear() {
  rows_.clear();
  edits_.clear();
  max_top_ = 0;
}

void SamplePacker::add(int src_row, const SamplingParams& p, const PenaltyState* penalties, uint64_t seed,
                       int choice, int num_choices, int index, std::span<const int32_t> banned) {
  SampleRowParams r;
  r.seed = seed;
  r.src_row = src_row;
  r.index = index;
  r.top_k = p.top_k;
  r.top_logprobs = p.top_logprobs;
  r.want_logprob = p.logprobs ? 1 : 0;
  r.temperature = p.temperature;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.repetition_penalty = p.repetition_penalty;
  r.frequency_penalty = p.frequency_penalty;
  r.presence_penalty = p.presence_penalty;
  r.edit_begin = int32_t(edits_.size());
  for (const auto& [t, b] : p.logit_bias) edits_.push_back({t, b, 0, 0});
  for (int32_t t : banned) edits_.push_back({t, -std::numeric_limits<float>::infinity(), 0, 0});
  r.penalty_begin = int32_t(edits_.size());
  if (penalties && needs_penalties(p)) {
    // One entry per token seen, so that the device can apply them in parallel.
    const auto& counts = penalties->output_counts;
    for (int32_t t : penalties->prompt_tokens) {
      const auto it = counts.find(t);
      edits_.push_back({t, 0.0f, 1, it == counts.end() ? 0 : it->second});
    }
    for (const auto& [t, c] : counts)
      if (!penalties->prompt_tokens.count(t)) edits_.push_back({t, 0.0f, 1, c});
  }
  r.edit_end = int32_t(edits_.size());
  max_top_ = std::max(max_top_, std::clamp(p.top_logprobs, 0, kSampleMaxTopLogprobs));
  for (int c = choice; c < choice + num_choices; ++c) {
    r.choice = c;
    rows_.push_back(r);
  }
}

SampleResult SamplePacker::result(std::span<const int32_t> out, size_t r, int64_t vocab) const {
  const int32_t* w = out.data() + r * size_t(out_words());
  SampleResult res;
  res.token = w[0];
  std::memcpy(&res.logprob, &w[1], 4);
  const int64_t k = std::min<int64_t>(rows_[r].top_logprobs, vocab);
  for (int64_t i = 0; i < k; ++i) {
    TopLogprob t;
    t.token = w[2 + 2 * i];
    std::memcpy(&t.logprob, &w[3 + 2 * i], 4);
    res.top.push_back(t);
  }
  return res;
}

void apply_bias_and_penalties(std::span<float> logits, const SamplingParams& p, const PenaltyState* state) {
  SamplePacker packer;
  packer.add(0, p, state, 0, 0, 1, 0);
  cpu::apply_sample_edits(logits, packer.rows()[0], packer.edits().data());
}

std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SamplingParams& p) {
  std::vector<Candidate> c;
  cpu::sampling_candidates(logits, p.temperature, p.top_k, p.top_p, p.min_p, c);
  return c;
}

SampleResult sample_row(std::span<const float> raw_logits, const SamplingParams& p, const PenaltyState* state,
                        uint64_t seed, int choice, int index, std::vector<float>& /*scratch*/) {
  SamplePacker packer;
  packer.add(0, p, state, seed, choice, 1, index);
  const int64_t V = int64_t(raw_logits.size());
  std::vector<int32_t> out(size_t(packer.out_words()));
  SampleBatch b;
  b.logits = Tensor(const_cast<float*>(raw_logits.data()), DType::f32, {1, V});
  b.rows = Tensor(const_cast<SampleRowParams*>(packer.rows().data()), DType::i32, {1, kSampleRowWords});
  if (!packer.edits().empty())
    b.edits = Tensor(const_cast<SampleEdit*>(packer.edits().data()), DType::i32,
                     {int64_t(packer.edits().size()), kSampleEditWords});
  b.out = Tensor(out.data(), DType::i32, {1, packer.out_words()});
  b.max_top_logprobs = packer.max_top_logprobs();
  cpu::sample(b);
  return packer.result(out, 0, V);
}

}  // namespace astrai
