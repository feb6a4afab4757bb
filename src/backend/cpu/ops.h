// The CPU implementations of the Backend ops (f32), one file per family:
//   linear.cpp (OpenBLAS), norm.cpp, rope.cpp, elementwise.cpp (embedding, swiglu, add, gather,
//   convert), attention.cpp (kv_store, paged_attention), sample.cpp. CpuBackend forwards to these; the
//   argument order and shapes are those of src/backend/backend.h.
#pragma once

#include <span>
#include <vector>

#include "src/backend/backend.h"

namespace astrai::cpu {

void embedding(const Tensor& table, const Tensor& ids, Tensor out);
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out);
void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& w, float eps, Tensor out);
void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out);
void rope(Tensor x, const Tensor& positions, const Tensor& cos_sin);
void swiglu(const Tensor& gate, const Tensor& up, Tensor out);
void add(const Tensor& a, const Tensor& b, Tensor out);
void kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache, Tensor v_cache);
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionBatch& batch, float scale, Tensor out);
void gather_rows(const Tensor& x, const Tensor& rows, Tensor out);
void convert(const Tensor& src, Tensor dst);
void sample(const SampleBatch& batch);

// sample.cpp's steps, also used by sched/sampler.cpp (the host sampler is this code):
// logits edits 1-2 of one draw in place (edits: the batch's entries the row points into) ...
void apply_sample_edits(std::span<float> logits, const SampleRowParams& p, const SampleEdit* edits);
// ... and step 3 for temperature > 0: the kept tokens, most likely first (ties by id), with their
// probabilities renormalised to sum 1 (float64).
struct SampleCandidate {
  int32_t token;
  double prob;
};
void sampling_candidates(std::span<const float> logits, float temperature, int top_k, float top_p,
                         float min_p, std::vector<SampleCandidate>& out);

}  // namespace astrai::cpu
