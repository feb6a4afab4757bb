// Element types and their conversions. bf16/f16 are stored as raw uint16 bit patterns on the host.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace astrai {

enum class DType : uint8_t { f32, bf16, f16, fp8_e4m3, i32, i64, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::fp8_e4m3:
    case DType::u8: return 1;
    case DType::i64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t);

// f32, bf16 or f16: the dtypes weights load as, convert converts between and dequantize writes.
constexpr bool is_float_dtype(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16;
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// float8 e4m3 as fp8 checkpoints store it (OCP "e4m3fn", torch.float8_e4m3fn): sign, 4 exponent
// bits (bias 7), 3 mantissa bits; no infinities, 0x7f and 0xff are NaN; largest finite 448,
// subnormals m * 2^-9. Exact in f32.
inline float fp8_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24, exp = (b >> 3) & 0xfu, man = b & 0x7u;
  uint32_t u;
  if (exp == 0xf && man == 0x7) {
    u = sign | 0x7fc00000u;
  } else if (exp != 0) {
    u = sign | ((exp + 120u) << 23) | (man << 20);  // rebias 7 -> 127
  } else {
    float f = float(man) * (1.0f / 512.0f);  // subnormal: exact
    std::memcpy(&u, &f, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace astrai
