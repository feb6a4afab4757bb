// DataParallelGroup on the CPU group (one thread per rank): dp 2 against dp 1 on the same global
// batches (the tiny preset and a Qwen3-style model, fresh seeds): losses within 1e-5 relative per
// step and final weights within 1e-5 relative L2 (the only difference is the order in which the
// gradients of the two halves are summed), every rank's weights and moments identical bit for bit,
// and a rank whose half of a batch is bad failing the step on every rank without a hang.
#include "train/data_parallel.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "model/forward_util.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

using train::DataParallelGroup;
using train::kIgnore;
using train::TrainBatch;

// B rows of T tokens; each row holds one or two documents; about a quarter of the targets ignored
// (so the ranks' halves have different target counts and the loss weighting matters).
TrainBatch random_batch(std::mt19937_64& rng, int B, int T, int64_t vocab) {
  TrainBatch b;
  b.batch = B;
  b.seq_len = T;
  std::uniform_int_distribution<int32_t> tok(0, int32_t(vocab) - 1);
  for (int r = 0; r < B; ++r) {
    const int cut = rng() % 2 ? int(1 + rng() % uint64_t(T - 1)) : 0;
    for (int t = 0; t < T; ++t) {
      const int start = t < cut ? 0 : cut;
      b.tokens.push_back(tok(rng));
      b.targets.push_back(rng() % 4 == 0 ? kIgnore : tok(rng));
      b.positions.push_back(t - start);
      b.doc_start.push_back(start);
    }
  }
  return b;
}

std::unique_ptr<DataParallelGroup> make_group(const std::filesystem::path& dir, int dp, bool zero = true,
                                              int64_t bucket_bytes = 0) {
  const ModelConfig config = ModelConfig::load(dir).value();
  const WeightStore store = WeightStore::open(dir).value();
  train::DataParallelOptions o;
  o.dp = dp;
  o.device = "cpu";
  o.cpu_threads = dp;  // one thread per rank
  o.zero = zero;
  o.bucket_bytes = bucket_bytes;
  return DataParallelGroup::create(config, store, o).value();
}

std::vector<float> download(Backend& be, const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  be.download(out.data(), t);
  return out;
}

// Rank r's weights, then the group's moments (gathered from the ranks' shards with zero).
std::vector<float> state_of(DataParallelGroup& g, int r) {
  std::vector<float> out = download(g.backend(r), g.model(r).flat_values()), m, v;
  REQUIRE(g.read_moments(m, v).ok());
  out.insert(out.end(), m.begin(), m.end());
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::vector<float> weights_of(DataParallelGroup& g) {
  std::vector<float> out;
  for (const auto& p : g.model(0).params()) {
    const auto v = download(g.backend(0), p.value);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

void dp2_matches_dp1(const ModelConfig& config) {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("dp");
  write_random_model(dir / "m", config, seed);
  auto one = make_group(dir / "m", 1);
  auto two = make_group(dir / "m", 2);
  REQUIRE(two->size() == 2);
  std::mt19937_64 rng(seed);
  for (int step = 0; step < 10; ++step) {
    INFO("step " << step + 1);
    // Two micro-batches of 4 rows (grad_accum 2): rank r takes rows 2r, 2r+1 of each.
    const std::vector<TrainBatch> micro = {random_batch(rng, 4, 12, config.vocab_size),
                                           random_batch(rng, 4, 12, config.vocab_size)};
    const double lr = 2e-3 * double(step + 1) / 10;
    const auto a = one->step(micro, lr, 1.0).value();
    const auto b = two->step(micro, lr, 1.0).value();
    REQUIRE(a.targets > 0);
    CHECK(b.targets == a.targets);
    CHECK(b.loss_sum / double(b.targets) == Approx(a.loss_sum / double(a.targets)).epsilon(1e-5));
    CHECK(b.grad_norm == Approx(a.grad_norm).epsilon(1e-4));
  }
  // Both ranks hold the same bits: they clipped and stepped the same summed gradient.
  CHECK(same_bits(state_of(*two, 0), state_of(*two, 1)));
  const double err = rel_l2(weights_of(*two), weights_of(*one));
  INFO("relative L2 of dp 2's weights against dp 1's: " << err);
  CHECK(err < 1e-5);
  CHECK(err > 0);  // the gradients were summed in another order; equal bits would mean no all-reduce
  // Evaluation splits the batch the same way and adds up to dp 1's.
  const TrainBatch v = random_batch(rng, 4, 12, config.vocab_size);
  const auto ea = one->loss_sum(v).value(), eb = two->loss_sum(v).value();
  CHECK(eb.second == ea.second);
  CHECK(eb.first == Approx(ea.first).epsilon(1e-5));
}

}  // namespace

TEST_CASE("data parallel: dp 2 trains like dp 1 on the same global batches, ranks stay bit-identical (tiny)",
          "[train][dp][threads]") {
  dp2_matches_dp1(preset_config("tiny").value());
}

TEST_CASE("data parallel: dp 2 trains like dp 1 on the same global batches, ranks stay bit-identical (Qwen3)",
          "[train][dp][threads]") {
  ModelConfig c = qwen3_style_config();
  c.tie_word_embeddings = false;
  dp2_matches_dp1(c);
}

TEST_CASE("data parallel: a bad row in one rank's half fails the step on every rank, without a hang",
          "[train][dp][threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("dp_fail");
  const ModelConfig config = preset_config("tiny").value();
  write_random_model(dir / "m", config, seed);
  auto g = make_group(dir / "m", 2);
  std::mt19937_64 rng(seed);
  for (int bad_rank : {1, 0}) {
    INFO("bad row in rank " << bad_rank << "'s half");
    std::vector<TrainBatch> micro = {random_batch(rng, 4, 8, config.vocab_size)};
    micro[0].tokens[(2 * size_t(bad_rank) + 1) * 8 + 3] = int32_t(config.vocab_size);  // out of range
    const auto before = state_of(*g, 0);
    const auto r = g->step(micro, 1e-3, 1.0);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::invalid_argument);
    CHECK_THAT(r.status().message(), Catch::Contains("outside the vocabulary"));
    // Neither rank stepped.
    CHECK(same_bits(state_of(*g, 0), before));
    CHECK(same_bits(state_of(*g, 1), before));
  }
  // The group is usable afterwards and its ranks still agree.
  const std::vector<TrainBatch> good = {random_batch(rng, 4, 8, config.vocab_size)};
  REQUIRE(g->step(good, 1e-3, 1.0).ok());
  CHECK(same_bits(state_of(*g, 0), state_of(*g, 1)));
}

TEST_CASE("data parallel: a batch whose rows do not split over the ranks is an error", "[train][dp]") {
  TempDir dir("dp_split");
  const ModelConfig config = preset_config("tiny").value();
  write_random_model(dir / "m", config, 7);
  auto g = make_group(dir / "m", 2);
  std::mt19937_64 rng(7);
  const std::vector<TrainBatch> micro = {random_batch(rng, 3, 8, config.vocab_size)};
  const auto r = g->step(micro, 1e-3, 1.0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("3 rows do not split evenly over 2 data-parallel ranks"));
}

TEST_CASE("data parallel: batch_rows cuts whole rows", "[train][dp]") {
  std::mt19937_64 rng(3);
  const TrainBatch b = random_batch(rng, 4, 5, 50);
  const TrainBatch r = train::batch_rows(b, 1, 3);
  CHECK(r.batch == 2);
  CHECK(r.seq_len == 5);
  CHECK(r.tokens == std::vector<int32_t>(b.tokens.begin() + 5, b.tokens.begin() + 15));
  CHECK(r.targets == std::vector<int32_t>(b.targets.begin() + 5, b.targets.begin() + 15));
  CHECK(r.positions == std::vector<int32_t>(b.positions.begin() + 5, b.positions.begin() + 15));
  CHECK(r.doc_start == std::vector<int32_t>(b.doc_start.begin() + 5, b.doc_start.begin() + 15));
}

}  // namespace astrai::test
