// Cross-entropy forward and backward over a chunk of f32 logit rows, fused (backend.h's
// cross_entropy): one block per row. Two passes over the row: the first keeps, per thread, a running
// max m and the sum of exp(z - m) (rescaled when m grows; f64, as the CPU op's normaliser) and the
// sum of z (f64), combined over the block in a fixed order; the second writes the gradient, into the
// logits themselves or into a separate (bf16) buffer that the head's backward GEMM reads directly.
// 16 bytes per load where the rows allow it.
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/reduce.cuh"
#include "gpu/rows.h"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

constexpr int kThreads = 1024;

// The running (max, sum of exp(z - max)) of one thread.
struct Softmax {
  float m = -INFINITY;
  double s = 0.0;
  __device__ void see(float v) {
    if (v > m) {
      s = s * double(expf(m - v)) + 1.0;
      m = v;
    } else {
      s += double(expf(v - m));
    }
  }
};

// kVec: 4 consecutive elements per step (z rows 16-byte aligned, dz rows aligned to 4 elements).
template <typename TD, bool kVec>
__global__ void cross_entropy_kernel(Rows z, const int32_t* __restrict__ targets, float e, float grad_scale,
                                     float* __restrict__ losses, Rows dz) {
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  const int64_t r = blockIdx.x, V = z.width;
  const float* row = z.row<float>(r);
  TD* drow = dz.row<TD>(r);
  const int32_t y = targets[r];
  if (y == Backend::kIgnoreIndex || y < 0 || y >= V) {
    // An ignored row has no loss and no gradient; a bad target (the model checks them on the
    // host) poisons the row with NaN rather than reading outside it.
    const float fill = y == Backend::kIgnoreIndex ? 0.0f : __int_as_float(0x7fc00000);
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) drow[j] = from_f32<TD>(fill);
    if (threadIdx.x == 0) losses[r] = fill;
    return;
  }
  const float zy = row[y];  // before any write (dz may be the logits)
  Softmax sm;
  double zsum = 0.0;
  if constexpr (kVec) {
    for (int64_t j = 4 * int64_t(threadIdx.x); j < V; j += 4 * int64_t(blockDim.x)) {
      const float4 v = *reinterpret_cast<const float4*>(row + j);
      sm.see(v.x), sm.see(v.y), sm.see(v.z), sm.see(v.w);
      zsum += double(v.x) + double(v.y) + double(v.z) + double(v.w);
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      sm.see(row[j]);
      zsum += double(row[j]);
    }
  }
  const float m = block_max_f32(sm.m, fscratch);
  const double sum = block_sum_f64(sm.s > 0.0 ? sm.s * double(expf(sm.m - m)) : 0.0, dscratch);
  zsum = block_sum_f64(zsum, dscratch);  // the reductions' barriers order every read above before the writes
  const double lse = double(m) + log(sum);
  if (threadIdx.x == 0)
    losses[r] = float((1.0 - double(e)) * (lse - double(zy)) + double(e) * (lse - zsum / double(V)));
  const float lse_f = float(lse), uniform = float(double(e) / double(V)), hit = 1.0f - e;
  auto grad = [&](float v, int64_t j) {
    return from_f32<TD>(grad_scale * (expf(v - lse_f) - uniform - (j == y ? hit : 0.0f)));
  };
  if constexpr (kVec) {
    for (int64_t j = 4 * int64_t(threadIdx.x); j < V; j += 4 * int64_t(blockDim.x)) {
      const float4 v = *reinterpret_cast<const float4*>(row + j);
      drow[j] = grad(v.x, j), drow[j + 1] = grad(v.y, j + 1), drow[j + 2] = grad(v.z, j + 2),
      drow[j + 3] = grad(v.w, j + 3);
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) drow[j] = grad(row[j], j);
  }
}

template <typename TD>
void launch(cudaStream_t stream, const Rows& zv, const Tensor& targets, float e, float grad_scale,
            const Tensor& losses, const Rows& dv) {
  auto aligned = [](const Rows& r, int64_t bytes) {
    return reinterpret_cast<uintptr_t>(r.base) % bytes == 0 && (r.s_inner * r.esize) % bytes == 0;
  };
  const bool vec = zv.width % 4 == 0 && aligned(zv, 16) && aligned(dv, 4 * dv.esize);
  auto kernel = vec ? cross_entropy_kernel<TD, true> : cross_entropy_kernel<TD, false>;
  kernel<<<unsigned(zv.n_rows), kThreads, 0, stream>>>(zv, targets.ptr<int32_t>(), e, grad_scale,
                                                       losses.ptr<float>(), dv);
  ASTRAI_CUDA_LAUNCH_CHECK(cross_entropy_kernel);
}

}  // namespace

void cross_entropy(cudaStream_t stream, const Tensor& logits, const Tensor& targets, float label_smoothing,
                   float grad_scale, Tensor losses, Tensor dlogits) {
  check_tensor(logits, "cross_entropy", "logits", DType::f32);
  check_index(targets, "cross_entropy", "targets");
  check_tensor(losses, "cross_entropy", "losses", DType::f32);
  check_tensor(dlogits, "cross_entropy", "dlogits", DType::f32, DType::bf16);
  ASTRAI_GPU_CHECK(logits.ndim == 2 && dlogits.ndim == 2,
                   "cross_entropy: logits and dlogits must be [R, V], got " + logits.shape_str() + " and " +
                       dlogits.shape_str());
  const Rows zv = rows_of(logits, "cross_entropy"), dv = rows_of(dlogits, "cross_entropy");
  ASTRAI_GPU_CHECK(
      dv.n_rows == zv.n_rows && dv.width == zv.width,
      "cross_entropy: dlogits " + dlogits.shape_str() + " differs from logits " + logits.shape_str());
  ASTRAI_GPU_CHECK(dlogits.dtype == DType::f32 || dlogits.data != logits.data,
                   "cross_entropy: a bf16 dlogits cannot be the logits");
  ASTRAI_GPU_CHECK(targets.numel() == zv.n_rows && losses.numel() == zv.n_rows && losses.is_contiguous(),
                   "cross_entropy: targets " + targets.shape_str() + " and losses " + losses.shape_str() +
                       " need one entry per row of " + logits.shape_str());
  ASTRAI_GPU_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f,
                   "cross_entropy: label_smoothing " + std::to_string(label_smoothing) + " outside [0, 1]");
  if (zv.n_rows == 0) return;
  if (dlogits.dtype == DType::bf16)
    launch<bf16>(stream, zv, targets, label_smoothing, grad_scale, losses, dv);
  else
    launch<float>(stream, zv, targets, label_smoothing, grad_scale, losses, dv);
}

}  // namespace astrai::gpu
