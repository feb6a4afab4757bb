// The Hugging Face tensor names of the Llama / Mistral / Qwen2 / Qwen3 decoders, and the loader
// check that finds every one of them in a WeightStore with the shape the config implies, with the
// scales of those an fp8 checkpoint stores in e4m3.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/core/status.h"
#include "src/model/config.h"
#include "src/model/safetensors.h"

namespace astrai {

// Pointers into the WeightStore (valid while it lives). Optional tensors are nullptr when the
// architecture has none: q/k/v_bias without attention_bias, o_bias without o_proj_bias,
// q/k_norm without qk_norm.
struct LayerWeightRefs {
  const SafeTensor *input_norm = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  const SafeTensor *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr, *o_bias = nullptr;
  const SafeTensor *q_norm = nullptr, *k_norm = nullptr;
  const SafeTensor *post_norm = nullptr, *gate = nullptr, *up = nullptr, *down = nullptr;
};

// The scales of a matrix stored in fp8: w[i, j] = q[i, j] * scale[i / block_rows, j / block_cols]
// (Backend::dequantize). One scale for the whole matrix is a block of all its rows and columns,
// one a row a block of one row.
struct WeightScale {
  const SafeTensor* scale = nullptr;  // [ceil(R / block_rows), ceil(C / block_cols)], F32, BF16 or F16
  int64_t block_rows = 0, block_cols = 0;
};

// A checkpoint tensor to load, with its scales when it is an fp8 matrix.
struct WeightPart {
  WeightPart(const SafeTensor* tensor, const WeightScale* scales = nullptr) : t(tensor), scale(scales) {}
  const SafeTensor* t;
  const WeightScale* scale;
};

// The scales of an fp8 matrix stacked from `parts` along its rows (q, k, v; gate, up: each [R_i, C])
// as one f32 grid [ceil(R / block_rows), cols = ceil(C / block_cols)], in blocks every part fits:
// the parts' own where they share them and each part but the last ends on a block's edge, else
// one row a block (one scale for a whole part then repeats down its rows). nullopt where the
// parts' column blocks differ, or a scale is not finite or not below 2^16 (the range Weight's
// scales keep to, src/core/tensor.h): the loader then widens the matrix instead of keeping it.
struct StackedScales {
  std::vector<float> grid;
  int64_t block_rows = 0, block_cols = 0, cols = 0;
};
std::optional<StackedScales> stack_scales(std::initializer_list<WeightPart> parts, int64_t C);

struct WeightRefs {
  const SafeTensor *embed = nullptr, *final_norm = nullptr;
  const SafeTensor* lm_head = nullptr;  // == embed when tie_word_embeddings
  std::vector<LayerWeightRefs> layers;
  std::map<const SafeTensor*, WeightScale> scales;  // of each fp8 matrix above

  const WeightScale* scale_of(const SafeTensor* t) const {
    const auto it = scales.find(t);
    return it == scales.end() ? nullptr : &it->second;
  }
};

// Every tensor the config needs, in file order (embedding, layers, final norm, lm_head unless
// tied), with its HF name and shape [out, in] for linear layers.
std::vector<std::pair<std::string, std::vector<int64_t>>> weight_shapes(const ModelConfig& config);

// Finds and shape-checks every tensor; dtypes must be F32, BF16 or F16, or for a matrix F8_E4M3
// with its scale beside it: `<name>_scale_inv` (the fp8 format's) or `<name>_scale`
// (compressed-tensors', AutoFP8's), holding one value, one a row ([R] or [R, 1]), or one per block
// of the config's quantization block size. With tied embeddings an lm_head.weight in the file is
// ignored. Errors name the file and tensor.
Result<WeightRefs> resolve_weights(const ModelConfig& config, const WeightStore& store);

}  // namespace astrai
