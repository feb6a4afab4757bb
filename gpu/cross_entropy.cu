// Cross-entropy forward and backward over a chunk of f32 logit rows, fused (backend.h's
// cross_entropy): one block per row; max, normaliser and mean logit reduced in a fixed order (the
// normaliser and the mean in f64, as the CPU op), then the row overwritten with its gradient.
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/reduce.cuh"
#include "gpu/rows.h"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

constexpr int kThreads = 1024;

__global__ void cross_entropy_kernel(Rows z, const int32_t* __restrict__ targets, float e, float grad_scale,
                                     float* __restrict__ losses) {
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  const int64_t r = blockIdx.x, V = z.width;
  float* row = z.row<float>(r);
  const int32_t y = targets[r];
  if (y == Backend::kIgnoreIndex || y < 0 || y >= V) {
    // An ignored row has no loss and no gradient; a bad target (the model checks them on the
    // host) poisons the row with NaN rather than reading outside it.
    const float fill = y == Backend::kIgnoreIndex ? 0.0f : __int_as_float(0x7fc00000);
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) row[j] = fill;
    if (threadIdx.x == 0) losses[r] = fill;
    return;
  }
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, row[j]);
  m = block_max_f32(m, fscratch);
  double sum = 0.0, zsum = 0.0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    sum += double(expf(row[j] - m));
    zsum += double(row[j]);
  }
  sum = block_sum_f64(sum, dscratch);
  zsum = block_sum_f64(zsum, dscratch);
  const double lse = double(m) + log(sum);
  const float zy = row[y];
  __syncthreads();  // every thread has read row[y] before it is overwritten
  if (threadIdx.x == 0)
    losses[r] = float((1.0 - double(e)) * (lse - double(zy)) + double(e) * (lse - zsum / double(V)));
  const float lse_f = float(lse), uniform = float(double(e) / double(V)), hit = 1.0f - e;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    row[j] = grad_scale * (expf(row[j] - lse_f) - uniform - (j == y ? hit : 0.0f));
}

}  // namespace

void cross_entropy(cudaStream_t stream, Tensor logits, const Tensor& targets, float label_smoothing,
                   float grad_scale, Tensor losses) {
  check_tensor(logits, "cross_entropy", "logits", DType::f32);
  check_index(targets, "cross_entropy", "targets");
  check_tensor(losses, "cross_entropy", "losses", DType::f32);
  ASTRAI_GPU_CHECK(logits.ndim == 2, "cross_entropy: logits must be [R, V], got " + logits.shape_str());
  const Rows zv = rows_of(logits, "cross_entropy");
  ASTRAI_GPU_CHECK(targets.numel() == zv.n_rows && losses.numel() == zv.n_rows && losses.is_contiguous(),
                   "cross_entropy: targets " + targets.shape_str() + " and losses " + losses.shape_str() +
                       " need one entry per row of " + logits.shape_str());
  ASTRAI_GPU_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f,
                   "cross_entropy: label_smoothing " + std::to_string(label_smoothing) + " outside [0, 1]");
  if (zv.n_rows == 0) return;
  cross_entropy_kernel<<<unsigned(zv.n_rows), kThreads, 0, stream>>>(
      zv, targets.ptr<int32_t>(), label_smoothing, grad_scale, losses.ptr<float>());
  ASTRAI_CUDA_LAUNCH_CHECK(cross_entropy_kernel);
}

}  // namespace astrai::gpu
