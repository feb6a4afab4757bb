// Random initialisation of a model and `astrai init`: a complete Hugging Face model directory
// (config.json, model.safetensors or shards + index, tokenizer files, generation_config.json)
// whose weights are a pure function of (seed, tensor name, element index).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "src/core/dtype.h"
#include "src/core/status.h"
#include "src/model/config.h"

namespace astrai {

struct InitOptions {
  uint64_t seed = 0;
  // Copy tokenizer.json / tokenizer_config.json (and special_tokens_map.json,
  // generation_config.json when present) from here; empty: the built-in byte tokenizer.
  std::filesystem::path tokenizer_dir;
  // Largest shard; more weights than this are split into model-0000i-of-0000N.safetensors.
  uint64_t max_shard_bytes = uint64_t(4) << 30;
  // Norm weights are 1 + N(0, norm_jitter) (0: exactly ones, as transformers initialises them).
  // Tests set it so that a forward pass exercises the norm weights.
  float norm_jitter = 0.0f;
  // Overrides config.torch_dtype, the dtype of the written weights ("float32", "bfloat16").
  std::string torch_dtype;
};

// The file dtype of config.torch_dtype: float32 -> f32, bfloat16 -> bf16, float16 -> f16.
Result<DType> torch_dtype_to_dtype(std::string_view torch_dtype);

// Writes tensor `name` (numel elements of dtype) initialised as init_model_dir does:
//   linear / embedding weights ~ N(0, 0.02), o_proj / down_proj ~ N(0, 0.02 / sqrt(2 * layers))
//   (GPT-2's residual scaling), biases ~ N(0, 0.02), norm weights 1.
// "N" is Irwin-Hall(4) rescaled to unit variance (bounded at +-3.46 sigma): cheap, and plenty
// normal for an init. Element i depends only on (seed, name, i), so any thread split gives the
// same bytes.
void fill_init_tensor(const ModelConfig& config, const InitOptions& options, std::string_view name,
                      DType dtype, void* dst, size_t numel);

// Writes config.json, weights, tokenizer and generation config into dir (which must exist).
// With a tokenizer_dir whose vocabulary is larger than config.vocab_size, vocab_size grows to fit
// (rounded up to a multiple of 64) and bos/eos ids follow that tokenizer.
Status write_random_model(ModelConfig config, const std::filesystem::path& dir, const InitOptions& options);

// `astrai init`: the preset's model into out, which must not exist or be empty. Written into a
// sibling temp directory and renamed into place, so out is either complete or absent.
Status init_model_dir(std::string_view preset, const std::filesystem::path& out, const InitOptions& options);

}  // namespace astrai
