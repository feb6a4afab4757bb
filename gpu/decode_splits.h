// How many KV splits the CUDA decode attention kernel takes (attention.cu): host arithmetic only,
// apart from the kernels so that tests check it without a GPU.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gpu/waves.h"

namespace astrai::gpu {

// Most KV splits of one (query tile or sequence, head) in any attention launch.
constexpr int kMaxSplits = 64;
// A decode split gets at least this many keys (the kernel rounds a split up to it), so short
// contexts use few splits whatever the grid's capacity.
constexpr int64_t kDecodeMinKeys = 64;
// A decode step whose longest sequence has this many keys or more may split its attention past
// one wave of blocks (fill_splits), so decode graphs are captured for steps below and from this
// length apart (CudaBackend::decode_kv_bounds).
constexpr int kDecodeLongKeys = 2048;
// Below this many keys a step of few blocks takes one split (few_blocks_one_split), so decode graphs
// are captured for steps below this length apart too.
constexpr int kDecodeShortKeys = 1024;
constexpr int64_t kFewDecodeBlocks = 8;

// Whether a decode step of `blocks` (sequence, KV head) blocks at head_dim D whose longest context
// is max_kv_len takes wide blocks (sixteen warps since the twenty-eighth session, eight before) and one
// split (attention.cu's decode_ring and decode_few_warps): at head_dim 64,
// at most kFewDecodeBlocks blocks under kDecodeShortKeys keys. Each block then streams its
// sequence's keys alone, and no combine kernel follows (its kernel boundary costs more than the
// longer key loop at these lengths). Measured on the H200 (bench decode overlapped, graphs at the
// 1,023-key class bound, both orders in one call): llama-1b at batch 1 (8 blocks) +3.3-3.6% at 512
// keys, +0.3% at 960; at batch 2 (16 blocks) +2% at 512 but -2.5% at 960, so 8 blocks at most;
// qwen3-8b (head_dim 128) lost 1% at batch 1 and keeps its splits (docs/performance.md).
inline bool few_blocks_one_split(int64_t head_dim, int64_t blocks, int64_t max_kv_len) {
  return head_dim == 64 && blocks <= kFewDecodeBlocks && max_kv_len < kDecodeShortKeys;
}

constexpr int64_t kFillMaxSplits = 4;

// Splits for a decode launch of `blocks` (sequence, KV head) pairs past one wave of `slots`
// resident blocks, whose longest sequence has max_kv_len keys. A last wave at most half full
// leaves most multiprocessors idle for a block's whole length; from kDecodeLongKeys keys on, 2 to
// kFillMaxSplits splits, the count whose blocks fill their last wave best (the fewest on a tie),
// end sooner. A count of blocks and slots only past the bound, so a decode graph captured at the
// cache's capacity splits as an eager step of the same bucket does. Measured on the H200 at 4k
// keys: llama-1b batch 128 (1,024 blocks, 792 slots) -10% a step with 3 splits, qwen3-8b batch 96
// (768, 528) -7% with 2; at 1.9 and 2.6 waves splits were even or lost up to 3%, and at 512 keys
// they lost 3-15% everywhere (docs/performance.md). (llama-1b's batch 128 now runs the head_dim 64
// kernel's three-stage ring, whose 1,188 slots hold its blocks in one wave.)
inline int64_t fill_splits(int64_t blocks, int64_t slots, int64_t max_kv_len) {
  const int64_t last = blocks % slots;
  if (max_kv_len < kDecodeLongKeys || last == 0 || 2 * last > slots) return 1;
  int64_t best = 1;
  double best_fill = 0;
  for (int64_t s = 2; s <= kFillMaxSplits; ++s) {
    const double fill = wave_fill(blocks * s, slots);
    if (fill > best_fill) best = s, best_fill = fill;
  }
  return best;
}

// Short contexts take one split from 1 / kOneSplitWaveShare of a wave of blocks (decode_splits).
constexpr int64_t kOneSplitWaveShare = 3;

// What decode_splits weighs beyond the step's shape.
struct DecodeSplitOptions {
  // A split takes at least this many of the longest sequence's keys (the diagnostic
  // ASTRAI_DECODE_MIN_KEYS sets more).
  int64_t min_keys = kDecodeMinKeys;
  // The keys a block takes a round: the kernel rounds a split's share up to them.
  int64_t keys_per_round = 1;
  // Below kDecodeLongKeys, blocks that fill a third of a wave or more take one split (no combine).
  bool short_one_split = true;
};

// The splits of a decode launch over `seqs` sequences of `kv_heads` KV heads (a block each per
// split) on `slots` resident blocks: within one wave, as many as keep the blocks in it (rounded
// down: a second, partial wave would run at a fraction of the occupancy), each at least
// o.min_keys of the longest sequence's keys; past one wave, fill_splits. The grid's z dimension
// (seqs * splits) stays under 65,536.
// Short contexts (below kDecodeLongKeys) whose blocks fill a third of a wave or more take one
// split: the combine kernel after a split costs 4-5 µs a layer however few the splits (a kernel
// boundary and a dependent read; H200 kernel timeline, llama-1b at 512 keys), more than the blocks'
// longer key loops save at these lengths. Measured on the H200 (docs/performance.md, both orders
// in one call): llama-1b at batch 24 and 32, 512 keys +2.7-4.5%, 1,536 keys +0.7-4.3%; qwen3-8b at
// batch 16 +0.4-1.4%. Past 2,048 keys one split at a third of a wave lost (qwen3-8b batch 32, 4k:
// -3%, an earlier kernel).
// The kernel gives a split of n its share of a sequence's keys rounded up to o.keys_per_round and
// to kDecodeMinKeys; the count is then trimmed to the splits that hold keys of the longest
// sequence, so no block of it is launched only to write an empty state for the combine to read
// (llama-1b at batch 8 and 576 keys, four-warp blocks of 64 keys a round: 8 splits of which 3 were
// empty, now 5).
inline int decode_splits(int64_t seqs, int64_t kv_heads, int64_t slots, int64_t max_kv_len,
                         const DecodeSplitOptions& o = {}) {
  const int64_t blocks = seqs * kv_heads;
  int64_t want = blocks <= slots ? slots / blocks : fill_splits(blocks, slots, max_kv_len);
  if (o.short_one_split && blocks <= slots && kOneSplitWaveShare * blocks >= slots &&
      max_kv_len < kDecodeLongKeys)
    want = 1;
  const int64_t min_keys = std::max<int64_t>(1, o.min_keys);
  const int64_t most = (max_kv_len + min_keys - 1) / min_keys;
  const int64_t n = std::clamp<int64_t>(std::min(want, most), 1, std::min<int64_t>(kMaxSplits, 65535 / seqs));
  const int64_t share = (max_kv_len + n - 1) / n;
  const int64_t round = std::max<int64_t>(1, o.keys_per_round);
  const int64_t chunk = std::max(kDecodeMinKeys, (share + round - 1) / round * round);
  return int(std::clamp<int64_t>((max_kv_len + chunk - 1) / chunk, 1, n));
}

}  // namespace astrai::gpu
