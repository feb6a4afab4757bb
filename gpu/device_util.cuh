// Device-side helpers shared by the kernels: f32 <-> storage-type conversion, rounding to the
// storage type (so a bf16 op rounds where PyTorch's bf16 op rounds), and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace astrai::gpu {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(bf16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// x rounded to T's precision and widened back: the value a PyTorch op in dtype T would hand on.
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

// SiLU's g / (1 + e^-g) rounded to T, as the swiglu op and the GEMVs that fuse it round it (then
// multiplied by up in f32, as Hugging Face's bf16 act_fn(gate) * up). __expf and the approximate
// division (2 ulp each in f32), where the IEEE forms made SwiGLU's kernel bound by its arithmetic: for
// bf16, over every finite gate, the result is float64's rounded to bf16 but for the 20 gates below
// -87, whose results (about -1e-36) the division flushes to 0 (bench/prefill_rows_bench.cu, H200).
template <typename T>
__device__ __forceinline__ float silu_rounded(float g) {
  return round_to<T>(__fdividef(g, 1.0f + __expf(-g)));
}

// 8 bf16 packed in 16 bytes, widened. v by value: a caller's unpack8(*reinterpret_cast<const uint4*>(p),
// f) is then one 16-byte load, where a reference let the compiler read through it 4 bytes at a time
// (four loads a row chunk, and the L1 wavefronts of each).
__device__ __forceinline__ void unpack8(const uint4 v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // a bf16 is the high half of its f32
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// 8 floats rounded to bf16 and packed in 16 bytes.
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
// `scratch` holds 32 floats of shared memory; the call contains __syncthreads.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

// Programmatic dependent launch (sm_90 on): a kernel launched with the programmatic-serialization
// attribute (the decode GEMV, linear_kernels.cu, and the decode attention kernel, attention.cu) may
// start while the kernel before it still runs, once every block of that kernel has called
// pdl_launch_dependents (or exited). It reads only what no earlier kernel writes (the GEMV: its
// weights; attention: K/V rows but the step's own) before pdl_wait, which returns when the kernel
// before it has finished and its writes are visible. The kernels that feed a GEMV call
// pdl_launch_dependents at their start, so the GEMV's weight loads overlap their work; in a kernel
// whose successor was launched without the attribute both calls do nothing.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Softmax kernels keep scores in log2 units (exp2 is one instruction): x * kLog2e turns a natural
// exponent into one, y * kLn2 back.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// 2^x in one instruction (ex2.approx: about 2 ulp; results below 2^-126 flush to 0, as softmax
// terms that small are).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// cp.async (sm_80 on): copies from global to shared memory that complete in the background, in
// groups a thread commits and later waits for (each thread waits only for its own copies).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, bypassing L1; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
// The same, asking L2 to fetch the aligned 128 bytes around src as one request: for copies that
// read whole 128-byte lines, as the decode attention kernel's K/V rows are (on the H200, +2-3%
// decode tok/s at 32k contexts; a 256-byte fetch, half of it another KV head's row, lost 5-9% at
// head_dim 64).
__device__ __forceinline__ void cp_async16_line(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
// Returns once at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Host side: whether environment variable `name` is `value` (the measurement switches; callers read
// it once per process, as the decode step is a hot path).
inline bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e && std::string(e) == value;
}

// Host side: the device's multiprocessors (132 where it cannot be asked). Read once per process.
inline int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return v;
  }();
  return n;
}

// Host side: whether kernels go out with that attribute: on compute capability 9.0 and up, unless
// ASTRAI_NO_PDL is set (to measure without it). Read once per process.
inline bool pdl_enabled() {
  static const bool on = [] {
    const char* off = std::getenv("ASTRAI_NO_PDL");
    if (off && *off && std::string(off) != "0") return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return false;
    return major >= 9;
  }();
  return on;
}

// A cudaLaunchKernelEx configuration, with the programmatic-serialization attribute when pdl.
struct LaunchConfig {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;  // points into this object: not copyable
    cfg.numAttrs = pdl ? 1 : 0;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// Blocks for n elements at `threads` per block, capped so a grid-stride loop covers the rest.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 1 ? 1 : blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

}  // namespace astrai::gpu
