// The sampling defaults a model directory's generation_config.json sets (Qwen3: temperature 0.6,
// top_k 20, top_p 0.95), which a request's own fields override, as vLLM's `--generation-config
// auto` and SGLang apply them. `serve` and `generate` read them unless told `--generation-config
// none`; the API dialects and offline lines start from them instead of the built-in defaults.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "src/core/status.h"
#include "src/engine/request.h"

namespace astrai {

struct SamplingDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::optional<int> max_tokens;  // max_new_tokens

  bool empty() const;
  // Sets the fields the file gave; leaves the others as they are.
  void apply(SamplingParams& s) const;
  // "temperature 0.6, top_p 0.95, top_k 20" (for the start-up log); "" when empty.
  std::string describe() const;
};

// Reads the sampling fields of `text` (generation_config.json's JSON; `source` names it in messages).
// Fields outside the engine's ranges (validate_sampling) are left out, each with a line in
// `warnings`; do_sample is not read (as in vLLM: a request's temperature decides). Text that is not
// a JSON object, or a sampling field that is not a number: invalid_argument naming the field.
Result<SamplingDefaults> parse_sampling_defaults(std::string_view text, const std::string& source,
                                                 std::vector<std::string>* warnings = nullptr);
// The same for DIR/generation_config.json; no file: no defaults.
Result<SamplingDefaults> read_sampling_defaults(const std::filesystem::path& model_dir,
                                                std::vector<std::string>* warnings = nullptr);

}  // namespace astrai
