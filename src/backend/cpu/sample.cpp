// The sample op on the CPU (src/backend/backend.h, "sampling"): the host sampler, one draw at a
// time in float64 after the f32 edits. A draw that keeps every candidate is O(V) (one pass for the
// masses, one for the cumulative sum in id order); one that truncates sorts its candidates.
// sched/sampler.cpp's helpers call into this file, so the host has one implementation of the math.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "src/backend/cpu/ops.h"
#include "src/backend/cpu/rows.h"

namespace astrai::cpu {

namespace {

// Step 3 from the candidates' masses: c holds every candidate (mass e > 0) with its unnormalised
// mass; top_k, then most likely first (ties by id), top_p, min_p, each renormalised.
void truncate_candidates(int top_k, float top_p, float min_p, std::vector<SampleCandidate>& c) {
  auto more_likely = [](const SampleCandidate& a, const SampleCandidate& b) {
    return a.prob != b.prob ? a.prob > b.prob : a.token < b.token;
  };
  if (top_k > 0 && size_t(top_k) < c.size()) {
    std::nth_element(c.begin(), c.begin() + top_k, c.end(), more_likely);
    c.resize(size_t(top_k));
  }
  std::sort(c.begin(), c.end(), more_likely);
  auto normalise = [&] {
    double sum = 0;
    for (const auto& x : c) sum += x.prob;
    for (auto& x : c) x.prob /= sum;
  };
  normalise();
  if (top_p < 1.0f) {
    double cum = 0;
    size_t keep = 0;
    while (keep < c.size() && (keep == 0 || cum < double(top_p))) cum += c[keep++].prob;
    c.resize(keep);
  }
  if (min_p > 0.0f && !c.empty()) {
    const double floor = double(min_p) * c.front().prob;
    size_t keep = 1;
    while (keep < c.size() && c[keep].prob >= floor) ++keep;
    c.resize(keep);
  }
  normalise();
}

// The largest logit, NaN skipped (std::max keeps its first argument against a NaN).
float largest_logit(std::span<const float> logits) {
  float m = -std::numeric_limits<float>::infinity();
  for (float l : logits) m = std::max(m, l);
  return m;
}

// e[t] = exp((l[t] - max) / T) for every token (0 where it is not a candidate); returns how many
// are candidates (e > 0).
int64_t candidate_masses(std::span<const float> logits, float max_logit, float temperature,
                         std::vector<double>& e) {
  e.resize(logits.size());
  int64_t n = 0;
  for (size_t t = 0; t < logits.size(); ++t) {
    const double x = std::exp((double(logits[t]) - double(max_logit)) / double(temperature));
    e[t] = x > 0 ? x : 0.0;  // NaN (a NaN logit, or max +inf) is no candidate
    n += e[t] > 0;
  }
  return n;
}

// Step 3 from the masses: every candidate (e > 0) in id order with its mass, then truncated.
void truncated_candidates(const std::vector<double>& e, int top_k, float top_p, float min_p,
                          std::vector<SampleCandidate>& c) {
  c.clear();
  for (size_t t = 0; t < e.size(); ++t)
    if (e[t] > 0) c.push_back({int32_t(t), e[t]});
  truncate_candidates(top_k, top_p, min_p, c);
}

}  // namespace

void sampling_candidates(std::span<const float> logits, float temperature, int top_k, float top_p,
                         float min_p, std::vector<SampleCandidate>& c) {
  std::vector<double> e;
  candidate_masses(logits, largest_logit(logits), temperature, e);
  truncated_candidates(e, top_k, top_p, min_p, c);
}

void apply_sample_edits(std::span<float> logits, const SampleRowParams& p, const SampleEdit* edits) {
  const int64_t vocab = int64_t(logits.size());
  for (int32_t e = p.edit_begin; e < p.penalty_begin; ++e)
    if (edits[e].token >= 0 && edits[e].token < vocab)
      logits[size_t(edits[e].token)] = sample_math::add_rn(logits[size_t(edits[e].token)], edits[e].bias);
  for (int32_t e = p.penalty_begin; e < p.edit_end; ++e) {
    if (edits[e].token < 0 || edits[e].token >= vocab) continue;
    float& l = logits[size_t(edits[e].token)];
    l = sample_math::apply_penalty(l, edits[e], p.repetition_penalty, p.frequency_penalty,
                                   p.presence_penalty);
  }
}

namespace {

// Scratch reused across steps by each thread that samples.
struct RowScratch {
  std::vector<float> logits;
  std::vector<double> masses;
  std::vector<SampleCandidate> candidates;
  std::vector<int32_t> ids;
};

// Step 4 over every candidate in id order: the first token whose cumulative mass exceeds u * (the
// total), else the last candidate (u * total rounded up to the total). At least one e > 0.
int32_t draw_in_id_order(const std::vector<double>& e, double u) {
  double total = 0;
  for (double x : e) total += x;
  const double target = u * total;
  double cum = 0;
  int32_t last = -1;
  for (size_t t = 0; t < e.size(); ++t) {
    if (!(e[t] > 0)) continue;
    cum += e[t];
    if (cum > target) return int32_t(t);
    last = int32_t(t);
  }
  return last;
}

void sample_one(const float* raw_row, int64_t vocab, const uint32_t* mask_row, const SampleRowParams& p,
                const SampleEdit* edits, int32_t* out, RowScratch& s) {
  const std::span<const float> raw(raw_row, size_t(vocab));
  s.logits.assign(raw.begin(), raw.end());
  std::span<float> logits(s.logits);
  if (mask_row)
    for (int64_t t = 0; t < vocab; ++t)
      if (!((mask_row[t >> 5] >> (t & 31)) & 1u)) logits[size_t(t)] = -std::numeric_limits<float>::infinity();
  apply_sample_edits(logits, p, edits);

  auto argmax = [&] { return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()); };
  int32_t token = 0;
  if (p.temperature <= 0.0f) {
    token = argmax();
  } else {
    const double u = counter_uniform(p.seed, uint64_t(p.choice), uint64_t(p.index));
    // One exp pass for every draw: the masses give the candidates' count (whether top_k truncates),
    // the id-order draw, and a truncating draw's candidates.
    const int64_t candidates = candidate_masses(logits, largest_logit(logits), p.temperature, s.masses);
    if (candidates == 0) {  // every logit -inf or NaN
      token = argmax();
    } else if (sample_math::keeps_every_candidate(p, candidates)) {
      token = draw_in_id_order(s.masses, u);
    } else {
      truncated_candidates(s.masses, p.top_k, p.top_p, p.min_p, s.candidates);  // keeps at least one
      double cum = 0;
      token = s.candidates.back().token;
      for (const auto& c : s.candidates) {
        cum += c.prob;
        if (u < cum) {
          token = c.token;
          break;
        }
      }
    }
  }
  out[0] = token;
  float logprob = 0.0f;
  if (p.want_logprob || p.top_logprobs > 0) {
    float m = -std::numeric_limits<float>::infinity();
    for (float l : raw) m = std::max(m, l);
    double z = 0;
    for (float l : raw) z += std::exp(double(l) - double(m));
    const double lse = double(m) + std::log(z);
    logprob = float(double(raw[size_t(token)]) - lse);
    if (p.top_logprobs > 0) {
      const size_t k = std::min(size_t(p.top_logprobs), raw.size());
      s.ids.resize(raw.size());
      for (size_t i = 0; i < s.ids.size(); ++i) s.ids[i] = int32_t(i);
      std::partial_sort(s.ids.begin(), s.ids.begin() + ptrdiff_t(k), s.ids.end(), [&](int32_t a, int32_t b) {
        return raw[size_t(a)] != raw[size_t(b)] ? raw[size_t(a)] > raw[size_t(b)] : a < b;
      });
      for (size_t i = 0; i < k; ++i) {
        const float lp = float(double(raw[size_t(s.ids[i])]) - lse);
        out[2 + 2 * i] = s.ids[i];
        std::memcpy(&out[3 + 2 * i], &lp, 4);
      }
    }
  }
  std::memcpy(&out[1], &logprob, 4);
}

}  // namespace

void sample(const SampleBatch& b) {
  if (const std::string err = sample_batch_error(b, Device::cpu); !err.empty())
    ASTRAI_OP_CHECK(false, "sample: " + err);
  const int64_t L = b.logits.size(0), V = b.logits.size(1), R = b.rows.size(0);
  const int words = sample_out_words(b.max_top_logprobs);
  const int64_t E = b.edits.data ? b.edits.size(0) : 0;
  const int64_t mask_words = (V + 31) / 32;
  const auto* rows = static_cast<const SampleRowParams*>(b.rows.data);
  bool any_sampled = false;
  for (int64_t r = 0; r < R; ++r) {
    const SampleRowParams& p = rows[r];
    any_sampled = any_sampled || p.temperature > 0.0f;
    ASTRAI_OP_CHECK(p.src_row >= 0 && p.src_row < L, "sample: a row's src_row is outside the logits");
    ASTRAI_OP_CHECK(0 <= p.edit_begin && p.edit_begin <= p.penalty_begin && p.penalty_begin <= p.edit_end &&
                        p.edit_end <= E,
                    "sample: a row's edit range is outside the edits");
    ASTRAI_OP_CHECK(p.top_logprobs >= 0 && p.top_logprobs <= b.max_top_logprobs,
                    "sample: a row asks for more top logprobs than out holds");
  }
  const auto* edits = static_cast<const SampleEdit*>(b.edits.data);
  const float* logits = b.logits.ptr<float>();
  const auto* mask = static_cast<const uint32_t*>(b.mask.data);
  int32_t* out = b.out.ptr<int32_t>();
  // Rows are independent: a batch with sampled rows (a millisecond or more each: float64 exp over
  // the row, and a sort when it truncates) spreads them over the threads, each with its scratch.
  // Greedy rows (a copy and an argmax, memory-bound) stay on this thread, where a parallel region
  // costs more than it saves.
#pragma omp parallel for schedule(dynamic, 1) if (R > 1 && any_sampled)
  for (int64_t r = 0; r < R; ++r) {
    thread_local RowScratch scratch;
    const SampleRowParams& p = rows[r];
    sample_one(logits + p.src_row * V, V, mask ? mask + p.src_row * mask_words : nullptr, p, edits,
               out + r * words, scratch);
  }
}

}  // namespace astrai::cpu
