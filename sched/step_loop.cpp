#include "sched/step_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "sched/kv_pool.h"
#include "sched/metrics.h"
#include "sched/radix_cache.h"
#include "sched/request_queue.h"
#include "src/engine/request_state.h"
#include "sched/sampler.h"
#include "sched/scheduler.h"
#include "sched/sequence.h"
#include "src/backend/backend.h"
#include "src/model/model.h"

namespace astrai {
namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

Status StepLoop::validate(const Request& r) const {
  const auto& sp = r.sampling;
  if (r.prompt.empty()) return invalid_argument("the prompt is empty");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= vocab_)
      return invalid_argument("prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_) + ")");
  if (int(r.prompt.size()) >= max_model_len_)
    return invalid_argument("the prompt has " + std::to_string(r.prompt.size()) +
                            " tokens but the context length is " + std::to_string(max_model_len_) +
                            " (at least one token must be left for the output)");
  const int need = pages_for(int(r.prompt.size()) + 1);
  if (need > pool_.num_pages())
    return invalid_argument("the prompt has " + std::to_string(r.prompt.size()) + " tokens and needs " +
                            std::to_string(need) + " KV pages but the cache holds only " +
                            std::to_string(pool_.num_pages()) + " (raise --kv-memory)");
  if (r.max_tokens < 1)
    return invalid_argument("max_tokens must be at least 1, got " + std::to_string(r.max_tokens));
  if (r.n < 1 || r.n > 128) return invalid_argument("n must be in [1, 128], got " + std::to_string(r.n));
  if (!(sp.temperature >= 0) || !std::isfinite(sp.temperature))
    return invalid_argument("temperature must be >= 0, got " + std::to_string(sp.temperature));
  if (!(sp.top_p > 0 && sp.top_p <= 1))
    return invalid_argument("top_p must be in (0, 1], got " + std::to_string(sp.top_p));
  if (sp.top_k < 0) return invalid_argument("top_k must be >= 0, got " + std::to_string(sp.top_k));
  if (!(sp.min_p >= 0 && sp.min_p <= 1))
    return invalid_argument("min_p must be in [0, 1], got " + std::to_string(sp.min_p));
  if (!(sp.repetition_penalty > 0) || !std::isfinite(sp.repetition_penalty))
    return invalid_argument("repetition_penalty must be > 0, got " + std::to_string(sp.repetition_penalty));
  if (!std::isfinite(sp.frequency_penalty) || !std::isfinite(sp.presence_penalty))
    return invalid_argument("frequency_penalty and presence_penalty must be finite");
  if (sp.top_logprobs < 0 || sp.top_logprobs > 20)
    return invalid_argument("top_logprobs must be in [0, 20], got " + std::to_string(sp.top_logprobs));
  for (const auto& [t, b] : sp.logit_bias) {
    if (t < 0 || t >= vocab_)
      return invalid_argument("logit_bias token " + std::to_string(t) + " is outside the vocabulary");
    if (!std::isfinite(b)) return invalid_argument("logit_bias values must be finite");
  }
  return {};
}

Result<Stream> StepLoop::submit(Request r) {
  ASTRAI_RETURN_IF_ERROR(validate(r));
  // Counted before stopping_ is read, so shutdown() (which sets stopping_, then waits for the count
  // to drop to 0) never misses a submit that got past this check.
  active_submits_.fetch_add(1);
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { n.fetch_sub(1); }
  } leave{active_submits_};
  if (stopping_.load()) return Status(ErrorCode::cancelled, "the engine is shutting down");
  if (waiting_count_.fetch_add(1) >= opts_.max_queue) {
    waiting_count_.fetch_sub(1);
    return resource_exhausted("the request queue is full (" + std::to_string(opts_.max_queue) +
                              " waiting); retry later");
  }
  auto task = std::make_unique<Task>();
  task->id = next_id_.fetch_add(1);
  task->seed =
      r.sampling.seed ? *r.sampling.seed : std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  task->submitted = Clock::now();
  task->state = std::make_shared<RequestState>(task->id, r.n, int(r.prompt.size()),
                                               size_t(std::max(opts_.stream_capacity, 2)));
  task->req = std::move(r);
  Stream stream(task->state);
  auto c = std::make_unique<Command>();
  c->kind = Command::Kind::submit;
  c->id = task->id;
  c->task = std::move(task);
  queue_.push(std::move(c));
  return stream;
}

Status StepLoop::check_invariants() {
  auto c = std::make_unique<Command>();
  c->kind = Command::Kind::check;
  auto fut = c->checked.get_future();
  {
    std::lock_guard g(shutdown_mu_);
    if (joined_) return scheduler_.check();  // the loop is gone: nothing else touches the pool
    queue_.push(std::move(c));
  }
  return fut.get();
}

void StepLoop::shutdown() {
  std::lock_guard g(shutdown_mu_);
  if (joined_) return;
  stopping_.store(true);
  while (active_submits_.load() > 0) std::this_thread::yield();
  stop_loop_.store(true);
  queue_.wake();
  if (thread_.joinable()) thread_.join();
  joined_ = true;
}

void StepLoop::drain_commands() {
  while (auto c = queue_.pop()) {
    switch (c->kind) {
      case Command::Kind::submit: {
        Task* t = c->task.get();
        auto seq = std::make_unique<Sequence>();
        seq->task = t;
        seq->choice = 0;
        seq->tokens = t->req.prompt;
        seq->num_prompt = int(seq->tokens.size());
        if (needs_penalties(t->req.sampling)) {
          seq->penalties = std::make_unique<PenaltyState>();
          seq->penalties->prompt_tokens.insert(seq->tokens.begin(), seq->tokens.end());
        }
        scheduler_.enqueue(seq.get());
        t->seqs.push_back(std::move(seq));
        metrics_.record_prompt(uint64_t(t->req.prompt.size()));
        tasks_.emplace(t->id, std::move(c->task));
        break;
      }
      case Command::Kind::cancel: {
        auto it = tasks_.find(c->id);
        if (it != tasks_.end() && !it->second->cancelled) {
          it->second->cancelled = true;
          to_cancel_.push_back(c->id);
        }
        break;
      }
      case Command::Kind::check: c->checked.set_value(scheduler_.check()); break;
    }
  }
}

bool StepLoop::is_stop(const Task& t, int32_t token) const {
  for (int32_t s : t.req.stop_ids)
    if (s == token) return true;
  return !t.req.ignore_eos && model_stop_.count(token);
}

void StepLoop::emit(Task& t, TokenEvent ev) {
  t.state->push(std::move(ev));
  if (!t.touched) {
    t.touched = true;
    touched_.push_back(&t);
  }
}

void StepLoop::finish_seq(Sequence& s, FinishReason reason, TokenEvent ev, const std::string& error) {
  Task& t = *s.task;
  if (s.finished) return;
  scheduler_.remove(&s);
  s.finished = true;
  ev.choice = s.choice;
  ev.finish = reason;
  ev.error = error;
  emit(t, std::move(ev));
  ++t.finished_choices;
  if (!t.forked) {
    // The other choices do not exist yet (they fork when the first token is sampled): they end
    // the same way.
    t.forked = true;
    for (int c = 1; c < t.req.n; ++c) {
      TokenEvent e;
      e.choice = c;
      e.finish = reason;
      e.error = error;
      emit(t, std::move(e));
      ++t.finished_choices;
    }
  }
  if (t.finished_choices < t.req.n) return;
  const auto now = Clock::now();
  FinishReason overall = t.cancelled ? FinishReason::cancelled : reason;
  const double decode_s = t.got_first_token ? std::chrono::duration<double>(now - t.first_token).count() : 0;
  metrics_.record_finish(overall, ms_between(t.submitted, now), t.completion_tokens / std::max(1, t.req.n),
                         decode_s);
  if (t.counted_waiting) {
    t.counted_waiting = false;
    waiting_count_.fetch_sub(1);
  }
  completed_.push_back(t.id);
}

void StepLoop::cancel_task(Task& t) {
  for (auto& s : t.seqs)
    if (!s->finished) finish_seq(*s, FinishReason::cancelled);
}

void StepLoop::handle_token(Sequence& s, const SampleResult& r) {
  Task& t = *s.task;
  const auto now = Clock::now();
  if (!t.got_first_token) {
    t.got_first_token = true;
    t.first_token = now;
    metrics_.record_ttft(ms_between(t.submitted, now));
  } else if (s.generated > 0) {
    metrics_.record_itl(ms_between(s.last_token_time, now));
  }
  s.last_token_time = now;
  if (is_stop(t, r.token)) {
    finish_seq(s, FinishReason::stop);
    return;
  }
  s.tokens.push_back(r.token);
  ++s.generated;
  ++t.completion_tokens;
  if (s.penalties) s.penalties->add_output(r.token);
  metrics_.record_generated(1);
  TokenEvent ev;
  ev.token = r.token;
  ev.choice = s.choice;
  ev.logprob = r.logprob;
  ev.top = r.top;
  if (s.generated >= t.req.max_tokens || int(s.tokens.size()) >= max_model_len_) {
    finish_seq(s, FinishReason::length, std::move(ev));
    return;
  }
  emit(t, std::move(ev));
}

void StepLoop::fork(Task& t, Sequence& s0, const float* row) {
  std::span<const float> logits(row, size_t(vocab_));
  for (int c = 1; c < t.req.n; ++c) {
    auto s = std::make_unique<Sequence>();
    s->task = &t;
    s->choice = c;
    s->tokens = s0.tokens;
    s->num_prompt = s0.num_prompt;
    if (s0.penalties) s->penalties = std::make_unique<PenaltyState>(*s0.penalties);
    scheduler_.share_prefix(&s0, s.get());
    scheduler_.add_running(s.get());
    Sequence& ref = *s;
    t.seqs.push_back(std::move(s));
    handle_token(ref, sample_row(logits, t.req.sampling, ref.penalties.get(), t.seed, c, 0, scratch_));
  }
}

void StepLoop::sample_chunk(const Chunk& c, const float* row) {
  Sequence& s = *c.seq;
  Task& t = *s.task;
  std::span<const float> logits(row, size_t(vocab_));
  const SampleResult r =
      sample_row(logits, t.req.sampling, s.penalties.get(), t.seed, s.choice, s.generated, scratch_);
  if (!t.forked) {
    t.forked = true;
    fork(t, s, row);  // before s appends its token: the choices share the prompt
  }
  handle_token(s, r);
}

void StepLoop::step() {
  const auto t0 = Clock::now();
  StepPlan plan = scheduler_.plan();
  for (Sequence* s : plan.out_of_memory) finish_seq(*s, FinishReason::length);
  for (const Chunk& c : plan.chunks) {
    Task& t = *c.seq->task;
    if (!t.admitted_once) {
      t.admitted_once = true;
      metrics_.record_queue_wait(ms_between(t.submitted, t0));
      if (t.counted_waiting) {
        t.counted_waiting = false;
        waiting_count_.fetch_sub(1);
      }
    }
  }
  if (plan.chunks.empty()) return;

  // Pack the batch: sequence s owns rows [q_start[s], q_start[s+1]).
  const int ps = opts_.page_size;
  ForwardBatch& b = batch_;
  b.tokens.clear();
  b.positions.clear();
  b.slots.clear();
  b.q_start.assign(1, 0);
  b.kv_len.clear();
  b.logit_rows.clear();
  b.max_pages = 0;
  for (const Chunk& c : plan.chunks) b.max_pages = std::max(b.max_pages, int(c.seq->pages.size()));
  b.page_table.assign(plan.chunks.size() * size_t(b.max_pages), 0);
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const Chunk& c = plan.chunks[i];
    const Sequence& s = *c.seq;
    for (int j = c.start; j < c.start + c.len; ++j) {
      b.tokens.push_back(s.tokens[size_t(j)]);
      b.positions.push_back(j);
      b.slots.push_back(s.pages[size_t(j / ps)] * ps + j % ps);
    }
    b.q_start.push_back(int(b.tokens.size()));
    b.kv_len.push_back(c.start + c.len);
    std::copy(s.pages.begin(), s.pages.end(), b.page_table.begin() + long(i) * b.max_pages);
    if (c.wants_logits) b.logit_rows.push_back(int(b.tokens.size()) - 1);
  }

  Result<Tensor> logits = [&]() -> Result<Tensor> {
    try {
      return model_->forward(b, kv_);
    } catch (const std::exception& e) {
      return internal_error(std::string("forward failed: ") + e.what());
    }
  }();
  if (!logits.ok()) {
    spdlog::error("step failed: {}", logits.status().message());
    for (const Chunk& c : plan.chunks) finish_seq(*c.seq, FinishReason::error, {}, logits.status().message());
    return;
  }
  scheduler_.commit(plan);
  const Tensor& lt = logits.value();
  const float* rows = nullptr;
  if (!b.logit_rows.empty()) {
    if (lt.device == Device::cpu) {
      rows = lt.ptr<float>();
    } else {
      host_logits_.resize(size_t(lt.numel()));
      model_->backend().download(host_logits_.data(), lt);
      rows = host_logits_.data();
    }
  }
  int r = 0;
  for (const Chunk& c : plan.chunks) {
    if (!c.wants_logits) continue;
    sample_chunk(c, rows + size_t(r) * size_t(vocab_));
    ++r;
  }
  metrics_.record_step(int(plan.chunks.size()), std::chrono::duration<double>(Clock::now() - t0).count());
}

void StepLoop::deliver() {
  // One wake-up per touched request per step; backlogged rings are retried every step.
  for (auto it = backlog_.begin(); it != backlog_.end();) {
    Task* t = *it;
    // Nobody holds the Stream any more (a client went away): nobody will read these events.
    if (t->state.use_count() == 1) t->state->overflow.clear();
    if (t->state->flush() && !t->touched) {
      t->touched = true;
      touched_.push_back(t);
    }
    it = t->state->overflow.empty() ? backlog_.erase(it) : std::next(it);
  }
  for (Task* t : touched_) {
    t->touched = false;
    if (!t->state->overflow.empty()) backlog_.insert(t);
    t->state->wake_consumers();
    if (t->req.notify) t->req.notify();
  }
  touched_.clear();
  for (auto it = completed_.begin(); it != completed_.end();) {
    auto tt = tasks_.find(*it);
    if (tt == tasks_.end()) {
      it = completed_.erase(it);
    } else if (tt->second->state->overflow.empty()) {
      backlog_.erase(tt->second.get());
      tasks_.erase(tt);
      it = completed_.erase(it);
    } else {
      ++it;
    }
  }
}

void StepLoop::close_all() {
  for (auto& [id, t] : tasks_) cancel_task(*t);
  deliver();
  for (auto& [id, t] : tasks_) {
    t->state->closed.store(true, std::memory_order_release);
    t->state->wake_consumers();
    if (t->req.notify) t->req.notify();
  }
  tasks_.clear();
  backlog_.clear();
  completed_.clear();
}

void StepLoop::run() {
  for (;;) {
    drain_commands();
    if (stop_loop_.load()) break;
    for (RequestId id : to_cancel_) {
      auto it = tasks_.find(id);
      if (it != tasks_.end()) cancel_task(*it->second);
    }
    to_cancel_.clear();
    if (!scheduler_.idle()) {
      try {
        step();
      } catch (const std::exception& e) {
        // Nothing in a step should throw; if it does, fail what ran rather than kill the thread.
        spdlog::error("step loop: {}", e.what());
        for (Sequence* s : scheduler_.all()) finish_seq(*s, FinishReason::error, {}, e.what());
      }
    }
    deliver();
    update_gauges();
    if (scheduler_.idle()) {
      // Nothing to compute: sleep until a command arrives (or, with a consumer behind on its
      // ring, retry delivery every millisecond).
      queue_.wait(backlog_.empty() ? std::chrono::microseconds(std::chrono::hours(1))
                                   : std::chrono::microseconds(1000));
    }
  }
  drain_commands();
  close_all();
  update_gauges();
}

Result<std::unique_ptr<StepLoop>> make_step_loop(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model,
                                                 const EngineOptions& o) {
  if (!model) return invalid_argument("engine: no model");
  if (o.page_size < 1 || o.page_size > 1024) return invalid_argument("page size must be in [1, 1024]");
  if (o.max_batch_size < 1) return invalid_argument("max batch size must be at least 1");
  if (o.max_queue < 1) return invalid_argument("max queue must be at least 1");
  if (o.max_prefill_tokens < 0) return invalid_argument("max prefill tokens must be >= 0 (0: unlimited)");
  const ModelConfig& cfg = model->config();
  const int64_t max_pos = cfg.max_position_embeddings;
  if (o.max_model_len > max_pos)
    return invalid_argument("max model length " + std::to_string(o.max_model_len) +
                            " exceeds the model's max_position_embeddings " + std::to_string(max_pos));
  const int max_len = int(o.max_model_len > 0 ? o.max_model_len : max_pos);
  KvPoolSizing sz;
  sz.max_pages = o.max_pages;
  sz.budget_bytes = o.kv_memory_bytes;
  sz.memory_fraction = o.kv_memory_fraction;
  sz.available_bytes = available_host_memory();
  sz.bytes_per_page = model->kv_bytes_per_page(o.page_size);
  // More than every batch slot at full context can never be used.
  sz.cap = int64_t(o.max_batch_size) * ((max_len + o.page_size - 1) / o.page_size);
  ASTRAI_ASSIGN_OR_RETURN(int pages, kv_pool_pages(sz));
  KvCache kv;
  try {
    kv = model->allocate_kv(pages, o.page_size);
  } catch (const std::exception& e) {
    return resource_exhausted("cannot allocate the KV cache (" + std::to_string(pages) +
                              " pages): " + e.what());
  }
  spdlog::debug("engine: {} KV pages of {} tokens ({} bytes each), context {}", pages, o.page_size,
                sz.bytes_per_page, max_len);
  return std::unique_ptr<StepLoop>(
      new StepLoop(std::move(backend), std::move(model), o, max_len, pages, std::move(kv)));
}

}  // namespace astrai
