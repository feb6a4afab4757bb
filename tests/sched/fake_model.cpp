#include "fake_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <thread>

namespace astrai::test {

void NullBackend::fail() {
  std::fprintf(stderr, "NullBackend: op called\n");
  std::abort();
}

FakeModel::FakeModel(const FakeModelOptions& o) {
  cfg_.architecture = "FakeForCausalLM";
  cfg_.model_type = "fake";
  cfg_.vocab_size = o.vocab;
  cfg_.hidden_size = 8;
  cfg_.num_layers = 1;
  cfg_.num_heads = 1;
  cfg_.num_kv_heads = 1;
  cfg_.head_dim = 8;
  cfg_.max_position_embeddings = o.max_position_embeddings;
  cfg_.eos_token_ids = o.eos_ids;
}

KvCache FakeModel::allocate_kv(int num_pages, int page_size) const {
  KvCache kv;
  kv.num_pages = num_pages;
  kv.page_size = page_size;
  kv.num_kv_heads = 1;  // one i32 per slot in each buffer: KvCache's page layout, for discard_pages
  kv.head_dim = 1;
  kv.dtype = DType::i32;
  kv.k.push_back(Buffer::host(size_t(num_pages) * size_t(page_size) * 4));  // token ids
  kv.v.push_back(Buffer::host(size_t(num_pages) * size_t(page_size) * 4));  // position + 1
  return kv;
}

namespace {
uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7FB5D329728EA185ull;
  x ^= x >> 27;
  x *= 0x81DADEF4BC2DD44Dull;
  x ^= x >> 33;
  return x;
}
}  // namespace

void FakeModel::logits_for(const std::vector<int32_t>& history, int vocab, float* out) {
  uint64_t h = 0x12345;
  for (int32_t t : history) h = mix(h ^ uint64_t(uint32_t(t)) ^ (h << 7));
  for (int v = 0; v < vocab; ++v) {
    const uint64_t r = mix(h + uint64_t(v) * 0x9E3779B97F4A7C15ull);
    out[v] = float(double(r >> 11) * 0x1.0p-53 * 8.0 - 4.0);  // uniform in [-4, 4)
  }
}

Result<Tensor> FakeModel::forward(const ForwardBatch& b, KvCache& kv) {
  ++forward_calls;
  if (delay_us.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us.load()));
  const int T = b.num_tokens(), S = b.num_seqs();
  if (T == 0 || S == 0) return internal_error("fake forward: empty batch");
  if (int(b.positions.size()) != T || int(b.slots.size()) != T || int(b.kv_len.size()) != S ||
      int(b.page_table.size()) != S * b.max_pages || b.q_start.back() != T)
    return internal_error("fake forward: inconsistent batch sizes");
  max_tokens_per_step = std::max(max_tokens_per_step.load(), T);
  max_seqs_per_step = std::max(max_seqs_per_step.load(), S);
  const int ps = kv.page_size;
  const int64_t slots = int64_t(kv.num_pages) * ps;
  auto* ktok = static_cast<int32_t*>(kv.k[0].data());
  auto* vpos = static_cast<int32_t*>(kv.v[0].data());
  // Tokens the previous step drew (the overlapped loop): taken from its output by the CPU op, as
  // a device does (a move outside the batch or the draws throws).
  tokens_.assign(b.tokens.begin(), b.tokens.end());
  if (!b.moves.empty()) {
    cpu::take_tokens(Tensor(tokens_.data(), DType::i32, {T}),
                     Tensor(const_cast<int32_t*>(b.moves.data()), DType::i32, {b.num_moves(), 2}), b.draws);
    moves_taken += b.num_moves();
  }
  for (int32_t t : tokens_)
    if (t < 0 || t >= int32_t(cfg_.vocab_size))
      return internal_error("fake forward: token outside the vocabulary");
  for (int s = 0; s < S; ++s) {
    for (int i = b.q_start[s]; i < b.q_start[s + 1]; ++i) {
      const int pos = b.kv_len[s] - (b.q_start[s + 1] - b.q_start[s]) + (i - b.q_start[s]);
      if (b.positions[i] != pos) return internal_error("fake forward: position mismatch");
      const int32_t slot = b.slots[i];
      if (slot < 0 || slot >= slots) return internal_error("fake forward: slot out of range");
      if (b.page_table[size_t(s) * size_t(b.max_pages) + size_t(pos / ps)] * ps + pos % ps != slot)
        return internal_error("fake forward: slot does not match the page table");
      ktok[slot] = tokens_[size_t(i)];
      vpos[slot] = pos + 1;
    }
  }
  const int R = int(b.logit_rows.size());
  const int V = int(cfg_.vocab_size);
  logits_.assign(size_t(std::max(R, 1)) * size_t(V), 0.0f);
  std::vector<int32_t> history;
  for (int r = 0; r < R; ++r) {
    const int row = b.logit_rows[r];
    int s = 0;
    while (!(b.q_start[s] <= row && row < b.q_start[s + 1])) ++s;
    const int pos = b.kv_len[s] - (b.q_start[s + 1] - b.q_start[s]) + (row - b.q_start[s]);
    history.clear();
    for (int j = 0; j <= pos; ++j) {
      const int32_t page = b.page_table[size_t(s) * size_t(b.max_pages) + size_t(j / ps)];
      const int64_t slot = int64_t(page) * ps + j % ps;
      if (slot < 0 || slot >= slots) return internal_error("fake forward: page out of range");
      if (vpos[slot] != j + 1)
        return internal_error("fake forward: KV slot of position " + std::to_string(j) + " holds position " +
                              std::to_string(vpos[slot] - 1));
      history.push_back(ktok[slot]);
    }
    logits_for(history, V, logits_.data() + size_t(r) * size_t(V));
  }
  return Tensor(logits_.data(), DType::f32, {int64_t(R), int64_t(V)}, Device::cpu);
}

std::vector<int32_t> fake_greedy(const std::vector<int32_t>& prompt, int vocab, int max_tokens,
                                 const std::vector<int32_t>& stop_ids, bool* stopped, int min_tokens) {
  std::vector<int32_t> hist = prompt, out;
  std::vector<float> l(static_cast<size_t>(vocab));
  if (stopped) *stopped = false;
  for (int i = 0; i < max_tokens; ++i) {
    FakeModel::logits_for(hist, vocab, l.data());
    if (i < min_tokens)
      for (int32_t s : stop_ids)
        if (s >= 0 && s < vocab) l[size_t(s)] = -std::numeric_limits<float>::infinity();
    const int32_t t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end()) {
      if (stopped) *stopped = true;
      break;
    }
    out.push_back(t);
    hist.push_back(t);
  }
  return out;
}

}  // namespace astrai::test
