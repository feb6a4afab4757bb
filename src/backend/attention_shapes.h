// The argument shapes of Backend::paged_attention, checked alike by both backends (their dtype and
// device checks are their own).
#pragma once

#include "src/backend/backend.h"

namespace astrai {

// q and out [T, H, D] of one shape; k_cache and v_cache [slots, KVH, D] of one shape, H a multiple
// of KVH > 0; slots a multiple of batch.page_size > 0; q_start, kv_len and page_table sized for
// batch.num_seqs. Throws an internal error naming the backend (by q's device), as rows_of does.
void check_attention_shapes(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                            const AttentionBatch& batch, const Tensor& out);

}  // namespace astrai
