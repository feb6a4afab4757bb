// A plain GEMM for the shapes cuBLASLt has no algorithm for (rows that start on 2-byte boundaries,
// e.g. column slices at odd offsets): one thread per output, f32 accumulation. Correct, not fast;
// the model's shapes never take it.
#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"

namespace astrai::gpu {
namespace {

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

}  // namespace

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
