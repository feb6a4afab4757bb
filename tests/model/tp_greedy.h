// A small greedy decode of two sequences through a paged cache, shared by the tensor-parallel
// tests on the CPU (tests/model/tp_forward_test.cpp) and on GPUs (tests/gpu/tp_forward_test.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/forward_util.h"

namespace astrai::test {

struct GreedyRun {
  std::vector<std::vector<int32_t>> seqs;  // prompts followed by the greedy tokens
  std::vector<std::vector<float>> logits;  // per step, every row's
};

inline int32_t argmax_row(const std::vector<float>& logits, int64_t row, int64_t V) {
  const auto b = logits.begin() + row * V;
  return int32_t(std::max_element(b, b + V) - b);
}

// Prefill (sequence 0 in two chunks, the first packed with all of sequence 1), then `steps`
// decode steps of both sequences (decode-only steps: a graph bucket where one is captured), each
// taking the argmax of its last row. kv: allocated by the caller (so that it may capture graphs).
inline GreedyRun greedy(Model& model, KvCache& kv, const std::vector<std::vector<int32_t>>& prompts,
                        int64_t cut, int steps, const std::vector<SeqPages>& pages) {
  const int64_t V = model.config().vocab_size;
  GreedyRun run;
  run.seqs = prompts;
  auto& a = run.seqs[0];
  auto& b = run.seqs[1];
  const int64_t na = int64_t(a.size()), nb = int64_t(b.size());
  run.logits.push_back(run_forward(model, make_batch({{&a, &pages[0], 0, cut}, {&b, &pages[1], 0, nb}}), kv));
  const int32_t next_b = argmax_row(run.logits.back(), cut + nb - 1, V);
  run.logits.push_back(run_forward(model, make_batch({{&a, &pages[0], cut, na}}), kv));
  a.push_back(argmax_row(run.logits.back(), na - cut - 1, V));
  b.push_back(next_b);
  for (int s = 0; s < steps; ++s) {
    const int64_t la = int64_t(a.size()), lb = int64_t(b.size());
    run.logits.push_back(
        run_forward(model, make_batch({{&a, &pages[0], la - 1, la}, {&b, &pages[1], lb - 1, lb}}), kv));
    a.push_back(argmax_row(run.logits.back(), 0, V));
    b.push_back(argmax_row(run.logits.back(), 1, V));
  }
  return run;
}

inline GreedyRun greedy(Model& model, const std::vector<std::vector<int32_t>>& prompts, int64_t cut,
                        int steps, const std::vector<SeqPages>& pages, int num_pages) {
  KvCache kv = model.allocate_kv(num_pages, pages[0].page_size);
  return greedy(model, kv, prompts, cut, steps, pages);
}

}  // namespace astrai::test
