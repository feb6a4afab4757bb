// The CPU implementations of the Backend ops (f32), one file per family:
//   linear.cpp (batch-invariant; its tiles in lanes.h, isa.cpp picks the path), norm.cpp, rope.cpp,
//   elementwise.cpp (embedding, swiglu, add, gather, convert, dequantize), attention.cpp (kv_store,
//   paged_attention), sample.cpp; the training ops beside their forwards (gemm and linear_backward in
//   linear.cpp, rms_norm_train/backward in norm.cpp, ...) and in attention_train.cpp and cross_entropy.cpp.
//   CpuBackend forwards to these; the argument order and shapes are those of src/backend/backend.h.
#pragma once

#include <span>
#include <vector>

#include "src/backend/backend.h"

namespace astrai::cpu {

void embedding(const Tensor& table, const Tensor& ids, Tensor out);
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out);
void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& w, float eps, Tensor out);
// The instruction-set paths of the kernels that give the same bits on every path (linear,
// paged_attention, attention_train and its backward; lanes.h). `best` is the widest this CPU has; checked_isa
// resolves `best` and refuses (with an error naming `op`) a path this CPU lacks.
enum class Isa { best, avx512, avx2, baseline };
bool isa_available(Isa isa);
Isa checked_isa(Isa isa, const char* op);
void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out, Isa isa = Isa::best);
void rope(Tensor x, const Tensor& positions, const Tensor& cos_sin);
void swiglu(const Tensor& gate, const Tensor& up, Tensor out);
void add(const Tensor& a, const Tensor& b, Tensor out);
void kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache, Tensor v_cache);
void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const AttentionBatch& batch, float scale, Tensor out, Isa isa = Isa::best);
void gather_rows(const Tensor& x, const Tensor& rows, Tensor out);
void take_tokens(Tensor ids, const Tensor& moves, const Tensor& draws);
void convert(const Tensor& src, Tensor dst);
void dequantize(const Tensor& q, const Tensor& scale, int64_t block_rows, int64_t block_cols, Tensor out);
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

// Training ops (backend.h, "training ops").
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha, float beta, Tensor c);
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, Tensor dw,
                     const Tensor* dbias);
void rms_norm_train(const Tensor& x, const Tensor& w, float eps, Tensor out, Tensor rstd);
void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor dx,
                       Tensor dw, bool accumulate);
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor dtable);
void rope_backward(Tensor dx, const Tensor& positions, const Tensor& cos_sin);
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor dgate, Tensor dup);
void attention_train(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_begin, float scale,
                     Tensor out, Tensor lse, Isa isa = Isa::best);
void attention_train_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& kv_begin, const Tensor& out, const Tensor& lse, float scale,
                              Tensor dq, Tensor dk, Tensor dv, Isa isa = Isa::best);
void cross_entropy(const Tensor& logits, const Tensor& targets, float label_smoothing, float grad_scale,
                   Tensor losses, Tensor dlogits);
// Optimizer ops (optimizer.cpp).
void adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWStep& s);
double sum_squares(const std::vector<Tensor>& xs);

}  // namespace astrai::cpu
