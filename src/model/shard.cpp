#include "src/model/shard.h"

#include <cstring>
#include <string>

namespace astrai {

Result<ModelConfig> shard_config(const ModelConfig& full, int world) {
  if (world < 1)
    return invalid_argument("tensor parallelism needs at least 1 rank (got " + std::to_string(world) + ")");
  auto divides = [&](const char* what, int64_t n) -> Status {
    if (n % world != 0)
      return invalid_argument("--tp " + std::to_string(world) + ": the model's " + what + " (" +
                              std::to_string(n) + ") is not divisible by " + std::to_string(world));
    return {};
  };
  ASTRAI_RETURN_IF_ERROR(divides("attention heads", full.num_heads));
  ASTRAI_RETURN_IF_ERROR(divides("KV heads", full.num_kv_heads));
  ASTRAI_RETURN_IF_ERROR(divides("intermediate size", full.intermediate_size));
  ModelConfig c = full;
  c.num_heads /= world;
  c.num_kv_heads /= world;
  c.intermediate_size /= world;
  return c;
}

TensorSlice slice_rows(const SafeTensor& t, int64_t begin, int64_t end) {
  TensorSlice s;
  s.view = t;
  const int64_t row_elems = t.shape.size() == 2 ? t.shape[1] : 1;
  const size_t esize = dtype_size(t.dtype);
  s.view.data = static_cast<const std::byte*>(t.data) + size_t(begin * row_elems) * esize;
  s.view.shape[0] = end - begin;
  s.view.nbytes = size_t((end - begin) * row_elems) * esize;
  return s;
}

TensorSlice slice_cols(const SafeTensor& t, int64_t begin, int64_t end) {
  TensorSlice s;
  s.view = t;
  const int64_t rows = t.shape[0], cols = t.shape[1], w = end - begin;
  const size_t esize = dtype_size(t.dtype);
  s.gathered.resize(size_t(rows * w) * esize);
  const auto* src = static_cast<const std::byte*>(t.data);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(s.gathered.data() + size_t(r * w) * esize, src + size_t(r * cols + begin) * esize,
                size_t(w) * esize);
  s.view.data = s.gathered.data();
  s.view.shape[1] = w;
  s.view.nbytes = s.gathered.size();
  return s;
}

WeightScale slice_scale(const WeightScale& s, int64_t dim, int64_t begin, int64_t end, bool by_rows,
                        std::deque<TensorSlice>& keep) {
  const int64_t block = by_rows ? s.block_rows : s.block_cols;
  const int64_t blocks = (dim + block - 1) / block;
  if (blocks == 1) return s;
  WeightScale out = s;
  const int64_t b = begin / block, e = (end + block - 1) / block;
  if (by_rows) {
    out.scale = &keep.emplace_back(slice_rows(*s.scale, b, e)).view;
  } else {
    // A 2-D scale (a 1-D one is one a row: a single block of columns, returned above).
    out.scale = &keep.emplace_back(slice_cols(*s.scale, b, e)).view;
  }
  return out;
}

Status check_scale_cuts(const WeightRefs& refs, int world) {
  auto check = [&](const SafeTensor* t, bool by_rows) -> Status {
    const WeightScale* s = refs.scale_of(t);
    if (!s || world == 1) return {};
    const int64_t dim = t->shape[by_rows ? 0 : 1], block = by_rows ? s->block_rows : s->block_cols;
    if ((dim + block - 1) / block == 1 || (dim / world) % block == 0) return {};
    return invalid_argument("--tp " + std::to_string(world) + ": fp8 tensor '" + t->name + "' " +
                            t->shape_str() + " has scales in blocks of " + std::to_string(block) +
                            (by_rows ? " rows" : " columns") + ", and each rank's " +
                            std::to_string(dim / world) + " would cut one");
  };
  for (const LayerWeightRefs& l : refs.layers) {
    for (const SafeTensor* t : {l.q, l.k, l.v, l.gate, l.up}) ASTRAI_RETURN_IF_ERROR(check(t, true));
    for (const SafeTensor* t : {l.o, l.down}) ASTRAI_RETURN_IF_ERROR(check(t, false));
  }
  return {};
}

}  // namespace astrai
