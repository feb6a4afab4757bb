// In-place rotary embedding, Hugging Face rotate-half pairing, one thread per (token, head, i < D/2).
// The table is f32; like HF (cos.to(x.dtype), then q * cos + rotate_half(q) * sin in x's dtype)
// cos and sin are rounded to the storage dtype T and each product and the sum round to T.
#include <string>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/ops.h"
#include "gpu/rows.h"

namespace astrai::gpu {
namespace {

template <typename T>
__global__ void rope_kernel(Rows x, int64_t heads, int64_t half, const int32_t* __restrict__ positions,
                            const float* __restrict__ cos_sin, int64_t max_pos, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / half, i = e % half;  // r: row (token * heads + head)
    const int32_t p = positions[r / heads];
    T* a = x.row<T>(r);
    if (p < 0 || p >= max_pos) {  // the model validated positions; never read outside the table
      a[i] = a[half + i] = from_f32<T>(__int_as_float(0x7fc00000));
      continue;
    }
    const float* cs = cos_sin + int64_t(p) * 2 * half;
    const float c = round_to<T>(cs[i]), s = round_to<T>(cs[half + i]);
    const float x1 = to_f32(a[i]), x2 = to_f32(a[half + i]);
    a[i] = from_f32<T>(round_to<T>(x1 * c) - round_to<T>(x2 * s));
    a[half + i] = from_f32<T>(round_to<T>(x2 * c) + round_to<T>(x1 * s));
  }
}

}  // namespace

void rope(cudaStream_t stream, Tensor x, const Tensor& positions, const Tensor& cos_sin) {
  check_tensor(x, "rope", "x", DType::bf16, DType::f32);
  check_index(positions, "rope", "positions");
  check_tensor(cos_sin, "rope", "cos_sin", DType::f32);
  ASTRAI_GPU_CHECK(x.ndim == 3, "rope: x must be [T, heads, D], got " + x.shape_str());
  const int64_t T = x.shape[0], H = x.shape[1], D = x.shape[2], half = D / 2;
  ASTRAI_GPU_CHECK(D % 2 == 0 && cos_sin.ndim == 2 && cos_sin.shape[1] == D && cos_sin.is_contiguous(),
                   "rope: cos_sin " + cos_sin.shape_str() + " for head_dim " + std::to_string(D));
  ASTRAI_GPU_CHECK(positions.numel() == T, "rope: positions size differs from T");
  const Rows xv = rows_of(x, "rope");
  const int64_t n = T * H * half;
  if (n == 0) return;
  const int threads = 256;
  if (x.dtype == DType::bf16)
    rope_kernel<bf16><<<grid_for(n, threads), threads, 0, stream>>>(
        xv, H, half, positions.ptr<int32_t>(), cos_sin.ptr<float>(), cos_sin.shape[0], n);
  else
    rope_kernel<float><<<grid_for(n, threads), threads, 0, stream>>>(
        xv, H, half, positions.ptr<int32_t>(), cos_sin.ptr<float>(), cos_sin.shape[0], n);
  ASTRAI_CUDA_LAUNCH_CHECK(rope_kernel);
}

}  // namespace astrai::gpu
