// Offline batch generation (`astrai generate`): JSONL prompts in, JSONL completions out, in input
// order. Every runnable line is submitted to the engine at once (as far as its waiting queue
// allows; the rest follow as others finish), so the engine batches them continuously.
//
// Input line:  {"id"?: any, "prompt": str} or {"id"?: any, "messages": [...]} (the model's chat
//              template with add_generation_prompt; "chat_template_kwargs": {...} adds template
//              variables, e.g. {"enable_thinking": false}), optional max_tokens, temperature, top_p, top_k,
//              min_p, seed, stop (string or list: trimmed from the text, end the choice; matched on
//              the detokenized text, so across token boundaries), n.
// Output line: {"id", "text" | "texts" (n > 1), "finish_reason": "stop"|"length"
//              (n > 1: also "finish_reasons"), "usage": {"prompt_tokens", "completion_tokens"}};
//              the id is echoed as given (any JSON value), the line number when absent.
//              A bad line: {"id", "error": "line N: ..."}; the run goes on.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "src/core/status.h"
#include "src/engine/engine.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {

struct OfflineOptions {
  // Defaults for fields a line does not set.
  int max_tokens = 256;
  SamplingParams sampling;  // temperature, top_p, top_k, min_p, seed
  std::vector<int32_t> stop_ids;
  bool ignore_eos = false;
  bool resume = false;   // skip ids already in the output file and append to it
  bool progress = true;  // progress bar on stderr
};

struct OfflineSummary {
  int lines = 0;    // non-empty input lines
  int skipped = 0;  // already in the output (--resume)
  int errors = 0;
  int completed = 0;
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  double seconds = 0;
  double tokens_per_s = 0;  // completion tokens per second of wall time
};

Result<OfflineSummary> run_offline_generate(Engine& engine, const Tokenizer& tokenizer,
                                            const std::filesystem::path& input,
                                            const std::filesystem::path& output,
                                            const OfflineOptions& options);

}  // namespace astrai
