// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): shared-memory matrix descriptors, the fences
// and waits around the asynchronous instruction, and wrappers of the shapes the attention kernels
// use (m64 x n64 / n128 x k16, bf16 in, f32 accumulate). CUDA only. The instructions exist only
// where ASTRAI_WGMMA is 1 (device code compiled for sm_90a); elsewhere the wrappers are empty and
// the kernels that use them are never launched (attention_wgmma.cuh's built_for_current_device
// tells the host).
//
// Operands in shared memory use the 128-byte swizzle of the PTX ISA's canonical layouts: a tile of
// rows of 64 bf16 (128 bytes), 16-byte chunk c of row r stored at chunk c ^ (r % 8), on 1024-byte
// boundaries. A K-major operand (rows are the M or N index, K along the row) is described by
// SBO = 1024 (eight rows); an MN-major one (rows are the K index, transposed) by SBO = 1024 (eight K
// rows) and LBO = the distance between blocks of 64 columns.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ASTRAI_WGMMA 1
#else
#define ASTRAI_WGMMA 0
#endif

namespace astrai::gpu::wgmma {

// The descriptor of a 128-byte-swizzled operand starting at shared address `addr` (bytes) is
// desc_of(desc_lo(addr, lbo), desc_hi(sbo)): the low word holds the address (bits 0-13, in 16-byte
// units) and LBO, the high one SBO and the swizzle. A kernel keeps an operand's low word and adds
// (bytes >> 4) to step through shared memory (no carry: shared addresses stay below 2^18), where
// rebuilding the descriptor costs a handful of instructions a wgmma.
__device__ __forceinline__ uint32_t desc_lo(uint32_t addr, uint32_t lbo) {
  return ((addr & 0x3FFFF) >> 4) | ((lbo & 0x3FFFF) >> 4) << 16;
}
constexpr uint32_t desc_hi(uint32_t sbo) {
  return ((sbo & 0x3FFFF) >> 4) | 1u << 30;
}
__device__ __forceinline__ uint64_t desc_of(uint32_t lo, uint32_t hi) {
  return uint64_t(hi) << 32 | lo;
}

// Element offset of 16-byte chunk c (of kCols / 8) in row r of a swizzled [kRows][kCols] bf16 tile:
// kCols / 64 blocks of [kRows][64], one after the other.
template <int kRows>
__device__ __forceinline__ int swizzled(int r, int c) {
  return (c / 8) * kRows * 64 + r * 64 + ((c % 8) ^ (r % 8)) * 8;
}

#if ASTRAI_WGMMA
// Before the first wgmma of a group whose registers (accumulators, A fragments) other instructions wrote.
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Returns once at most kPending of the warpgroup's committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Shared memory written by ordinary stores or cp.async, made visible to wgmma's reads (the async proxy).
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across a wait.
template <int kN>
__device__ __forceinline__ void pin(float* d) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The accumulator operands of the wrappers below, d[0, 32) or d[0, 64), and their places in the
// instruction text.
#define ASTRAI_WGMMA_D8(i)                                                                    \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define ASTRAI_WGMMA_D32 ASTRAI_WGMMA_D8(0), ASTRAI_WGMMA_D8(8), ASTRAI_WGMMA_D8(16), ASTRAI_WGMMA_D8(24)
#define ASTRAI_WGMMA_D64 \
  ASTRAI_WGMMA_D32, ASTRAI_WGMMA_D8(32), ASTRAI_WGMMA_D8(40), ASTRAI_WGMMA_D8(48), ASTRAI_WGMMA_D8(56)
#define ASTRAI_WGMMA_R32                                                                                 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ASTRAI_WGMMA_R64                                                                              \
  ASTRAI_WGMMA_R32                                                                                    \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, " \
  "%51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// d[64 x 64] (+)= A[64 x 16] B[16 x 64], A and B in shared memory (K-major), one warpgroup.
__device__ __forceinline__ void wgmma_ss_n64(float* d, uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" ASTRAI_WGMMA_R32
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : ASTRAI_WGMMA_D32
      : "l"(a), "l"(b), "r"(int(accumulate)));
}
// d[64 x 64] (+)= A[64 x 16] B[16 x 64], A in registers (a[4]: the m16n8k16 A fragment of the warp's 16
// rows), B in shared memory N-major (transposed).
__device__ __forceinline__ void wgmma_rs_n64_tb(float* d, const uint32_t* a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" ASTRAI_WGMMA_R32
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : ASTRAI_WGMMA_D32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));
}
// d[64 x 128] (+)= A[64 x 16] B[16 x 128], A and B in shared memory (K-major), one warpgroup.
__device__ __forceinline__ void wgmma_ss_n128(float* d, uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" ASTRAI_WGMMA_R64
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : ASTRAI_WGMMA_D64
      : "l"(a), "l"(b), "r"(int(accumulate)));
}
// d[64 x 128] (+)= A[64 x 16] B[16 x 128], A in registers (a[4]: the m16n8k16 A fragment of the warp's
// 16 rows), B in shared memory N-major (transposed).
__device__ __forceinline__ void wgmma_rs_n128_tb(float* d, const uint32_t* a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" ASTRAI_WGMMA_R64
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : ASTRAI_WGMMA_D64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));
}
#undef ASTRAI_WGMMA_D8
#undef ASTRAI_WGMMA_D32
#undef ASTRAI_WGMMA_D64
#undef ASTRAI_WGMMA_R32
#undef ASTRAI_WGMMA_R64

#else
__device__ __forceinline__ void fence() {}
__device__ __forceinline__ void commit() {}
template <int kPending>
__device__ __forceinline__ void wait() {}
__device__ __forceinline__ void fence_async_shared() {}
template <int kN>
__device__ __forceinline__ void pin(float*) {}
__device__ __forceinline__ void wgmma_ss_n64(float*, uint64_t, uint64_t, bool) {}
__device__ __forceinline__ void wgmma_rs_n64_tb(float*, const uint32_t*, uint64_t, bool) {}
__device__ __forceinline__ void wgmma_ss_n128(float*, uint64_t, uint64_t, bool) {}
__device__ __forceinline__ void wgmma_rs_n128_tb(float*, const uint32_t*, uint64_t, bool) {}
#endif

// d[64 x kN] (+)= A B, both from shared memory (K-major).
template <int kN>
__device__ __forceinline__ void mma_ss(float* d, uint64_t a, uint64_t b, bool accumulate) {
  static_assert(kN == 64 || kN == 128);
  if constexpr (kN == 64)
    wgmma_ss_n64(d, a, b, accumulate);
  else
    wgmma_ss_n128(d, a, b, accumulate);
}
// d[64 x kN] (+)= A B, A from registers, B from shared memory MN-major.
template <int kN>
__device__ __forceinline__ void mma_rs_tb(float* d, const uint32_t* a, uint64_t b, bool accumulate) {
  static_assert(kN == 64 || kN == 128);
  if constexpr (kN == 64)
    wgmma_rs_n64_tb(d, a, b, accumulate);
  else
    wgmma_rs_n128_tb(d, a, b, accumulate);
}

}  // namespace astrai::gpu::wgmma
