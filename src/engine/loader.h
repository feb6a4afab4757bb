// Loading an engine for a command: `--model` (a directory or a preset) -> backend, model,
// tokenizer, engine. Shared by `astrai generate` and the engine benchmarks.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "src/backend/backend.h"
#include "src/core/status.h"
#include "src/engine/engine.h"
#include "src/model/model.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {

struct LoadedEngine {
  std::filesystem::path dir;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
};

// The backend and model of one model directory. With tp > 1 the model is tensor-parallel
// (src/model/tp_model.h) over tp devices: GPUs 0..tp-1 on cuda (rank i on GPU i; backend is rank
// 0's, the model owns the others), or tp CPU backends sharing the host (a test mode: same numbers,
// no speed-up).
struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};
// device: "cpu", "cuda" or "auto" (cuda when available, else cpu); threads: CPU compute threads (0:
// all cores). Errors: tp < 1; tp beyond the visible GPUs; sizes tp does not divide.
Result<LoadedModel> load_model(const std::filesystem::path& dir, const std::string& device, int tp = 1,
                               int threads = 0, const LoadOptions& options = {});

// device as for load_model. The tokenizer's stop ids (eos + generation_config.json) are added to
// options.stop_ids. chat_template: in place of the model's (Tokenizer::load).
Result<LoadedEngine> load_engine(const std::string& model_or_preset, const std::string& device,
                                 EngineOptions options, int tp = 1,
                                 const std::optional<ChatTemplateText>& chat_template = {},
                                 const LoadOptions& load = {});

// "2GiB", "512M", "1.5G", "1000000" -> bytes (K/M/G/T, binary multiples; optional "iB"/"B").
Result<int64_t> parse_byte_size(const std::string& text);

}  // namespace astrai
