#include "src/model/forward_batch.h"

#include <algorithm>
#include <cassert>

namespace astrai {

void ForwardBatchBuilder::clear() {
  ForwardBatch& b = batch_;
  b.tokens.clear();
  b.positions.clear();
  b.slots.clear();
  b.q_start.assign(1, 0);
  b.kv_len.clear();
  b.page_table.clear();
  b.max_pages = 0;
  b.logit_rows.clear();
  b.moves.clear();
  b.draws = Tensor();
  pages_.clear();
  pages_start_.assign(1, 0);
}

void ForwardBatchBuilder::add_sequence(std::span<const int32_t> tokens, int start, int len,
                                       std::span<const int32_t> pages, LogitRows logits) {
  assert(start >= 0 && len >= 0 && size_t(start + len) <= tokens.size());
  assert(pages.size() * size_t(page_size_) >= size_t(start + len));
  ForwardBatch& b = batch_;
  const int ps = page_size_;
  const int first_row = b.num_tokens();
  for (int j = start; j < start + len; ++j) {
    b.tokens.push_back(tokens[size_t(j)]);
    b.positions.push_back(j);
    b.slots.push_back(pages[size_t(j / ps)] * ps + j % ps);
  }
  const int end_row = b.num_tokens();
  b.q_start.push_back(end_row);
  b.kv_len.push_back(start + len);
  switch (logits) {
    case LogitRows::none: break;
    case LogitRows::last:
      if (len > 0) b.logit_rows.push_back(end_row - 1);
      break;
    case LogitRows::all:
      for (int r = first_row; r < end_row; ++r) b.logit_rows.push_back(r);
      break;
    case LogitRows::scored:
      for (int j = start; j < start + len && size_t(j) + 1 < tokens.size(); ++j)
        b.logit_rows.push_back(first_row + (j - start));
      break;
  }
  pages_.insert(pages_.end(), pages.begin(), pages.end());
  pages_start_.push_back(int32_t(pages_.size()));
  b.max_pages = std::max(b.max_pages, int(pages.size()));
}

void ForwardBatchBuilder::take_last_row_from(int draw, const Tensor& draws) {
  ForwardBatch& b = batch_;
  assert(b.num_tokens() > 0 && (b.moves.empty() || b.moves[b.moves.size() - 2] < b.num_tokens() - 1));
  b.moves.push_back(b.num_tokens() - 1);
  b.moves.push_back(draw);
  b.draws = draws;
}

const ForwardBatch& ForwardBatchBuilder::finish() {
  ForwardBatch& b = batch_;
  const size_t S = size_t(b.num_seqs()), stride = size_t(b.max_pages);
  b.page_table.assign(S * stride, 0);
  for (size_t s = 0; s < S; ++s)
    std::copy(pages_.begin() + pages_start_[s], pages_.begin() + pages_start_[s + 1],
              b.page_table.begin() + long(s * stride));
  return b;
}

}  // namespace astrai
