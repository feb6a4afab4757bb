// Model directories for engine tests: the `tiny` preset and a Qwen3-style tiny config (qk-norm,
// head_dim != hidden / heads), written once per test process with random (seeded) weights.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "src/engine/engine.h"
#include "src/model/model.h"

namespace astrai::test {

// "tiny" or "qwen3-tiny".
std::filesystem::path model_dir(const std::string& which);

struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};
LoadedModel load_model(const std::filesystem::path& dir);

std::unique_ptr<Engine> make_engine(const std::filesystem::path& dir, const EngineOptions& o);

// Greedy decode by full forwards: at every step the whole sequence is forwarded into a fresh KV
// cache and the next token is the argmax of the last row (no KV-cache reuse at all).
std::vector<int32_t> full_forward_greedy(Model& model, std::vector<int32_t> tokens, int max_tokens,
                                         const std::vector<int32_t>& stop_ids = {});

}  // namespace astrai::test
