// Views into the decoder's fused qkv buffer, shared by the serving forward
// (src/model/model.cpp) and the training model (train/train_model.cpp).
#pragma once

#include <cstdint>

#include "src/core/tensor.h"

namespace astrai {

// Column slice [col, col + heads * head_dim) of a [T, width] buffer as [T, heads, head_dim].
inline Tensor head_view(const Tensor& buf, int64_t col, int64_t heads, int64_t head_dim) {
  Tensor t(static_cast<char*>(buf.data) + col * int64_t(dtype_size(buf.dtype)), buf.dtype,
           {buf.shape[0], heads, head_dim}, buf.device);
  t.stride = {buf.stride[0], head_dim, 1, 0};
  return t;
}

}  // namespace astrai
