// TrainModel on the Backend ops: the serving decoder's math (src/model/model.cpp) with every
// intermediate the backward needs kept per layer, and the backward written out layer by layer.
//
// Storage, laid out once (llm.c's ParameterTensors / ActivationTensors):
//   params, grads   one f32 buffer each, tensors in weight_shapes() order. That order puts q/k/v
//                   (weights and biases) and gate/up next to each other, so the fused [q;k;v] and
//                   [gate;up] matrices the forward multiplies by are plain views: one GEMM each, as
//                   in serving, while every Param keeps its Hugging Face name and shape.
//   compute copy    mixed precision (a backend whose compute_dtype() is not f32, the GPU's bf16):
//                   the f32 params are the master weights the optimizer updates; each forward
//                   first converts them into one bf16 buffer of the same layout, which every op
//                   reads. Activations and their gradients are bf16 too; parameter gradients,
//                   rstd, lse, logits and losses stay f32. On the CPU the copy is the params.
//   activations     one buffer per (batch, seq_len), re-laid out only when the shape changes.
//
// Forward of layer l (N = B * T rows; x_l is the residual stream entering layer l):
//   h1 = rms_norm(x_l) [rstd1]           qkv = h1 Wqkv^T (+ b)
//   q, k = rms_norm per head [rstd_q, rstd_k] into qk (Qwen3), else q, k in place in qkv
//   rope(q), rope(k)                     attn, lse = attention(q, k, v, kv_begin)
//   x_mid = x_l + attn Wo^T (+ bo)       h2 = rms_norm(x_mid) [rstd2]
//   gu = h2 Wgu^T; act = silu(gate) * up
//   x_{l+1} = x_mid + act Wdown^T
// then hf = rms_norm(x_L) [rstdf] and, chunk by chunk of rows, logits = hf Whead^T -> cross_entropy.
// The backward walks the same list in reverse; dres carries d loss / d x through the residual stream.
#include "train/train_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <string>

#include "src/core/float_elements.h"
#include "src/model/rope.h"
#include "src/model/views.h"
#include "src/model/weights.h"

namespace astrai::train {

int64_t TrainBatch::num_targets() const {
  return int64_t(std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != kIgnore; }));
}

namespace {

static_assert(kIgnore == Backend::kIgnoreIndex, "the batch's ignore index is the cross_entropy op's");

// Which fusions the training step uses; ASTRAI_TRAIN_FUSE turns them off for A/B benchmarks (one
// binary measures both): 0 runs the op sequences they stand for, "residual" or "dlogits" keeps only
// that one; anything else, or unset, fuses both.
struct Fusions {
  bool residual = true;  // linear_residual, else linear then add
  bool dlogits = true;   // cross_entropy writes a compute-dtype gradient apart from the f32 logits
};
Fusions fusions_from_env() {
  const char* e = std::getenv("ASTRAI_TRAIN_FUSE");
  const std::string v = e ? e : "";
  if (v == "0") return {false, false};
  if (v == "residual") return {true, false};
  if (v == "dlogits") return {false, true};
  return {};
}

// The tensors of one layer, as views into the parameter (or gradient) buffer.
struct LayerTensors {
  Tensor input_norm, qkv, qkv_bias, o, o_bias, q_norm, k_norm, post_norm, gate_up, down;
};

// Saved activations of one layer.
struct LayerActs {
  Tensor x;               // [N, H] residual stream entering the layer
  Tensor h1, rstd1;       // input norm output [N, H], rstd [N]
  Tensor qkv;             // [N, q_dim + 2 kv_dim] projections (q, k roped in place unless qk_norm)
  Tensor qk;              // [N, q_dim + kv_dim] normed, roped q | k (qk_norm only)
  Tensor rstd_q, rstd_k;  // [N * heads], [N * kv_heads] (qk_norm only)
  Tensor attn, lse;       // [N, q_dim], [N, heads]
  Tensor x_mid;           // [N, H] after the attention residual add
  Tensor h2, rstd2;       // post-attention norm
  Tensor gate_up, act;    // [N, 2F], [N, F]
};

class DecoderTrainModel final : public TrainModel {
 public:
  DecoderTrainModel(const ModelConfig& c, Backend& be) : cfg_(c), be_(be), fuse_(fusions_from_env()) {}

  Status init(const WeightStore& store) {
    // Every tensor present with its shape and a float dtype; the values are read by name below.
    ASTRAI_ASSIGN_OR_RETURN(const WeightRefs refs, resolve_weights(cfg_, store));
    const auto shapes = weight_shapes(cfg_);
    int64_t total = 0;
    std::vector<int64_t> offsets;
    for (const auto& [name, shape] : shapes) {
      offsets.push_back(total);
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      total += n;
    }
    adt_ = be_.compute_dtype();
    try {
      values_ = be_.alloc(size_t(total) * sizeof(float));
      grads_ = be_.alloc(size_t(total) * sizeof(float));
      if (mixed()) compute_ = be_.alloc(size_t(total) * dtype_size(adt_));
    } catch (const std::bad_alloc& e) {
      return resource_exhausted("out of memory allocating " + std::to_string(total) +
                                " parameters and their gradients for training: " + e.what());
    }
    num_values_ = total;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto& [name, shape] = shapes[i];
      Param p;
      p.name = name;
      p.shape = shape;
      p.value = view(values_, DType::f32, offsets[i], shape);
      p.grad = view(grads_, DType::f32, offsets[i], shape);
      p.decay = shape.size() == 2 && name != "model.embed_tokens.weight";
      ASTRAI_ASSIGN_OR_RETURN(const SafeTensor* src, store.get(name, shape));
      ASTRAI_RETURN_IF_ERROR(upload_f32(p.value, *src, refs.scale_of(src)));
      params_.push_back(std::move(p));
    }
    // Where the final norm and each layer's tensors begin: the offsets the backward reports.
    layer_begin_.assign(size_t(cfg_.num_layers), total);
    const std::string layers = "model.layers.";
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::string& name = shapes[i].first;
      if (name == "model.norm.weight") final_norm_begin_ = offsets[i];
      if (name.rfind(layers, 0) != 0) continue;
      int64_t& b = layer_begin_[size_t(std::stoll(name.substr(layers.size())))];
      b = std::min(b, offsets[i]);
    }
    bind(mixed() ? compute_ : values_, adt_, offsets, value_layers_, value_globals_);
    bind(grads_, DType::f32, offsets, grad_layers_, grad_globals_);

    max_pos_ = std::max<int64_t>(cfg_.max_context(), 1);
    const std::vector<float> table = rope_cos_sin_table(cfg_, max_pos_);
    rope_buf_ = be_.alloc(table.size() * sizeof(float));
    cos_sin_ = rope_buf_.as(DType::f32, {max_pos_, cfg_.head_dim});
    be_.upload(cos_sin_, table.data());
    return {};
  }

  const ModelConfig& config() const override { return cfg_; }
  Backend& backend() const override { return be_; }
  std::vector<Param>& params() override { return params_; }

  void zero_grad() override { be_.zero(flat_grads()); }
  Tensor flat_grads() const override { return grads_.as(DType::f32, {num_values_}); }
  Tensor flat_values() const override { return values_.as(DType::f32, {num_values_}); }

  Result<float> forward_backward(const TrainBatch& batch, float scale, const LossOptions& loss) override {
    ASTRAI_RETURN_IF_ERROR(prepare(batch, loss));
    forward();
    return loss_and_head(batch, scale, loss, /*backward=*/true);
  }

  Result<float> loss(const TrainBatch& batch, const LossOptions& loss) override {
    ASTRAI_RETURN_IF_ERROR(prepare(batch, loss));
    forward();
    return loss_and_head(batch, 0.0f, loss, /*backward=*/false);
  }

  Result<std::vector<float>> logits(const TrainBatch& batch) override {
    ASTRAI_RETURN_IF_ERROR(prepare(batch, LossOptions{}));
    forward();
    const int64_t N = n_, V = cfg_.vocab_size;
    std::vector<float> out(size_t(N * V));
    const int64_t rows = laid_out_chunk_;
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t r1 = std::min(N, r0 + rows);
      const Tensor z = logits_.rows(0, r1 - r0);
      be_.linear(final_h_.rows(r0, r1), head(value_globals_), nullptr, z);
      be_.synchronize();
      be_.download(out.data() + r0 * V, z);
    }
    return out;
  }

 private:
  struct Globals {
    Tensor embed, final_norm, lm_head;
  };

  bool mixed() const { return adt_ != DType::f32; }
  bool separate_dlogits() const { return mixed() && fuse_.dlogits; }

  static Tensor view(const Buffer& buf, DType dt, int64_t offset, const std::vector<int64_t>& shape) {
    Tensor t = buf.as(dt, {1});
    t.data = static_cast<char*>(buf.data()) + offset * int64_t(dtype_size(dt));
    t.ndim = int(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
    t.set_contiguous_strides();
    return t;
  }

  const Tensor& head(const Globals& g) const { return cfg_.tie_word_embeddings ? g.embed : g.lm_head; }

  // Layer views into buf, by the offsets of weight_shapes(); the fused matrices start at q_proj /
  // gate_proj and span the tensors that follow them.
  void bind(const Buffer& buf, DType dt, const std::vector<int64_t>& offsets,
            std::vector<LayerTensors>& layers, Globals& g) const {
    const auto shapes = weight_shapes(cfg_);
    const int64_t H = cfg_.hidden_size, F = cfg_.intermediate_size;
    const int64_t qkv_rows = cfg_.q_dim() + 2 * cfg_.kv_dim();
    layers.assign(size_t(cfg_.num_layers), {});
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::string& name = shapes[i].first;
      const Tensor t = view(buf, dt, offsets[i], shapes[i].second);
      if (name == "model.embed_tokens.weight") g.embed = t;
      if (name == "model.norm.weight") g.final_norm = t;
      if (name == "lm_head.weight") g.lm_head = t;
      if (name.rfind("model.layers.", 0) != 0) continue;
      const size_t dot = name.find('.', 13);
      LayerTensors& l = layers[size_t(std::stoll(name.substr(13, dot - 13)))];
      const std::string leaf = name.substr(dot + 1);
      if (leaf == "input_layernorm.weight") l.input_norm = t;
      if (leaf == "self_attn.q_proj.weight") l.qkv = view(buf, dt, offsets[i], {qkv_rows, H});
      if (leaf == "self_attn.q_proj.bias") l.qkv_bias = view(buf, dt, offsets[i], {qkv_rows});
      if (leaf == "self_attn.o_proj.weight") l.o = t;
      if (leaf == "self_attn.o_proj.bias") l.o_bias = t;
      if (leaf == "self_attn.q_norm.weight") l.q_norm = t;
      if (leaf == "self_attn.k_norm.weight") l.k_norm = t;
      if (leaf == "post_attention_layernorm.weight") l.post_norm = t;
      if (leaf == "mlp.gate_proj.weight") l.gate_up = view(buf, dt, offsets[i], {2 * F, H});
      if (leaf == "mlp.down_proj.weight") l.down = t;
    }
  }

  // Converts a file tensor (f32 / bf16 / f16) to f32 on the host and uploads it; an fp8 matrix goes
  // up as it is stored, with its scales, and widens on the backend (Backend::dequantize).
  Status upload_f32(Tensor dst, const SafeTensor& src, const WeightScale* scale) {
    const int64_t n = src.numel();
    if (dst.numel() != n) return internal_error("tensor '" + src.name + "' does not fit its parameter");
    if (src.dtype == DType::fp8_e4m3 && scale) {
      const int64_t R = src.shape[0], C = src.shape[1];
      const int64_t sr = (R + scale->block_rows - 1) / scale->block_rows;
      const int64_t sc = (C + scale->block_cols - 1) / scale->block_cols;
      Buffer q = be_.alloc(src.nbytes), s = be_.alloc(scale->scale->nbytes);
      be_.upload(q.as(DType::fp8_e4m3, {R, C}), src.data);
      be_.upload(s.as(scale->scale->dtype, {sr, sc}), scale->scale->data);
      be_.dequantize(q.as(DType::fp8_e4m3, {R, C}), s.as(scale->scale->dtype, {sr, sc}), scale->block_rows,
                     scale->block_cols, Tensor(dst.data, DType::f32, {R, C}, dst.device));
      be_.synchronize();  // q and s are freed on return
      return {};
    }
    if (n > 0 && !is_float_dtype(src.dtype))
      return unsupported(src.file + ": tensor '" + src.name + "' has dtype " +
                         std::string(dtype_name(src.dtype)) + " (expected F32, BF16 or F16)");
    std::vector<float> host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) host[size_t(i)] = load_as_f32(src.data, src.dtype, i);
    be_.upload(dst, host.data());
    return {};
  }

  int64_t chunk_rows(const LossOptions& loss) const {
    if (loss.chunk_rows > 0) return std::min(loss.chunk_rows, std::max<int64_t>(n_, 1));
    // 8 MB of f32 logits on the CPU (cache-sized); 1 GB on a GPU, where a chunk is three GEMMs
    // against the whole head: a few thousand rows keep them compute-bound.
    const int64_t chunk_elems = be_.device() == Device::cpu ? int64_t(2) << 20 : int64_t(256) << 20;
    return std::clamp<int64_t>(chunk_elems / cfg_.vocab_size, 16, std::max<int64_t>(n_, 16));
  }

  // Checks the batch, lays out the activations for its shape (once per shape) and uploads it.
  Status prepare(const TrainBatch& b, const LossOptions& loss) {
    auto bad = [](const std::string& m) { return invalid_argument("train batch: " + m); };
    if (b.batch <= 0 || b.seq_len <= 0) return bad("batch and seq_len must be positive");
    const int64_t N = int64_t(b.batch) * b.seq_len;
    if (int64_t(b.tokens.size()) != N || int64_t(b.targets.size()) != N || int64_t(b.positions.size()) != N ||
        int64_t(b.doc_start.size()) != N)
      return bad("tokens, targets, positions and doc_start must each hold batch * seq_len = " +
                 std::to_string(N) + " entries");
    if (!(loss.label_smoothing >= 0.0f && loss.label_smoothing <= 1.0f))
      return bad("label_smoothing " + std::to_string(loss.label_smoothing) + " outside [0, 1]");
    if (cfg_.sliding_window > 0 && b.seq_len > cfg_.sliding_window)
      return unsupported("training with seq_len " + std::to_string(b.seq_len) +
                         " beyond the sliding window of " + std::to_string(cfg_.sliding_window) +
                         " tokens is not supported");
    kv_begin_host_.resize(size_t(N));
    for (int64_t i = 0; i < N; ++i) {
      const int64_t t = i % b.seq_len;
      const int32_t tok = b.tokens[size_t(i)], tgt = b.targets[size_t(i)], pos = b.positions[size_t(i)],
                    ds = b.doc_start[size_t(i)];
      const std::string at = " at row " + std::to_string(i / b.seq_len) + ", position " + std::to_string(t);
      if (tok < 0 || tok >= cfg_.vocab_size)
        return bad("token id " + std::to_string(tok) + at + " outside the vocabulary of " +
                   std::to_string(cfg_.vocab_size));
      if (tgt != kIgnore && (tgt < 0 || tgt >= cfg_.vocab_size))
        return bad("target " + std::to_string(tgt) + at + " is neither a token id nor kIgnore (-100)");
      if (pos < 0 || pos >= max_pos_)
        return bad("position " + std::to_string(pos) + at + " outside the model's context [0, " +
                   std::to_string(max_pos_) + ")");
      if (ds < 0 || ds > t)
        return bad("doc_start " + std::to_string(ds) + at + " is not in [0, " + std::to_string(t) + "]");
      kv_begin_host_[size_t(i)] = int32_t(i - t + ds);
    }
    n_ = N;
    try {
      layout(chunk_rows(loss));
    } catch (const std::bad_alloc& e) {
      laid_out_n_ = -1;
      return resource_exhausted("out of memory laying out the activations of a " + std::to_string(b.batch) +
                                " x " + std::to_string(b.seq_len) + " training batch: " + e.what());
    }
    be_.upload(ids_, b.tokens.data());
    be_.upload(targets_, b.targets.data());
    be_.upload(positions_, b.positions.data());
    be_.upload(kv_begin_, kv_begin_host_.data());
    return {};
  }

  // Carves every activation of an N-row batch (and the logits chunk) out of one buffer; keeps the
  // current layout when N and the chunk are unchanged.
  void layout(int64_t chunk) {
    if (n_ == laid_out_n_ && chunk == laid_out_chunk_) return;
    const int64_t N = n_, H = cfg_.hidden_size, F = cfg_.intermediate_size, V = cfg_.vocab_size;
    const int64_t qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), nh = cfg_.num_heads, nkv = cfg_.num_kv_heads;
    const int64_t L = cfg_.num_layers;
    // Two passes: count the floats, then allocate and hand out views.
    int64_t used = 0;
    float* base = nullptr;
    const DType adt = adt_;  // activations and their gradients; DType::f32 below: always f32
    auto take = [&](std::initializer_list<int64_t> dims, DType dt) {
      Tensor t(base ? base + used : nullptr, dt, dims, be_.device());
      used += (int64_t(t.nbytes()) + 63) / 64 * 16;  // 64-byte aligned, counted in floats
      return t;
    };
    for (int pass = 0; pass < 2; ++pass) {
      used = 0;
      acts_.assign(size_t(L), {});
      for (LayerActs& a : acts_) {
        a.x = take({N, H}, adt);
        a.h1 = take({N, H}, adt);
        a.rstd1 = take({N}, DType::f32);
        a.qkv = take({N, qd + 2 * kvd}, adt);
        if (cfg_.qk_norm) {
          a.qk = take({N, qd + kvd}, adt);
          a.rstd_q = take({N * nh}, DType::f32);
          a.rstd_k = take({N * nkv}, DType::f32);
        }
        a.attn = take({N, qd}, adt);
        a.lse = take({N, nh}, DType::f32);
        a.x_mid = take({N, H}, adt);
        a.h2 = take({N, H}, adt);
        a.rstd2 = take({N}, DType::f32);
        a.gate_up = take({N, 2 * F}, adt);
        a.act = take({N, F}, adt);
      }
      final_x_ = take({N, H}, adt);
      final_h_ = take({N, H}, adt);
      final_rstd_ = take({N}, DType::f32);
      tmp_ = take({N, H}, adt);
      dres_ = take({N, H}, adt);
      dh_ = take({N, H}, adt);
      dqkv_ = take({N, qd + 2 * kvd}, adt);
      dattn_ = take({N, qd}, adt);
      dgate_up_ = take({N, 2 * F}, adt);
      dact_ = take({N, F}, adt);
      logits_ = take({chunk, V}, DType::f32);
      // Mixed precision: the loss writes its gradient in the compute dtype, as the head's backward
      // GEMM reads it (no conversion pass over the f32 logits); otherwise over the logits.
      if (separate_dlogits()) dlogits_ = take({chunk, V}, adt);
      losses_ = take({N}, DType::f32);
      ids_ = take({N}, DType::i32);
      targets_ = take({N}, DType::i32);
      positions_ = take({N}, DType::i32);
      kv_begin_ = take({N}, DType::i32);
      if (pass == 0) {
        acts_buf_ = Buffer();
        acts_buf_ = be_.alloc(size_t(used) * sizeof(float));
        base = static_cast<float*>(acts_buf_.data());
      }
    }
    laid_out_n_ = N;
    laid_out_chunk_ = chunk;
  }

  // The residual stream entering layer l (l == num_layers: the final norm's input).
  const Tensor& stream(int64_t l) const { return l < cfg_.num_layers ? acts_[size_t(l)].x : final_x_; }

  void forward() {
    const int64_t qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), F = cfg_.intermediate_size;
    const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
    const float eps = float(cfg_.rms_norm_eps), scale = float(1.0 / std::sqrt(double(hd)));
    const Globals& g = value_globals_;
    // The master weights may have changed (an optimizer step, a test's upload): refresh the copy.
    if (mixed()) be_.convert(values_.as(DType::f32, {num_values_}), compute_.as(adt_, {num_values_}));
    be_.embedding(g.embed, ids_, stream(0));
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      const LayerTensors& w = value_layers_[size_t(l)];
      LayerActs& a = acts_[size_t(l)];
      be_.rms_norm_train(a.x, w.input_norm, eps, a.h1, a.rstd1);
      be_.linear(a.h1, w.qkv, cfg_.attention_bias ? &w.qkv_bias : nullptr, a.qkv);
      const auto [q, k] = roped_qk(a);
      if (cfg_.qk_norm) {
        be_.rms_norm_train(head_view(a.qkv, 0, nh, hd), w.q_norm, eps, q, a.rstd_q);
        be_.rms_norm_train(head_view(a.qkv, qd, nkv, hd), w.k_norm, eps, k, a.rstd_k);
      }
      be_.rope(qk_heads(cfg_.qk_norm ? a.qk : a.qkv), positions_, cos_sin_);
      be_.attention_train(q, k, head_view(a.qkv, qd + kvd, nkv, hd), kv_begin_, scale,
                          head_view(a.attn, 0, nh, hd), a.lse);
      linear_residual(a.attn, w.o, cfg_.o_proj_bias ? &w.o_bias : nullptr, a.x, a.x_mid);
      be_.rms_norm_train(a.x_mid, w.post_norm, eps, a.h2, a.rstd2);
      be_.linear(a.h2, w.gate_up, nullptr, a.gate_up);
      be_.swiglu(a.gate_up.cols(0, F), a.gate_up.cols(F, 2 * F), a.act);
      linear_residual(a.act, w.down, nullptr, a.x_mid, stream(l + 1));
    }
    be_.rms_norm_train(final_x_, g.final_norm, eps, final_h_, final_rstd_);
  }

  // out = residual + x w^T (+ b): the fused op, or (fusions_from_env) the linear and add it stands
  // for (the two differ only in bf16 rounding).
  void linear_residual(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& residual,
                       Tensor out) {
    if (fuse_.residual) {
      be_.linear_residual(x, w, bias, residual, out);
    } else {
      be_.linear(x, w, bias, tmp_);
      be_.add(residual, tmp_, out);
    }
  }

  // The q and k heads of a [N, q | k | ...] buffer as one [N, heads + kv_heads, head_dim] view: q's
  // heads end where k's begin, so one rope call rotates both.
  Tensor qk_heads(const Tensor& buf) const {
    return head_view(buf, 0, cfg_.num_heads + cfg_.num_kv_heads, cfg_.head_dim);
  }

  // The q and k attention reads: the normed copies (Qwen3) or the projections themselves.
  std::pair<Tensor, Tensor> roped_qk(const LayerActs& a) const {
    const int64_t qd = cfg_.q_dim(), nh = cfg_.num_heads, nkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
    const Tensor& src = cfg_.qk_norm ? a.qk : a.qkv;
    return {head_view(src, 0, nh, hd), head_view(src, qd, nkv, hd)};
  }

  // Cross-entropy over the final hidden rows, chunk by chunk: logits = hf Whead^T, loss, and with
  // backward the chunk's dhf (into dh_) and the head's gradient (the logits buffer is reused by the
  // next chunk: the stream orders it). Then, with backward, the rest of
  // the model's backward. Returns the mean loss over the batch's targets.
  Result<float> loss_and_head(const TrainBatch& batch, float scale, const LossOptions& opt, bool backward) {
    const int64_t N = n_, targets = batch.num_targets();
    const int64_t rows = laid_out_chunk_;
    const float grad_scale = targets > 0 ? scale / float(targets) : 0.0f;
    const Tensor& w_head = head(value_globals_);
    Tensor d_head = head(grad_globals_);
    if (backward) grads_ready_from(num_values_);
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t r1 = std::min(N, r0 + rows);
      const Tensor z = logits_.rows(0, r1 - r0), ls = losses_.rows(r0, r1);
      const Tensor dz = separate_dlogits() ? dlogits_.rows(0, r1 - r0) : z;
      be_.linear(final_h_.rows(r0, r1), w_head, nullptr, z);
      be_.cross_entropy(z, targets_.rows(r0, r1), opt.label_smoothing, grad_scale, ls, dz);
      if (backward) {
        const Tensor dh = dh_.rows(r0, r1);
        be_.linear_backward(dz, final_h_.rows(r0, r1), w_head, &dh, d_head, nullptr);
      }
    }
    if (backward) backward_body();
    // The losses of every row, read once at the end (no host round trip between the chunks).
    be_.synchronize();
    std::vector<float> row_losses(static_cast<size_t>(N));
    be_.download(row_losses.data(), losses_);
    double total = 0.0;
    for (const float l : row_losses) total += double(l);
    return targets > 0 ? float(total / double(targets)) : 0.0f;
  }

  // Everything after the head: dh_ holds d loss / d hf.
  void backward_body() {
    const int64_t qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), F = cfg_.intermediate_size;
    const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
    const float scale = float(1.0 / std::sqrt(double(hd)));
    const Globals& g = value_globals_;
    const Globals& dg = grad_globals_;
    be_.rms_norm_backward(dh_, final_x_, g.final_norm, final_rstd_, dres_, dg.final_norm,
                          /*accumulate=*/false);
    grads_ready_from(final_norm_begin_);  // with tied embeddings the head's gradient is the embedding's
    for (int64_t l = cfg_.num_layers - 1; l >= 0; --l) {
      const LayerTensors& w = value_layers_[size_t(l)];
      const LayerTensors& dw = grad_layers_[size_t(l)];
      const LayerActs& a = acts_[size_t(l)];
      // MLP: x_{l+1} = x_mid + down(silu(gate) * up), gate|up = h2 Wgu^T, h2 = norm(x_mid).
      be_.linear_backward(dres_, a.act, w.down, &dact_, dw.down, nullptr);
      be_.swiglu_backward(dact_, a.gate_up.cols(0, F), a.gate_up.cols(F, 2 * F), dgate_up_.cols(0, F),
                          dgate_up_.cols(F, 2 * F));
      be_.linear_backward(dgate_up_, a.h2, w.gate_up, &dh_, dw.gate_up, nullptr);
      be_.rms_norm_backward(dh_, a.x_mid, w.post_norm, a.rstd2, dres_, dw.post_norm, /*accumulate=*/true);
      // Attention: x_mid = x_l + attn Wo^T (+ bo).
      be_.linear_backward(dres_, a.attn, w.o, &dattn_, dw.o, cfg_.o_proj_bias ? &dw.o_bias : nullptr);
      const auto [q, k] = roped_qk(a);
      const Tensor dq = head_view(dqkv_, 0, nh, hd), dk = head_view(dqkv_, qd, nkv, hd);
      be_.attention_train_backward(head_view(dattn_, 0, nh, hd), q, k, head_view(a.qkv, qd + kvd, nkv, hd),
                                   kv_begin_, head_view(a.attn, 0, nh, hd), a.lse, scale, dq, dk,
                                   head_view(dqkv_, qd + kvd, nkv, hd));
      be_.rope_backward(qk_heads(dqkv_), positions_, cos_sin_);
      if (cfg_.qk_norm) {  // in place: d(normed q) -> d(projected q)
        be_.rms_norm_backward(dq, head_view(a.qkv, 0, nh, hd), w.q_norm, a.rstd_q, dq, dw.q_norm, false);
        be_.rms_norm_backward(dk, head_view(a.qkv, qd, nkv, hd), w.k_norm, a.rstd_k, dk, dw.k_norm, false);
      }
      be_.linear_backward(dqkv_, a.h1, w.qkv, &dh_, dw.qkv, cfg_.attention_bias ? &dw.qkv_bias : nullptr);
      be_.rms_norm_backward(dh_, a.x, w.input_norm, a.rstd1, dres_, dw.input_norm, /*accumulate=*/true);
      grads_ready_from(layer_begin_[size_t(l)]);
    }
    be_.embedding_backward(dres_, ids_, dg.embed);
    grads_ready_from(0);
  }

  ModelConfig cfg_;
  Backend& be_;
  Fusions fuse_;
  Buffer values_, grads_, compute_, rope_buf_, acts_buf_;
  DType adt_ = DType::f32;  // the backend's compute dtype: activations and the weights the ops read
  int64_t num_values_ = 0;
  int64_t final_norm_begin_ = 0;      // the final norm's offset in the flat layout
  std::vector<int64_t> layer_begin_;  // each layer's first offset
  std::vector<Param> params_;
  std::vector<LayerTensors> value_layers_, grad_layers_;
  Globals value_globals_, grad_globals_;
  Tensor cos_sin_;
  int64_t max_pos_ = 0;

  // Batch shape and activations (layout()).
  int64_t n_ = 0, laid_out_n_ = -1, laid_out_chunk_ = -1;
  std::vector<LayerActs> acts_;
  Tensor final_x_, final_h_, final_rstd_, tmp_;
  Tensor dres_, dh_, dqkv_, dattn_, dgate_up_, dact_;
  Tensor logits_, dlogits_, losses_;
  Tensor ids_, targets_, positions_, kv_begin_;
  std::vector<int32_t> kv_begin_host_;
};

}  // namespace

Result<std::unique_ptr<TrainModel>> TrainModel::create(const ModelConfig& config, const WeightStore& weights,
                                                       Backend& backend) {
  ASTRAI_RETURN_IF_ERROR(config.validate());
  if (!backend.supports_training())
    return unsupported("training is not implemented on the " + backend.name() +
                       " backend yet; use --device cpu");
  auto model = std::make_unique<DecoderTrainModel>(config, backend);
  ASTRAI_RETURN_IF_ERROR(model->init(weights));
  return std::unique_ptr<TrainModel>(std::move(model));
}

}  // namespace astrai::train
