// Shared by the forward tests: random-weight model directories, the PyTorch reference, paged
// single-sequence batches and row-wise relative errors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "src/model/config.h"
#include "src/model/model.h"
#include "src/model/safetensors.h"

namespace astrai::test {

// Writes config.json and model.safetensors with random weights in file_dtype: linear weights
// uniform in +-1.5/sqrt(fan_in) (activations stay O(1), attention is far from uniform), norms
// 1 +- 0.3, biases +-0.2, embeddings +-1.
// `edit` may change the tensor list before writing (drop one, alter a shape) for the bad-model tests.
// with_tokenizer also writes the built-in byte-level tokenizer files. bf16_values: every value
// rounded to bf16 first, so an f32 file holds exactly what the bf16 file of the same seed holds.
void write_random_model(const std::filesystem::path& dir, const ModelConfig& config, uint64_t seed,
                        DType file_dtype = DType::f32,
                        const std::function<void(std::vector<TensorSpec>&)>& edit = nullptr,
                        bool with_tokenizer = false, bool bf16_values = false);

// Logits [ids.size(), vocab] from tests/model/reference.py (float64 PyTorch).
std::vector<double> reference_logits(const std::filesystem::path& model_dir, const std::vector<int32_t>& ids);
// The same for several independent sequences in one Python run: one logits vector per sequence.
std::vector<std::vector<double>> reference_logits(const std::filesystem::path& model_dir,
                                                  const std::vector<std::vector<int32_t>>& seqs,
                                                  int64_t vocab);

// One sequence's pages in a shared cache, drawn at random (non-contiguous, unordered).
struct SeqPages {
  std::vector<int32_t> pages;
  int page_size = 16;
  int32_t slot(int64_t pos) const {
    return pages[size_t(pos / page_size)] * page_size + int32_t(pos % page_size);
  }
};
// Deals out disjoint random pages of a cache of num_pages to sequences of the given lengths.
std::vector<SeqPages> random_pages(const std::vector<int64_t>& lengths, int page_size, int num_pages,
                                   std::mt19937_64& rng);

// A chunk [p0, p1) of each listed sequence, packed into one batch; all rows' logits are wanted.
struct Chunk {
  const std::vector<int32_t>* ids;
  const SeqPages* pages;
  int64_t p0, p1;
};
ForwardBatch make_batch(const std::vector<Chunk>& chunks);

// Runs the batch and returns its logits on the host.
std::vector<float> run_forward(Model& model, const ForwardBatch& batch, KvCache& kv);

// max over rows of ||got_row - want_row|| / ||want_row||.
double max_row_rel_error(const std::vector<float>& got, const std::vector<double>& want, int64_t vocab);

std::vector<int32_t> random_ids(std::mt19937_64& rng, int64_t n, int64_t vocab);

// fp8 checkpoints (src/model/weights.h) made from the f32 one in `src` (write_random_model's):
//   fp8      its linear weights (q/k/v/o, gate/up/down) in e4m3 with a scale each, the layout drawn
//            per tensor from `layouts` (0: one scale, 1: one a row, 2: blocks of block_rows x
//            block_cols, the config's weight_block_size), the scale f32 or bf16, named
//            `_scale_inv` or `_scale` at random; every other tensor and file as in src;
//   widened  an f32 checkpoint of the values the fp8 one stands for (each q * scale rounded to f32):
//            what loading fp8 must give.
struct Fp8Layout {
  int64_t block_rows = 128, block_cols = 128;
  std::vector<int> layouts{0, 1, 2};
};
// quantization_config: the fp8 config's (empty: the fp8 method's with these blocks, Qwen3-FP8's form).
void write_fp8_model(const std::filesystem::path& src, const std::filesystem::path& fp8,
                     const std::filesystem::path& widened, const Fp8Layout& layout, uint64_t seed,
                     const std::string& quantization_config = "");

// A small Qwen3-style config (per-head q/k norm, head_dim * heads != hidden) for forward tests.
ModelConfig qwen3_style_config();
// A Qwen2-style config with head_dim 64, GQA 4:1, q/k/v biases and an untied head.
ModelConfig gqa4_bias_config();

}  // namespace astrai::test
