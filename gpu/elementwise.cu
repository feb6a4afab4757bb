// Row-wise and element-wise ops: embedding lookup, SwiGLU, add, row gather, dtype conversion, fp8
// dequantization; and prefetch_l2 (Backend::prefetch's hint).
// SwiGLU and add run as rows_map (gpu/rows_map.cuh), embedding and the row gather as one kernel, a
// row of blocks per row copied (16-byte copies where the rows allow); the rest one thread per element
// in grid-stride loops. Rows addressed through
// Rows so that column slices (gate/up halves of one buffer, q/k/v slices of qkv) work without copies.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"
#include "gpu/rows_map.cuh"

namespace astrai::gpu {
namespace {

constexpr int kThreads = 256;

#define ASTRAI_GRID_STRIDE(e, n)                                            \
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < (n); \
       e += int64_t(gridDim.x) * blockDim.x)

// Row t of out = row ids[t] of src (embedding: of the table; gather_rows: of the hidden rows):
// blockIdx.y walks out's rows, the threads of blockIdx.x a row in units of U (uint4: 16 bytes, where
// every row allows it; else T). An id outside src leaves, with kFill, a row of `fill` (the embedding's
// NaN in every element: the model validates ids on the host, and a NaN is visible downstream where a
// clamped id would be silently wrong), else out's row as it was.
template <typename T, typename U, bool kFill>
__global__ void row_gather_kernel(Rows src, const int32_t* __restrict__ ids, Rows out, U fill) {
  pdl_launch_dependents();  // after gather_rows, the LM head's GEMV may start loading its weights
  const int64_t units = out.width * int64_t(sizeof(T)) / int64_t(sizeof(U));
  for (int64_t t = blockIdx.y; t < out.n_rows; t += gridDim.y) {
    const int32_t id = ids[t];
    const bool ok = id >= 0 && id < src.n_rows;
    if (!kFill && !ok) continue;
    const U* s = reinterpret_cast<const U*>(row_ptr<T>(src, ok ? id : 0));
    U* d = reinterpret_cast<U*>(row_ptr<T>(out, t));
    for (int64_t u = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; u < units;
         u += int64_t(gridDim.x) * blockDim.x)
      d[u] = ok ? s[u] : fill;
  }
}

// row_gather_kernel over 16-byte units where src's and out's rows allow it, else elements of T.
template <typename T, bool kFill>
void launch_row_gather(cudaStream_t stream, const Rows& src, const int32_t* ids, const Rows& out, T fill) {
  auto launch = [&](auto unit) {
    using U = decltype(unit);
    const int64_t units = out.width * int64_t(sizeof(T)) / int64_t(sizeof(U));
    const int threads = int(std::clamp<int64_t>((units + 31) / 32 * 32, 32, 256));
    const dim3 grid(unsigned(std::min<int64_t>((units + threads - 1) / threads, 1024)),
                    unsigned(std::min<int64_t>(out.n_rows, 65535)));
    row_gather_kernel<T, U, kFill><<<grid, threads, 0, stream>>>(src, ids, out, unit);
    ASTRAI_CUDA_LAUNCH_CHECK(row_gather_kernel);
  };
  if (rows_aligned16(src) && rows_aligned16(out)) {
    uint4 fill16;
    for (size_t i = 0; i < sizeof(uint4) / sizeof(T); ++i)
      std::memcpy(reinterpret_cast<char*>(&fill16) + i * sizeof(T), &fill, sizeof(T));
    launch(fill16);
  } else {
    launch(fill);
  }
}

// silu(g) * up with HF's bf16 rounding: silu(g) rounds to T before the product.
template <typename T>
struct SwigluOp {
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    out[0] = silu_rounded<T>(in[0]) * in[1];
  }
};

struct AddOp {
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const { out[0] = in[0] + in[1]; }
};

// One thread a move; a move outside ids or draws does nothing (the host validated them).
__global__ void take_tokens_kernel(int32_t* __restrict__ ids, int64_t T, const int32_t* __restrict__ moves,
                                   int64_t M, const int32_t* __restrict__ draws, int64_t D, int64_t W) {
  ASTRAI_GRID_STRIDE(i, M) {
    const int32_t row = moves[2 * i], draw = moves[2 * i + 1];
    if (row >= 0 && row < T && draw >= 0 && draw < D) ids[row] = draws[int64_t(draw) * W];
  }
}

template <typename S, typename D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  ASTRAI_GRID_STRIDE(e, n) {
    dst[e] = from_f32<D>(to_f32(src[e]));
  }
}

// f32 -> bf16 four at a time (src 16-byte, dst 8-byte aligned): the training step's conversion of
// the master weights into their bf16 copy, a billion elements per step at the llama-1b size.
__global__ void convert_f32_bf16x4_kernel(const float4* __restrict__ src, uint2* __restrict__ dst,
                                          int64_t n4) {
  ASTRAI_GRID_STRIDE(e, n4) {
    const float4 v = src[e];
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    dst[e] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  }
}

template <typename S>
void launch_convert(cudaStream_t stream, const S* src, const Tensor& dst, int64_t n) {
  const unsigned grid = grid_for(n, kThreads);
  switch (dst.dtype) {
    case DType::f32: convert_kernel<<<grid, kThreads, 0, stream>>>(src, dst.ptr<float>(), n); break;
    case DType::bf16: convert_kernel<<<grid, kThreads, 0, stream>>>(src, dst.ptr<bf16>(), n); break;
    default: convert_kernel<<<grid, kThreads, 0, stream>>>(src, dst.ptr<__half>(), n); break;
  }
  ASTRAI_CUDA_LAUNCH_CHECK(convert_kernel);
}

// dequantize: one thread an element (a load-time op: a checkpoint's matrix once); the byte goes
// through the hardware's e4m3 -> f16 conversion (exact), the product is one f32 multiply.
template <typename S, typename D>
__global__ void dequantize_kernel(const uint8_t* __restrict__ q, const S* __restrict__ scale,
                                  D* __restrict__ out, int64_t rows, int64_t cols, int64_t block_rows,
                                  int64_t block_cols, int64_t scale_cols) {
  ASTRAI_GRID_STRIDE(e, rows * cols) {
    const int64_t i = e / cols, j = e - i * cols;
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(q[e]), __NV_E4M3);
    const float s = to_f32(scale[(i / block_rows) * scale_cols + j / block_cols]);
    out[e] = from_f32<D>(__fmul_rn(__half2float(__half(h)), s));
  }
}

// The same 8 elements a thread, into bf16 (an 8-byte load, one scale, a 16-byte store): the widening
// a GEMM over fp8 weights kept on the device runs each step (gpu/linear.cpp), where the columns and
// the column blocks are multiples of 8 (or one block spans every column). The same arithmetic.
template <typename S>
__global__ void dequantize8_kernel(const uint2* __restrict__ q, const S* __restrict__ scale,
                                   uint4* __restrict__ out, int64_t rows, int64_t row_chunks,
                                   int64_t block_rows, int64_t block_cols, int64_t scale_cols) {
  ASTRAI_GRID_STRIDE(e, rows * row_chunks) {
    const int64_t i = e / row_chunks, j = (e - i * row_chunks) * 8;
    const float s = to_f32(scale[(i / block_rows) * scale_cols + j / block_cols]);
    const uint2 v = q[e];
    float f[8];
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      const uint32_t byte = ((b < 4 ? v.x : v.y) >> (8 * (b % 4))) & 0xffu;
      const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(byte), __NV_E4M3);
      f[b] = __fmul_rn(__half2float(__half(h)), s);
    }
    out[e] = pack8(f);
  }
}

template <typename S>
void launch_dequantize(cudaStream_t stream, const Tensor& q, const S* scale, int64_t block_rows,
                       int64_t block_cols, int64_t scale_cols, Tensor out) {
  const int64_t R = q.size(0), C = q.size(1);
  const auto* in = q.ptr<uint8_t>();
  if (out.dtype == DType::bf16 && C % 8 == 0 && (block_cols % 8 == 0 || block_cols >= C) &&
      reinterpret_cast<uintptr_t>(in) % 8 == 0 && reinterpret_cast<uintptr_t>(out.data) % 16 == 0) {
    dequantize8_kernel<<<grid_for(R * C / 8, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<const uint2*>(in), scale, out.ptr<uint4>(), R, C / 8, block_rows, block_cols,
        scale_cols);
    ASTRAI_CUDA_LAUNCH_CHECK(dequantize8_kernel);
    return;
  }
  const unsigned grid = grid_for(R * C, kThreads);
  switch (out.dtype) {
    case DType::f32:
      dequantize_kernel<<<grid, kThreads, 0, stream>>>(in, scale, out.ptr<float>(), R, C, block_rows,
                                                       block_cols, scale_cols);
      break;
    case DType::bf16:
      dequantize_kernel<<<grid, kThreads, 0, stream>>>(in, scale, out.ptr<bf16>(), R, C, block_rows,
                                                       block_cols, scale_cols);
      break;
    default:
      dequantize_kernel<<<grid, kThreads, 0, stream>>>(in, scale, out.ptr<__half>(), R, C, block_rows,
                                                       block_cols, scale_cols);
      break;
  }
  ASTRAI_CUDA_LAUNCH_CHECK(dequantize_kernel);
}

void check_same_rows(const Rows& a, const Rows& b, const Rows& c, const char* op) {
  ASTRAI_GPU_CHECK(a.n_rows == b.n_rows && a.n_rows == c.n_rows && a.width == b.width && a.width == c.width,
                   std::string(op) + ": operand shapes differ");
}

// prefetch_l2: one thread a piece of kPrefetchPiece bytes, which it hands to the copy engine as an
// L2 prefetch (cp.async.bulk.prefetch.L2: sm_90 on; elsewhere the kernel does nothing). The engine
// fetches the bytes after the thread and the kernel have gone; nothing waits for them. Pieces of
// 64 KB beat 1 and 4 KB at decode batch 8 on the H200 (docs/performance.md).
constexpr int64_t kPrefetchPiece = 64 << 10;
constexpr int kPrefetchSpans = 4;
struct PrefetchSpans {
  const char* p[kPrefetchSpans] = {};
  int64_t bytes[kPrefetchSpans] = {};      // multiples of 16, p 16-byte aligned
  int64_t first[kPrefetchSpans + 1] = {};  // the span's first piece; first[n]: the pieces in all
  int n = 0;
};

__global__ void prefetch_l2_kernel(PrefetchSpans s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int i = 0;
  while (i < s.n && c >= s.first[i + 1]) ++i;
  if (i == s.n) return;
  const int64_t off = (c - s.first[i]) * kPrefetchPiece;
  const int64_t size = s.bytes[i] - off < kPrefetchPiece ? s.bytes[i] - off : kPrefetchPiece;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(s.p[i] + off), "r"(uint32_t(size))
               : "memory");
#else
  (void)s;
#endif
}
}  // namespace

void embedding(cudaStream_t stream, const Tensor& table, const Tensor& ids, Tensor out) {
  check_tensor(table, "embedding", "table", DType::bf16, DType::f32);
  check_index(ids, "embedding", "ids");
  check_tensor(out, "embedding", "out", table.dtype);
  ASTRAI_GPU_CHECK(table.ndim == 2 && table.is_contiguous(), "embedding: table must be a contiguous [V, H]");
  const int64_t H = table.shape[1], T = ids.numel();
  const Rows ov = rows_of(out, "embedding");
  ASTRAI_GPU_CHECK(ov.n_rows == T && ov.width == H, "embedding: out " + out.shape_str() + " for " +
                                                        std::to_string(T) + " ids of width " +
                                                        std::to_string(H));
  if (T == 0 || H == 0) return;
  const Rows tv = rows_of(table, "embedding");
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  if (table.dtype == DType::bf16)
    launch_row_gather<bf16, true>(stream, tv, ids.ptr<int32_t>(), ov, __float2bfloat16(nan));
  else
    launch_row_gather<float, true>(stream, tv, ids.ptr<int32_t>(), ov, nan);
}

void swiglu(cudaStream_t stream, const Tensor& gate, const Tensor& up, Tensor out) {
  check_tensor(gate, "swiglu", "gate", DType::bf16, DType::f32);
  check_tensor(up, "swiglu", "up", gate.dtype);
  check_tensor(out, "swiglu", "out", gate.dtype);
  const Rows gv = rows_of(gate, "swiglu"), uv = rows_of(up, "swiglu"), ov = rows_of(out, "swiglu");
  check_same_rows(gv, uv, ov, "swiglu");
  const RowsMapArgs<2, 1> args{{gv, uv}, {ov}};
  if (gate.dtype == DType::bf16)
    rows_map<bf16>(stream, args, SwigluOp<bf16>{});
  else
    rows_map<float>(stream, args, SwigluOp<float>{});
}

void add(cudaStream_t stream, const Tensor& a, const Tensor& b, Tensor out) {
  check_tensor(a, "add", "a", DType::bf16, DType::f32);
  check_tensor(b, "add", "b", a.dtype);
  check_tensor(out, "add", "out", a.dtype);
  const Rows av = rows_of(a, "add"), bv = rows_of(b, "add"), ov = rows_of(out, "add");
  check_same_rows(av, bv, ov, "add");
  const RowsMapArgs<2, 1> args{{av, bv}, {ov}};
  if (a.dtype == DType::bf16)
    rows_map<bf16>(stream, args, AddOp{});
  else
    rows_map<float>(stream, args, AddOp{});
}

void take_tokens(cudaStream_t stream, Tensor ids, const Tensor& moves, const Tensor& draws) {
  if (std::string e = take_tokens_error(ids, moves, draws, Device::cuda); !e.empty())
    throw Error(invalid_argument("take_tokens: " + e));
  const int64_t M = moves.size(0);
  if (M == 0) return;
  take_tokens_kernel<<<grid_for(M, kThreads), kThreads, 0, stream>>>(
      ids.ptr<int32_t>(), ids.numel(), moves.ptr<int32_t>(), M, draws.ptr<int32_t>(), draws.size(0),
      draws.size(1));
  ASTRAI_CUDA_CHECK(cudaGetLastError());
}

void gather_rows(cudaStream_t stream, const Tensor& x, const Tensor& rows, Tensor out) {
  check_index(rows, "gather_rows", "rows");
  ASTRAI_GPU_CHECK(x.device == Device::cuda && out.device == Device::cuda,
                   "gather_rows: x and out must be on cuda");
  ASTRAI_GPU_CHECK(x.dtype == out.dtype, "gather_rows: x and out dtypes differ");
  ASTRAI_GPU_CHECK(x.ndim == 2 && out.ndim == 2, "gather_rows: x and out must be 2-D");
  const Rows xv = rows_of(x, "gather_rows"), ov = rows_of(out, "gather_rows");
  const int64_t R = rows.numel();
  ASTRAI_GPU_CHECK(
      ov.n_rows == R && ov.width == xv.width,
      "gather_rows: out " + out.shape_str() + " for " + std::to_string(R) + " rows of " + x.shape_str());
  if (R == 0 || ov.width == 0) return;
  const size_t es = dtype_size(x.dtype);
  ASTRAI_GPU_CHECK(es == 2 || es == 4, "gather_rows: element size must be 2 or 4 bytes");
  // Copies by element size (2 or 4 bytes as uint16 / uint32); a row index outside x leaves out alone.
  if (es == 2)
    launch_row_gather<uint16_t, false>(stream, xv, rows.ptr<int32_t>(), ov, uint16_t(0));
  else
    launch_row_gather<uint32_t, false>(stream, xv, rows.ptr<int32_t>(), ov, uint32_t(0));
}

void convert(cudaStream_t stream, const Tensor& src, Tensor dst) {
  ASTRAI_GPU_CHECK(src.device == Device::cuda && dst.device == Device::cuda,
                   "convert: src and dst must be on cuda");
  ASTRAI_GPU_CHECK(is_float_dtype(src.dtype) && is_float_dtype(dst.dtype),
                   "convert: only f32, bf16 and f16 are supported");
  ASTRAI_GPU_CHECK(
      src.is_contiguous() && dst.is_contiguous() && src.numel() == dst.numel(),
      "convert: src " + src.shape_str() + " and dst " + dst.shape_str() + " must be contiguous, same size");
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype == dst.dtype) {
    ASTRAI_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (src.dtype == DType::f32 && dst.dtype == DType::bf16 &&
      reinterpret_cast<uintptr_t>(src.data) % 16 == 0 && reinterpret_cast<uintptr_t>(dst.data) % 8 == 0) {
    const int64_t n4 = n / 4;
    if (n4 > 0) {
      convert_f32_bf16x4_kernel<<<grid_for(n4, kThreads), kThreads, 0, stream>>>(
          reinterpret_cast<const float4*>(src.data), static_cast<uint2*>(dst.data), n4);
      ASTRAI_CUDA_LAUNCH_CHECK(convert_f32_bf16x4_kernel);
    }
    if (n % 4)  // the last n % 4 elements
      launch_convert(stream, src.ptr<float>() + n4 * 4,
                     Tensor(dst.ptr<bf16>() + n4 * 4, DType::bf16, {n % 4}, Device::cuda), n % 4);
    return;
  }
  switch (src.dtype) {
    case DType::f32: launch_convert(stream, src.ptr<float>(), dst, n); break;
    case DType::bf16: launch_convert(stream, src.ptr<bf16>(), dst, n); break;
    default: launch_convert(stream, src.ptr<__half>(), dst, n); break;
  }
}

void dequantize(cudaStream_t stream, const Tensor& q, const Tensor& scale, int64_t block_rows,
                int64_t block_cols, Tensor out) {
  if (std::string e = dequantize_error(q, scale, block_rows, block_cols, out, Device::cuda); !e.empty())
    throw Error(invalid_argument("dequantize: " + e));
  if (q.numel() == 0) return;
  const int64_t sc = scale.size(1);
  switch (scale.dtype) {
    case DType::f32: launch_dequantize(stream, q, scale.ptr<float>(), block_rows, block_cols, sc, out); break;
    case DType::bf16: launch_dequantize(stream, q, scale.ptr<bf16>(), block_rows, block_cols, sc, out); break;
    default: launch_dequantize(stream, q, scale.ptr<__half>(), block_rows, block_cols, sc, out); break;
  }
}

void check_prefetch(std::span<const Tensor* const> next) {
  for (const Tensor* t : next)
    ASTRAI_GPU_CHECK(t && t->device == Device::cuda && t->is_contiguous(),
                     "prefetch: tensors must be contiguous cuda tensors");
}

void prefetch_l2(cudaStream_t stream, std::span<const Tensor* const> next, int64_t budget) {
  PrefetchSpans s;
  for (const Tensor* t : next) {
    if (budget < 16 || s.n == kPrefetchSpans) break;
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(t->data) + 15) & ~uintptr_t(15);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(t->data) + t->nbytes()) & ~uintptr_t(15);
    if (end <= begin) continue;
    const int64_t bytes = std::min(int64_t(end - begin), budget & ~int64_t(15));
    s.p[s.n] = reinterpret_cast<const char*>(begin);
    s.bytes[s.n] = bytes;
    s.first[s.n + 1] = s.first[s.n] + (bytes + kPrefetchPiece - 1) / kPrefetchPiece;
    ++s.n;
    budget -= bytes;
  }
  if (s.n == 0) return;
  const int64_t pieces = s.first[s.n];
  constexpr int kPieceThreads = 32;
  prefetch_l2_kernel<<<unsigned((pieces + kPieceThreads - 1) / kPieceThreads), kPieceThreads, 0, stream>>>(s);
  ASTRAI_CUDA_LAUNCH_CHECK(prefetch_l2_kernel);
}

}  // namespace astrai::gpu
