// The CUDA decode attention's split count (gpu/decode_splits.h), host arithmetic checked without a
// GPU: within one wave of resident blocks the splits fill it; past one wave, long contexts whose
// last wave is at most half full take the 2-4 splits that fill it best, everything else one; short
// contexts whose blocks fill a third of a wave or more take one.
#include "gpu/decode_splits.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "gpu/waves.h"
#include "tools/test_util.h"

namespace astrai::test {
namespace {

using gpu::decode_splits;
using gpu::kDecodeLongKeys;

// The share of the last wave's slots that `blocks` blocks leave busy.
double last_wave_fill(int64_t blocks, int64_t slots) {
  const int64_t waves = (blocks + slots - 1) / slots;
  return double(blocks) / double(waves * slots);
}

TEST_CASE("decode splits fill the last wave of blocks at long contexts and keep one split otherwise",
          "[unit]") {
  // The two buckets measured on the H200 (docs/performance.md): llama-1b batch 128 (8 KV heads,
  // 792 slots) and qwen3-8b batch 96 (8 KV heads, 528 slots) at 4k keys.
  CHECK(decode_splits(128, 8, 792, 4096) == 3);
  CHECK(decode_splits(96, 8, 528, 4096) == 2);
  // Short contexts, and last waves over half full, keep one split.
  CHECK(decode_splits(128, 8, 792, kDecodeLongKeys - 1) == 1);
  CHECK(decode_splits(192, 8, 792, 4096) == 1);
  CHECK(decode_splits(198, 8, 792, 32768) == 1);  // exactly two waves
  // Within one wave: as many as the wave holds, at least 64 keys each, at most 64.
  CHECK(decode_splits(1, 8, 792, 32768) == 64);
  CHECK(decode_splits(1, 8, 792, 512) == 8);
  CHECK(decode_splits(8, 8, 792, 32768) == 12);
  CHECK(decode_splits(99, 8, 792, 32768) == 1);
  // A larger least share of keys (ASTRAI_DECODE_MIN_KEYS) takes fewer splits within one wave.
  CHECK(decode_splits(32, 8, 792, 512) == 3);
  CHECK(decode_splits(32, 8, 792, 512, {.min_keys = 256}) == 2);
  CHECK(decode_splits(32, 8, 792, 512, {.min_keys = 512}) == 1);
  CHECK(decode_splits(1, 8, 792, 2047, {.min_keys = 1024}) == 2);
  // Four-warp blocks take 64 keys a round: llama-1b at batch 8 and a 576-key bound would take 8
  // splits of 128 keys, 3 of them empty; it takes the 5 that hold keys.
  CHECK(decode_splits(8, 8, 528, 576, {.keys_per_round = 64}) == 5);
  CHECK(decode_splits(8, 8, 792, 576, {.keys_per_round = 32}) == 9);
  // Short contexts whose blocks fill a third of a wave or more take one split: llama-1b at batch
  // 32 (256 four-warp blocks of 528 slots), qwen3-8b at 16 (128 of 264); not from kDecodeLongKeys
  // keys, nor below a third (batch 16, 128 of 528).
  CHECK(decode_splits(32, 8, 528, 576, {.keys_per_round = 64}) == 1);
  CHECK(decode_splits(32, 8, 528, 576, {.keys_per_round = 64, .short_one_split = false}) == 2);
  CHECK(decode_splits(16, 8, 264, kDecodeLongKeys - 1, {.keys_per_round = 64}) == 1);
  CHECK(decode_splits(16, 8, 264, kDecodeLongKeys, {.keys_per_round = 64}) == 2);
  CHECK(decode_splits(16, 8, 528, 576, {.keys_per_round = 64}) == 3);  // 4 fill the wave; 3 hold keys

  // Few blocks at head_dim 64 under 1,024 keys take one eight-warp split: llama-1b at batch 1 (8
  // blocks), not at batch 2 (16), not at 1,024 keys, not at head_dim 128 (qwen3-8b).
  CHECK(gpu::few_blocks_one_split(64, 8, 576));
  CHECK(gpu::few_blocks_one_split(64, 8, gpu::kDecodeShortKeys - 1));
  CHECK_FALSE(gpu::few_blocks_one_split(64, 8, gpu::kDecodeShortKeys));
  CHECK_FALSE(gpu::few_blocks_one_split(64, 16, 576));
  CHECK_FALSE(gpu::few_blocks_one_split(128, 8, 576));
  CHECK(gpu::kDecodeShortKeys < kDecodeLongKeys);

  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20000; ++trial) {
    const int64_t slots = std::uniform_int_distribution<int64_t>(1, 2000)(rng);
    const int64_t kv_heads = std::uniform_int_distribution<int64_t>(1, 16)(rng);
    const int64_t seqs = std::uniform_int_distribution<int64_t>(1, 1024)(rng);
    const int64_t max_kv = std::uniform_int_distribution<int64_t>(1, 40000)(rng);
    INFO("seqs " << seqs << ", kv heads " << kv_heads << ", slots " << slots << ", max kv " << max_kv);
    const int64_t blocks = seqs * kv_heads;
    // With a block's keys a round: never more splits than without, every split of the longest
    // sequence holds keys, and any sequence's keys are covered by the kernel's shares of it.
    const int64_t round = std::uniform_int_distribution<int64_t>(1, 8)(rng) * 16;
    const int rs = decode_splits(seqs, kv_heads, slots, max_kv, {.keys_per_round = round});
    const auto kernel_chunk = [&](int64_t kv) {  // attention.cu's decode_attention_kernel
      const int64_t share = (kv + rs - 1) / rs;
      return std::max(gpu::kDecodeMinKeys, (share + round - 1) / round * round);
    };
    REQUIRE(rs >= 1);
    REQUIRE(rs <= decode_splits(seqs, kv_heads, slots, max_kv));
    CHECK((rs - 1) * kernel_chunk(max_kv) < max_kv);
    const int64_t kv = std::uniform_int_distribution<int64_t>(1, max_kv)(rng);
    CHECK(rs * kernel_chunk(kv) >= kv);
    const int s = decode_splits(seqs, kv_heads, slots, max_kv);
    const int plain = decode_splits(seqs, kv_heads, slots, max_kv, {.short_one_split = false});
    REQUIRE(s >= 1);
    if (blocks <= slots && 3 * blocks >= slots && max_kv < kDecodeLongKeys) {
      CHECK(s == 1);  // a short context filling a third of a wave: one split
      continue;
    }
    CHECK(s == plain);
    REQUIRE(s <= gpu::kMaxSplits);
    REQUIRE(seqs * s <= 65535);
    const int64_t most = (max_kv + gpu::kDecodeMinKeys - 1) / gpu::kDecodeMinKeys;  // 64 keys a split
    if (blocks <= slots) {
      // One wave: never past it, as many splits as it holds unless a cap stops them.
      CHECK(blocks * s <= slots);
      CHECK(s <= most);
      CHECK((blocks * (s + 1) > slots || s == most || s == gpu::kMaxSplits || s == 65535 / seqs));
      continue;
    }
    const int64_t last = blocks % slots;
    if (max_kv < kDecodeLongKeys || last == 0 || 2 * last > slots) {
      CHECK(s == 1);
      continue;
    }
    // Past one wave with a mostly empty last wave: no count of 2-4 fills the last wave better, and
    // the chosen one fills it at least as well as one split does.
    CHECK(s >= 2);
    CHECK(s <= gpu::kFillMaxSplits);
    for (int64_t other = 2; other <= gpu::kFillMaxSplits; ++other)
      CHECK(last_wave_fill(blocks * s, slots) >= last_wave_fill(blocks * other, slots));
    CHECK(last_wave_fill(blocks * s, slots) >= last_wave_fill(blocks, slots));
  }
}

TEST_CASE("a GEMV runs under the roomiest register budget that keeps its grid one wave, else the fullest",
          "[unit]") {
  // The shares of the waves' slots a grid keeps busy, against a count by hand.
  CHECK(gpu::wave_fill(264, 264) == 1.0);
  CHECK(gpu::wave_fill(384, 264) == Approx(384.0 / 528.0));
  CHECK(gpu::wave_fill(384, 396) == Approx(384.0 / 396.0));
  CHECK(gpu::wave_fill(512, 396) == Approx(512.0 / 792.0));
  CHECK(gpu::wave_fill(1, 132) == Approx(1.0 / 132.0));
  CHECK(gpu::wave_fill(0, 132) == 1.0);
  auto pick = [](int64_t blocks, std::vector<int64_t> slots) {
    return gpu::pick_register_budget(blocks, slots);
  };
  // The cases measured on the H200 (132 multiprocessors). The plain GEMV, roomy (2 blocks of 8 warps
  // a multiprocessor, 264 slots) or as the compiler fits it (4, 528): qwen3-8b's o and down at 256
  // blocks go roomy; its 384-block gate/up and qkv grids would be 1.45 waves roomy, so they stay.
  CHECK(pick(256, {264, 528}) == 0);
  CHECK(pick(384, {264, 528}) == 1);
  // 16-warp blocks: 1 a multiprocessor roomy, 2 as fitted; llama-1b's o and down are 128 blocks.
  CHECK(pick(128, {132, 264}) == 0);
  // The add + norm GEMV, as fitted (2 blocks with the gate/up pairs) or tight (3): qwen3-8b's gate/up
  // at one row (384 blocks) goes tight; llama-1b's at two rows (512: 1.94 waves fitted, 1.29
  // tight) stays; its qkv (192) fits one wave either way and stays.
  CHECK(pick(384, {264, 396}) == 1);
  CHECK(pick(512, {264, 396}) == 0);
  CHECK(pick(192, {264, 396}) == 0);
  // One budget; ties past one wave go to the roomier.
  CHECK(pick(5000, {528}) == 0);
  CHECK(pick(1056, {264, 528}) == 0);
  // Against the definition, over random grids and budgets: the first budget that holds the grid in
  // one wave; else a budget whose waves fill most (fills compared exactly, cross-multiplied), the
  // first of those.
  std::mt19937_64 rng(Catch::rngSeed());
  for (int i = 0; i < 2000; ++i) {
    const int64_t sms = 1 + int64_t(rng() % 200);
    std::vector<int64_t> slots;
    for (int64_t per = 1 + int64_t(rng() % 3), n = 1 + int64_t(rng() % 3); n > 0;
         --n, per += 1 + int64_t(rng() % 2))
      slots.push_back(sms * per);
    const int64_t blocks = 1 + int64_t(rng() % 5000);
    size_t want = slots.size();
    for (size_t j = 0; j < slots.size() && want == slots.size(); ++j)
      if (blocks <= slots[j]) want = j;
    if (want == slots.size()) {
      auto used = [&](size_t j) {
        return (blocks + slots[j] - 1) / slots[j] * slots[j];
      };  // fill = blocks / used
      want = 0;
      for (size_t j = 1; j < slots.size(); ++j)
        if (used(j) < used(want)) want = j;
    }
    INFO("blocks " << blocks << ", budgets " << slots.size());
    CHECK(gpu::pick_register_budget(blocks, slots) == want);
  }
}

}  // namespace
}  // namespace astrai::test
