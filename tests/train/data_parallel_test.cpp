// DataParallelGroup on the CPU group (one thread per rank): dp 2 against dp 1 on the same global
// batches (the tiny preset and a Qwen3-style model, fresh seeds): losses within 1e-5 relative per
// step and final weights within 1e-5 relative L2 (the only difference is the order in which the
// gradients of the two halves are summed), every rank's weights and moments identical bit for bit,
// and a rank whose half of a batch is bad failing the step on every rank without a hang. ZeRO-1
// (sharded moments) and gradient buckets against the replicated optimizer at dp 2 and 3: the same
// bits; moments moved between groups of other dp and zero; the backward's grad-ready reports.
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

// Steps every group through the same micro-batches (grad_accum 2, B rows each) with weight decay
// and a clip norm low enough to clip; every group must give the first's bits: the losses, the grad
// norms, every rank's weights and the moments.
void same_bits_over_steps(std::vector<std::unique_ptr<DataParallelGroup>>& groups, const ModelConfig& config,
                          std::mt19937_64& rng, int B) {
  int clipped = 0;
  for (int step = 0; step < 4; ++step) {
    INFO("step " << step + 1);
    const std::vector<TrainBatch> micro = {random_batch(rng, B, 10, config.vocab_size),
                                           random_batch(rng, B, 10, config.vocab_size)};
    const double lr = 3e-3 * double(step + 1) / 4, max_norm = 0.5;
    std::vector<train::StepResult> res;
    for (auto& g : groups) res.push_back(g->step(micro, lr, max_norm).value());
    clipped += res[0].grad_norm > max_norm;
    // The first group is replicated: its gradients are the whole sum, whose norm a float64 loop gives
    // up to the order of its additions.
    REQUIRE_FALSE(groups[0]->zero());
    double squares = 0;
    for (float x : download(groups[0]->backend(), groups[0]->model().flat_grads())) squares += double(x) * x;
    CHECK(res[0].grad_norm == Approx(std::sqrt(squares)).epsilon(1e-12));
    for (size_t i = 1; i < groups.size(); ++i) {
      INFO("group " << i);
      CHECK(res[i].targets == res[0].targets);
      CHECK(res[i].loss_sum == res[0].loss_sum);
      CHECK(res[i].grad_norm == res[0].grad_norm);
    }
  }
  CHECK(clipped > 0);  // the clip factor took part
  const auto want = state_of(*groups[0], 0);
  for (size_t i = 0; i < groups.size(); ++i)
    for (int r = 0; r < groups[i]->size(); ++r) {
      INFO("group " << i << " rank " << r);
      CHECK(same_bits(state_of(*groups[i], r), want));
    }
}

}  // namespace

TEST_CASE("data parallel: ZeRO-1 and buckets give the replicated optimizer's bits at dp 2 and 3",
          "[train][dp][zero][threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("dp_zero");
  ModelConfig config = preset_config("tiny").value();
  write_random_model(dir / "m", config, seed);
  for (int dp : {2, 3}) {
    INFO("dp " << dp);
    std::vector<std::unique_ptr<DataParallelGroup>> groups;
    groups.push_back(make_group(dir / "m", dp, /*zero=*/false));
    groups.push_back(make_group(dir / "m", dp, /*zero=*/true));
    // Buckets of 3000 floats: many, most crossing tensor boundaries, cut at the slices' ends too.
    groups.push_back(make_group(dir / "m", dp, /*zero=*/true, 12000));
    groups.push_back(make_group(dir / "m", dp, /*zero=*/false, 12000));
    const DataParallelGroup& z = *groups[1];
    CHECK(z.zero());
    CHECK_FALSE(groups[0]->zero());
    CHECK(groups[2]->num_buckets() > 10);
    // Equal slices from 0 and a tail every rank holds; dp 3 leaves a tail on the tiny preset's layout.
    for (int r = 0; r < dp; ++r) CHECK(z.slice(r).size() % DataParallelGroup::kShardAlign == 0);
    CHECK(z.slice(dp - 1).end == z.tail().begin);
    CHECK(z.tail().end == z.model().flat_values().numel());
    CHECK(z.tail().size() < dp * DataParallelGroup::kShardAlign);
    if (dp == 3) CHECK(z.tail().size() > 0);
    // Rank r's optimizer holds the moments of its slice and the tail only.
    CHECK(z.optimizer(1).owned_exp_avg().numel() == z.slice(1).size() + z.tail().size());
    std::mt19937_64 rng(seed + uint64_t(dp));
    same_bits_over_steps(groups, config, rng, 2 * dp);
  }
}

TEST_CASE("data parallel: ZeRO-1 with an untied head (Qwen3) gives the replicated optimizer's bits",
          "[train][dp][zero][threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("dp_zero_qwen");
  ModelConfig config = qwen3_style_config();
  config.tie_word_embeddings = false;
  write_random_model(dir / "m", config, seed);
  std::vector<std::unique_ptr<DataParallelGroup>> groups;
  groups.push_back(make_group(dir / "m", 2, /*zero=*/false));
  groups.push_back(make_group(dir / "m", 2, /*zero=*/true, 20000));
  std::mt19937_64 rng(seed);
  same_bits_over_steps(groups, config, rng, 4);
}

TEST_CASE(
    "data parallel: moments read from one group's shards and written to another's continue the same run",
    "[train][dp][zero][threads]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  TempDir dir("dp_moments");
  const ModelConfig config = preset_config("tiny").value();
  write_random_model(dir / "m", config, seed);
  std::mt19937_64 rng(seed);
  auto batches = [&] {
    return std::vector<TrainBatch>{random_batch(rng, 6, 10, config.vocab_size),
                                   random_batch(rng, 6, 10, config.vocab_size)};
  };
  auto from = make_group(dir / "m", 2, /*zero=*/true, 16000);
  for (int step = 0; step < 3; ++step) REQUIRE(from->step(batches(), 2e-3, 1.0).ok());
  std::vector<float> m, v;
  REQUIRE(from->read_moments(m, v).ok());
  const auto weights = download(from->backend(), from->model().flat_values());
  // The same state into dp 1, dp 3 with zero and dp 3 without (what a checkpoint carries: the weights,
  // the moments of every element and AdamW's step count).
  std::vector<std::unique_ptr<DataParallelGroup>> to;
  to.push_back(make_group(dir / "m", 1));
  to.push_back(make_group(dir / "m", 3, /*zero=*/true));
  to.push_back(make_group(dir / "m", 3, /*zero=*/false));
  for (auto& g : to) {
    for (int r = 0; r < g->size(); ++r) g->backend(r).upload(g->model(r).flat_values(), weights.data());
    REQUIRE(g->write_moments(m, v, from->optimizer().steps_taken()).ok());
    std::vector<float> m2, v2;
    REQUIRE(g->read_moments(m2, v2).ok());
    CHECK(same_bits(m2, m));
    CHECK(same_bits(v2, v));
  }
  // One more step: the two dp 3 groups agree bit for bit (they continue the same run), and dp 1 within
  // the summation order's rounding.
  const auto next = batches();
  const auto a = to[0]->step(next, 2e-3, 1.0).value();
  const auto b = to[1]->step(next, 2e-3, 1.0).value();
  const auto c = to[2]->step(next, 2e-3, 1.0).value();
  CHECK(b.loss_sum == c.loss_sum);
  CHECK(b.grad_norm == c.grad_norm);
  CHECK(same_bits(state_of(*to[1], 2), state_of(*to[2], 0)));
  CHECK(b.loss_sum == Approx(a.loss_sum).epsilon(1e-5));
  CHECK(rel_l2(weights_of(*to[1]), weights_of(*to[0])) < 1e-5);
  // A wrong count is an error, not a crash.
  m.pop_back();
  CHECK(to[1]->write_moments(m, v, 1).code() == ErrorCode::invalid_argument);
}

TEST_CASE("train model: the grad-ready hook reports offsets past which the gradients are final",
          "[train][dp]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  for (bool tied : {true, false}) {
    INFO("tied embeddings " << tied);
    TempDir dir("grad_hook");
    ModelConfig config = tied ? preset_config("tiny").value() : qwen3_style_config();
    config.tie_word_embeddings = tied;
    write_random_model(dir / "m", config, seed);
    auto g = make_group(dir / "m", 1);
    train::TrainModel& m = g->model();
    const int64_t N = m.flat_grads().numel();
    std::mt19937_64 rng(seed);
    const TrainBatch b = random_batch(rng, 2, 10, config.vocab_size);
    // Accumulate over two calls, as gradient accumulation does: the hook speaks of the second.
    m.zero_grad();
    REQUIRE(m.forward_backward(b, 0.5f).ok());
    std::vector<std::pair<int64_t, std::vector<float>>> seen;  // offset, gradients [offset, N) then
    m.set_grad_ready_hook(
        [&](int64_t from) { seen.emplace_back(from, download(g->backend(), m.flat_grads().rows(from, N))); });
    REQUIRE(m.forward_backward(b, 0.5f).ok());
    m.set_grad_ready_hook(nullptr);
    const auto final_grads = download(g->backend(), m.flat_grads());
    REQUIRE(seen.size() == size_t(config.num_layers) + 3);  // start, final norm, each layer, embeddings
    CHECK(seen.front().first == N);
    CHECK(seen.back().first == 0);
    for (size_t i = 0; i < seen.size(); ++i) {
      INFO("report " << i << " offset " << seen[i].first);
      if (i > 0) CHECK(seen[i].first < seen[i - 1].first);
      CHECK(same_bits(seen[i].second,
                      std::vector<float>(final_grads.begin() + seen[i].first, final_grads.end())));
    }
    // The report before the embeddings' (the first layer's) leaves them out: they were not final yet.
    CHECK(seen[seen.size() - 2].first >= config.vocab_size * config.hidden_size);
  }
}

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
  // Replicated and ZeRO, without buckets and with (where the ranks' bucket reductions start inside
  // the last micro-batch's backward, so a rank failing before it must not leave the others there).
  for (auto [zero, bucket_bytes] : {std::pair{false, int64_t(0)}, std::pair{true, int64_t(0)},
                                    std::pair{true, int64_t(12000)}, std::pair{false, int64_t(12000)}}) {
    INFO("zero " << zero << " bucket bytes " << bucket_bytes);
    auto g = make_group(dir / "m", 2, zero, bucket_bytes);
    std::mt19937_64 rng(seed);
    for (int bad_rank : {1, 0})
      for (size_t bad_micro : {size_t(0), size_t(1)}) {
        INFO("bad row in rank " << bad_rank << "'s half of micro-batch " << bad_micro);
        std::vector<TrainBatch> micro = {random_batch(rng, 4, 8, config.vocab_size),
                                         random_batch(rng, 4, 8, config.vocab_size)};
        micro[bad_micro].tokens[(2 * size_t(bad_rank) + 1) * 8 + 3] =
            int32_t(config.vocab_size);  // out of range
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
