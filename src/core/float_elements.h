// Reading host arrays of the float dtypes (f32, bf16, f16) one element at a time, as f32: the CPU
// backend's elementwise ops, the fp8 loader's scales and the trainer's f32 parameters.
#pragma once

#include <cstdint>

#include "src/core/dtype.h"

namespace astrai {

// Element i of the array at p, of dtype t, widened to f32 (exact); 0 for a dtype that is not
// is_float_dtype.
inline float load_as_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return 0.0f;
  }
}

}  // namespace astrai
