// linear's own kernels beside cuBLASLt (linear.cpp decides which runs):
// - gemv: out[m, n] = x[m, :] . w[n, :] (+ bias[n]) for M <= kGemvMaxRows rows of x (decode), on the
//   tensor cores: a warp multiplies a tile of 16 weight rows, over a range of K, by all M rows of x at
//   once, so the weights stream once for every M and the arithmetic per weight byte does not grow
//   with M. A decode step is a stream over the weights, so this is what sets its time. Its x may be
//   computed in the block first (SwiGLU, or residual add + RMSNorm), and for the MLP's gate_up it can
//   take gate and up rows in pairs and write their SwiGLU (add_rms_norm_mlp).
//   Its weights may be fp8 (e4m3, an fp8 checkpoint's matrix kept as stored), read at half the bytes
//   and widened in registers (below: kFp8).
// - naive: a plain GEMM for the shapes cuBLASLt has no algorithm for (rows that start on 2-byte
//   boundaries, e.g. column slices at odd offsets): one thread per output, f32 accumulation.
//   Correct, not fast; the model's shapes never take it.
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"
#include "gpu/waves.h"

namespace astrai::gpu {
namespace {

// kGemvMaxRows (ops.h) is the MMA's N: x rows past M repeat row M - 1, their outputs dropped.
constexpr int kGemvTile = 16;  // weight rows per warp (the MMA's M)
// 16-byte loads per lane per operand issued before the first MMA: with ~32 resident warps per
// multiprocessor that keeps enough bytes in flight to cover device-memory latency (on the H200,
// unrolling 8 was a median 3% slower than 4).
constexpr int kGemvUnroll = 4;
// About one wave of warps on the H200 (132 multiprocessors, 2-4 resident 8-warp blocks each).
constexpr int64_t kGemvSplitWarps = 4096;

// D (16 x 8, f32) += A (16 x 16, bf16, row-major) B (16 x 8, bf16, column-major).
__device__ __forceinline__ void mma_16x8x16(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Weights are read once per step: past L1 (no allocation there), asking L2 to fetch the 256-byte
// block around each access (on the H200 that was a median 10-28% faster than without the hint).
__device__ __forceinline__ uint4 load_weights(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// How the GEMV gets x: kPlain reads x; kSwiglu has the block first compute the whole [M, K] x =
// silu(gate) * up into shared memory from a [M, 2K] gate|up row (up K past gate), rounded where the
// swiglu op rounds (gpu/elementwise.cu), so the fused down projection equals swiglu then linear bit
// for bit. (Computing it per lane as x is read, as an earlier version did, repeated the
// exponentials in each of a warp's 8 lane groups at M = 1 and in every weight tile: slower than
// the two kernels it replaced.)
// kAddNorm has it compute x = rms_norm(residual + y) the same way (residual + y rounded as the add
// rounds it, then the norm as gpu/norm.cu writes it, its sum of squares in another order), block 0
// also writing residual + y to its own buffer: the norm kernel before the GEMV is gone.
enum XMode { kPlain, kSwiglu, kAddNorm };

// kFp8: the weights are e4m3 bytes with f32 scales (Weight). A lane's chunk is then 8 bytes (the
// same 8 values of K as a bf16 chunk's 16), widened to the bf16 the MMA takes: e4m3 is exact in
// f16 (the hardware's conversion), and f16's bits shifted into bf16's fields give the value times
// 2^-112 (exponent bias 15 against 127; e4m3's 3 mantissa bits fit, zero stays zero, and its
// smallest value, 2^-9, becomes 2^-121: a normal bf16). Each round of a warp's loop covers 128
// columns (4 chunks a lane, 4 lanes), which lie in one scale block: its sums start from zero and
// are added to the accumulators times the block's scale (times 2^112). So the products are exact
// and each 128 columns are scaled once: no rounding of widened weights to bf16 on the way.
struct Fp8Scales {
  const float* s = nullptr;  // [ceil(N / block_rows), ld]
  int64_t ld = 0;
  int64_t block_rows = 1;
  int64_t block_cols = 0;  // a multiple of 128, or >= K
};

// 2^112, the widening's bias (see Fp8Scales).
constexpr float kFp8Bias = 5.192296858534828e33f;

// Two e4m3 values (the low byte first) as a bf16 pair times 2^-112 (see Fp8Scales).
__device__ __forceinline__ uint32_t widen_e4m3x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  const uint32_t u = uint32_t(h.x) | (uint32_t(h.y) << 16);
  return ((u >> 3) & 0x0fff0fffu) | (u & 0x80008000u);
}

// A chunk of 8 e4m3 values as the 8 bf16 (times 2^-112) a bf16 chunk holds, in the same order.
__device__ __forceinline__ uint4 widen_chunk(uint2 v) {
  return make_uint4(widen_e4m3x2(v.x & 0xffffu), widen_e4m3x2(v.x >> 16), widen_e4m3x2(v.y & 0xffffu),
                    widen_e4m3x2(v.y >> 16));
}

// load_weights for an fp8 chunk (8 bytes).
__device__ __forceinline__ uint2 load_weights(const uint2* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// What kAddNorm needs beyond x (the residual).
struct AddNorm {
  const bf16* y = nullptr;  // [M, K], row stride ldy
  int64_t ldy = 0;
  const bf16* w = nullptr;  // the norm's weight [K]
  float eps = 0.0f;
  bf16* residual_out = nullptr;  // [M, K], row stride ld_out; written by block 0
  int64_t ld_out = 0;
};

// silu(g) * u of one 16-byte chunk of gate and of up.
__device__ __forceinline__ uint4 swiglu8(uint4 gate, uint4 up) {
  float g[8], u[8];
  unpack8(gate, g);
  unpack8(up, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) g[i] = silu_rounded<bf16>(g[i]) * u[i];
  return pack8(g);
}

// Block: W warps on W / ksplit tiles of 16 weight rows; the ksplit warps of a tile take consecutive
// ranges of K, and their partial sums meet in shared memory.
//
// The MMA (m16n8k16): A = the weight tile, B = x transposed, f32 accumulators. A dot product's order
// over K is free, so each lane loads whole 16-byte runs of its rows and x is read in the same
// permuted order: lane group g = lane / 4 takes rows g and g + 8, lane t = lane % 4 the 8 values at
// k0 + 8t. In A's fragment a lane holds columns {2t, 2t+1, 2t+8, 2t+9} of its two rows (one 32-bit
// register per row and column pair); the first MMA maps those columns to k0 + 8t + {0,1,2,3}, the
// second to k0 + 8t + {4,5,6,7}. B's fragment (x row g, the same columns) then is the lane's own
// 16-byte load of x, and each such load serves 16 weight rows.
//
// The first round of weight loads is issued before pdl_wait (device_util.cuh): under programmatic
// dependent launch they overlap the kernel before (for llama-1b's small projections a warp's whole
// range of K is one or two rounds), and only x waits for it. (Two rounds in registers, and asking
// L2 for the next rounds with prefetch.global.L2, were both measured slower on the H200.)
//
// kPairs (the MLP's gate_up projection with the SwiGLU after it): w is [2F, K], gate rows then up
// rows, and a tile is gate rows [8t, 8t + 8) (the MMA's rows 0-7) with the up rows F past them (rows
// 8-15). Each is summed exactly as it would be alone (a tile of 16 rows holds each row's dot product
// apart; the tiles, and so the split of K, number the same: N / 16), rounded to bf16 as the
// projection's output would be, and out [M, F] gets silu(gate) * up rounded where the swiglu op
// rounds: the projection then the swiglu, bit for bit, without the [M, 2F] round trip or the kernel.
template <typename TO, int W, int kX, bool kPairs, bool kFp8>
__device__ __forceinline__ void gemv_body(const bf16* __restrict__ x, int64_t ldx, int M,
                                          const void* __restrict__ w, int64_t K, int64_t N,
                                          const TO* __restrict__ bias, TO* __restrict__ out, int64_t ldo,
                                          int ksplit, AddNorm an, Fp8Scales fs) {
  __shared__ float partial[W][kGemvTile][kGemvMaxRows];
  extern __shared__ uint4 x_shared[];  // kSwiglu, kAddNorm: x as [M][K / 8] chunks
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tiles_per_block = W / ksplit, part = warp % ksplit;
  const int64_t tile = int64_t(blockIdx.x) * tiles_per_block + warp / ksplit, F = N / 2;
  // chunk: 8 values (16 bytes; fp8: 8). An fp8 warp's range starts on a round (16 chunks, 128
  // columns), so that each round lies in one scale block.
  constexpr int64_t kRound = 4 * kGemvUnroll;
  const int64_t chunks = K / 8, even = (chunks + ksplit - 1) / ksplit;
  const int64_t per_part = kFp8 ? (even + kRound - 1) / kRound * kRound : even;
  const int64_t begin = part * per_part, end = min(chunks, begin + per_part);
  const bool active = (kPairs ? tile * 8 < F : tile * kGemvTile < N) && begin < end;  // warp-uniform
  float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};           // two chains of MMAs
  // Rows past the last (of N, or of each half) repeat it (outputs dropped): every load is in bounds.
  int64_t row_a, row_b;
  if constexpr (kPairs) {
    row_a = min(tile * 8 + g, max(F - 1, int64_t(0)));
    row_b = F + row_a;
  } else {
    const int64_t last = max(N - 1, int64_t(0));
    row_a = min(tile * kGemvTile + g, last);
    row_b = min(tile * kGemvTile + g + 8, last);
  }
  using Chunk = std::conditional_t<kFp8, uint2, uint4>;
  const Chunk* wa = reinterpret_cast<const Chunk*>(static_cast<const char*>(w) + row_a * K * (kFp8 ? 1 : 2));
  const Chunk* wb = reinterpret_cast<const Chunk*>(static_cast<const char*>(w) + row_b * K * (kFp8 ? 1 : 2));
  Chunk va[kGemvUnroll], vb[kGemvUnroll];
  float sa = 0.0f, sb = 0.0f;  // kFp8: the round's scales of rows a and b, times 2^112
  const float* sra = kFp8 ? fs.s + row_a / fs.block_rows * fs.ld : nullptr;
  const float* srb = kFp8 ? fs.s + row_b / fs.block_rows * fs.ld : nullptr;
  // Past the part's end a lane re-reads its last chunk (no branch, so every load is issued before
  // the first MMA) and multiplies it by zeros in place of x.
  auto load_w = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const int64_t cc = min(base + 4 * u + t, end - 1);
      va[u] = load_weights(wa + cc);
      vb[u] = load_weights(wb + cc);
    }
    if constexpr (kFp8) {
      const int64_t col = base * 8 / fs.block_cols;
      sa = __ldg(sra + col) * kFp8Bias;
      sb = __ldg(srb + col) * kFp8Bias;
    }
  };
  if (active) load_w(begin);
  pdl_wait();
  pdl_launch_dependents();
  if constexpr (kX == kSwiglu) {
    const int64_t row_chunks = K / 8;
    for (int64_t i = threadIdx.x; i < M * row_chunks; i += W * 32) {
      const int64_t m = i / row_chunks, c = i % row_chunks;
      const uint4* gr = reinterpret_cast<const uint4*>(x + m * ldx);
      x_shared[i] = swiglu8(__ldg(gr + c), __ldg(gr + row_chunks + c));
    }
    __syncthreads();
  } else if constexpr (kX == kAddNorm) {
    __shared__ float red[32];
    const int64_t row_chunks = K / 8;
    for (int m = 0; m < M; ++m) {
      const uint4* rr = reinterpret_cast<const uint4*>(x + m * ldx);
      const uint4* yr = reinterpret_cast<const uint4*>(an.y + m * an.ldy);
      float ss = 0.0f;
      for (int64_t c = threadIdx.x; c < row_chunks; c += W * 32) {
        float a[8], b[8];
        unpack8(__ldg(rr + c), a);
        unpack8(__ldg(yr + c), b);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          a[i] = round_to<bf16>(a[i] + b[i]);
          ss += a[i] * a[i];
        }
        const uint4 v = pack8(a);
        x_shared[m * row_chunks + c] = v;
        if (blockIdx.x == 0) reinterpret_cast<uint4*>(an.residual_out + m * an.ld_out)[c] = v;
      }
      const float inv = rsqrtf(block_sum(ss, red) / float(K) + an.eps);
      for (int64_t c = threadIdx.x; c < row_chunks; c += W * 32) {
        float a[8], g[8];
        unpack8(x_shared[m * row_chunks + c], a);
        unpack8(__ldg(reinterpret_cast<const uint4*>(an.w) + c), g);
#pragma unroll
        for (int i = 0; i < 8; ++i) a[i] = round_to<bf16>(a[i] * inv) * g[i];
        x_shared[m * row_chunks + c] = pack8(a);
      }
    }
    __syncthreads();
  }
  // One round of weights in registers at a time, as before programmatic launch: issuing round
  // i + 1's loads ahead of round i's MMAs (two rounds in registers), with the lane groups past M
  // skipping their x loads behind a branch, was 6% (llama-1b) and 14% (qwen3-8b) slower per step
  // on the H200 (docs/performance.md).
  if (active) {
    const uint4* xr = kX != kPlain ? x_shared + min(g, M - 1) * (K / 8)
                                   : reinterpret_cast<const uint4*>(x + min(g, M - 1) * ldx);
    for (int64_t base = begin;;) {
      uint4 vx[kGemvUnroll];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int64_t c = base + 4 * u + t;
        vx[u] = kX != kPlain ? xr[min(c, end - 1)] : __ldg(xr + min(c, end - 1));
        if (c >= end) vx[u] = make_uint4(0, 0, 0, 0);
      }
      if constexpr (kFp8) {
        float e0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e1[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // this round's sums
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          const uint4 a = widen_chunk(va[u]), b = widen_chunk(vb[u]);
          mma_16x8x16(e0, a.x, b.x, a.y, b.y, vx[u].x, vx[u].y);
          mma_16x8x16(e1, a.z, b.z, a.w, b.w, vx[u].z, vx[u].w);
        }
        // Accumulator layout (below): d[0], d[1] row a (g), d[2], d[3] row b (g + 8).
        d0[0] += sa * (e0[0] + e1[0]);
        d0[1] += sa * (e0[1] + e1[1]);
        d0[2] += sb * (e0[2] + e1[2]);
        d0[3] += sb * (e0[3] + e1[3]);
      } else {
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          mma_16x8x16(d0, va[u].x, vb[u].x, va[u].y, vb[u].y, vx[u].x, vx[u].y);
          mma_16x8x16(d1, va[u].z, vb[u].z, va[u].w, vb[u].w, vx[u].z, vx[u].w);
        }
      }
      base += kRound;
      if (base >= end) break;
      load_w(base);
    }
  }
  // Accumulator layout: d[0], d[1] are row g, x rows 2t and 2t + 1; d[2], d[3] the same for row g + 8.
  partial[warp][g][2 * t] = d0[0] + d1[0];
  partial[warp][g][2 * t + 1] = d0[1] + d1[1];
  partial[warp][g + 8][2 * t] = d0[2] + d1[2];
  partial[warp][g + 8][2 * t + 1] = d0[3] + d1[3];
  __syncthreads();
  if constexpr (kPairs) {
    const int outs = tiles_per_block * 8;
    for (int i = threadIdx.x; i < M * outs; i += W * 32) {
      const int m = i / outs, r = i % outs, t = r / 8;
      const int64_t n = int64_t(blockIdx.x) * outs + r;
      if (n >= F) continue;
      float gate = 0.0f, up = 0.0f;
      for (int p = 0; p < ksplit; ++p) {
        gate += partial[t * ksplit + p][r % 8][m];
        up += partial[t * ksplit + p][r % 8 + 8][m];
      }
      gate = round_to<bf16>(gate);
      up = round_to<bf16>(up);
      out[m * ldo + n] = from_f32<TO>(silu_rounded<TO>(gate) * up);
    }
    return;
  }
  const int rows = tiles_per_block * kGemvTile;
  for (int i = threadIdx.x; i < M * rows; i += W * 32) {  // consecutive threads: consecutive n
    const int m = i / rows, r = i % rows, tile = r / kGemvTile;
    const int64_t n = int64_t(blockIdx.x) * rows + r;
    if (n >= N) continue;
    float v = bias ? to_f32(bias[n]) : 0.0f;
    for (int p = 0; p < ksplit; ++p) v += partial[tile * ksplit + p][r % kGemvTile][m];
    out[m * ldo + n] = from_f32<TO>(v);
  }
}

// The GEMV compiled under more than one register budget; launch_gemv picks one per grid with
// pick_register_budget (gpu/waves.h): the roomiest under which the grid is one wave, else the one
// whose waves fill best. The arithmetic is the same under each, so are the bits.
// - gemv_kernel: as the compiler fits it (plain x: 60 registers a thread at 8 warps, 4 blocks a
//   multiprocessor; the add + norm prologue: 80, and 90 with the gate/up pairs, 2 blocks).
// - gemv_roomy_kernel (plain x): told one block a multiprocessor is enough (`__launch_bounds__`
//   minBlocks 1), the compiler takes 92 registers and keeps more weight loads in flight; 2 blocks at
//   8 warps, 1 at 16.
// - gemv_tight_kernel (add + norm prologue, 8 warps): held to 3 blocks a multiprocessor (80 registers).
// Measured on the H200 (bench decode, both orders in one call; docs/performance.md):
// - the tight twin: qwen3-8b at one row, whose gate/up pairs GEMV is 384 blocks (1.45 waves loose,
//   0.97 tight), 211.1 -> 219.2 tok/s; everywhere it lost 3.8% for llama-1b at two rows (512
//   blocks: 1.94 waves loose, 1.29 tight), and every fused GEMV held to 4 blocks (64 registers,
//   spilling) 4.6% at one row;
// - then the roomy plain GEMV where its grid is one wave: qwen3-8b 218.5 -> 225.2 tok/s at one row,
//   +0.6-1.5% at 2-8; llama-1b +5.4-7.4% at 2-8 rows, -0.6% at one; everywhere it lost 5-6% for
//   qwen3-8b at 2-8 rows (its 384-block gate/up and qkv grids in 1.45 waves).
constexpr int kTightBlocks = 3;

template <typename TO, int W, int kX, bool kPairs, bool kFp8>
__global__ void __launch_bounds__(W * 32)
    gemv_kernel(const bf16* __restrict__ x, int64_t ldx, int M, const void* __restrict__ w, int64_t K,
                int64_t N, const TO* __restrict__ bias, TO* __restrict__ out, int64_t ldo, int ksplit,
                AddNorm an, Fp8Scales fs) {
  gemv_body<TO, W, kX, kPairs, kFp8>(x, ldx, M, w, K, N, bias, out, ldo, ksplit, an, fs);
}

template <typename TO, int W, int kX, bool kPairs, bool kFp8>
__global__ void __launch_bounds__(W * 32, 1)
    gemv_roomy_kernel(const bf16* __restrict__ x, int64_t ldx, int M, const void* __restrict__ w, int64_t K,
                      int64_t N, const TO* __restrict__ bias, TO* __restrict__ out, int64_t ldo, int ksplit,
                      AddNorm an, Fp8Scales fs) {
  gemv_body<TO, W, kX, kPairs, kFp8>(x, ldx, M, w, K, N, bias, out, ldo, ksplit, an, fs);
}

template <typename TO, int W, int kX, bool kPairs, bool kFp8>
__global__ void __launch_bounds__(W * 32, kTightBlocks)
    gemv_tight_kernel(const bf16* __restrict__ x, int64_t ldx, int M, const void* __restrict__ w, int64_t K,
                      int64_t N, const TO* __restrict__ bias, TO* __restrict__ out, int64_t ldo, int ksplit,
                      AddNorm an, Fp8Scales fs) {
  gemv_body<TO, W, kX, kPairs, kFp8>(x, ldx, M, w, K, N, bias, out, ldo, ksplit, an, fs);
}

// Blocks of `kernel` (W warps a block) resident on the device at once, with the largest x that fuse_prologue
// lets into shared memory at 8 warps (M x K at most 16 x 256 values: 8 KB). Once per kernel.
template <auto kernel, int W>
int64_t gemv_slots() {
  static const int64_t n = [] {
    int v = 0;
    ASTRAI_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel, W * 32, 16 * 256 * sizeof(bf16)));
    return int64_t(std::max(v, 1)) * sm_count();
  }();
  return n;
}

// The kernel a grid of `blocks` runs under (see above). ASTRAI_GEMV_BUDGET=loose / roomy / tight:
// the compiler's fit, the roomiest, the tightest budget a kernel has, at every grid (to measure, and
// to test each on any shape).
template <typename TO, int W, int kX, bool kPairs, bool kFp8>
auto pick_gemv_kernel(int64_t blocks) {
  constexpr auto loose = gemv_kernel<TO, W, kX, kPairs, kFp8>;
  static const bool force_loose = env_is("ASTRAI_GEMV_BUDGET", "loose"),
                    force_roomy = env_is("ASTRAI_GEMV_BUDGET", "roomy"),
                    force_tight = env_is("ASTRAI_GEMV_BUDGET", "tight");
  if (force_loose) return loose;
  if constexpr (kX == kPlain) {
    constexpr auto roomy = gemv_roomy_kernel<TO, W, kX, kPairs, kFp8>;
    if (force_roomy || force_tight) return force_roomy ? roomy : loose;
    const int64_t slots[] = {gemv_slots<roomy, W>(), gemv_slots<loose, W>()};
    return pick_register_budget(blocks, slots) == 0 ? roomy : loose;
  } else if constexpr (kX == kAddNorm && W == 8) {
    constexpr auto tight = gemv_tight_kernel<TO, W, kX, kPairs, kFp8>;
    if (force_roomy || force_tight) return force_tight ? tight : loose;
    const int64_t slots[] = {gemv_slots<loose, W>(), gemv_slots<tight, W>()};
    return pick_register_budget(blocks, slots) == 0 ? loose : tight;
  } else {
    return loose;
  }
}

template <int W, typename TO, int kX, bool kPairs, bool kFp8>
void launch_gemv(cudaStream_t stream, const bf16* x, int64_t ldx, int64_t M, const Weight& w,
                 const Tensor* bias, Tensor out, int64_t ldo, int ksplit, const AddNorm& an, bool pdl) {
  Fp8Scales fs;
  if constexpr (kFp8) {
    fs.s = w.scale.ptr<float>();
    fs.ld = w.scale.shape[1];
    fs.block_rows = w.block_rows;
    fs.block_cols = w.block_cols;
  }
  const int64_t K = w.shape[1], N = w.shape[0];
  const int64_t tiles = (N + kGemvTile - 1) / kGemvTile, tiles_per_block = W / ksplit;
  const int64_t blocks = (tiles + tiles_per_block - 1) / tiles_per_block;
  const LaunchConfig lc(dim3(unsigned(blocks)), dim3(W * 32),
                        kX != kPlain ? size_t(M * K * int64_t(sizeof(bf16))) : 0, stream,
                        pdl && pdl_enabled());
  ASTRAI_CUDA_CHECK(cudaLaunchKernelEx(&lc.cfg, pick_gemv_kernel<TO, W, kX, kPairs, kFp8>(blocks), x, ldx,
                                       int(M), static_cast<const void*>(w.data), K, N,
                                       bias ? bias->ptr<TO>() : static_cast<const TO*>(nullptr),
                                       out.ptr<TO>(), ldo, ksplit, an, fs));
}

// Split K 8 ways: shorter ranges of K put more warps, and more loads, in flight. Where 8 ways leave
// the grid at <= 8 warps per multiprocessor (N <= 2048), 16-warp blocks split 16 ways. Where 8 ways
// give a grid of 1 to 8 waves (of ~4096 warps), the last, partial wave costs: split only until the
// grid is one wave. Measured on the H200 (bench/gemv_bench.cu, table in docs/performance.md):
// llama-1b's o and down projections 5.7 -> 5.4 and 13.9 -> 12.5 us with 16 ways; the gate_up
// projections 21.7 -> 20.2 (llama-1b, 4 ways) and 52.6 -> 51.3 us (qwen3-8b, 2 ways); qwen3-8b's
// LM head (19 waves at 8 ways, so the last one's share is small) 301 us unsplit, 287 us 8 ways.
// Whether an N-row weight takes 16-warp blocks (below): few tiles.
bool wide_gemv_blocks(int64_t N) {
  return (N + kGemvTile - 1) / kGemvTile * 8 <= 1024;
}

// pdl: launched with programmatic dependent launch (when the device has it), which the decode
// GEMVs are but for the exception in Linear::run_mlp.
template <int kX, bool kPairs, bool kFp8>
void dispatch_gemv_of(cudaStream_t stream, const bf16* x, int64_t ldx, int64_t M, const Weight& w,
                      const Tensor* bias, Tensor out, int64_t ldo, const AddNorm& an, bool pdl) {
  const int64_t tiles = (w.shape[0] + kGemvTile - 1) / kGemvTile;
  int ksplit = 8;
  if (tiles * ksplit > kGemvSplitWarps && tiles * ksplit < 8 * kGemvSplitWarps)
    while (ksplit > 1 && tiles * ksplit > kGemvSplitWarps) ksplit /= 2;
  const bool wide_blocks = wide_gemv_blocks(w.shape[0]);
  if (out.dtype == DType::bf16) {
    if (wide_blocks)
      launch_gemv<16, bf16, kX, kPairs, kFp8>(stream, x, ldx, M, w, bias, out, ldo, 16, an, pdl);
    else
      launch_gemv<8, bf16, kX, kPairs, kFp8>(stream, x, ldx, M, w, bias, out, ldo, ksplit, an, pdl);
  } else if constexpr (!kPairs) {
    if (wide_blocks)
      launch_gemv<16, float, kX, kPairs, kFp8>(stream, x, ldx, M, w, bias, out, ldo, 16, an, pdl);
    else
      launch_gemv<8, float, kX, kPairs, kFp8>(stream, x, ldx, M, w, bias, out, ldo, ksplit, an, pdl);
  }
}

// The GEMV for w's dtype (bf16, or fp8 with its scales).
template <int kX, bool kPairs = false>
void dispatch_gemv(cudaStream_t stream, const bf16* x, int64_t ldx, int64_t M, const Weight& w,
                   const Tensor* bias, Tensor out, int64_t ldo, const AddNorm& an = {}, bool pdl = true) {
  if (w.dtype == DType::fp8_e4m3)
    dispatch_gemv_of<kX, kPairs, true>(stream, x, ldx, M, w, bias, out, ldo, an, pdl);
  else
    dispatch_gemv_of<kX, kPairs, false>(stream, x, ldx, M, w, bias, out, ldo, an, pdl);
}

// Whether a fused prologue (kSwiglu, kAddNorm) runs for M rows of K into an N-row weight: only while
// each thread of the block computes at most two 16-byte chunks of x before the GEMV can start.
// Measured on the H200 (docs/performance.md): llama-1b's down projection at M = 1 (K 8,192, 512
// threads) gained 4% per decode step over swiglu + GEMV, qwen3-8b's (K 12,288, 256 threads) lost 2%,
// and every M = 8 case lost. `never`: the switch's environment variable said unfused (to measure).
bool fuse_prologue(bool never, int64_t M, int64_t K, int64_t N) {
  return !never && M * K <= 16 * (wide_gemv_blocks(N) ? 512 : 256);
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

template <typename TI, typename TO>
__global__ void linear_naive_kernel(Rows x, const TI* __restrict__ w, const TO* __restrict__ bias, Rows out,
                                    int64_t K, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = e / out.width, c = e % out.width;
    const TI* xr = x.row<TI>(m);
    const TI* wr = w + c * K;
    float acc = bias ? to_f32(bias[c]) : 0.0f;
    for (int64_t k = 0; k < K; ++k) acc += to_f32(xr[k]) * to_f32(wr[k]);
    out.row<TO>(m)[c] = from_f32<TO>(acc);
  }
}

template <typename TI, typename TO>
void launch(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  const Rows xv = rows_of(x, "linear"), ov = rows_of(out, "linear");
  const int64_t n = ov.n_rows * ov.width;
  linear_naive_kernel<TI, TO><<<grid_for(n, 128), 128, 0, stream>>>(
      xv, w.ptr<TI>(), bias ? bias->ptr<TO>() : nullptr, ov, x.shape[1], n);
  ASTRAI_CUDA_LAUNCH_CHECK(linear_naive_kernel);
}

// Whether the GEMV reads w as it is: bf16, or fp8 in scale blocks it takes (gemv_takes_fp8).
bool gemv_weights(const Weight& w) {
  return (w.dtype == DType::bf16 || gemv_takes_fp8(w)) && aligned16(w.data);
}

// Whether the GEMV takes x (reading it as it is); ldx its row stride.
bool gemv_takes(const Tensor& x, const Weight& w, int64_t& ldx) {
  const int64_t M = x.shape[0], K = x.shape[1];
  ldx = M > 1 ? x.stride[0] : K;
  return x.dtype == DType::bf16 && M >= 1 && M <= kGemvMaxRows && K % 8 == 0 && ldx % 8 == 0 &&
         aligned16(x.data) && gemv_weights(w);
}

// add_rms_norm_linear's GEMV (and with the SwiGLU pairs after it, whose own bounds
// add_rms_norm_linear_swiglu_gemv checks): false where the shapes or the alignment do not take it.
template <bool kPairs>
bool add_norm_gemv(cudaStream_t stream, const Tensor& residual, const Tensor& x, const Tensor& norm_w,
                   float eps, const Tensor& residual_out, const Weight& w, const Tensor* bias,
                   const Tensor& out) {
  const int64_t M = residual.shape[0], K = residual.shape[1];
  auto ld = [&](const Tensor& t) { return M > 1 ? t.stride[0] : K; };
  const int64_t ldr = ld(residual), ldy = ld(x), ld_out = ld(residual_out),
                ldo = M > 1 ? out.stride[0] : out.shape[1];
  // The blocks all read residual while block 0 writes residual_out: they must be different buffers.
  const char* r0 = static_cast<const char*>(residual.data);
  const char* o0 = static_cast<const char*>(residual_out.data);
  const int64_t span = ((M - 1) * std::max(ldr, ld_out) + K) * int64_t(sizeof(bf16));
  if (residual.dtype != DType::bf16 || M < 1 || M > kGemvMaxRows || K % 8 != 0 || ldr % 8 != 0 ||
      ldy % 8 != 0 || ld_out % 8 != 0 || !aligned16(residual.data) || !aligned16(x.data) ||
      !aligned16(residual_out.data) || !aligned16(norm_w.data) || !gemv_weights(w) ||
      residual.stride[1] != 1 || x.stride[1] != 1 || residual_out.stride[1] != 1 ||
      (o0 < r0 + span && r0 < o0 + span))
    return false;
  static const bool never = env_is("ASTRAI_ADD_NORM", "unfused");
  if (!fuse_prologue(never, M, K, w.shape[0])) return false;
  AddNorm an;
  an.y = x.ptr<bf16>();
  an.ldy = ldy;
  an.w = norm_w.ptr<bf16>();
  an.eps = eps;
  an.residual_out = residual_out.ptr<bf16>();
  an.ld_out = ld_out;
  dispatch_gemv<kAddNorm, kPairs>(stream, residual.ptr<bf16>(), ldr, M, w, bias, out, ldo, an);
  return true;
}

}  // namespace

bool gemv_takes_fp8(const Weight& w) {
  const int64_t K = w.ndim == 2 ? w.shape[1] : 0;
  return w.dtype == DType::fp8_e4m3 && w.scale.dtype == DType::f32 && w.block_rows > 0 &&
         (w.block_cols % 128 == 0 || w.block_cols >= K) && w.block_cols > 0 && K % 8 == 0;
}

bool linear_gemv(cudaStream_t stream, const Tensor& x, const Weight& w, const Tensor* bias, Tensor out,
                 bool pdl) {
  int64_t ldx = 0;
  if (!gemv_takes(x, w, ldx)) return false;
  dispatch_gemv<kPlain>(stream, x.ptr<bf16>(), ldx, x.shape[0], w, bias, out,
                        x.shape[0] > 1 ? out.stride[0] : w.shape[0], {}, pdl);
  return true;
}

bool swiglu_linear_gemv(cudaStream_t stream, const Tensor& gate, const Tensor& up, const Weight& w,
                        Tensor out) {
  const int64_t M = gate.shape[0], K = gate.shape[1];
  const int64_t ldx = M > 1 ? gate.stride[0] : 2 * K, ldo = M > 1 ? out.stride[0] : w.shape[0];
  // gate and up must be the two halves of one [M, 2K] buffer: the kernel finds up K past gate.
  if (gate.dtype != DType::bf16 || up.dtype != DType::bf16 || M < 1 || M > kGemvMaxRows || K % 8 != 0 ||
      ldx % 8 != 0 || ldx < 2 * K || !aligned16(gate.data) || !gemv_weights(w) ||
      static_cast<const char*>(up.data) !=
          static_cast<const char*>(gate.data) + K * int64_t(sizeof(uint16_t)) ||
      (M > 1 && up.stride[0] != gate.stride[0]))
    return false;
  static const bool never = env_is("ASTRAI_SWIGLU", "unfused");
  if (!fuse_prologue(never, M, K, w.shape[0])) return false;
  dispatch_gemv<kSwiglu>(stream, gate.ptr<bf16>(), ldx, M, w, nullptr, out, ldo);
  return true;
}

bool add_rms_norm_linear_gemv(cudaStream_t stream, const Tensor& residual, const Tensor& x,
                              const Tensor& norm_w, float eps, Tensor residual_out, const Weight& w,
                              const Tensor* bias, Tensor out) {
  return add_norm_gemv<false>(stream, residual, x, norm_w, eps, residual_out, w, bias, out);
}

bool add_rms_norm_linear_swiglu_gemv(cudaStream_t stream, const Tensor& residual, const Tensor& x,
                                     const Tensor& norm_w, float eps, Tensor residual_out, Tensor h,
                                     const Weight& w, Tensor act) {
  static const bool never = env_is("ASTRAI_SWIGLU", "unpaired");  // to measure without the pairs
  // The pairs take whole 8-row groups of each half, so the tiles (and the split of K) are the
  // unpaired projection's; act is bf16, as the projection's output would be.
  if (never || w.shape[0] % 16 != 0 || act.dtype != DType::bf16) return false;
  if (add_norm_gemv<true>(stream, residual, x, norm_w, eps, residual_out, w, nullptr, act)) return true;
  // Where the GEMV does not add and norm (a long prologue), what add_rms_norm_linear then runs
  // (add_rms_norm into h, the GEMV on h), with the pairs.
  const int64_t M = h.shape[0];
  int64_t ldh = 0;
  if (!gemv_takes(h, w, ldh)) return false;
  add_rms_norm(stream, residual, x, norm_w, eps, h, &residual_out);
  dispatch_gemv<kPlain, true>(stream, h.ptr<bf16>(), ldh, M, w, nullptr, act,
                              M > 1 ? act.stride[0] : act.shape[1]);
  return true;
}

void linear_fallback(cudaStream_t stream, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) {
  if (x.shape[0] == 0 || w.shape[0] == 0) return;
  if (x.dtype == DType::bf16 && out.dtype == DType::bf16)
    launch<bf16, bf16>(stream, x, w, bias, out);
  else if (x.dtype == DType::bf16)
    launch<bf16, float>(stream, x, w, bias, out);
  else
    launch<float, float>(stream, x, w, bias, out);
}

}  // namespace astrai::gpu
