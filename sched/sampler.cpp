#include "sched/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace astrai {

bool needs_penalties(const SamplingParams& p) {
  return p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f || p.repetition_penalty != 1.0f;
}

void apply_bias_and_penalties(std::span<float> logits, const SamplingParams& p, const PenaltyState* state) {
  const int64_t vocab = int64_t(logits.size());
  for (const auto& [t, b] : p.logit_bias)
    if (t >= 0 && t < vocab) logits[size_t(t)] += b;
  if (!state || !needs_penalties(p)) return;
  if (p.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t t) {
      if (t < 0 || t >= vocab) return;
      float& l = logits[size_t(t)];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    for (int32_t t : state->prompt_tokens) penalise(t);
    for (const auto& [t, c] : state->output_counts)
      if (!state->prompt_tokens.count(t)) penalise(t);
  }
  for (const auto& [t, c] : state->output_counts) {
    if (t < 0 || t >= vocab) continue;
    logits[size_t(t)] -= p.frequency_penalty * float(c) + (c > 0 ? p.presence_penalty : 0.0f);
  }
}

std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SamplingParams& p) {
  const size_t vocab = logits.size();
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  std::vector<Candidate> c;
  c.reserve(vocab);
  double sum = 0;
  for (size_t t = 0; t < vocab; ++t) {
    const double e = std::exp((double(logits[t]) - double(max_logit)) / double(p.temperature));
    if (e > 0) {
      c.push_back({int32_t(t), e});
      sum += e;
    }
  }
  auto more_likely = [](const Candidate& a, const Candidate& b) {
    return a.prob != b.prob ? a.prob > b.prob : a.token < b.token;
  };
  if (p.top_k > 0 && size_t(p.top_k) < c.size()) {
    std::nth_element(c.begin(), c.begin() + p.top_k, c.end(), more_likely);
    c.resize(size_t(p.top_k));
  }
  std::sort(c.begin(), c.end(), more_likely);
  sum = 0;
  for (const auto& x : c) sum += x.prob;
  for (auto& x : c) x.prob /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t keep = 0;
    while (keep < c.size() && (keep == 0 || cum < double(p.top_p))) cum += c[keep++].prob;
    c.resize(keep);
  }
  if (p.min_p > 0.0f && !c.empty()) {
    const double floor = double(p.min_p) * c.front().prob;
    size_t keep = 1;
    while (keep < c.size() && c[keep].prob >= floor) ++keep;
    c.resize(keep);
  }
  sum = 0;
  for (const auto& x : c) sum += x.prob;
  for (auto& x : c) x.prob /= sum;
  return c;
}

namespace {
uint64_t mix64(uint64_t x) {  // splitmix64's finaliser: a bijection with full avalanche
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}
}  // namespace

double counter_uniform(uint64_t seed, uint64_t choice, uint64_t index) {
  uint64_t x = mix64(seed + 0x9E3779B97F4A7C15ull);
  x = mix64(x ^ (choice * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull));
  x = mix64(x ^ (index * 0xA0761D6478BD642Full + 0xE7037ED1A0B428DBull));
  return double(x >> 11) * 0x1.0p-53;
}

SampleResult sample_row(std::span<const float> raw_logits, const SamplingParams& p, const PenaltyState* state,
                        uint64_t seed, int choice, int index, std::vector<float>& scratch) {
  SampleResult r;
  scratch.assign(raw_logits.begin(), raw_logits.end());
  std::span<float> logits(scratch);
  apply_bias_and_penalties(logits, p, state);
  if (p.temperature <= 0.0f) {
    r.token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    const auto cand = sampling_candidates(logits, p);
    const double u = counter_uniform(seed, uint64_t(choice), uint64_t(index));
    double cum = 0;
    r.token = cand.back().token;
    for (const auto& c : cand) {
      cum += c.prob;
      if (u < cum) {
        r.token = c.token;
        break;
      }
    }
  }
  if (p.logprobs || p.top_logprobs > 0) {
    float m = -std::numeric_limits<float>::infinity();
    for (float l : raw_logits) m = std::max(m, l);
    double z = 0;
    for (float l : raw_logits) z += std::exp(double(l) - double(m));
    const double lse = double(m) + std::log(z);
    r.logprob = float(double(raw_logits[size_t(r.token)]) - lse);
    if (p.top_logprobs > 0) {
      const size_t k = std::min(size_t(p.top_logprobs), raw_logits.size());
      std::vector<int32_t> ids(raw_logits.size());
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        return raw_logits[size_t(a)] != raw_logits[size_t(b)] ? raw_logits[size_t(a)] > raw_logits[size_t(b)]
                                                              : a < b;
      });
      for (size_t i = 0; i < k; ++i)
        r.top.push_back({ids[i], float(double(raw_logits[size_t(ids[i])]) - lse)});
    }
  }
  return r;
}

}  // namespace astrai
