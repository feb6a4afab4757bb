// Tensor-parallel shards of the decoder (Megatron-LM's split): rank r of N holds
//   column-parallel q/k/v and gate/up: rows [r, r+1) * out / N of each [out, hidden] weight (its
//                                      heads, its KV heads, its slice of the MLP), and their biases;
//   row-parallel o and down:           columns [r, r+1) * in / N of [hidden, in], so each rank's
//                                      o / down output is a partial sum over its heads / MLP slice
//                                      that one all-reduce completes (o's bias on rank 0 only, so
//                                      the sum adds it once);
//   replicated: the embedding, every norm, q/k norms and the RoPE table; the LM head on rank 0
//   only (sampling happens there; the other ranks skip it).
// A shard runs the unchanged forward at its local sizes: shard_config divides heads, KV heads and
// the intermediate size by N.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "src/backend/backend.h"
#include "src/core/status.h"
#include "src/model/config.h"
#include "src/model/model.h"
#include "src/model/safetensors.h"
#include "src/model/weights.h"

namespace astrai {

class Communicator;

struct ShardSpec {
  int rank = 0;
  int world = 1;
  Communicator* comm = nullptr;  // null when world == 1
};

// The config rank-local forward runs at; an invalid_argument error naming the first size (heads,
// KV heads, intermediate size) that `world` does not divide.
Result<ModelConfig> shard_config(const ModelConfig& full, int world);

// Rank shard.rank's part of the model whose full config and checkpoint tensors are given, on
// `backend` (src/model/model.cpp). Its forward expects the same ForwardBatch on every rank of the
// group at once (the all-reduces meet); its KV cache holds this rank's KV heads only.
Result<std::unique_ptr<Model>> make_shard(const ModelConfig& full, const WeightRefs& refs, Backend& backend,
                                          const ShardSpec& shard, const LoadOptions& options = {});

// A file tensor cut to one rank's part, as a SafeTensor the loader uploads like any other. A row
// slice points into the file's mapping; a column slice is gathered into `gathered` (host memory
// holding only this rank's part), which must outlive the upload.
struct TensorSlice {
  SafeTensor view;
  std::vector<std::byte> gathered;
};
// Rows [begin, end) of a 1-D or 2-D tensor (elements of a 1-D one).
TensorSlice slice_rows(const SafeTensor& t, int64_t begin, int64_t end);
// Columns [begin, end) of a 2-D tensor.
TensorSlice slice_cols(const SafeTensor& t, int64_t begin, int64_t end);

// The scales of rows (by_rows) or columns [begin, end) of an fp8 matrix whose scales are `s` and
// whose cut dimension is `dim` long: the blocks the part covers, cut from s.scale into `keep`
// (which must outlive the upload), or s itself where one block spans the dimension. The cut falls
// on block edges (check_scale_cuts).
WeightScale slice_scale(const WeightScale& s, int64_t dim, int64_t begin, int64_t end, bool by_rows,
                        std::deque<TensorSlice>& keep);
// An invalid_argument error naming the first fp8 matrix whose scale blocks a rank's cut (rows of
// q/k/v and gate/up, columns of o and down) would fall inside.
Status check_scale_cuts(const WeightRefs& refs, int world);

}  // namespace astrai
