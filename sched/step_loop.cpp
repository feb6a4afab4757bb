#include "sched/step_loop.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include "src/backend/backend.h"
#include "src/core/out_of_memory.h"
#include "src/engine/request_state.h"
#include "src/model/model.h"

namespace astrai {
namespace {

using Clock = Metrics::Clock;

double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

// Per kind of step (decode-only, or with prefill/extend chunks): host time before the forward
// (schedule + build), the forward's launch, the sample op up to its draws on the host (on a GPU
// mostly the wait for the device), processing the output, delivering it (the gauges and the
// consumers' wake-ups after the step), and the gap from the previous step's draws to this step's
// forward (the host time the device sits idle for, in a loop without overlap: it holds the previous
// step's process and deliver and this step's plan).
struct StepProfile {
  struct Sums {
    int64_t steps = 0, rows = 0;
    double plan = 0, forward = 0, sample = 0, process = 0, deliver = 0, gap = 0;
  };
  Sums kinds[2];
  int last_kind = -1;  // the kind of the step this loop iteration ran (-1: none)
  Clock::time_point last_draws{};
  int64_t total = 0;

  void log() const {
    const char* names[2] = {"decode", "mixed"};
    for (int k = 0; k < 2; ++k) {
      const Sums& s = kinds[k];
      if (s.steps == 0) continue;
      const double n = double(s.steps);
      spdlog::info(
          "step profile {}: {} steps, {:.1f} rows, ms per step: plan {:.3f} forward {:.3f} sample {:.3f} "
          "process {:.3f} deliver {:.3f} gap {:.3f}",
          names[k], s.steps, double(s.rows) / n, s.plan / n, s.forward / n, s.sample / n, s.process / n,
          s.deliver / n, s.gap / n);
    }
  }
};

namespace {

// A plan's hold on its tasks (Task::in_flight), given up when the pin goes unless released.
class PlanPin {
 public:
  PlanPin() = default;
  PlanPin(PlanPin&& o) noexcept : plan_(std::exchange(o.plan_, nullptr)) {}
  PlanPin& operator=(PlanPin&& o) noexcept {
    std::swap(plan_, o.plan_);
    return *this;
  }
  ~PlanPin() {
    if (plan_)
      for (const Chunk& c : plan_->chunks) --c.seq->task->in_flight;
  }
  static PlanPin pin(const StepPlan& plan) {
    for (const Chunk& c : plan.chunks) ++c.seq->task->in_flight;
    return adopt(plan);
  }
  static PlanPin adopt(const StepPlan& plan) {  // a hold taken earlier
    PlanPin p;
    p.plan_ = &plan;
    return p;
  }
  void release() { plan_ = nullptr; }

 private:
  const StepPlan* plan_ = nullptr;
};

std::unordered_set<int32_t> model_stop_ids(const ModelConfig& cfg, const EngineOptions& o) {
  std::unordered_set<int32_t> ids(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end());
  ids.insert(o.stop_ids.begin(), o.stop_ids.end());
  return ids;
}

}  // namespace

StepLoop::StepLoop(std::unique_ptr<Backend> backend, std::unique_ptr<Model> model, const EngineOptions& o,
                   int max_model_len, int num_pages, KvCache kv)
    : opts_(o),
      max_model_len_(max_model_len),
      vocab_(int(model->config().vocab_size)),
      runner_(std::move(backend), std::move(model), std::move(kv)),
      pool_(num_pages),
      cache_(o.prefix_cache ? std::make_unique<RadixCache>(pool_, o.page_size) : nullptr),
      scheduler_(
          SchedulerConfig{o.page_size, o.max_prefill_tokens, o.max_batch_size, std::max(1, num_pages / 100)},
          pool_, cache_.get(), metrics_),
      batch_builder_(o.page_size),
      output_(scheduler_, metrics_, tasks_, waiting_count_, max_model_len,
              model_stop_ids(runner_.model().config(), o)),
      deliver_after_launch_(
          resolved_deliver_after_launch(o, runner_.model().backend().device() != Device::cpu)),
      overlap_(resolved_overlap(o, runner_.model().backend().device() != Device::cpu,
                                runner_.model().takes_drawn_tokens())) {
  metrics_.set_gauges(0, 0, uint64_t(num_pages), 0, 0, o.page_size);
  spdlog::debug("step loop: overlapped steps {}", overlap_ ? "on" : "off");
  if (const char* e = std::getenv("ASTRAI_STEP_PROFILE"); e && std::string_view(e) == "1")
    profile_ = std::make_unique<StepProfile>();
  thread_ = std::thread([this] { run(); });
}

StepLoop::~StepLoop() {
  shutdown();
  if (profile_) profile_->log();
}

Status StepLoop::validate(const Request& r) const {
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
                            std::to_string(pool_.num_pages()) + " (" + kMoreKvMemory + ")");
  // The sampling ranges have one owner (src/engine/request.h); the API dialects check theirs first.
  if (auto e = validate_sampling(r.sampling, r.max_tokens, r.n, vocab_))
    return invalid_argument(std::string(request_field_name(e->field)) + " " + e->message);
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > kMaxTopLogprobs)
    return invalid_argument("prompt_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) +
                            "] (or -1: off), got " + std::to_string(r.prompt_logprobs));
  if (r.constraint.kind != ConstraintKind::none) {
    if (!r.constraint.grammar) return invalid_argument("the constraint has no compiled grammar");
    if (r.constraint.grammar->vocabulary().size() > vocab_)
      return invalid_argument("the constraint's vocabulary is larger than the model's");
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

void StepLoop::push(Command::Kind kind, RequestId id) {
  auto c = std::make_unique<Command>();
  c->kind = kind;
  c->id = id;
  queue_.push(std::move(c));
}

void StepLoop::cancel(RequestId id) {
  push(Command::Kind::cancel, id);
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

int StepLoop::flush_prefix_cache() {
  auto c = std::make_unique<Command>();
  c->kind = Command::Kind::flush_cache;
  auto fut = c->flushed.get_future();
  {
    std::lock_guard g(shutdown_mu_);
    if (joined_) return flush_cache();  // the loop is gone: nothing else touches the cache
    queue_.push(std::move(c));
  }
  return fut.get();
}

// Unlocked nodes have no locked descendants (radix_cache.h), so evicting leaf-first reaches all of
// them. Written KV pages stay resident after the pool takes them back, and so does what malloc keeps
// on its free lists (every arena: the network threads' too): a flush is the moment to return both.
int StepLoop::flush_cache() {
  const int freed = cache_ ? cache_->evict(cache_->evictable_pages()) : 0;
  update_gauges();
  runner_.discard_pages(pool_.free_pages());
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  return freed;
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

// ---- receive ------------------------------------------------------------------------------------

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
        if (t->req.constraint.grammar) seq->matcher = structured::Matcher(t->req.constraint.grammar);
        if (t->req.constraint.grammar || t->req.sampling.min_tokens > 0) {
          if (!t->req.ignore_eos) {
            const auto ids = model_stop_ids(runner_.model().config(), opts_);
            t->mask_stop_ids.assign(ids.begin(), ids.end());
          }
          t->mask_stop_ids.insert(t->mask_stop_ids.end(), t->req.stop_ids.begin(), t->req.stop_ids.end());
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
      case Command::Kind::pause: paused_ = true; break;
      case Command::Kind::resume: paused_ = false; break;
      case Command::Kind::flush_cache: c->flushed.set_value(flush_cache()); break;
    }
  }
}

void StepLoop::apply_cancels() {
  for (RequestId id : to_cancel_) {
    auto it = tasks_.find(id);
    if (it != tasks_.end()) output_.cancel(*it->second);
  }
  to_cancel_.clear();
}

// ---- the loop -----------------------------------------------------------------------------------

void StepLoop::note_admitted(const StepPlan& plan, Clock::time_point now) {
  for (const Chunk& c : plan.chunks) {
    Task& t = *c.seq->task;
    if (t.admitted_once) continue;
    t.admitted_once = true;
    metrics_.record_queue_wait(ms_between(t.submitted, now));
    if (t.leave_queue()) waiting_count_.fetch_sub(1);
  }
}

bool StepLoop::step() {
  const auto t0 = Clock::now();
  // Schedule.
  StepPlan plan = scheduler_.plan();
  out_of_memory_.insert(out_of_memory_.end(), plan.out_of_memory.begin(), plan.out_of_memory.end());
  if (!in_flight_) finish_out_of_memory();  // else after its tokens are read
  note_admitted(plan, t0);
  if (plan.chunks.empty()) {
    return complete_in_flight();
  }
  // Overlapped, this step's tasks stay (Task::in_flight) until it is processed, a later turn;
  // until it is in flight, the pin goes with this scope.
  PlanPin pin;
  if (overlap_) pin = PlanPin::pin(plan);
  // Build the batch (rows ending at a token still on the device take it from the step in flight).
  const ForwardBatch& batch = batch_builder_.build(plan, runner_.last_draws());
  // The last step's events go out after this step's launch (below) when that is quick, a decode
  // step's graph replay; a step with prompt chunks runs eagerly, and its launch takes long on the
  // host (22 ms for 2,300 rows of qwen3-8b on the H200): they go out first. Overlapped, the step in
  // flight is processed first then, as without overlap (its streams would otherwise wait out the
  // launch: ITL p99 66 -> 106 ms at qwen3-8b's 1,000 streams); the batch is built already, so a
  // sequence that ends now only leaves a row computed for nothing.
  const bool decode = plan.num_tokens == int(plan.chunks.size());
  const auto tb = Clock::now();
  if (!decode && in_flight_) {
    complete_in_flight();
    deliver();
  } else if (delivery_due_ && !decode) {
    deliver();
  }
  const auto t1 = Clock::now();
  // Run.
  if (Status st = runner_.forward(batch); !st.ok()) {
    spdlog::error("step failed: {}", st.message());
    complete_in_flight();
    for (const Chunk& c : plan.chunks) output_.finish(*c.seq, FinishReason::error, {}, st.message());
    return false;
  }
  const auto t2 = Clock::now();
  // The last step's events, while the device runs this one.
  if (delivery_due_) deliver();
  const auto t2d = Clock::now();
  runner_.start_sample(batch_builder_.samples());
  // Overlapped: the step before this one, while the device runs this one.
  Clock::time_point t3 = t2d;  // the draws read (overlapped: the previous step's, if any)
  complete_in_flight(&t3);
  scheduler_.commit(plan);
  const int seqs = int(plan.chunks.size());
  if (overlap_) {
    run_ahead(plan, batch_builder_.samples());
    pin.release();  // complete_in_flight or drop_in_flight unpins it
    in_flight_ =
        InFlight{std::move(plan), {batch_builder_.samples().begin(), batch_builder_.samples().end()}};
  } else {
    runner_.finish_sample(draws_);
    t3 = Clock::now();
    output_.process(plan, batch_builder_.samples(), draws_);
  }
  const auto t4 = Clock::now();
  metrics_.record_step(seqs, std::chrono::duration<double>(t4 - t0).count());
  if (profile_) {
    StepProfile& pr = *profile_;
    pr.last_kind = decode ? 0 : 1;
    StepProfile::Sums& s = pr.kinds[pr.last_kind];
    ++s.steps;
    s.rows += batch.num_tokens();
    s.plan += ms(t0, tb);
    s.forward += ms(t1, t2);
    // Overlapped, sample and process are the previous step's wait and processing, and the device
    // has this step queued meanwhile: no gap to count.
    s.sample += ms(t2d, t3);
    s.process += ms(t3, t4);
    // A step right after another (the loop did not sleep): the device idled from the last draws to
    // this forward's launch.
    if (!overlap_ && pr.last_draws != Clock::time_point{} && ms(pr.last_draws, t0) < 5.0)
      s.gap += ms(pr.last_draws, t1);
    pr.last_draws = t3;
    if (++pr.total % 4000 == 0) pr.log();
  }
  return true;
}

bool StepLoop::complete_in_flight(Clock::time_point* draws_read) {
  if (!in_flight_) {
    finish_out_of_memory();
    return false;
  }
  InFlight f = std::move(*in_flight_);
  in_flight_.reset();
  const PlanPin unpin = PlanPin::adopt(f.plan);  // the tasks may go once it is processed, come what may
  runner_.finish_sample(draws_);
  if (draws_read) *draws_read = Clock::now();
  output_.process(f.plan, f.rows, draws_);
  finish_out_of_memory();
  return true;
}

void StepLoop::drop_in_flight() {
  runner_.drop_samples();
  if (!in_flight_) return;
  const PlanPin unpin = PlanPin::adopt(in_flight_->plan);
  for (const Chunk& c : in_flight_->plan.chunks) forget_draw(*c.seq);
  in_flight_.reset();
}

bool StepLoop::can_run_ahead(const Sequence& s) const {
  const Task& t = *s.task;
  return !s.finished && !t.cancelled && (t.forked || t.req.n == 1) && !s.penalties && !s.matcher.active() &&
         s.generated + 1 < t.req.max_tokens && int(s.tokens.size()) + 1 < max_model_len_;
}

void StepLoop::run_ahead(const StepPlan& plan, std::span<const SampleRow> rows) {
  size_t row = 0;
  int draw = 0;
  for (const Chunk& c : plan.chunks) {
    Sequence& s = *c.seq;
    if (!c.wants_logits) continue;
    if (can_run_ahead(s)) {
      s.tokens.push_back(kDrawnToken);
      s.drawn = draw;
    } else {
      s.sits_out = true;
    }
    draw += rows[row++].num_choices;
  }
}

void StepLoop::finish_out_of_memory() {
  for (Sequence* s : out_of_memory_) output_.finish(*s, FinishReason::length);
  out_of_memory_.clear();
}

void StepLoop::update_gauges() {
  metrics_.set_gauges(scheduler_.num_running(), scheduler_.num_waiting(), uint64_t(pool_.num_pages()),
                      uint64_t(pool_.num_used()), cache_ ? uint64_t(cache_->cached_pages()) : 0,
                      opts_.page_size);
}

void StepLoop::deliver() {
  // Gauges before delivery: whoever reads stats() after seeing an event sees this step's state (or
  // a later one's).
  const auto d0 = profile_ ? Clock::now() : Clock::time_point{};
  update_gauges();
  output_.deliver();
  delivery_due_ = false;
  if (profile_ && profile_->last_kind >= 0) {
    profile_->kinds[profile_->last_kind].deliver += ms(d0, Clock::now());
    profile_->last_kind = -1;
  }
}

void StepLoop::run() {
  for (;;) {
    drain_commands();
    if (stop_loop_.load()) break;
    apply_cancels();
    bool stepped = false;
    try {
      if (!paused_ && !scheduler_.idle()) {
        stepped = step();
      } else if (in_flight_) {  // nothing more to launch (paused, or everything ended): read it now
        complete_in_flight();
      }
    } catch (const std::exception& e) {
      // Nothing in a step should throw; if it does, fail what ran rather than kill the thread.
      spdlog::error("step loop: {}", e.what());
      drop_in_flight();
      for (Sequence* s : scheduler_.all()) output_.finish(*s, FinishReason::error, {}, e.what());
      for (Sequence* s : out_of_memory_) output_.finish(*s, FinishReason::error, {}, e.what());
      out_of_memory_.clear();
    }
    // With deliver_after_launch_ a step's events wait for the next step's launch (step() delivers
    // them while the device runs it) when that step follows at once; otherwise they go now.
    // Overlapped, they were processed after the next step's launch already: they go now.
    if (deliver_after_launch_ && !overlap_ && stepped && !paused_ && !scheduler_.idle())
      delivery_due_ = true;
    else
      deliver();
    if (paused_ || scheduler_.idle()) {
      // Nothing to compute: sleep until a command arrives (or, with a consumer behind on its
      // ring, retry delivery every millisecond).
      queue_.wait(output_.has_backlog() ? std::chrono::microseconds(1000)
                                        : std::chrono::microseconds(std::chrono::hours(1)));
    }
  }
  drain_commands();
  out_of_memory_.clear();  // close_all ends them (they are still in tasks_)
  try {
    complete_in_flight();  // its tokens reach the streams before they close
  } catch (const std::exception& e) {
    spdlog::error("step loop: {}", e.what());
    drop_in_flight();
  }
  output_.close_all();
  update_gauges();
}

// On a GPU a decode step's GEMMs are compute-bound from about 160 rows and run nearer the peak with
// more; measured on the H200 (qwen3-8b, 1,000 requests of 128 / 128 tokens): 15,613 output tok/s at
// 256, 16,530 at 512 (ITL p50 10.2 -> 18.5 ms at that load). vLLM's default on such GPUs is 1,024.
int resolved_max_batch_size(const EngineOptions& o, bool gpu) {
  return o.max_batch_size != 0 ? o.max_batch_size : gpu ? 512 : 256;
}

// ASTRAI_DELIVER_AFTER_LAUNCH=0 / 1 overrides the option (A/B timing). On the H200 (qwen3-8b, 1,000
// requests) delivery took 0.44 ms of a 17.2 ms decode step of 464 rows when it ran between the
// steps.
bool resolved_deliver_after_launch(const EngineOptions& o, bool gpu) {
  if (const char* e = std::getenv("ASTRAI_DELIVER_AFTER_LAUNCH"); e && *e) return std::string_view(e) != "0";
  return o.deliver_after_launch < 0 ? gpu : o.deliver_after_launch != 0;
}

// ASTRAI_OVERLAP=0 / 1 overrides the option (A/B timing) where the model takes drawn tokens.
bool resolved_overlap(const EngineOptions& o, bool gpu, bool model_takes_drawn_tokens) {
  if (!model_takes_drawn_tokens) return false;
  if (const char* e = std::getenv("ASTRAI_OVERLAP"); e && *e) return std::string_view(e) != "0";
  return o.overlap < 0 ? gpu : o.overlap != 0;
}

Result<std::unique_ptr<StepLoop>> make_step_loop(std::unique_ptr<Backend> backend,
                                                 std::unique_ptr<Model> model, const EngineOptions& options) {
  if (!model) return invalid_argument("engine: no model");
  const bool gpu = model->backend().device() != Device::cpu;
  EngineOptions o = options;
  o.max_batch_size = resolved_max_batch_size(options, gpu);
  if (o.page_size < 1 || o.page_size > 1024) return invalid_argument("page size must be in [1, 1024]");
  if (o.max_batch_size < 1)
    return invalid_argument("max batch size must be at least 1 (0: the device's default)");
  if (o.max_queue < 1) return invalid_argument("max queue must be at least 1");
  if (o.max_prefill_tokens < 0) return invalid_argument("max prefill tokens must be >= 0 (0: unlimited)");
  const ModelConfig& cfg = model->config();
  const int64_t max_pos = cfg.max_context();
  if (o.max_model_len > max_pos)
    return invalid_argument("max model length " + std::to_string(o.max_model_len) +
                            " exceeds the model's context of " + std::to_string(max_pos) + " positions");
  const int max_len = int(o.max_model_len > 0 ? o.max_model_len : max_pos);
  // Step buffers first, so that the KV cache is sized from what they leave.
  StepLimits limits;
  limits.max_seqs = o.max_batch_size;
  limits.max_tokens = o.max_prefill_tokens > 0 ? o.max_prefill_tokens + o.max_batch_size : 0;
  limits.max_model_len = max_len;
  limits.page_size = o.page_size;
  ASTRAI_RETURN_IF_ERROR(model->reserve_steps(limits));
  KvPoolSizing sz;
  sz.max_pages = o.max_pages;
  sz.budget_bytes = o.kv_memory_bytes;
  sz.memory_fraction = o.kv_memory_fraction > 0 ? o.kv_memory_fraction : gpu ? 0.9 : 0.5;
  sz.available_bytes = model->backend().memory_available();  // free device memory on a GPU
  sz.bytes_per_page = model->kv_bytes_per_page(o.page_size);
  // More than every batch slot at full context can never be used.
  sz.cap = int64_t(o.max_batch_size) * ((max_len + o.page_size - 1) / o.page_size);
  ASTRAI_ASSIGN_OR_RETURN(int pages, kv_pool_pages(sz));
  KvCache kv;
  try {
    kv = model->allocate_kv(pages, o.page_size);
  } catch (const std::exception& e) {
    return resource_exhausted("cannot allocate the KV cache (" + std::to_string(pages) + " pages, " +
                              memory_size(size_t(pages) * sz.bytes_per_page) + "): " + e.what());
  }
  spdlog::debug("engine: {} KV pages of {} tokens ({} bytes each), context {}", pages, o.page_size,
                sz.bytes_per_page, max_len);
  if (o.cuda_graphs) {
    Result<int> graphs = [&]() -> Result<int> {
      try {
        return model->capture_decode_graphs(kv);
      } catch (const std::exception& e) {
        return internal_error(std::string("capturing the decode graphs failed: ") + e.what());
      }
    }();
    ASTRAI_RETURN_IF_ERROR(graphs.status());
  }
  return std::unique_ptr<StepLoop>(  // NOLINT(modernize-make-unique): the constructor is private
      new StepLoop(std::move(backend), std::move(model), o, max_len, pages, std::move(kv)));
}

}  // namespace astrai
