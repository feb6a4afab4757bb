// How a grid of blocks fills the waves of blocks a GPU holds resident at once: host arithmetic
// only, apart from the kernels so that tests check it without a GPU (decode_splits.h's split counts,
// linear_kernels.cu's choice of a GEMV's register budget).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace astrai::gpu {

// The share of the slots of its waves that a grid of `blocks` keeps busy, `slots` blocks resident
// at once: 1 when the grid is whole waves; a grid of 1.45 waves leaves the second wave's
// multiprocessors mostly idle (0.73).
inline double wave_fill(int64_t blocks, int64_t slots) {
  if (blocks <= 0 || slots <= 0) return 1.0;
  const int64_t waves = (blocks + slots - 1) / slots;
  return double(blocks) / double(waves * slots);
}

// Which register budget a grid of `blocks` runs under, of a kernel compiled under several: slots[i]
// blocks are resident at once under budget i, the budgets ordered roomiest (most registers a
// thread, fewest blocks) first. The roomiest under which the grid is one wave: more registers let
// the compiler keep more loads in flight, and while the grid is one wave no block waits for a slot.
// Where no budget makes it one wave, the one whose waves fill best, the roomier on a tie. The
// budget changes where values live, not the arithmetic, so every budget gives the same bits.
inline size_t pick_register_budget(int64_t blocks, std::span<const int64_t> slots) {
  for (size_t i = 0; i < slots.size(); ++i)
    if (blocks <= slots[i]) return i;
  size_t best = 0;
  for (size_t i = 1; i < slots.size(); ++i)
    if (wave_fill(blocks, slots[i]) > wave_fill(blocks, slots[best])) best = i;
  return best;
}

}  // namespace astrai::gpu
