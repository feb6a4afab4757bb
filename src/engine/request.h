// The engine's public value types: what a request asks for, the events that come back, the
// consumer end of a request (Stream), engine options and stats. A leaf: every layer may include it
// (sched/ produces these, src/engine/ wraps the step loop, net/ and the CLI consume them), and it
// depends on nothing but the standard library.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace astrai {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;
  int top_k = 0;  // 0: off
  float min_p = 0.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;  // same seed -> same tokens, whatever else is in the batch
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool logprobs = false;  // return the sampled token's logprob
  int top_logprobs = 0;   // and this many most likely alternatives (0..20)
  // No stop id (the model's unless ignore_eos, and the request's) is drawn before a choice has this
  // many tokens (vLLM's min_tokens); past max_tokens it has no effect.
  int min_tokens = 0;
};

enum class FinishReason : uint8_t { none, stop, length, cancelled, error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

// Structured output: what the generated text must match. The API dialects read it (OpenAI's
// response_format, vLLM's guided_regex, offline lines) into a ConstraintSpec; Generation::start
// compiles it (src/structured/, cached by its source) into the Request's Constraint.
enum class ConstraintKind : uint8_t { none, json_object, json_schema, regex };
const char* constraint_kind_name(ConstraintKind k);  // "json_object", "json_schema", "regex"

namespace structured {
struct Grammar;      // src/structured/grammar.h
class TokenGrammar;  // src/structured/token_grammar.h
}  // namespace structured

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::none;
  std::string source;  // json_schema: the schema's JSON text; regex: the pattern
  // The byte grammar of `source` when reading the request compiled it (to check it); Generation::start
  // then builds the token grammar from it instead of compiling the source again. May be null.
  std::shared_ptr<const structured::Grammar> grammar;
};

struct Constraint {
  ConstraintKind kind = ConstraintKind::none;
  std::shared_ptr<structured::TokenGrammar> grammar;  // set whenever kind != none
};

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 256;           // generated tokens per choice
  int n = 1;                      // choices sharing the prompt's pages
  std::vector<int32_t> stop_ids;  // in addition to the model's eos/stop ids
  bool ignore_eos = false;
  // >= 0: the logprob of each prompt token after the first under the model (what the legacy
  // completions API's echo with logprobs reports, an evaluation's loglikelihood), with this many
  // most likely alternatives (<= kMaxTopLogprobs), as TokenEvents with `prompt` set, in order and
  // before any generated token. The prompt is then computed whole (no prefix-cache reuse); -1: off.
  int prompt_logprobs = -1;
  // Each choice's tokens are drawn only from those the grammar allows; a stop id only where the
  // text is complete, and the choice ends with `stop` once nothing may follow.
  Constraint constraint;
  // Called by the step-loop thread after it pushed events for this request in a step (at most
  // once per step). Must not block: net/ posts to the connection's executor.
  std::function<void()> notify;
};

// ---- One request schema ------------------------------------------------------------------------
// Every API dialect (OpenAI, Anthropic, WebSocket, offline JSONL) reads its own field names and its
// own documented ranges, then maps onto Request and checks it here; the step loop checks the same
// way, so a request a dialect accepts is one the engine runs. The ranges below are the engine's:
// what the sampler and the scheduler can execute.

// The fields validate_sampling checks, by their canonical (Request) names.
enum class RequestField : uint8_t {
  max_tokens,
  n,
  temperature,
  top_p,
  top_k,
  min_p,
  frequency_penalty,
  presence_penalty,
  repetition_penalty,
  top_logprobs,
  logit_bias,
  min_tokens,
};
const char* request_field_name(RequestField f);  // "max_tokens", "top_p", ...

inline constexpr int kMaxChoices = 128;     // Request::n
inline constexpr int kMaxTopLogprobs = 20;  // SamplingParams::top_logprobs

struct ParamError {
  RequestField field;
  std::string message;  // what is wrong, without the field's name: "must be in (0, 1], got 1.5"
};

// max_tokens >= 1; n in [1, kMaxChoices]; temperature finite and >= 0; top_p in (0, 1]; top_k >= 0
// (0: off); min_p in [0, 1]; repetition_penalty finite and > 0; frequency / presence penalty finite;
// top_logprobs in [0, kMaxTopLogprobs]; logit_bias values finite and, when vocab_size > 0, tokens in
// [0, vocab_size) (a dialect that does not know the vocabulary passes 0; the engine checks again);
// min_tokens >= 0.
// Returns the first field that fails.
std::optional<ParamError> validate_sampling(const SamplingParams& s, int max_tokens, int n, int vocab_size);

struct TopLogprob {
  int32_t token;
  float logprob;
};

// Events of one choice: one per generated token, in order; the last one has `finish` set.
// finish == length: the last event also carries the last token. finish == stop: a stop id was
// sampled; the event has token -1 (the stop id is not part of the output and not counted in
// completion tokens). cancelled / error: token -1.
struct TokenEvent {
  int32_t token = -1;                        // -1 for a pure finish event
  int choice = 0;                            // 0..n-1
  float logprob = 0.0f;                      // when SamplingParams::logprobs
  std::vector<TopLogprob> top;               // when top_logprobs > 0
  FinishReason finish = FinishReason::none;  // set on the last event of a choice
  std::string error;                         // when finish == error
  // A prompt token's logprob (Request::prompt_logprobs): `token` is that prompt token, `logprob` and
  // `top` as for a generated one; choice 0, never finishing. Not a generated token.
  bool prompt = false;
};

using RequestId = uint64_t;

struct RequestState;  // shared between the step loop and the Stream; defined in sched/

// The consumer end of one request: events in order, through a lock-free SPSC ring.
class Stream {
 public:
  Stream() = default;
  explicit Stream(std::shared_ptr<RequestState> s);
  RequestId id() const;
  // Pops the next event without blocking; false when none is ready yet.
  bool poll(TokenEvent& out);
  // Blocks until the next event (for CLI / tests); false once every choice has finished.
  bool wait(TokenEvent& out);
  bool done() const;  // every choice finished and all events consumed
  int prompt_tokens() const;

 private:
  std::shared_ptr<RequestState> state_;
};

struct EngineOptions {
  int page_size = 16;
  int64_t kv_memory_bytes = 0;  // 0: use kv_memory_fraction of free memory
  // Share of the memory left after the weights and step buffers (free device memory on a GPU,
  // MemAvailable on the CPU) for the KV cache; 0: the device's default, 0.9 on a GPU (vLLM's),
  // 0.5 on the CPU (the host runs other things).
  double kv_memory_fraction = 0;
  int max_pages = 0;              // tests: exact pool size (overrides memory sizing)
  int max_prefill_tokens = 2048;  // token budget per step (chunked prefill); 0 = unlimited
  int max_batch_size = 0;         // sequences per step; 0: the device's (512 on a GPU, 256 on the CPU)
  int max_queue = 1024;           // waiting requests; past it submit fails (resource_exhausted)
  bool prefix_cache = true;
  int max_model_len = 0;  // 0: ModelConfig::max_context()
  // Model-level stop ids besides config.eos_token_ids (e.g. Tokenizer::special_tokens().stop_ids,
  // which include generation_config.json's); ignored, like eos, by Request::ignore_eos.
  std::vector<int32_t> stop_ids;
  int stream_capacity = 256;  // events per request's SPSC ring (the surplus waits in the loop)
  // Decode-only steps replay a CUDA graph per batch bucket (captured at start-up) where the
  // backend has graphs; false runs them eagerly (same results, bit for bit).
  bool cuda_graphs = true;
  // When a step's events go to the requests' rings and consumers: -1, after the next step's launch
  // where the device runs asynchronously (a GPU: the delivery then overlaps the device's work) and
  // at once on the CPU; 0, always at once; 1, always after the next launch (tests). Either way they
  // go at once when no step follows right away, and before a next step with prompt chunks (its
  // eager launch is long on the host). Overlapped steps (below) process a step after the next one's
  // launch already, so their events go at once.
  int deliver_after_launch = -1;
  // Overlapped steps (SGLang's overlap scheduler): the loop plans and launches step N + 1 before it
  // reads step N's draws, whose tokens step N + 1 takes on the device, so the host's planning and
  // output processing hide behind the device's work. -1: on where the device runs asynchronously
  // (a GPU) and the model takes drawn tokens (not tensor-parallel); 0: off; 1: on wherever the
  // model can (tests run the CPU this way). The same tokens either way.
  int overlap = -1;
};

struct LatencySummary {
  double avg_ms = 0, p50_ms = 0, p99_ms = 0;
  uint64_t count = 0;
};

struct EngineStats {
  uint64_t running = 0, waiting = 0, finished = 0, cancelled = 0, failed = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  LatencySummary ttft, itl, e2e, queue_wait;
  double avg_decode_tps = 0;
  uint64_t kv_pages_total = 0, kv_pages_used = 0;
  int page_size = 0;
  double prefix_hit_rate = 0;
  uint64_t prefix_cached_pages = 0;
  uint64_t steps = 0;
  double avg_batch_size = 0;
  double steps_per_s = 0;
  double uptime_s = 0;
  uint64_t preemptions = 0;
};

}  // namespace astrai
