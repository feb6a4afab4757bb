// mma.sync m16n8k16 (bf16 in, f32 accumulate) and its fragments loaded from shared memory with
// ldmatrix: the building blocks of the tensor-core attention kernels (train_attention_mma.cuh's
// FlashAttention-2 forward and backward, attention.cu's decode kernel). CUDA only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/device_util.cuh"
#include "gpu/wgmma.cuh"

namespace astrai::gpu::attention_mma {

// ---- PTX primitives ------------------------------------------------------------------------------

__device__ __forceinline__ void ldsm_x4(const bf16* p, uint32_t* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(const bf16* p, uint32_t* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c[16x8] += a[16x16] b[16x8], bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- fragments -----------------------------------------------------------------------------------
// m16n8k16 layouts (lane = 4 * g + c): A holds rows g, g + 8 and columns 2c, 2c + 1 (+ 8); B holds
// k rows 2c, 2c + 1 (+ 8) of column g; the accumulator holds rows g, g + 8 and columns 2c, 2c + 1.

// A fragment of rows [r0, r0 + 16) x columns [k0, k0 + 16) of a row-major tile.
template <int kP>
__device__ __forceinline__ void load_a(const bf16* tile, int r0, int k0, uint32_t* a) {
  const int l = threadIdx.x % 32;
  ldsm_x4(tile + (r0 + (l & 15)) * kP + k0 + (l >> 4) * 8, a);
}

// B fragments of two n-blocks when B[k][n] = tile[n][k] (tile rows are the n index): rows
// [n0, n0 + 16), columns [k0, k0 + 16). b[0..1] cover n0..n0+7, b[2..3] n0+8..n0+15.
template <int kP>
__device__ __forceinline__ void load_b(const bf16* tile, int n0, int k0, uint32_t* b) {
  const int l = threadIdx.x % 32;
  ldsm_x4(tile + (n0 + (l & 7) + ((l >> 4) << 3)) * kP + k0 + ((l >> 3) & 1) * 8, b);
}

// B fragments of two n-blocks when B[k][n] = tile[k][n] (tile rows are the k index): rows
// [k0, k0 + 16), columns [n0, n0 + 16).
template <int kP>
__device__ __forceinline__ void load_b_trans(const bf16* tile, int k0, int n0, uint32_t* b) {
  const int l = threadIdx.x % 32;
  ldsm_x4_trans(tile + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * kP + n0 + (l >> 4) * 8, b);
}

// load_b and load_b_trans from a tile of kRows rows in wgmma's 128-byte swizzle (wgmma::swizzled:
// 64-column blocks of dense rows, 16-byte chunk c of row r at c ^ (r % 8)), so the eight rows an
// ldmatrix phase reads fall in eight different bank groups without padding.
template <int kRows>
__device__ __forceinline__ void load_b_swz(const bf16* tile, int n0, int k0, uint32_t* b) {
  const int l = threadIdx.x % 32;
  ldsm_x4(tile + wgmma::swizzled<kRows>(n0 + (l & 7) + ((l >> 4) << 3), k0 / 8 + ((l >> 3) & 1)), b);
}
template <int kRows>
__device__ __forceinline__ void load_b_trans_swz(const bf16* tile, int k0, int n0, uint32_t* b) {
  const int l = threadIdx.x % 32;
  ldsm_x4_trans(tile + wgmma::swizzled<kRows>(k0 + (l & 7) + ((l >> 3) & 1) * 8, n0 / 8 + (l >> 4)), b);
}

// The A fragment (16 x 16, k block kk) of a 16 x N product held as accumulators c[N / 8][4].
__device__ __forceinline__ void acc_to_a(const float (*c)[4], int kk, uint32_t* a) {
  a[0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

}  // namespace astrai::gpu::attention_mma
