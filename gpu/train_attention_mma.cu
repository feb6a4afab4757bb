// attention_train and its backward on tensor cores: the backend's entry to the FlashAttention-2
// style kernels of train_attention_mma.cuh (mma.sync bf16, register-resident scores and
// accumulators, cp.async double buffering; see there), for bf16 tensors with head_dim 64 or 128
// and 16-byte aligned rows (every model config we train; the CUDA-core kernels of
// train_attention.cu take the rest). Deterministic: no atomics on floats, fixed summation order.
#include <cstdint>

#include "gpu/check.h"
#include "gpu/rows.h"
#include "gpu/train_attention_mma.cuh"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

namespace am = attention_mma;

// The kernels address row (t, head) as t * s_outer + head * s_inner: a Rows over [N, heads, D].
bool usable(const Rows& r, int64_t heads) {
  return rows_aligned16(r) && r.inner == heads && r.esize == 2;
}

am::Geo geo(const Tensor& q, const Tensor& k, float scale) {
  am::Geo g;
  g.n = q.shape[0];
  g.heads = int(q.shape[1]);
  g.kv_heads = int(k.shape[1]);
  g.group = g.heads / g.kv_heads;
  g.scale = scale;
  g.scale_log2 = scale * kLog2e;
  return g;
}

}  // namespace

bool attention_train_mma(cudaStream_t stream, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& kv_begin, float scale, Tensor out, Tensor lse) {
  const int64_t D = q.shape[2];
  if (q.dtype != DType::bf16 || (D != 64 && D != 128)) return false;
  const char* op = "attention_train";
  const Rows qv = rows_of(q, op), kv = rows_of(k, op), vv = rows_of(v, op), ov = rows_of(out, op);
  const am::Geo g = geo(q, k, scale);
  if (!usable(qv, g.heads) || !usable(kv, g.kv_heads) || !usable(vv, g.kv_heads) || !usable(ov, g.heads))
    return false;
  const int32_t* kvb = kv_begin.ptr<int32_t>();
  const cudaError_t err = D == 64 ? am::forward<64>(stream, qv, kv, vv, kvb, g, ov, lse.ptr<float>())
                                  : am::forward<128>(stream, qv, kv, vv, kvb, g, ov, lse.ptr<float>());
  ASTRAI_CUDA_CHECK(err);
  return true;
}

bool attention_train_backward_mma(cudaStream_t stream, const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& kv_begin, const Tensor& out,
                                  const Tensor& lse, float scale, Tensor dq, Tensor dk, Tensor dv,
                                  float* delta) {
  const int64_t D = q.shape[2];
  if (q.dtype != DType::bf16 || (D != 64 && D != 128)) return false;
  const char* op = "attention_train_backward";
  const Rows qv = rows_of(q, op), kv = rows_of(k, op), vv = rows_of(v, op), dov = rows_of(dout, op),
             ov = rows_of(out, op), dqv = rows_of(dq, op), dkv = rows_of(dk, op), dvv = rows_of(dv, op);
  const am::Geo g = geo(q, k, scale);
  if (!usable(qv, g.heads) || !usable(kv, g.kv_heads) || !usable(vv, g.kv_heads) || !usable(dov, g.heads) ||
      !usable(ov, g.heads) || !usable(dqv, g.heads) || !usable(dkv, g.kv_heads) || !usable(dvv, g.kv_heads))
    return false;
  const int32_t* kvb = kv_begin.ptr<int32_t>();
  const cudaError_t err =
      D == 64
          ? am::backward<64>(stream, dov, qv, kv, vv, kvb, ov, lse.ptr<float>(), g, dqv, dkv, dvv, delta)
          : am::backward<128>(stream, dov, qv, kv, vv, kvb, ov, lse.ptr<float>(), g, dqv, dkv, dvv, delta);
  ASTRAI_CUDA_CHECK(err);
  return true;
}

}  // namespace astrai::gpu
