#include "sched/metrics.h"

#include <algorithm>
#include <cmath>

namespace astrai {

void LatencyWindow::add(double ms) {
  ++count_;
  sum_ += ms;
  if (ring_.size() < window_) {
    ring_.push_back(ms);
  } else {
    ring_[next_] = ms;
    next_ = (next_ + 1) % window_;
  }
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  // Nearest rank: the smallest sample with at least q of the samples at or below it.
  size_t rank = size_t(std::ceil(q * double(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  std::nth_element(v.begin(), v.begin() + long(rank - 1), v.end());
  return v[rank - 1];
}

LatencySummary LatencyWindow::summary() const {
  LatencySummary s;
  s.count = count_;
  s.avg_ms = count_ ? sum_ / double(count_) : 0;
  s.p50_ms = percentile(ring_, 0.50);
  s.p99_ms = percentile(ring_, 0.99);
  return s;
}

Metrics::Metrics() : start_(Clock::now()) {}

void Metrics::record_ttft(double ms) {
  std::lock_guard g(mu_);
  ttft_.add(ms);
}
void Metrics::record_itl(double ms) {
  std::lock_guard g(mu_);
  itl_.add(ms);
}
void Metrics::record_queue_wait(double ms) {
  std::lock_guard g(mu_);
  queue_wait_.add(ms);
}
void Metrics::record_finish(FinishReason reason, double e2e_ms, int completion_tokens, double decode_s) {
  std::lock_guard g(mu_);
  switch (reason) {
    case FinishReason::cancelled: ++s_.cancelled; return;
    case FinishReason::error: ++s_.failed; return;
    default: break;
  }
  ++s_.finished;
  e2e_.add(e2e_ms);
  if (completion_tokens >= 2 && decode_s > 0) {
    decode_tps_sum_ += double(completion_tokens - 1) / decode_s;
    ++decode_tps_n_;
  }
}
void Metrics::record_prompt(uint64_t n) {
  std::lock_guard g(mu_);
  s_.prompt_tokens += n;
}
void Metrics::record_generated(uint64_t n) {
  std::lock_guard g(mu_);
  s_.generated_tokens += n;
}
void Metrics::record_step(int batch_seqs, double step_s) {
  std::lock_guard g(mu_);
  ++s_.steps;
  batch_sum_ += batch_seqs;
  busy_s_ += step_s;
}
void Metrics::record_prefix_lookup(uint64_t looked_up, uint64_t hit) {
  std::lock_guard g(mu_);
  lookup_tokens_ += looked_up;
  hit_tokens_ += hit;
}
void Metrics::record_preemption() {
  std::lock_guard g(mu_);
  ++s_.preemptions;
}
void Metrics::set_gauges(uint64_t running, uint64_t waiting, uint64_t pages_total, uint64_t pages_used,
                         uint64_t cached_pages, int page_size) {
  std::lock_guard g(mu_);
  s_.running = running;
  s_.waiting = waiting;
  s_.kv_pages_total = pages_total;
  s_.kv_pages_used = pages_used;
  s_.prefix_cached_pages = cached_pages;
  s_.page_size = page_size;
}

EngineStats Metrics::snapshot() const {
  std::lock_guard g(mu_);
  EngineStats s = s_;
  s.ttft = ttft_.summary();
  s.itl = itl_.summary();
  s.e2e = e2e_.summary();
  s.queue_wait = queue_wait_.summary();
  s.avg_decode_tps = decode_tps_n_ ? decode_tps_sum_ / double(decode_tps_n_) : 0;
  s.avg_batch_size = s_.steps ? batch_sum_ / double(s_.steps) : 0;
  s.steps_per_s = busy_s_ > 0 ? double(s_.steps) / busy_s_ : 0;
  s.prefix_hit_rate = lookup_tokens_ ? double(hit_tokens_) / double(lookup_tokens_) : 0;
  s.uptime_s = std::chrono::duration<double>(Clock::now() - start_).count();
  return s;
}

}  // namespace astrai
