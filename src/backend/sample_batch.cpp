// The shape checks of a SampleBatch, of take_tokens and of dequantize, shared by the CPU and CUDA
// implementations of those ops, and the Backend defaults for a backend without them.
#include <string>

#include "src/backend/backend.h"

namespace astrai {
namespace {

bool is_i32_on(const Tensor& t, Device device, int64_t cols) {
  return t.dtype == DType::i32 && t.device == device && t.ndim == 2 && t.is_contiguous() && t.size(1) == cols;
}

}  // namespace

std::string sample_batch_error(const SampleBatch& b, Device device) {
  if (b.logits.dtype != DType::f32 || b.logits.device != device || b.logits.ndim != 2 ||
      !b.logits.is_contiguous())
    return "logits must be a contiguous f32 [L, V] on the backend's device";
  const int64_t L = b.logits.size(0), V = b.logits.size(1);
  if (V < 1 || V > (int64_t(1) << 24)) return "vocab must be in [1, 2^24]";
  if (!is_i32_on(b.rows, device, kSampleRowWords))
    return "rows must be a contiguous i32 [R, kSampleRowWords]";
  const int64_t R = b.rows.size(0);
  if (R > 65535) return "at most 65535 rows";
  if (b.max_top_logprobs < 0 || b.max_top_logprobs > kSampleMaxTopLogprobs)
    return "max_top_logprobs must be in [0, 20]";
  if (!is_i32_on(b.out, device, sample_out_words(b.max_top_logprobs)) || b.out.size(0) != R)
    return "out must be a contiguous i32 [R, sample_out_words(max_top_logprobs)]";
  if (b.edits.data && !is_i32_on(b.edits, device, kSampleEditWords))
    return "edits must be a contiguous i32 [E, 4]";
  if (b.mask.data && (!is_i32_on(b.mask, device, (V + 31) / 32) || b.mask.size(0) != L))
    return "mask must be a contiguous i32 [L, ceil(V / 32)]";
  return {};
}

std::string take_tokens_error(const Tensor& ids, const Tensor& moves, const Tensor& draws, Device device) {
  if (ids.dtype != DType::i32 || ids.device != device || ids.ndim != 1 || !ids.is_contiguous())
    return "ids must be a contiguous i32 [T] on the backend's device";
  if (!is_i32_on(moves, device, 2)) return "moves must be a contiguous i32 [M, 2] on the backend's device";
  if (draws.dtype != DType::i32 || draws.device != device || draws.ndim != 2 || !draws.is_contiguous() ||
      draws.size(1) < 1)
    return "draws must be a contiguous i32 [D, W] on the backend's device";
  return {};
}

std::string dequantize_error(const Tensor& q, const Tensor& scale, int64_t block_rows, int64_t block_cols,
                             const Tensor& out, Device device) {
  for (const Tensor* t : {&q, &scale, &out})
    if (t->device != device || t->ndim != 2 || !t->is_contiguous())
      return "q, scale and out must be contiguous 2-D tensors on the backend's device";
  if (q.dtype != DType::fp8_e4m3) return "q must be fp8_e4m3, not " + std::string(dtype_name(q.dtype));
  if (!is_float_dtype(scale.dtype) || !is_float_dtype(out.dtype))
    return "scale and out must be f32, bf16 or f16";
  if (out.size(0) != q.size(0) || out.size(1) != q.size(1))
    return "out " + out.shape_str() + " must have q's shape " + q.shape_str();
  if (block_rows <= 0 || block_cols <= 0) return "block sizes must be positive";
  const int64_t sr = (q.size(0) + block_rows - 1) / block_rows,
                sc = (q.size(1) + block_cols - 1) / block_cols;
  if (scale.size(0) != sr || scale.size(1) != sc)
    return "scale " + scale.shape_str() + " must be [" + std::to_string(sr) + ", " + std::to_string(sc) +
           "] for q " + q.shape_str() + " in blocks of " + std::to_string(block_rows) + " x " +
           std::to_string(block_cols);
  return {};
}

void Backend::dequantize(const Tensor&, const Tensor&, int64_t, int64_t, Tensor) {
  throw Error(unsupported("dequantize: not implemented on the " + name() + " backend"));
}

void Backend::take_tokens(Tensor, const Tensor&, const Tensor&) {
  throw Error(unsupported("take_tokens: not implemented on the " + name() + " backend"));
}

void Backend::sample(const SampleBatch&) {
  throw Error(unsupported("sample: not implemented on the " + name() + " backend"));
}

size_t Backend::sample_workspace_bytes(int, int) const {
  return 0;
}

}  // namespace astrai
