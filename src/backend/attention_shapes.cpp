#include "src/backend/attention_shapes.h"

#include <string>

#include "src/core/status.h"

namespace astrai {

void check_attention_shapes(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                            const AttentionBatch& batch, const Tensor& out) {
  auto check = [&](bool ok, const std::string& what) {
    if (!ok)
      throw Error(internal_error(std::string(q.device == Device::cuda ? "cuda " : "cpu ") +
                                 "paged_attention: " + what));
  };
  check(q.ndim == 3 && out.ndim == 3 && q.shape == out.shape,
        "q " + q.shape_str() + " and out " + out.shape_str() + " must be [T, H, D]");
  const int64_t H = q.shape[1], D = q.shape[2], KVH = k_cache.ndim == 3 ? k_cache.shape[1] : 0;
  const int64_t ps = batch.page_size, S = batch.num_seqs;
  check(
      k_cache.ndim == 3 && k_cache.shape == v_cache.shape && k_cache.shape[2] == D && KVH > 0 && H % KVH == 0,
      "cache " + k_cache.shape_str() + " for q " + q.shape_str());
  check(ps > 0 && k_cache.shape[0] % ps == 0, "cache slots not a multiple of page_size");
  check(S >= 0 && batch.q_start.numel() == S + 1 && batch.kv_len.numel() == S &&
            batch.page_table.numel() >= S * int64_t(batch.max_pages),
        "q_start/kv_len/page_table sizes do not match num_seqs");
}

}  // namespace astrai
