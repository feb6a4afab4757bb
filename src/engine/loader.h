// Loading an engine for a command: `--model` (a directory or a preset) -> backend, model,
// tokenizer, engine. Shared by `astrai generate` and the engine benchmarks.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "src/core/status.h"
#include "src/engine/engine.h"
#include "src/tokenizer/tokenizer.h"

namespace astrai {

struct LoadedEngine {
  std::filesystem::path dir;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
};

// device: "cpu", "cuda" or "auto" (cuda when available, else cpu). The tokenizer's stop ids
// (eos + generation_config.json) are added to options.stop_ids.
Result<LoadedEngine> load_engine(const std::string& model_or_preset, const std::string& device,
                                 EngineOptions options);

// "2GiB", "512M", "1.5G", "1000000" -> bytes (K/M/G/T, binary multiples; optional "iB"/"B").
Result<int64_t> parse_byte_size(const std::string& text);

}  // namespace astrai
