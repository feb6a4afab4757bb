// Model directories for the sched and engine tests: the `tiny` preset and a Qwen3-style tiny config
// (qk-norm, head_dim != hidden / heads), written once per test process with random (seeded)
// weights; and the reference greedy decode they are checked against.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "src/backend/backend.h"
#include "src/model/model.h"

namespace astrai::test {

// "tiny" or "qwen3-tiny".
std::filesystem::path model_dir(const std::string& which);

struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};
// On the CPU backend with one thread.
LoadedModel load_model(const std::filesystem::path& dir);

// Greedy decode by full forwards: at every step the whole sequence is forwarded into a fresh KV
// cache and the next token is the argmax of the last row (no KV-cache reuse at all).
std::vector<int32_t> full_forward_greedy(Model& model, std::vector<int32_t> tokens, int max_tokens,
                                         const std::vector<int32_t>& stop_ids = {});

}  // namespace astrai::test
