// The element-wise training backwards: swiglu_backward (rows_map, gpu/rows_map.cuh: rows through
// Rows so column slices work), and embedding_backward (a scatter-add
// done as a gather: tokens grouped by id in token order, one block per distinct id).
#include <algorithm>
#include <string>
#include <vector>

#include "gpu/check.h"
#include "gpu/device_util.cuh"
#include "gpu/rows.h"
#include "gpu/rows_map.cuh"
#include "gpu/train_ops.h"

namespace astrai::gpu {
namespace {

constexpr int kThreads = 256;

struct SwigluBackwardOp {  // in: dout, gate, up; out: dgate, dup
  __device__ void operator()(const float (&in)[3], float (&out)[2]) const {
    const float d = in[0], g = in[1], u = in[2];
    const float s = 1.0f / (1.0f + expf(-g));
    out[0] = d * u * s * (1.0f + g * (1.0f - s));
    out[1] = d * g * s;
  }
};

// Block b owns distinct id ids_sorted[seg[b]] and adds its tokens' rows (in token order) to it.
template <typename T>
__global__ void embedding_backward_kernel(Rows dout, const int32_t* __restrict__ order,
                                          const int32_t* __restrict__ seg, const int32_t* __restrict__ seg_id,
                                          float* __restrict__ dtable, int64_t width) {
  const int32_t begin = seg[blockIdx.x], end = seg[blockIdx.x + 1];
  float* row = dtable + int64_t(seg_id[blockIdx.x]) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    float s = 0.0f;
    for (int32_t k = begin; k < end; ++k) s += to_f32(dout.row<T>(order[k])[i]);
    row[i] += s;
  }
}

}  // namespace

void swiglu_backward(cudaStream_t stream, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     Tensor dgate, Tensor dup) {
  check_tensor(dout, "swiglu_backward", "dout", DType::bf16, DType::f32);
  for (const Tensor* t : {&gate, &up, static_cast<const Tensor*>(&dgate), static_cast<const Tensor*>(&dup)})
    check_tensor(*t, "swiglu_backward", "gate, up, dgate and dup", dout.dtype);
  const Rows o = rows_of(dout, "swiglu_backward"), g = rows_of(gate, "swiglu_backward"),
             u = rows_of(up, "swiglu_backward"), dg = rows_of(dgate, "swiglu_backward"),
             du = rows_of(dup, "swiglu_backward");
  for (const Rows* r : {&g, &u, &dg, &du})
    ASTRAI_GPU_CHECK(r->n_rows == o.n_rows && r->width == o.width,
                     "swiglu_backward: shapes differ from dout " + dout.shape_str());
  const RowsMapArgs<3, 2> args{{o, g, u}, {dg, du}};
  if (dout.dtype == DType::bf16)
    rows_map<bf16>(stream, args, SwigluBackwardOp{});
  else
    rows_map<float>(stream, args, SwigluBackwardOp{});
}

void embedding_backward(cudaStream_t stream, const Tensor& dout, const Tensor& ids, Tensor dtable,
                        Scratch& scratch) {
  check_tensor(dout, "embedding_backward", "dout", DType::bf16, DType::f32);
  check_index(ids, "embedding_backward", "ids");
  check_tensor(dtable, "embedding_backward", "dtable", DType::f32);
  const Rows dv = rows_of(dout, "embedding_backward");
  const int64_t T = dv.n_rows, H = dv.width;
  ASTRAI_GPU_CHECK(ids.numel() == T && dtable.ndim == 2 && dtable.shape[1] == H && dtable.is_contiguous(),
                   "embedding_backward: dout " + dout.shape_str() + " ids " + ids.shape_str() + " dtable " +
                       dtable.shape_str());
  if (T == 0) return;
  const int64_t V = dtable.shape[0];
  // Group the tokens by id on the host (a counting sort keeps token order within an id), so each
  // row of the table is summed by one block in a fixed order: deterministic, no atomics. Reading
  // the ids waits for the stream; this is the backward's last op.
  std::vector<int32_t> host(static_cast<size_t>(T));
  ASTRAI_CUDA_CHECK(cudaMemcpyAsync(host.data(), ids.data, size_t(T) * 4, cudaMemcpyDeviceToHost, stream));
  ASTRAI_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<int32_t> sorted(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    ASTRAI_GPU_CHECK(host[size_t(t)] >= 0 && host[size_t(t)] < V,
                     "embedding_backward: id " + std::to_string(host[size_t(t)]) + " outside the table");
    sorted[size_t(t)] = int32_t(t);
  }
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](int32_t a, int32_t b) { return host[size_t(a)] < host[size_t(b)]; });
  // Layout in one upload: order [T], seg [U + 1], seg_id [U].
  std::vector<int32_t> packed(sorted);
  std::vector<int32_t> seg, seg_id;
  for (int64_t k = 0; k < T; ++k)
    if (k == 0 || host[size_t(sorted[size_t(k)])] != host[size_t(sorted[size_t(k - 1)])]) {
      seg.push_back(int32_t(k));
      seg_id.push_back(host[size_t(sorted[size_t(k)])]);
    }
  const int64_t U = int64_t(seg_id.size());
  seg.push_back(int32_t(T));
  packed.insert(packed.end(), seg.begin(), seg.end());
  packed.insert(packed.end(), seg_id.begin(), seg_id.end());
  int32_t* dev = static_cast<int32_t*>(scratch.ensure(packed.size() * sizeof(int32_t)));
  ASTRAI_CUDA_CHECK(
      cudaMemcpyAsync(dev, packed.data(), packed.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  const int32_t *order = dev, *segs = dev + T, *seg_ids = dev + T + U + 1;
  if (dout.dtype == DType::bf16)
    embedding_backward_kernel<bf16>
        <<<unsigned(U), kThreads, 0, stream>>>(dv, order, segs, seg_ids, dtable.ptr<float>(), H);
  else
    embedding_backward_kernel<float>
        <<<unsigned(U), kThreads, 0, stream>>>(dv, order, segs, seg_ids, dtable.ptr<float>(), H);
  ASTRAI_CUDA_LAUNCH_CHECK(embedding_backward_kernel);
  // The pageable source must outlive the copy: wait for it before `packed` goes out of scope.
  ASTRAI_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace astrai::gpu
