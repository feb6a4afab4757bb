// One forward step's inputs (ForwardBatch) and the one way to pack them (ForwardBatchBuilder).
//
// The step loop, `astrai score`, the decode benchmark and the tests all build batches through the
// builder, so the layout rules live here once: sequence s owns the query rows
// [q_start[s], q_start[s+1]); a row's token sits at `positions` in its sequence and its K/V goes
// to `slots` (page * page_size + offset, page from the sequence's page list); the page table is
// [S, max_pages] with each sequence's pages in its row, padded with 0.
//
// The builder keeps its vectors between steps (clear() keeps their capacity), so once a batch as
// large as any later one has been built, building allocates nothing. Its output is flat int32
// arrays of known sizes: what a device backend copies into fixed-size pinned host buffers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/core/tensor.h"

namespace astrai {

// One step's packed batch, host side. Sequence s owns query rows [q_start[s], q_start[s+1]).
struct ForwardBatch {
  std::vector<int32_t> tokens;      // [T]
  std::vector<int32_t> positions;   // [T]
  std::vector<int32_t> slots;       // [T] KV slot for each token's K/V (page * page_size + offset)
  std::vector<int32_t> q_start;     // [S+1]
  std::vector<int32_t> kv_len;      // [S] tokens in cache for s after this step
  std::vector<int32_t> page_table;  // [S * max_pages], row s = physical pages of s (unused: 0)
  int max_pages = 0;
  std::vector<int32_t> logit_rows;  // rows of the batch whose logits are wanted (e.g. each last row)
  // Rows whose token the previous step drew and the host has not read yet (the overlapped step
  // loop): (row, draw) pairs, rows increasing. tokens[row] holds a placeholder; the model takes
  // draw `draw`'s token from `draws` (the sample op's output on the backend's device, the token in
  // column 0) before its first op (Backend::take_tokens). Empty in every other batch.
  std::vector<int32_t> moves;  // [M * 2]
  Tensor draws;                // [D, W] i32, set when moves is not empty

  int num_moves() const { return int(moves.size() / 2); }

  int num_tokens() const { return int(tokens.size()); }
  int num_seqs() const { return q_start.empty() ? 0 : int(q_start.size()) - 1; }
};

// Which rows of a sequence's chunk want logits.
enum class LogitRows {
  none,    // a prefill chunk that does not reach the end of the sequence
  last,    // the chunk's last row: the next token (generation)
  all,     // every row
  scored,  // every row whose next token is in `tokens` (all but the sequence's final token): scoring
};

class ForwardBatchBuilder {
 public:
  explicit ForwardBatchBuilder(int page_size) : page_size_(page_size) { clear(); }

  int page_size() const { return page_size_; }

  // Starts an empty batch (keeps the vectors' capacity).
  void clear();

  // Appends the chunk tokens[start, start + len) of a sequence whose first `start` tokens already
  // have their K/V in the cache. `pages` are the sequence's pages in order (page i holds tokens
  // [i * page_size, (i + 1) * page_size)); they must cover start + len tokens. The page list is
  // copied, so it may change after the call.
  void add_sequence(std::span<const int32_t> tokens, int start, int len, std::span<const int32_t> pages,
                    LogitRows logits);

  // The last row added takes its token from draw `draw` of `draws` (ForwardBatch::moves): its
  // token in the sequence is a placeholder until the host reads that draw.
  void take_last_row_from(int draw, const Tensor& draws);

  // Lays out the page table at the stride of the longest page list and returns the batch. Valid
  // until the next clear() or add_sequence().
  const ForwardBatch& finish();

  int num_seqs() const { return batch_.num_seqs(); }
  int num_tokens() const { return batch_.num_tokens(); }
  int num_logit_rows() const { return int(batch_.logit_rows.size()); }

 private:
  int page_size_;
  ForwardBatch batch_;
  std::vector<int32_t> pages_;        // every sequence's pages, concatenated
  std::vector<int32_t> pages_start_;  // [S+1] sequence s's pages are pages_[pages_start_[s] ..)
};

}  // namespace astrai
