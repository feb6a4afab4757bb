// The pieces of the sample op (src/backend/backend.h, "sampling") that the CPU and the CUDA
// implementations must compute bit for bit alike: the layout of the per-draw parameters and edit
// entries they both read, the counter-based uniform generator, and the float arithmetic of the
// logit bias and penalties. Plain C++ that nvcc also compiles (__host__ __device__ under nvcc).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ASTRAI_SAMPLE_HD __host__ __device__ __forceinline__
#else
#define ASTRAI_SAMPLE_HD inline
#endif

namespace astrai {

// One draw of the op (one output row). Several draws may read the same logits row (the n choices
// of a request's first token) and share its edits. Stored as 16 int32 words of a device tensor.
struct SampleRowParams {
  uint64_t seed = 0;         // the request's RNG key
  int32_t src_row = 0;       // logits row to draw from
  int32_t choice = 0;        // RNG key: the choice drawn for
  int32_t index = 0;         // RNG key: tokens that choice generated so far
  int32_t top_k = 0;         // 0: off
  int32_t top_logprobs = 0;  // 0..kSampleMaxTopLogprobs alternatives to report
  int32_t want_logprob = 0;  // nonzero: report the drawn token's logprob (implied by top_logprobs)
  float temperature = 1.0f;  // <= 0: greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // Edits of this draw's logits (SampleEdit): the bias entries [edit_begin, penalty_begin), applied
  // in order (a token may repeat), then the penalty entries [penalty_begin, edit_end), one per token.
  int32_t edit_begin = 0;
  int32_t penalty_begin = 0;
  int32_t edit_end = 0;
  int32_t reserved = 0;
};
static_assert(sizeof(SampleRowParams) == 72 && sizeof(SampleRowParams) % 8 == 0);
constexpr int kSampleRowWords = int(sizeof(SampleRowParams) / 4);

// A bias entry: logits[token] += bias. A penalty entry: token seen in the prompt or the output
// (`seen`: the repetition penalty applies) and generated `count` times (frequency / presence).
struct SampleEdit {
  int32_t token = 0;
  float bias = 0.0f;
  int32_t seen = 0;
  int32_t count = 0;
};
static_assert(sizeof(SampleEdit) == 16);
constexpr int kSampleEditWords = 4;

// As kMaxTopLogprobs (src/engine/request.h, which backend/ may not include).
constexpr int kSampleMaxTopLogprobs = 20;
// The output row of a draw, in int32 words: [0] token, [1] its logprob (f32 bits), then
// `max_top_logprobs` pairs (token, logprob f32 bits), most likely first; only the first
// top_logprobs pairs of a row are written.
ASTRAI_SAMPLE_HD constexpr int sample_out_words(int max_top_logprobs) {
  return 2 + 2 * max_top_logprobs;
}

namespace sample_math {

// Float operations that must not be fused into an FMA (nvcc contracts a * b + c by default; the
// host build targets x86-64 without FMA), so the CPU and the GPU round the same way.
ASTRAI_SAMPLE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
ASTRAI_SAMPLE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
ASTRAI_SAMPLE_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// splitmix64's finaliser: a bijection with full avalanche.
ASTRAI_SAMPLE_HD uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// Step 2 for one penalty entry: repetition (CTRL / HF: divide positive logits, multiply negative
// ones) when the token was seen, then frequency and presence over output counts (OpenAI).
ASTRAI_SAMPLE_HD float apply_penalty(float l, const SampleEdit& e, float repetition, float frequency,
                                     float presence) {
  if (e.seen && repetition != 1.0f) l = l > 0 ? div_rn(l, repetition) : mul_rn(l, repetition);
  if (e.count > 0) l = add_rn(l, -add_rn(mul_rn(frequency, float(e.count)), presence));
  return l;
}

// Whether step 3 keeps every candidate of a draw with temperature > 0 (`candidates`: the tokens
// with e > 0): then step 4 walks them in id order (backend.h, "sampling").
ASTRAI_SAMPLE_HD bool keeps_every_candidate(const SampleRowParams& p, int64_t candidates) {
  return p.top_p >= 1.0f && p.min_p <= 0.0f && (p.top_k <= 0 || p.top_k >= candidates);
}

}  // namespace sample_math

// The uniform draw in [0, 1) for (seed, choice, index): a pure function of its key, so a request's
// draws do not depend on the batch around it or on the device.
ASTRAI_SAMPLE_HD double counter_uniform(uint64_t seed, uint64_t choice, uint64_t index) {
  using sample_math::mix64;
  uint64_t x = mix64(seed + 0x9E3779B97F4A7C15ull);
  x = mix64(x ^ (choice * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull));
  x = mix64(x ^ (index * 0xA0761D6478BD642Full + 0xE7037ED1A0B428DBull));
  return double(x >> 11) * 0x1.0p-53;
}

}  // namespace astrai
