#include "sched/step_runner.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "src/backend/cpu/host_pages.h"

namespace astrai {

StepRunner::StepRunner(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model, KvCache kv)
    : backend_(std::move(backend)),
      model_(std::move(model)),
      kv_(std::move(kv)),
      vocab_(int(model_->config().vocab_size)) {}

Status StepRunner::forward(const ForwardBatch& batch) {
  Result<Tensor> logits = [&]() -> Result<Tensor> {
    try {
      return model_->forward(batch, kv_);
    } catch (const std::exception& e) {
      return internal_error(std::string("forward failed: ") + e.what());
    }
  }();
  if (!logits.ok()) return logits.status();
  logits_ = logits.value();
  return {};
}

namespace {

// Page p of a layer's K (or V) buffer is bytes [p * page_bytes, (p + 1) * page_bytes) (KvCache's
// layout); a tensor-parallel cache holds its pages in each rank's shard. Only host memory is given
// back: a GPU's cache is one preallocated device block per layer, the process's for its lifetime
// whatever the pool holds, so there is nothing to return there.
void discard_runs(const KvCache& kv, std::span<const std::pair<int32_t, int32_t>> runs) {
  const size_t page_bytes =
      size_t(kv.page_size) * size_t(kv.num_kv_heads) * size_t(kv.head_dim) * dtype_size(kv.dtype);
  if (kv.device == Device::cpu)
    for (const std::vector<Buffer>* buffers : {&kv.k, &kv.v})
      for (const Buffer& b : *buffers)
        for (const auto& [first, count] : runs)
          discard_host_pages(static_cast<std::byte*>(b.data()) + size_t(first) * page_bytes,
                             size_t(count) * page_bytes);
  for (const KvCache& shard : kv.shards) discard_runs(shard, runs);
}

}  // namespace

void StepRunner::discard_pages(std::span<const int32_t> pages) {
  // Runs of consecutive pages: one call per run and buffer, and the OS pages that straddle two
  // neighbouring free KV pages go back too.
  std::vector<int32_t> sorted(pages.begin(), pages.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<int32_t, int32_t>> runs;  // first page, count
  for (int32_t p : sorted) {
    if (!runs.empty() && runs.back().first + runs.back().second == p)
      ++runs.back().second;
    else
      runs.emplace_back(p, 1);
  }
  discard_runs(kv_, runs);
}

namespace {

// buf holds at least `bytes` (grown, never shrunk, so a warm step loop does not allocate): device
// memory, or page-locked host memory when `pinned`.
void ensure(Backend& be, Buffer& buf, size_t bytes, bool pinned = false) {
  if (buf.size() >= bytes) return;
  const size_t n = std::max(bytes, buf.size() * 2);
  buf = pinned ? be.alloc_host_pinned(n) : be.alloc(n);
}

}  // namespace

bool StepRunner::fill_masks(std::span<const SampleRow> rows) {
  bool any = false;
  for (const SampleRow& r : rows) any = any || r.matcher || r.forced >= 0;
  if (!any) return false;
  const int64_t words = (int64_t(vocab_) + 31) / 32;
  // One bit set per logits row: every token, but a constrained row's grammar or a forced draw's token.
  host_mask_.assign(size_t(logits_.size(0)) * size_t(words), ~0u);
  for (const SampleRow& sr : rows) {
    uint32_t* row = host_mask_.data() + size_t(sr.logit_row) * size_t(words);
    if (sr.forced >= 0) {
      std::fill(row, row + words, 0u);
      row[sr.forced >> 5] = 1u << (sr.forced & 31);
      continue;
    }
    if (!sr.matcher) continue;
    static const std::vector<int32_t> kNone;
    const std::vector<int32_t>& stop = sr.stop_ids ? *sr.stop_ids : kNone;
    // Before min_tokens no stop id may be drawn, not even one the grammar spells text with.
    const bool may_stop = sr.index >= sr.params->min_tokens;
    int64_t allowed = sr.matcher->fill_mask(row, words, may_stop ? stop : kNone);
    if (!may_stop)
      for (int32_t t : stop)
        if (t >= 0 && t < vocab_ && ((row[t >> 5] >> (t & 31)) & 1u)) {
          row[t >> 5] &= ~(1u << (t & 31));
          --allowed;
        }
    if (allowed == 0) {
      // No token continues the text (the grammar needs bytes no token has, or ignore_eos at a
      // complete text): let the choice end at an end-of-sequence id rather than draw from nothing.
      for (int32_t t : model_->config().eos_token_ids)
        if (t >= 0 && t < vocab_) row[t >> 5] |= 1u << (t & 31);
    }
  }
  return true;
}

void StepRunner::start_sample(std::span<const SampleRow> rows) {
  if (started_ == 2) throw Error(internal_error("start_sample: two sample ops are already started"));
  Slot& sl = slots_[next_];
  SamplePacker& packer = sl.packer;
  packer.clear();
  for (const SampleRow& row : rows)
    packer.add(row.logit_row, *row.params, row.penalties, row.seed, row.choice, row.num_choices, row.index,
               row.banned ? std::span<const int32_t>(*row.banned) : std::span<const int32_t>());
  Backend& be = model_->backend();
  const int64_t R = int64_t(packer.rows().size()), E = int64_t(packer.edits().size());
  const int words = packer.out_words();
  const bool on_host = be.device() == Device::cpu;
  const size_t out_bytes = size_t(R * words) * 4;
  ensure(be, sl.host_out, out_bytes, /*pinned=*/true);
  void* out = sl.host_out.data();
  sl.out = Tensor(out, DType::i32, {R, words}, be.device());
  // Counted only once everything is enqueued: an op that throws leaves no slot started.
  auto mark_started = [&] {
    next_ = 1 - next_;
    ++started_;
  };
  if (R == 0) return mark_started();

  const int64_t in_words = R * kSampleRowWords + E * kSampleEditWords;
  const size_t in_bytes = size_t(in_words) * 4;
  ensure(be, sl.host_in, in_bytes, /*pinned=*/true);
  int32_t* in = static_cast<int32_t*>(sl.host_in.data());
  std::memcpy(in, packer.rows().data(), size_t(R) * sizeof(SampleRowParams));
  // No edits (no penalties, bias or masks): edits().data() may be null, which memcpy may not be given.
  if (E > 0) std::memcpy(in + R * kSampleRowWords, packer.edits().data(), size_t(E) * sizeof(SampleEdit));
  if (!on_host) {
    ensure(be, sl.dev_in, in_bytes);
    ensure(be, sl.dev_out, out_bytes);
    ensure(be, workspace_, be.sample_workspace_bytes(int(R), vocab_));
    be.upload(sl.dev_in.as(DType::i32, {in_words}), in);
    in = static_cast<int32_t*>(sl.dev_in.data());
    sl.out = Tensor(sl.dev_out.data(), DType::i32, {R, words}, be.device());
  }
  SampleBatch b;
  b.logits = logits_;
  b.rows = Tensor(in, DType::i32, {R, kSampleRowWords}, be.device());
  if (E > 0) b.edits = Tensor(in + R * kSampleRowWords, DType::i32, {E, kSampleEditWords}, be.device());
  b.out = sl.out;
  if (!on_host) b.workspace = workspace_.as(DType::i32, {int64_t(workspace_.size() / 4)});
  if (fill_masks(rows)) {
    const int64_t mask_words = (int64_t(vocab_) + 31) / 32;
    void* mask = host_mask_.data();
    if (!on_host) {
      ensure(be, dev_mask_, host_mask_.size() * 4);
      be.upload(dev_mask_.as(DType::i32, {int64_t(host_mask_.size())}), host_mask_.data());
      mask = dev_mask_.data();
    }
    b.mask = Tensor(mask, DType::i32, {logits_.size(0), mask_words}, be.device());
  }
  b.max_top_logprobs = packer.max_top_logprobs();
  be.sample(b);
  if (!on_host) sl.ticket = be.download_async(out, sl.out);
  mark_started();
}

void StepRunner::drop_samples() {
  if (started_ == 0) return;
  model_->backend().synchronize();  // no copy into a slot's host memory is left running
  started_ = 0;
}

void StepRunner::finish_sample(std::vector<SampleResult>& draws) {
  draws.clear();
  if (started_ == 0) throw Error(internal_error("finish_sample: no sample op was started"));
  Slot& sl = slots_[(next_ + 2 - started_) % 2];
  --started_;
  const int64_t R = int64_t(sl.packer.rows().size());
  if (R == 0) return;
  Backend& be = model_->backend();
  if (be.device() != Device::cpu) be.wait_download(sl.ticket);
  const std::span<const int32_t> out(static_cast<const int32_t*>(sl.host_out.data()),
                                     size_t(R) * size_t(sl.packer.out_words()));
  draws.reserve(size_t(R));
  for (int64_t r = 0; r < R; ++r) {
    draws.push_back(sl.packer.result(out, size_t(r), vocab_));
    // A token outside the vocabulary is a backend bug; the step loop fails the step's requests.
    if (draws.back().token < 0 || draws.back().token >= vocab_)
      throw Error(internal_error("sample op returned token " + std::to_string(draws.back().token) +
                                 " outside the vocabulary of " + std::to_string(vocab_)));
  }
}

}  // namespace astrai
