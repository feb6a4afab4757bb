// fp8 checkpoints on the CUDA backend: the e4m3 matrices and their scales go up as stored and widen
// to bf16 there (Backend::dequantize), in chunks of whole blocks of rows through the loader's
// staging buffer; the logits equal, bit for bit, those of the f32 checkpoint holding the widened
// values (converted to bf16 on load: the same rounding of the same f32 products). Skips itself
// (with a warning) without a GPU.
#include <catch2/catch.hpp>

#include "gpu/cuda_backend.h"
#include "model/fp8_check.h"

namespace astrai::test {

TEST_CASE("an fp8 checkpoint on cuda gives the logits of its widened copy bit for bit", "[gpu]") {
  if (!gpu::register_cuda_backend()) {
    WARN("no CUDA GPU visible: skipped");
    return;
  }
  auto cuda = [] { return make_backend(BackendOptions{Device::cuda, 0, 0}).value(); };
  check_fp8_matches_widened(qwen3_style_config(), {48, 40, {0, 1, 2}}, cuda);
  check_fp8_matches_widened(preset_config("tiny").value(), {16, 8, {0, 1, 2}}, cuda);
  // Matrices past the loader's 16M-element staging round trip: gate/up 12,288 x 2,048 in two
  // rounds of whole 128-row blocks, down 2,048 x 12,288 in two.
  ModelConfig big = preset_config("tiny").value();
  big.num_layers = 1;
  big.hidden_size = 2048;
  big.num_heads = 16;
  big.num_kv_heads = 4;
  big.head_dim = 128;
  big.intermediate_size = 12288;
  check_fp8_matches_widened(big, {128, 128, {1, 2}}, cuda);
}

}  // namespace astrai::test
