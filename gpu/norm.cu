// rms_norm and add_rms_norm: one block per row, sum of squares in f32.
// Rounding follows Hugging Face's LlamaRMSNorm in the storage dtype T:
//   out = w * T(x * rsqrt(mean(x^2) + eps))      (the normed row is cast to T before the weight)
// and the fused residual add rounds residual + x to T before it is normed, as the bf16 add would.
// For T = float every rounding is a no-op.
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"

namespace astrai::gpu {
namespace {

template <typename T>
__global__ void rms_norm_kernel(Rows x, const T* __restrict__ w, float eps, Rows out,
                                float* __restrict__ rstd) {
  pdl_launch_dependents();  // a norm feeds a GEMV: it may start loading its weights
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* xr = x.row<T>(r);
  T* orow = out.row<T>(r);
  const int64_t d = x.width;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / float(d) + eps);
  if (rstd && threadIdx.x == 0) rstd[r] = inv;
  // In place is safe: each thread reads and writes the same elements, after the reduction.
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    orow[i] = from_f32<T>(round_to<T>(to_f32(xr[i]) * inv) * to_f32(w[i]));
}

// sum = residual + x (sum may be residual itself), out = norm(sum).
template <typename T>
__global__ void add_rms_norm_kernel(Rows residual, Rows x, const T* __restrict__ w, float eps, Rows out,
                                    Rows sum) {
  pdl_launch_dependents();
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* res = residual.row<T>(r);
  const T* xr = x.row<T>(r);
  T* srow = sum.row<T>(r);
  T* orow = out.row<T>(r);
  const int64_t d = residual.width;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = round_to<T>(to_f32(res[i]) + to_f32(xr[i]));
    srow[i] = from_f32<T>(v);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / float(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    orow[i] = from_f32<T>(round_to<T>(to_f32(srow[i]) * inv) * to_f32(w[i]));
}

// bf16 rows of a multiple of 8 elements on 16-byte boundaries, up to kVecMaxWidth: one thread per
// 8 elements, held in registers between the reduction and the write (one read of each input).
// kAdd: the fused residual add (sum = residual + x, then norm the sum), else out = norm(residual).
constexpr int64_t kVecMaxWidth = 8 * 1024;

template <bool kAdd>
__global__ void __launch_bounds__(1024)
    norm_vec8_kernel(Rows residual, Rows x, const bf16* __restrict__ w, float eps, Rows out, Rows sum,
                     float* __restrict__ rstd) {
  pdl_launch_dependents();
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, c = int64_t(threadIdx.x) * 8;
  const bool active = c < residual.width;
  float v[8] = {};
  if (active) {
    unpack8(*reinterpret_cast<const uint4*>(residual.row<bf16>(r) + c), v);
    if constexpr (kAdd) {
      float a[8];
      unpack8(*reinterpret_cast<const uint4*>(x.row<bf16>(r) + c), a);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = round_to<bf16>(v[i] + a[i]);
      *reinterpret_cast<uint4*>(sum.row<bf16>(r) + c) = pack8(v);
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
  const float inv = rsqrtf(block_sum(ss, scratch) / float(residual.width) + eps);
  if (rstd && threadIdx.x == 0) rstd[r] = inv;
  if (!active) return;
  float wf[8], y[8];
  unpack8(*reinterpret_cast<const uint4*>(w + c), wf);
#pragma unroll
  for (int i = 0; i < 8; ++i) y[i] = round_to<bf16>(v[i] * inv) * wf[i];
  *reinterpret_cast<uint4*>(out.row<bf16>(r) + c) = pack8(y);
}

// The vectorised kernel when the rows allow it; returns false otherwise.
template <bool kAdd>
bool launch_vec8(cudaStream_t stream, const Tensor& residual, const Rows& rv, const Rows& xv, const Tensor& w,
                 float eps, const Rows& ov, const Rows& sv, float* rstd = nullptr) {
  if (residual.dtype != DType::bf16 || rv.width % 8 != 0 || rv.width > kVecMaxWidth || !rows_aligned16(rv) ||
      !rows_aligned16(ov) || (kAdd && (!rows_aligned16(xv) || !rows_aligned16(sv))) ||
      reinterpret_cast<uintptr_t>(w.data) % 16 != 0)
    return false;
  const int threads = int((rv.width / 8 + 31) / 32 * 32);
  norm_vec8_kernel<kAdd>
      <<<unsigned(rv.n_rows), threads, 0, stream>>>(rv, xv, w.ptr<bf16>(), eps, ov, sv, rstd);
  ASTRAI_CUDA_LAUNCH_CHECK(norm_vec8_kernel);
  return true;
}

// Threads per row: enough for one pass over a hidden row of a few thousand, fewer for head rows.
int threads_for(int64_t width) {
  return width >= 1024 ? 256 : width >= 256 ? 128 : 32;
}

void check_norm(const Rows& x, const Tensor& w, const Rows& out, const char* op) {
  ASTRAI_GPU_CHECK(
      w.numel() == x.width && w.is_contiguous(),
      std::string(op) + ": weight size " + w.shape_str() + " for rows of " + std::to_string(x.width));
  ASTRAI_GPU_CHECK(out.n_rows == x.n_rows && out.width == x.width,
                   std::string(op) + ": out shape differs from x");
}

}  // namespace

void rms_norm(cudaStream_t stream, const Tensor& x, const Tensor& w, float eps, Tensor out, float* rstd) {
  check_tensor(x, "rms_norm", "x", DType::bf16, DType::f32);
  check_tensor(w, "rms_norm", "w", x.dtype);
  check_tensor(out, "rms_norm", "out", x.dtype);
  const Rows xv = rows_of(x, "rms_norm"), ov = rows_of(out, "rms_norm");
  check_norm(xv, w, ov, "rms_norm");
  if (xv.n_rows == 0 || xv.width == 0) return;
  ASTRAI_GPU_CHECK(xv.n_rows < (int64_t(1) << 31), "rms_norm: too many rows");
  if (launch_vec8<false>(stream, x, xv, xv, w, eps, ov, xv, rstd)) return;
  const int threads = threads_for(xv.width);
  if (x.dtype == DType::bf16)
    rms_norm_kernel<bf16><<<unsigned(xv.n_rows), threads, 0, stream>>>(xv, w.ptr<bf16>(), eps, ov, rstd);
  else
    rms_norm_kernel<float><<<unsigned(xv.n_rows), threads, 0, stream>>>(xv, w.ptr<float>(), eps, ov, rstd);
  ASTRAI_CUDA_LAUNCH_CHECK(rms_norm_kernel);
}

void add_rms_norm(cudaStream_t stream, const Tensor& residual, const Tensor& x, const Tensor& w, float eps,
                  Tensor out, const Tensor* sum) {
  const Tensor& s = sum ? *sum : residual;
  check_tensor(residual, "add_rms_norm", "residual", DType::bf16, DType::f32);
  check_tensor(x, "add_rms_norm", "x", residual.dtype);
  check_tensor(w, "add_rms_norm", "w", residual.dtype);
  check_tensor(out, "add_rms_norm", "out", residual.dtype);
  check_tensor(s, "add_rms_norm", "sum", residual.dtype);
  const Rows rv = rows_of(residual, "add_rms_norm"), xv = rows_of(x, "add_rms_norm"),
             ov = rows_of(out, "add_rms_norm"), sv = rows_of(s, "add_rms_norm");
  check_norm(rv, w, ov, "add_rms_norm");
  ASTRAI_GPU_CHECK(
      xv.n_rows == rv.n_rows && xv.width == rv.width && sv.n_rows == rv.n_rows && sv.width == rv.width,
      "add_rms_norm: x or sum shape differs from residual");
  if (rv.n_rows == 0 || rv.width == 0) return;
  ASTRAI_GPU_CHECK(rv.n_rows < (int64_t(1) << 31), "add_rms_norm: too many rows");
  if (launch_vec8<true>(stream, residual, rv, xv, w, eps, ov, sv)) return;
  const int threads = threads_for(rv.width);
  if (residual.dtype == DType::bf16)
    add_rms_norm_kernel<bf16>
        <<<unsigned(rv.n_rows), threads, 0, stream>>>(rv, xv, w.ptr<bf16>(), eps, ov, sv);
  else
    add_rms_norm_kernel<float>
        <<<unsigned(rv.n_rows), threads, 0, stream>>>(rv, xv, w.ptr<float>(), eps, ov, sv);
  ASTRAI_CUDA_LAUNCH_CHECK(add_rms_norm_kernel);
}

}  // namespace astrai::gpu
