// The Backend interface: every op the decoder forward (and later the trainer) needs, implemented
// by backend/cpu (f32, OpenBLAS, OpenMP) and gpu/ (bf16, cuBLASLt, own kernels) with the same names
// and argument order. Tensors are views on the backend's device; shapes are in the comments.
// All tensors are row-major contiguous unless a stride is noted. Index tensors are int32.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/backend/sample_math.h"
#include "src/core/status.h"
#include "src/core/tensor.h"

namespace astrai {

// Describes a packed batch of sequences for paged attention (all int32, on the backend's device):
//   q_start   [S+1]  prefix sums of query tokens per sequence (rows of q belonging to sequence s:
//                    q_start[s] .. q_start[s+1])
//   kv_len    [S]    tokens of sequence s in the KV cache after this step's tokens were stored
//   page_table [S, max_pages]  physical page of each logical page of sequence s
// Query row i of sequence s sits at position kv_len[s] - (q_start[s+1] - q_start[s]) + (i - q_start[s])
// and attends causally to KV positions [0, that position].
struct AttentionBatch {
  Tensor q_start, kv_len, page_table;
  int num_seqs = 0;
  int max_pages = 0;
  int page_size = 16;
  int max_q_len = 0;   // longest query run (launch sizing on the GPU)
  int max_kv_len = 0;  // longest kv_len
  // A host count of leading one-query sequences: sequences [0, num_decode_seqs) have one query
  // each (rows 0 .. num_decode_seqs - 1). A hint for kernel choice (the CUDA backend runs them on
  // its decode kernel in a step that also has long query runs); 0 always works, and the result
  // does not depend on it beyond rounding.
  int num_decode_seqs = 0;
};

// ---- sampling -----------------------------------------------------------------------------------
// One step's draws from the forward's logits (the semantics of sched/sampler.h, on the device).
// For draw r, with l = logits[rows[r].src_row, :] (V = vocab):
//   0. mask (optional): l[t] = -inf where bit t of mask[src_row] is clear
//   1. bias entries in order: l[t] += bias
//   2. penalty entries: l[t] = seen ? (l[t] > 0 ? l[t] / rep : l[t] * rep) : l[t];
//                       l[t] -= frequency * count + presence * (count > 0)
//   3. temperature <= 0: token = argmax l (lowest id on ties). Otherwise e[t] = exp((l[t] - max l) / T)
//      over the tokens where it is > 0, in (e desc, id asc) order; keep the first top_k (when
//      0 < top_k), then the shortest prefix whose mass reaches top_p of that set, then the tokens
//      with e >= min_p * e_max (at least one). All three keep a prefix of the order.
//   4. u = counter_uniform(seed, choice, index) (src/backend/sample_math.h); the token is the first
//      of the kept prefix whose cumulative mass exceeds u * (its mass), else its last. When step 3
//      keeps every candidate (top_k off or >= their count, top_p >= 1, min_p <= 0: the OpenAI
//      default; sample_math::keeps_every_candidate), the walk is over the candidates in ascending id
//      order instead. Any fixed order of the kept tokens draws from the same distribution (a token
//      is drawn for u in an interval of width e / mass, wherever it sits); the (e desc) order only
//      matters for deciding what a truncation keeps, and without one, id order needs no selection:
//      a max, a prefix sum, a search (O(V) on the CPU, two passes over the row on the GPU).
//   5. logprob = raw[token] - logsumexp(raw) and the top_logprobs most likely tokens of the raw
//      (unedited) row, (raw desc, id asc), with their logprobs.
// The GPU computes the masses in f32 and sums them in f64: it draws the CPU's token whenever u is
// not within float rounding of a cumulative boundary.
struct SampleBatch {
  Tensor logits;     // [L, V] f32
  Tensor rows;       // [R, kSampleRowWords] i32: SampleRowParams per draw
  Tensor edits;      // [E, kSampleEditWords] i32: SampleEdit entries the rows point into (E may be 0)
  Tensor mask;       // optional [L, ceil(V / 32)] i32 bit sets of allowed tokens; data == nullptr: none
  Tensor out;        // [R, sample_out_words(max_top_logprobs)] i32
  Tensor workspace;  // sample_workspace_bytes(R, V) bytes (nothing when that is 0)
  int max_top_logprobs = 0;  // capacity of out's top-logprob pairs, <= kSampleMaxTopLogprobs
};
// What is wrong with the batch's shapes, dtypes or devices ("" when nothing); both backends check
// with it before they touch a tensor (the rows' contents are checked where they are read).
std::string sample_batch_error(const SampleBatch& batch, Device device);
// The same for take_tokens' tensors (Backend::take_tokens): ids [T], moves [M, 2], draws [D, W >= 1],
// all contiguous i32 on `device`. The indices themselves are checked by the caller (Model::forward
// validates a batch's moves on the host) and again by the CPU op.
std::string take_tokens_error(const Tensor& ids, const Tensor& moves, const Tensor& draws, Device device);
// The same for dequantize's operands (Backend::dequantize).
std::string dequantize_error(const Tensor& q, const Tensor& scale, int64_t block_rows, int64_t block_cols,
                             const Tensor& out, Device device);

// One AdamW update (step t >= 1), the definition every backend's adamw op implements. With
// g = grad * grad_scale (the clip factor), bc1 = 1 - beta1^t, bc2 = 1 - beta2^t, as
// torch.optim.AdamW computes it:
//   p <- p * (1 - lr * wd)                       (decoupled decay; wd = 0 where decay is off)
//   m <- beta1 m + (1 - beta1) g
//   v <- beta2 v + (1 - beta2) g^2
//   p <- p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
struct AdamWStep {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  float grad_scale = 1;
  int64_t t = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // The dtype activations and weights use on this backend (cpu: f32, cuda: bf16).
  virtual DType compute_dtype() const = 0;
  // The dtype a weight matrix (linear's w, embedding's table) is kept in when its checkpoint stores
  // it as `stored`: compute_dtype() (converted on load) unless this backend's linear and embedding
  // take `stored` as it is. The CPU keeps bf16 matrices in bf16 and widens them as it reads them
  // (exact: the results of f32 copies, with half their memory and half the bytes a decode step reads).
  // fp8_e4m3 is for linear's w alone (a Weight with its scales; embedding tables are widened), and
  // the loader keeps an fp8 matrix so only where LoadOptions asks it to.
  virtual DType weight_dtype(DType stored) const {
    (void)stored;
    return compute_dtype();
  }
  // Called by the loader once for each matrix it keeps in fp8 (weight_dtype(fp8_e4m3) ==
  // fp8_e4m3): the backend reserves what its linear ops need to run it, so that no step allocates.
  // The default reserves nothing.
  virtual void prepare_weight(const Weight& w) { (void)w; }

  // ---- memory -------------------------------------------------------------------------------
  virtual Buffer alloc(size_t bytes) = 0;                        // zero-initialised
  virtual void upload(Tensor dst, const void* host_src) = 0;     // dst.nbytes() bytes
  virtual void download(void* host_dst, const Tensor& src) = 0;  // src.nbytes() bytes
  virtual void synchronize() = 0;
  // Bytes the KV cache may be sized from: free device memory on a GPU, MemAvailable on the host
  // (this default, which the CPU backend keeps). 0 when unknown.
  virtual int64_t memory_available() const;

  // ---- forward ops -----------------------------------------------------------------------------
  // out[t, :] = table[ids[t], :]            table [V, H], ids [T] i32, out [T, H]; table in
  //   weight_dtype()'s dtype, out in compute_dtype()
  virtual void embedding(const Tensor& table, const Tensor& ids, Tensor out) = 0;

  // out = x / sqrt(mean(x^2) + eps) * w     x, out rows of D ([R, D] or [T, heads, D]), w [D];
  // in place allowed. Used per token (D = hidden) and per head (q/k norm: x [T, heads, head_dim],
  // possibly a column slice of the qkv buffer).
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) = 0;

  // residual += x; out = rms_norm(residual)  (the fused pre-norm of the next sub-layer)
  virtual void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& w, float eps, Tensor out) = 0;

  // out = x @ w^T (+ bias)                  x [M, K], w [N, K] (nn.Linear layout), bias [N], out [M, N]
  //   x and out may have a row stride larger than their width (column slices); w is contiguous,
  //   in compute_dtype() or weight_dtype()'s dtype (fp8_e4m3 with its scales: w = values * scale).
  virtual void linear(const Tensor& x, const Weight& w, const Tensor* bias, Tensor out) = 0;

  // In-place rotary embedding, Hugging Face rotate-half pairing: dims (i, i + D/2) rotate together.
  //   x [T, heads, D] (row stride may exceed heads*D: q/k may be column slices of one qkv buffer),
  //   positions [T] i32, cos_sin [max_pos, D] f32: cos in [:, :D/2], sin in [:, D/2:].
  virtual void rope(Tensor x, const Tensor& positions, const Tensor& cos_sin) = 0;

  // out = silu(gate) * up                   gate, up, out [T, F] (rows; gate/up may be the two halves
  //                                          of one fused gate_up buffer)
  virtual void swiglu(const Tensor& gate, const Tensor& up, Tensor out) = 0;

  // out = a + b (same shape)
  virtual void add(const Tensor& a, const Tensor& b, Tensor out) = 0;

  // Writes each token's K and V rows into its cache slot (slot = page * page_size + offset).
  //   k, v [T, KVH, D] (rows may be strided); slots [T] i32; k_cache, v_cache [num_pages * page_size, KVH, D]
  virtual void kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor k_cache,
                        Tensor v_cache) = 0;

  // Causal grouped-query attention over the paged cache (the new tokens' K/V already stored).
  //   q [T, H, D] (rows may be strided) -> out [T, H, D]; head h reads KV head h / (H / KVH);
  //   scores scaled by `scale`; softmax in f32 (max-subtracted).
  virtual void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                               const AttentionBatch& batch, float scale, Tensor out) = 0;

  // ---- fused forward ops ------------------------------------------------------------------------
  // Several ops of the decoder as one, so a decode step launches fewer kernels. Each is defined as
  // the sequence of unfused ops it replaces, which is what these defaults run (the CPU backend keeps
  // them); a backend that fuses must match that sequence within its dtype's rounding.

  // The attention prologue: q/k RMSNorm per head when q_norm is given (Qwen3; k_norm with it), RoPE
  // on q and k, then K and V into their cache slots. q, k are updated in place. Equals
  //   rms_norm(q, *q_norm, eps, q); rms_norm(k, *k_norm, eps, k);   (when q_norm)
  //   rope(q, positions, cos_sin); rope(k, positions, cos_sin); kv_store(k, v, slots, k_cache, v_cache)
  //   q [T, H, D], k, v [T, KVH, D] (rows may be strided: column slices of one qkv buffer);
  //   q_norm, k_norm [D]; the rest as in rope and kv_store.
  virtual void rope_kv_store(Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm, const Tensor* k_norm,
                             float eps, const Tensor& positions, const Tensor& cos_sin, const Tensor& slots,
                             Tensor k_cache, Tensor v_cache);

  // The attention between the qkv and o projections: rope_kv_store, then paged_attention of the
  // rotated q (the arguments as there). q's contents are unspecified after: a decode step on the
  // CUDA backend rotates q inside its attention kernel and leaves the buffer as it was.
  virtual void rope_attention(Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm, const Tensor* k_norm,
                              float eps, const Tensor& positions, const Tensor& cos_sin, const Tensor& slots,
                              Tensor k_cache, Tensor v_cache, const AttentionBatch& batch, float scale,
                              Tensor out);

  // A sub-layer's pre-norm and its first projection, the residual written to a second buffer:
  //   add(residual, x, residual_out); rms_norm(residual_out, norm_w, eps, h); linear(h, w, bias, out)
  //   residual, x, residual_out, h [T, hidden]; w [N, hidden]; out [T, N]. residual_out must not
  //   overlap x; it may be residual itself. h is where the normed rows go when the backend does not
  //   fuse (its contents are unspecified after). A decode step's GEMV on the GPU computes the norm in
  //   each block instead, which is why the residual is not updated in place: its blocks all read it.
  virtual void add_rms_norm_linear(const Tensor& residual, const Tensor& x, const Tensor& norm_w, float eps,
                                   Tensor residual_out, Tensor h, const Weight& w, const Tensor* bias,
                                   Tensor out);

  // The MLP sub-layer after its pre-norm's residual add (x is the attention's output):
  //   add_rms_norm_linear(residual, x, norm_w, eps, residual_out, h, w_gate_up, nullptr, gate_up);
  //   swiglu(gate_up[:, :F], gate_up[:, F:], act); linear(act, w_down, nullptr, out)
  //   w_gate_up [2F, hidden] (gate rows, then up rows), gate_up [T, 2F], act [T, F], w_down [N, F],
  //   out [T, N]; the rest as in add_rms_norm_linear. gate_up and act are where the intermediate
  //   values go when the backend does not fuse (their contents are unspecified after); out may be x.
  virtual void add_rms_norm_mlp(const Tensor& residual, const Tensor& x, const Tensor& norm_w, float eps,
                                Tensor residual_out, Tensor h, const Weight& w_gate_up, Tensor gate_up,
                                Tensor act, const Weight& w_down, Tensor out);

  // Copies rows: out[i, :] = x[rows[i], :]     x [T, H], rows [R] i32, out [R, H]
  virtual void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) = 0;

  // Tokens the previous step drew, taken into this step's inputs without a trip to the host (the
  // overlapped step loop): ids[moves[i, 0]] = draws[moves[i, 1], 0] for each row i of moves.
  //   ids [T] i32; moves [M, 2] i32; draws [D, W] i32 (the sample op's output: the token in
  //   column 0). The CPU and CUDA backends implement it; the default throws.
  virtual void take_tokens(Tensor ids, const Tensor& moves, const Tensor& draws);

  // Converts between dtypes (f32 <-> bf16/f16), same shape.
  virtual void convert(const Tensor& src, Tensor dst) = 0;

  // Widens a block-scaled fp8 matrix (an fp8 checkpoint's weight, src/model/weights.h):
  //   out[i, j] = f32(q[i, j]) * f32(scale[i / block_rows, j / block_cols]), then out's dtype
  //   q [R, C] fp8_e4m3; scale [ceil(R / block_rows), ceil(C / block_cols)] f32, bf16 or f16;
  //   out [R, C] f32, bf16 or f16; all contiguous on the backend's device.
  // One f32 multiply of exact inputs, rounded once, then converted (round to nearest even): what
  // (q.float() * scale.float()).to(dtype) gives in PyTorch. The CPU and CUDA backends implement
  // it; the default throws.
  virtual void dequantize(const Tensor& q, const Tensor& scale, int64_t block_rows, int64_t block_cols,
                          Tensor out);

  // ---- sampling (SampleBatch above) -----------------------------------------------------------------
  // Draws every row of `batch` into batch.out; reads only device tensors (no host values but sizes).
  // The CPU and CUDA backends implement it; any other inherits a default that throws
  // "sample: not implemented on the <name> backend" (a backend for tests need not have it).
  virtual void sample(const SampleBatch& batch);
  // Device scratch `sample` needs for `rows` draws over `vocab` tokens (allocate once, at the
  // largest); the default is none.
  virtual size_t sample_workspace_bytes(int rows, int vocab) const;

  // ---- training ops ----------------------------------------------------------------------------
  // Forward/backward pairs for train/ (llm.c style: each op's math and shapes above it; the
  // forward saves what its backward needs). Conventions: d<name> is the gradient of the loss with
  // respect to <name>. Gradients of parameters (dw, dbias, dtable) are ACCUMULATED (+=), so a
  // tied weight or a micro-batch adds into the same buffer; gradients of activations are
  // overwritten unless the op says otherwise. A backend without them inherits defaults that throw
  // "<op>: not implemented on the <name> backend"; supports_training() says which.
  // Dtypes: activations, weights and activation gradients are compute_dtype() (cpu f32; cuda
  // bf16, accumulated in f32 inside each op); parameter gradients, rstd, lse, logits and losses are
  // always f32 (mixed precision: the trainer keeps f32 master weights and converts them).
  virtual bool supports_training() const;

  // C = alpha * op(A) @ op(B) + beta * C      op(A) [M, K], op(B) [K, N], C [M, N]
  //   op(A) = A^T when trans_a (A stored [K, M]), likewise B. All 2-D with a contiguous last dim;
  //   row strides may exceed the width (column slices). beta = 0 ignores C's old contents.
  virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha, float beta,
                    Tensor c);

  // linear forward is linear() above: y = x @ w^T + bias.
  // Backward:  dx = dy @ w           dy [M, N], w [N, K], dx [M, K]   (skipped when dx is null)
  //            dw += dy^T @ x        x [M, K], dw [N, K]
  //            dbias += sum_m dy[m]  dbias [N]                        (skipped when null)
  virtual void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx,
                               Tensor dw, const Tensor* dbias);

  // A sub-layer's output projection with its residual add (the training forward's o_proj and
  // down_proj):  out = residual + x @ w^T (+ bias)   x [M, K], w [N, K], residual, out [M, N]; out
  // must not overlap x or residual. Equals linear(x, w, bias, out); add(residual, out, out), which is
  // the default; the CUDA backend adds the residual in the GEMM's epilogue (no pass over the
  // projection's output, and one rounding to bf16 instead of two).
  virtual void linear_residual(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& residual,
                               Tensor out);

  // rms_norm() that also saves rstd[r] = 1 / sqrt(mean(x[r]^2) + eps) for the backward.
  //   x, out rows of D (as rms_norm; in place allowed), w [D], rstd [R] (R = rows of x)
  virtual void rms_norm_train(const Tensor& x, const Tensor& w, float eps, Tensor out, Tensor rstd);
  // With xhat = x * rstd, y = xhat * w, g = dy * w:
  //   dx  = rstd * (g - xhat * mean(g * xhat))     (accumulate: dx += that, the residual stream)
  //   dw += sum_r dy[r] * xhat[r]
  //   dy, x, dx rows of D (dx may alias dy when not accumulating: q/k norm backward in place).
  virtual void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                                 Tensor dx, Tensor dw, bool accumulate);

  // embedding() backward (scatter-add): dtable[ids[t], :] += dout[t, :]
  //   dout [T, H], ids [T] i32, dtable [V, H]
  virtual void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor dtable);

  // rope() backward, in place: the rotation by -theta (the transpose of rope's rotation),
  //   dx[i] = dy[i] * c + dy[i + D/2] * s,  dx[i + D/2] = dy[i + D/2] * c - dy[i] * s.
  //   Shapes as rope().
  virtual void rope_backward(Tensor dx, const Tensor& positions, const Tensor& cos_sin);

  // swiglu() backward, with s = sigmoid(gate):
  //   dgate = dout * up * s * (1 + gate * (1 - s)),  dup = dout * gate * s
  //   all [T, F] rows (dgate/dup may be the two halves of one buffer)
  virtual void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor dgate,
                               Tensor dup);

  // Causal grouped-query attention over contiguous sequences (training; serving reads pages):
  // query row t attends to key rows [kv_begin[t], t] of the same tensor (kv_begin[t] <= t; packed
  // documents and batch rows are kept apart by kv_begin). Head h reads KV head h / (H / KVH).
  //   s_tj = scale * q_t . k_j,  lse_t = log sum_j exp(s_tj),  out_t = sum_j exp(s_tj - lse_t) v_j
  //   q [N, H, D], k, v [N, KVH, D] (rows may be strided), kv_begin [N] i32, out [N, H, D],
  //   lse [N, H] f32 (saved for the backward).
  virtual void attention_train(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_begin,
                               float scale, Tensor out, Tensor lse);
  // Its backward, with p_tj = exp(s_tj - lse_t) and delta_t = dout_t . out_t:
  //   dv_j = sum_t p_tj dout_t,  ds_tj = p_tj (dout_t . v_j - delta_t),
  //   dq_t = scale * sum_j ds_tj k_j,  dk_j = scale * sum_t ds_tj q_t   (summed over a KV group)
  //   dq like q, dk and dv like k (overwritten; may be column slices of one dqkv buffer).
  virtual void attention_train_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& kv_begin, const Tensor& out, const Tensor& lse,
                                        float scale, Tensor dq, Tensor dk, Tensor dv);

  // Cross-entropy forward and backward over a chunk of R logit rows (the model walks the rows in
  // chunks so the full [tokens, vocab] logits never exist), PyTorch's cross_entropy semantics with
  // label smoothing e over V classes:
  //   lse_r = log sum_j exp(z_rj),  loss_r = (1 - e) * (lse_r - z_r,y) + e * (lse_r - mean_j z_rj)
  //   dz_rj = grad_scale * (softmax(z_r)_j - (1 - e) * [j == y_r] - e / V)
  //   logits [R, V] f32; dz goes to dlogits [R, V]: the logits themselves (overwritten: the gradient
  //   needs no second buffer) or, on a backend whose compute dtype is not f32, a separate buffer of
  //   that dtype (the rounded gradient the head's backward GEMM reads, without a conversion pass);
  //   targets [R] i32; losses [R] f32. Rows with target kIgnoreIndex (-100) get loss 0 and dz 0; any
  //   other target outside [0, V) is an error. The mean over a batch's targets is the caller's grad_scale.
  static constexpr int32_t kIgnoreIndex = -100;
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, float label_smoothing,
                             float grad_scale, Tensor losses, Tensor dlogits);

  // ---- optimizer ops (f32 master weights and state on the backend's device) -------------------
  // Sets every byte of a contiguous tensor to zero (the gradients between optimizer steps). The
  // default uploads zeros; the CPU and CUDA backends memset.
  virtual void zero(Tensor x);
  // AdamW on one tensor in place (AdamWStep above has the math); p, g, m, v f32 with n elements each,
  // contiguous. Element-wise, so the result does not depend on how the work is split.
  virtual void adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, const AdamWStep& step);
  // sum over every tensor of the sum of its squared elements (f32 contiguous tensors), in f64 and a
  // fixed order: per tensor, partial sums of kSumSquaresChunk consecutive elements added in chunk
  // order, so the result (the global grad norm, hence the clipped update) is the same bits on every
  // run. Returns the host value (waits for the device).
  static constexpr int64_t kSumSquaresChunk = int64_t(1) << 16;
  virtual double sum_squares(const std::vector<Tensor>& xs);

  // ---- hints ---------------------------------------------------------------------------------
  // The tensors in `next` (weights) are what the ops after the ones enqueued so far read, in this
  // order, against `rows` rows of activations: a backend may start bringing (a prefix of) them
  // nearer the arithmetic while those ops run (the GPU: into L2, for decode-sized steps). Changes
  // no result and orders nothing; the default (the CPU's) does nothing.
  virtual void prefetch(std::span<const Tensor* const> next, int64_t rows) {
    (void)next;
    (void)rows;
  }

  // ---- static step inputs and step graphs ----------------------------------------------------
  // A step packs its inputs into one host staging buffer (alloc_host_pinned, allocated once) and
  // copies it with one upload_async; a decode step of a fixed shape may then replay a graph
  // captured once (the GPU: a CUDA graph; no launch overhead). The defaults are the CPU's: plain
  // host memory, a synchronous copy, no graphs.

  // Replays the ops recorded by capture() on the backend's stream, on whatever the captured
  // buffers hold at the time.
  class StepGraph {
   public:
    virtual ~StepGraph() = default;
    virtual void replay() = 0;
  };

  // Host memory (zeroed) that upload_async copies from without staging (page-locked on a GPU).
  virtual Buffer alloc_host_pinned(size_t bytes) { return Buffer::host(bytes); }
  // Starts copying dst.nbytes() bytes of host_src into dst, ordered before every later op, and may
  // return before the copy is done: host_src must not change until wait_uploads() returns.
  virtual void upload_async(Tensor dst, const void* host_src) { upload(dst, host_src); }
  // Returns once every earlier upload_async has read its source.
  virtual void wait_uploads() {}
  // Starts copying src into host_dst (alloc_host_pinned memory on a GPU), ordered after every
  // earlier op, and returns a ticket for wait_download; the bytes are there once it returns. Up to
  // kDownloadsInFlight may be outstanding. The default (the CPU's) copies at once.
  static constexpr int kDownloadsInFlight = 4;
  virtual uint64_t download_async(void* host_dst, const Tensor& src) {
    download(host_dst, src);
    return 0;
  }
  virtual void wait_download(uint64_t ticket) { (void)ticket; }
  // Whether capture() records graphs here.
  virtual bool supports_graphs() const { return false; }
  // Where a decode step's launch shapes change with the longest kv_len of its batch (ascending
  // lengths): a decode graph is captured per batch bucket and per class of kv_len that these cut,
  // and a step replays its class's graph. None by default (one graph a bucket).
  virtual std::vector<int> decode_kv_bounds() const { return {}; }
  // Starts (on) or stops recording by a device profiler started with recording off (ncu or nsys
  // --profile-from-start off), so one step can be profiled alone. A no-op where there is none.
  virtual void profile_range(bool on) { (void)on; }
  // Runs body with the backend recording its ops instead of executing them and returns them as a
  // graph, or null where graphs are unsupported. body must only launch ops: no upload, download,
  // synchronize or allocation; the buffers it names must outlive the graph.
  virtual std::unique_ptr<StepGraph> capture(const std::function<void()>& body) {
    (void)body;
    return nullptr;
  }
};

struct BackendOptions {
  Device device = Device::cpu;
  int threads = 0;  // cpu: 0 = all cores
  int gpu_index = 0;
};

// Creates the backend for a device; cuda without a GPU (or without CUDA support built in) is an error.
Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options);

// Device backends other than the CPU (gpu/) register a factory so that backend/ never depends on
// them; the CPU backend is built in. Registering twice for a device replaces the first factory.
using BackendFactory = std::function<Result<std::unique_ptr<Backend>>(const BackendOptions&)>;
void register_backend_factory(Device device, BackendFactory factory);
bool has_backend_factory(Device device);

}  // namespace astrai
