// How a grid of blocks fills the waves of blocks a GPU holds resident at once: host arithmetic
// only, apart from the kernels so that tests check it without a GPU (decode_splits.h's split counts,
// linear_kernels.cu's choice of a GEMV's register budget).
#pragma once

#include <cstdint>

namespace astrai::gpu {

// The share of the slots of its waves that a grid of `blocks` keeps busy, `slots` blocks resident
// at once: 1 when the grid is whole waves; a grid of 1.45 waves leaves the second wave's
// multiprocessors mostly idle (0.73).
inline double wave_fill(int64_t blocks, int64_t slots) {
  if (blocks <= 0 || slots <= 0) return 1.0;
  const int64_t waves = (blocks + slots - 1) / slots;
  return double(blocks) / double(waves * slots);
}

// Whether a grid of `blocks` runs the kernel compiled to fit more blocks a multiprocessor (fewer
// registers a thread: `tight_slots` resident at once) rather than the one the compiler fits as it
// likes (`loose_slots`): only where it fills its waves better. The register budget changes where
// values live, not the arithmetic, so both give the same bits.
inline bool prefer_tight_registers(int64_t blocks, int64_t loose_slots, int64_t tight_slots) {
  return wave_fill(blocks, tight_slots) > wave_fill(blocks, loose_slots);
}

}  // namespace astrai::gpu
