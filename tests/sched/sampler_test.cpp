#include "sched/sampler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "tools/test_util.h"

using namespace astrai;

namespace {

std::vector<float> random_logits(std::mt19937_64& rng, int vocab) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (auto& x : l) x = d(rng);
  return l;
}

// The textbook definition, in float64: softmax(l / T), then top-k, top-p (on the renormalised
// top-k), min-p; returns token -> probability of the final distribution.
std::map<int32_t, double> reference_distribution(const std::vector<float>& l, const SamplingParams& p) {
  const int V = int(l.size());
  std::vector<double> prob(static_cast<size_t>(V));
  double m = *std::max_element(l.begin(), l.end());
  double z = 0;
  for (int i = 0; i < V; ++i) z += prob[size_t(i)] = std::exp((double(l[size_t(i)]) - m) / p.temperature);
  for (auto& x : prob) x /= z;
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return prob[size_t(a)] > prob[size_t(b)]; });
  if (p.top_k > 0 && p.top_k < V) order.resize(size_t(p.top_k));
  double mass = 0;
  for (int32_t t : order) mass += prob[size_t(t)];
  std::vector<int32_t> kept;
  double cum = 0;
  for (int32_t t : order) {
    if (!kept.empty() && cum >= double(p.top_p)) break;
    kept.push_back(t);
    cum += prob[size_t(t)] / mass;
  }
  const double top = prob[size_t(kept[0])];
  std::map<int32_t, double> out;
  double s = 0;
  for (int32_t t : kept)
    if (prob[size_t(t)] >= double(p.min_p) * top) s += out[t] = prob[size_t(t)];
  for (auto& [t, q] : out) q /= s;
  return out;
}

}  // namespace

TEST_CASE("sampling candidates equal the reference top-k/top-p/min-p distribution", "[unit]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int V = 5 + int(rng() % 60);
    auto l = random_logits(rng, V);
    SamplingParams p;
    p.temperature = 0.3f + float(rng() % 100) / 50.0f;
    p.top_k = int(rng() % 3) == 0 ? 0 : 1 + int(rng() % V);
    p.top_p = int(rng() % 3) == 0 ? 1.0f : 0.05f + float(rng() % 95) / 100.0f;
    p.min_p = int(rng() % 3) == 0 ? 0.0f : float(rng() % 50) / 100.0f;
    auto ref = reference_distribution(l, p);
    auto cand = sampling_candidates(l, p);
    REQUIRE(cand.size() == ref.size());
    for (const auto& c : cand) {
      REQUIRE(ref.count(c.token));
      REQUIRE(c.prob == Approx(ref[c.token]).epsilon(1e-9));
    }
  }
}

TEST_CASE("sampled tokens never fall outside the filtered set and follow its probabilities", "[unit]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int V = 12;
  auto l = random_logits(rng, V);
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_k = 8;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  auto ref = reference_distribution(l, p);
  std::map<int32_t, int> counts;
  std::vector<float> scratch;
  const int N = 40000;
  const uint64_t req_seed = rng();
  for (int i = 0; i < N; ++i) {
    auto r = sample_row(l, p, nullptr, req_seed, 0, i, scratch);
    REQUIRE(ref.count(r.token));
    ++counts[r.token];
  }
  for (auto& [t, q] : ref) {
    const double f = double(counts[t]) / N, sigma = std::sqrt(q * (1 - q) / N);
    INFO("token " << t << " p " << q << " freq " << f);
    CHECK(std::abs(f - q) <= 6 * sigma + 1e-9);
  }
}

TEST_CASE("temperature near zero samples the greedy token", "[unit]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::vector<float> scratch;
  for (int trial = 0; trial < 100; ++trial) {
    auto l = random_logits(rng, 40);
    const int32_t greedy = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    SamplingParams p;
    p.temperature = 0.0f;
    CHECK(sample_row(l, p, nullptr, rng(), 0, trial, scratch).token == greedy);
    // A margin that a tiny temperature turns into certainty.
    l[size_t(greedy)] += 0.01f;
    p.temperature = 1e-4f;
    CHECK(sample_row(l, p, nullptr, rng(), 0, trial, scratch).token == greedy);
  }
}

TEST_CASE("penalties and logit bias change logits as defined", "[unit]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int V = 30;
  auto l = random_logits(rng, V);
  SamplingParams p;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.7f;
  p.logit_bias = {{3, 2.5f}, {7, -100.0f}};
  PenaltyState st;
  std::vector<int32_t> prompt, out;
  for (int i = 0; i < 10; ++i) prompt.push_back(int32_t(rng() % V));
  for (int i = 0; i < 15; ++i) out.push_back(int32_t(rng() % V));
  st.prompt_tokens.insert(prompt.begin(), prompt.end());
  for (int32_t t : out) st.add_output(t);
  auto got = l;
  apply_bias_and_penalties(got, p, &st);
  for (int t = 0; t < V; ++t) {
    double x = l[size_t(t)];
    for (auto& [bt, b] : p.logit_bias)
      if (bt == t) x += b;
    const bool seen = std::count(prompt.begin(), prompt.end(), t) || std::count(out.begin(), out.end(), t);
    if (seen) x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
    const double c = double(std::count(out.begin(), out.end(), t));
    x -= p.frequency_penalty * c + (c > 0 ? p.presence_penalty : 0.0);
    INFO("token " << t);
    CHECK(got[size_t(t)] == Approx(x).epsilon(1e-5).margin(1e-5));
  }
}

TEST_CASE("logprobs are the log-softmax of the raw logits, top ones most likely first", "[unit]") {
  const uint64_t seed = test::fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  auto l = random_logits(rng, 25);
  SamplingParams p;
  p.temperature = 0.7f;
  p.logprobs = true;
  p.top_logprobs = 5;
  std::vector<float> scratch;
  auto r = sample_row(l, p, nullptr, 1, 0, 0, scratch);
  double m = *std::max_element(l.begin(), l.end()), z = 0;
  for (float x : l) z += std::exp(double(x) - m);
  auto lp = [&](int32_t t) { return double(l[size_t(t)]) - m - std::log(z); };
  CHECK(r.logprob == Approx(lp(r.token)).margin(1e-5));
  REQUIRE(r.top.size() == 5);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
  for (int i = 0; i < 5; ++i) {
    CHECK(r.top[size_t(i)].token == order[size_t(i)]);
    CHECK(r.top[size_t(i)].logprob == Approx(lp(order[size_t(i)])).margin(1e-5));
  }
}

TEST_CASE("the counter-based draw depends only on (seed, choice, index)", "[unit]") {
  std::set<double> seen;
  for (uint64_t s = 0; s < 4; ++s)
    for (uint64_t c = 0; c < 4; ++c)
      for (uint64_t i = 0; i < 64; ++i) {
        const double u = counter_uniform(s, c, i);
        REQUIRE(u >= 0.0);
        REQUIRE(u < 1.0);
        REQUIRE(u == counter_uniform(s, c, i));
        seen.insert(u);
      }
  CHECK(seen.size() == 4 * 4 * 64);
  double mean = 0;
  for (uint64_t i = 0; i < 100000; ++i) mean += counter_uniform(42, 0, i);
  CHECK(mean / 100000 == Approx(0.5).margin(0.01));
}
