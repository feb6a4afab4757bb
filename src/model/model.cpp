// The decoder forward of Llama / Mistral / Qwen2 / Qwen3 over a paged KV cache, written once
// against the Backend interface. Per layer (HF semantics):
//   h = rms_norm(x)                                   input_layernorm
//   q|k|v = h @ Wqkv^T (+ b)                          q_proj, k_proj, v_proj fused into one GEMM
//   q, k = rms_norm per head (Qwen3), then RoPE       q_norm / k_norm, rotate-half
//   kv_store(k, v); a = paged_attention(q)            causal GQA, scale 1/sqrt(head_dim)
//                                                     (norm, RoPE and kv_store: one rope_kv_store)
//   x += a @ Wo^T (+ bo)                              o_proj
//   x += down(silu(h @ Wg^T) * (h @ Wu^T)),           post_attention_layernorm (with the add before
//     h = rms_norm(x)                                 it), gate_proj and up_proj fused into one GEMM,
//                                                     down_proj: one add_rms_norm_mlp
// then the final norm (fused into the last layer's add) and the LM head on logit_rows only.
#include "src/model/model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/core/out_of_memory.h"
#include "src/dist/communicator.h"
#include "src/model/rope.h"
#include "src/model/safetensors.h"
#include "src/model/shard.h"
#include "src/model/views.h"
#include "src/model/weights.h"
#include "src/model/workspace.h"

namespace astrai {

namespace {

// Pages a cache holds: the pool's and the scratch page.
int64_t held_pages(const KvCache& kv) {
  return int64_t(kv.num_pages) + (kv.scratch_page >= 0 ? 1 : 0);
}

}  // namespace

Tensor KvCache::k_layer(int layer) const {
  return Tensor(k[size_t(layer)].data(), dtype, {held_pages(*this) * page_size, num_kv_heads, head_dim},
                device);
}
Tensor KvCache::v_layer(int layer) const {
  return Tensor(v[size_t(layer)].data(), dtype, {held_pages(*this) * page_size, num_kv_heads, head_dim},
                device);
}

namespace {

// Decode bucket sizes up to max_seqs: powers of two, and 1.5x each from 16 on (SGLang's spacing,
// padding a batch by at most a third), then max_seqs itself.
std::vector<int64_t> decode_buckets(int64_t max_seqs) {
  std::vector<int64_t> out;
  for (int64_t p = 1; p < max_seqs; p *= 2) {
    out.push_back(p);
    if (p >= 16 && p * 3 / 2 < max_seqs) out.push_back(p * 3 / 2);
  }
  out.push_back(max_seqs);
  return out;
}

using Clock = std::chrono::steady_clock;

struct LayerWeights {
  Tensor input_norm, qkv_bias, o_bias, q_norm, k_norm, post_norm;
  Weight qkv, o, gate_up, down;  // fp8 with their scales where LoadOptions::keep_fp8 kept them
  bool has_qkv_bias = false, has_o_bias = false;
};

// Copies file tensors into backend tensors (the compute dtype, or a matrix's Backend::weight_dtype).
// On the CPU the backend's `convert` reads the mapped file directly into the destination (in
// parallel, no staging copy), converting or, for equal dtypes, copying. On a device equal dtypes
// upload as they are; other file bytes go up in bounded chunks through one device staging buffer
// (kept for the whole load) and are converted there. fp8 matrices widen through `dequantize` the
// same way: on the CPU straight from the file, on a device in chunks of whole blocks of rows, their
// scales uploaded whole beside them.
class WeightUploader {
 public:
  explicit WeightUploader(Backend& be) : be_(be) {}

  // dst: contiguous, as many elements as src.
  Status upload(Tensor dst, const WeightPart& part) {
    const SafeTensor& src = *part.t;
    const int64_t n = src.numel();
    if (dst.numel() != n)
      return internal_error(src.file + ": tensor '" + src.name + "' does not fit its destination");
    Tensor flat(dst.data, dst.dtype, {n}, dst.device);
    if (src.dtype == dst.dtype && dst.device != Device::cpu) {  // fp8 kept: its scales go up apart
      be_.upload(flat, src.data);
      return {};
    }
    if (src.dtype == DType::fp8_e4m3) return dequantize(dst, src, part.scale);
    if (!is_float_dtype(src.dtype))
      return unsupported(src.file + ": tensor '" + src.name + "' has dtype " +
                         std::string(dtype_name(src.dtype)) + " (expected F32, BF16 or F16)");
    const Tensor file(const_cast<void*>(src.data), src.dtype, {n}, Device::cpu);
    if (dst.device == Device::cpu) {
      be_.convert(file, flat);
      return {};
    }
    const int64_t chunk = std::min(n, kChunk);
    reserve(staging_, size_t(chunk) * dtype_size(src.dtype));
    for (int64_t b = 0; b < n; b += chunk) {
      const int64_t e = std::min(n, b + chunk);
      Tensor raw = staging_.as(src.dtype, {e - b});
      be_.upload(raw, file.rows(b, e).data);
      be_.convert(raw, flat.rows(b, e));
    }
    return {};
  }

 private:
  static constexpr int64_t kChunk = int64_t(16) << 20;  // elements per staging round trip

  void reserve(Buffer& b, size_t bytes) {
    if (b.size() < bytes) b = be_.alloc(std::max(bytes, size_t(kChunk) * dtype_size(DType::f32)));
  }

  Status dequantize(Tensor dst, const SafeTensor& src, const WeightScale* scale) {
    if (!scale || src.shape.size() != 2)
      return internal_error(src.file + ": fp8 tensor '" + src.name + "' has no scales");
    const int64_t R = src.shape[0], C = src.shape[1];
    const SafeTensor& s = *scale->scale;
    const int64_t br = scale->block_rows, bc = scale->block_cols;
    const int64_t sr = (R + br - 1) / br, sc = (C + bc - 1) / bc;
    if (s.numel() != sr * sc)
      return internal_error(s.file + ": tensor '" + s.name + "' does not fit the blocks of '" + src.name +
                            "'");
    const Tensor out(dst.data, dst.dtype, {R, C}, dst.device);
    const Tensor q_file(const_cast<void*>(src.data), DType::fp8_e4m3, {R, C}, Device::cpu);
    const Tensor s_file(const_cast<void*>(s.data), s.dtype, {sr, sc}, Device::cpu);
    if (dst.device == Device::cpu) {
      be_.dequantize(q_file, s_file, br, bc, out);
      return {};
    }
    reserve(scales_, s.nbytes);
    const Tensor s_dev = scales_.as(s.dtype, {sr, sc});
    be_.upload(s_dev, s.data);
    // Rows per round trip: whole blocks of rows (any count where one block spans them all).
    const int64_t step = sr == 1 ? 1 : br;
    const int64_t rows = std::max(step, std::min(R, std::max<int64_t>(kChunk / C, 1)) / step * step);
    reserve(staging_, size_t(rows * C));
    for (int64_t r0 = 0; r0 < R; r0 += rows) {
      const int64_t r1 = std::min(R, r0 + rows);
      const Tensor raw = staging_.as(DType::fp8_e4m3, {r1 - r0, C});
      be_.upload(raw, q_file.rows(r0, r1).data);
      be_.dequantize(raw, s_dev.rows(r0 / br, (r1 + br - 1) / br), br, bc, out.rows(r0, r1));
    }
    return {};
  }

  Backend& be_;
  Buffer staging_, scales_;
};

class DecoderModel final : public Model {
 public:
  // c: the config this rank runs at (shard_config of the checkpoint's when shard.world > 1).
  DecoderModel(const ModelConfig& c, Backend& be, const ShardSpec& shard = {}, bool keep_fp8 = false)
      : cfg_(c), be_(be), shard_(shard), keep_fp8_(keep_fp8) {}

  Status load(const WeightRefs& refs) {
    const DType dt = be_.compute_dtype();
    const int64_t H = cfg_.hidden_size, qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), F = cfg_.intermediate_size;
    WeightUploader uploader(be_);
    // The weights' size once loaded, for an out-of-memory error: the matrices, almost all of it, in
    // the dtype the backend keeps the embedding's.
    const size_t total_bytes =
        size_t(cfg_.num_parameters()) * dtype_size(be_.weight_dtype(refs.embed->dtype));
    // Allocates a tensor on the backend and fills it from one or more file tensors stacked along dim 0:
    // a vector (a norm, a bias) in the compute dtype, a matrix (2-D: linear's w, the embedding) in
    // the dtype the backend keeps its parts' dtype in (Backend::weight_dtype). fp8 parts stay fp8,
    // with their scales stacked into one grid, only for a projection (`projection`) when
    // LoadOptions::keep_fp8 asks it (and stack_scales takes their scales).
    auto make = [&](std::initializer_list<int64_t> dims, std::initializer_list<WeightPart> parts, Weight& out,
                    bool projection) -> Status {
      DType wdt = dt;
      std::optional<StackedScales> kept;
      if (dims.size() == 2) {
        const DType stored = parts.begin()->t->dtype;
        bool same = true;
        for (const WeightPart& p : parts) same = same && p.t->dtype == stored;
        wdt = same ? be_.weight_dtype(stored) : dt;
        if (wdt == DType::fp8_e4m3 && projection && keep_fp8_)
          kept = stack_scales(parts, *(dims.begin() + 1));
        if (wdt == DType::fp8_e4m3 && !kept) wdt = dt;
      }
      Tensor shape_only(nullptr, wdt, dims, be_.device());
      auto alloc = [&](size_t bytes) -> Status {
        try {
          owned_.push_back(be_.alloc(bytes));
        } catch (const std::bad_alloc& e) {
          return resource_exhausted("out of memory allocating " + parts.begin()->t->name + " " +
                                    shape_only.shape_str() + " (the weights take " +
                                    memory_size(total_bytes) + ", " + memory_size(weight_bytes_) +
                                    " of them loaded): " + e.what());
        }
        return {};
      };
      ASTRAI_RETURN_IF_ERROR(alloc(shape_only.nbytes()));
      out = owned_.back().as(wdt, dims);
      weight_bytes_ += out.nbytes();
      if (kept) {
        const int64_t rows = int64_t(kept->grid.size()) / kept->cols;
        ASTRAI_RETURN_IF_ERROR(alloc(kept->grid.size() * sizeof(float)));
        out.scale = owned_.back().as(DType::f32, {rows, kept->cols});
        out.block_rows = kept->block_rows;
        out.block_cols = kept->block_cols;
        be_.upload(out.scale, kept->grid.data());
        weight_bytes_ += out.scale.nbytes();
        be_.prepare_weight(out);
      }
      int64_t row = 0;
      const int64_t row_elems = shape_only.ndim == 2 ? shape_only.shape[1] : 1;
      for (const WeightPart& p : parts) {
        const int64_t rows = p.t->numel() / row_elems;
        Tensor flat(out.data, wdt, {shape_only.numel()}, out.device);
        ASTRAI_RETURN_IF_ERROR(uploader.upload(flat.rows(row * row_elems, (row + rows) * row_elems), p));
        row += rows;
      }
      return {};
    };
    auto make_tensor = [&](std::initializer_list<int64_t> dims, std::initializer_list<WeightPart> parts,
                           Tensor& out) -> Status {
      Weight w;
      ASTRAI_RETURN_IF_ERROR(make(dims, parts, w, false));
      out = static_cast<const Tensor&>(w);
      return {};
    };

    // This rank's part of a checkpoint tensor (src/model/shard.h), with its part of the tensor's
    // scales when it is fp8; the whole tensor at world 1.
    std::deque<TensorSlice> slices;  // alive until the layer's uploads are issued
    std::deque<WeightScale> slice_scales;
    const int64_t rank = shard_.rank, world = shard_.world;
    auto whole = [&](const SafeTensor* t) { return WeightPart(t, refs.scale_of(t)); };
    auto rows_part = [&](const SafeTensor* t) {
      if (world == 1) return whole(t);
      const int64_t n = t->shape[0] / world;
      WeightPart p(&slices.emplace_back(slice_rows(*t, rank * n, (rank + 1) * n)).view);
      if (const WeightScale* s = refs.scale_of(t))
        p.scale =
            &slice_scales.emplace_back(slice_scale(*s, t->shape[0], rank * n, (rank + 1) * n, true, slices));
      return p;
    };
    auto cols_part = [&](const SafeTensor* t) {
      if (world == 1) return whole(t);
      const int64_t n = t->shape[1] / world;
      WeightPart p(&slices.emplace_back(slice_cols(*t, rank * n, (rank + 1) * n)).view);
      if (const WeightScale* s = refs.scale_of(t))
        p.scale =
            &slice_scales.emplace_back(slice_scale(*s, t->shape[1], rank * n, (rank + 1) * n, false, slices));
      return p;
    };
    ASTRAI_RETURN_IF_ERROR(make_tensor({cfg_.vocab_size, H}, {whole(refs.embed)}, embed_));
    if (cfg_.tie_word_embeddings || refs.lm_head == refs.embed || !refs.lm_head) {
      lm_head_ = embed_;  // one buffer for both
    } else if (rank != 0) {
      lm_head_ = Tensor();  // only rank 0 computes logits
    } else {
      ASTRAI_RETURN_IF_ERROR(make_tensor({cfg_.vocab_size, H}, {whole(refs.lm_head)}, lm_head_));
    }
    ASTRAI_RETURN_IF_ERROR(make_tensor({H}, {refs.final_norm}, final_norm_));
    layers_.resize(refs.layers.size());
    for (size_t l = 0; l < refs.layers.size(); ++l) {
      const LayerWeightRefs& r = refs.layers[l];
      LayerWeights& w = layers_[l];
      ASTRAI_RETURN_IF_ERROR(make_tensor({H}, {r.input_norm}, w.input_norm));
      slices.clear();
      slice_scales.clear();
      ASTRAI_RETURN_IF_ERROR(
          make({qd + 2 * kvd, H}, {rows_part(r.q), rows_part(r.k), rows_part(r.v)}, w.qkv, true));
      if (r.q_bias && r.k_bias && r.v_bias) {
        ASTRAI_RETURN_IF_ERROR(make_tensor(
            {qd + 2 * kvd}, {rows_part(r.q_bias), rows_part(r.k_bias), rows_part(r.v_bias)}, w.qkv_bias));
        w.has_qkv_bias = true;
      }
      ASTRAI_RETURN_IF_ERROR(make({H, qd}, {cols_part(r.o)}, w.o, true));
      if (r.o_bias && rank == 0) {  // added once: the all-reduce sums the ranks' partial outputs
        ASTRAI_RETURN_IF_ERROR(make_tensor({H}, {r.o_bias}, w.o_bias));
        w.has_o_bias = true;
      }
      if (cfg_.qk_norm) {
        ASTRAI_RETURN_IF_ERROR(make_tensor({cfg_.head_dim}, {r.q_norm}, w.q_norm));
        ASTRAI_RETURN_IF_ERROR(make_tensor({cfg_.head_dim}, {r.k_norm}, w.k_norm));
      }
      ASTRAI_RETURN_IF_ERROR(make_tensor({H}, {r.post_norm}, w.post_norm));
      ASTRAI_RETURN_IF_ERROR(make({2 * F, H}, {rows_part(r.gate), rows_part(r.up)}, w.gate_up, true));
      ASTRAI_RETURN_IF_ERROR(make({H, F}, {cols_part(r.down)}, w.down, true));
    }
    // RoPE table, f32 on every backend (angles need the precision).
    max_pos_ = std::max<int64_t>(cfg_.max_context(), 1);
    const std::vector<float> table = rope_cos_sin_table(cfg_, max_pos_);
    owned_.push_back(be_.alloc(table.size() * sizeof(float)));
    cos_sin_ = owned_.back().as(DType::f32, {max_pos_, cfg_.head_dim});
    be_.upload(cos_sin_, table.data());
    return {};
  }

  const ModelConfig& config() const override { return cfg_; }
  Backend& backend() const override { return be_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  void for_each_weight(const std::function<void(const Tensor&)>& fn) const override {
    fn(embed_);
    if (lm_head_.data && lm_head_.data != embed_.data) fn(lm_head_);
    fn(final_norm_);
    for (const LayerWeights& w : layers_) {
      fn(w.input_norm);
      fn(w.post_norm);
      for (const Weight* m : {&w.qkv, &w.o, &w.gate_up, &w.down}) {
        fn(*m);
        if (m->scale.data) fn(m->scale);  // an fp8 projection's scales
      }
      if (w.has_qkv_bias) fn(w.qkv_bias);
      if (w.has_o_bias) fn(w.o_bias);
      if (cfg_.qk_norm) {
        fn(w.q_norm);
        fn(w.k_norm);
      }
    }
  }

  size_t kv_bytes_per_page(int page_size) const override {
    return 2 * size_t(cfg_.num_layers) * size_t(page_size) * size_t(cfg_.kv_dim()) *
           dtype_size(be_.compute_dtype());
  }

  KvCache allocate_kv(int num_pages, int page_size) const override {
    KvCache kv;
    kv.num_pages = num_pages;
    kv.scratch_page = num_pages;
    kv.page_size = page_size;
    kv.num_kv_heads = int(cfg_.num_kv_heads);
    kv.head_dim = int(cfg_.head_dim);
    kv.dtype = be_.compute_dtype();
    kv.device = be_.device();
    const size_t bytes =
        size_t(held_pages(kv)) * size_t(page_size) * size_t(cfg_.kv_dim()) * dtype_size(kv.dtype);
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      kv.k.push_back(be_.alloc(bytes));
      kv.v.push_back(be_.alloc(bytes));
    }
    return kv;
  }

  bool takes_drawn_tokens() const override { return true; }

  Result<Tensor> forward(const ForwardBatch& b, KvCache& kv) override {
    Status valid = validate(b, kv);
    if (shard_.comm) valid = shard_.comm->agree(valid);  // a step runs on every rank or on none
    ASTRAI_RETURN_IF_ERROR(valid);
    StepShape sh = shape_of(b, kv);
    be_.wait_uploads();  // the previous step's inputs were read: the mirror may be rewritten
    ws_.reserve(be_, cfg_, WorkspaceShape{sh.T, sh.S, std::max(b.max_pages, 1), std::max<int64_t>(sh.R, 1)});
    if (!graphs_.empty() && graphs_generation_ != ws_.generation()) {
      // A step larger than the reserved limits moved the step buffers the graphs were captured on.
      spdlog::warn("step buffers grew past the reserved limits: recapturing the decode graphs");
      KvCache* graph_kv = graph_kv_ == cache_id(kv) ? &kv : nullptr;
      graphs_.clear();
      if (graph_kv) ASTRAI_RETURN_IF_ERROR(capture_decode_graphs(*graph_kv).status());
    }
    int kv_class = 0;
    if (sh.bucketed) {
      const std::vector<int>& caps = kv_class_caps(kv);
      while (kv_class + 1 < int(caps.size()) && sh.max_kv_len > caps[size_t(kv_class)]) ++kv_class;
      sh.max_kv_len = caps[size_t(kv_class)];
    }
    stage_inputs(b, sh.S, kv);
    ws_.upload_inputs(be_, sh.S);
    if (!b.moves.empty()) be_.take_tokens(ws_.ids(sh.T), ws_.moves(b.num_moves()), b.draws);
    auto g = sh.bucketed && graph_kv_ == cache_id(kv) ? graphs_.find({sh.S, kv_class}) : graphs_.end();
    if (g != graphs_.end())
      g->second->replay();
    else
      run_layers(sh, kv);
    return ws_.logits(int64_t(b.logit_rows.size()));
  }

  Status reserve_steps(const StepLimits& l) override {
    if (l.max_seqs < 1 || l.max_tokens < 0 || l.max_model_len < 1 || l.page_size < 1)
      return invalid_argument("step limits: max_seqs, max_model_len and page_size must be positive");
    buckets_.clear();
    if (be_.supports_graphs()) buckets_ = decode_buckets(l.max_seqs);
    const int64_t S = l.max_seqs, P = (int64_t(l.max_model_len) + l.page_size - 1) / l.page_size;
    try {
      ws_.reserve(be_, cfg_, WorkspaceShape{std::max<int64_t>(S, l.max_tokens), S, P, S});
    } catch (const std::bad_alloc& e) {
      return resource_exhausted("out of memory allocating the step buffers for " + std::to_string(S) +
                                " sequences of " + std::to_string(l.max_model_len) + " tokens: " + e.what());
    }
    return {};
  }

  Result<int> capture_decode_graphs(KvCache& kv) override {
    graphs_.clear();
    graph_kv_ = nullptr;
    if (!be_.supports_graphs() || buckets_.empty() || kv.scratch_page < 0) return 0;
    const auto t0 = Clock::now();
    ForwardBatch none;  // every row of a warm-up step is a padding row
    none.q_start.assign(1, 0);
    size_t classes = 0;
    for (int64_t bucket : buckets_) {
      be_.wait_uploads();
      ws_.reserve(be_, cfg_, WorkspaceShape{bucket, bucket, 1, bucket});
      stage_inputs(none, bucket, kv);
      ws_.upload_inputs(be_, bucket);
      const std::vector<int>& caps = kv_class_caps(kv);
      classes = caps.size();
      for (size_t c = 0; c < caps.size(); ++c) {
        StepShape sh;
        sh.T = sh.S = sh.R = bucket;
        sh.max_q_len = 1;
        sh.bucketed = true;
        sh.max_kv_len = caps[c];
        run_layers(sh, kv);  // warm-up: GEMM plans and kernel attributes are set outside the capture
        std::unique_ptr<Backend::StepGraph> g = be_.capture([&] { run_layers(sh, kv); });
        if (!g) return 0;
        graphs_.emplace(std::pair{bucket, int(c)}, std::move(g));
      }
    }
    be_.synchronize();
    graphs_generation_ = ws_.generation();
    graph_kv_ = cache_id(kv);
    spdlog::info("captured {} decode graphs (batch 1..{}, {} context class{}) in {:.3f} s", graphs_.size(),
                 buckets_.back(), classes, classes == 1 ? "" : "es",
                 std::chrono::duration<double>(Clock::now() - t0).count());
    return int(graphs_.size());
  }

 private:
  // A step's launch shape: the batch's own, or for a decode-only step its bucket's (rows past the
  // batch's are padding). Host scalars that size grids only.
  struct StepShape {
    int64_t T = 0, S = 0, R = 0;  // rows, sequences, logit rows
    int max_q_len = 0;            // longest query run
    int max_kv_len = 0;           // longest kv_len; a bucket: the page table's capacity (fixed grid)
    int num_decode_seqs = 0;      // leading one-query sequences (AttentionBatch::num_decode_seqs)
    bool bucketed = false;
  };

  // The longest kv_len of each class of decode graphs, ascending: below each of the backend's
  // decode_kv_bounds under the cache's capacity, then the capacity (the page table's width). A
  // bucketed step sizes its grids by its class's cap, so a graph serves every step of its class.
  // Worked out again only when the capacity changes (the backend's bounds are fixed).
  const std::vector<int>& kv_class_caps(const KvCache& kv) {
    const int capacity = int(ws_.capacity().page_stride * kv.page_size);
    if (capacity == kv_caps_capacity_) return kv_caps_;
    kv_caps_.clear();
    for (int bound : be_.decode_kv_bounds())
      if (bound > 1 && bound <= capacity && (kv_caps_.empty() || bound - 1 > kv_caps_.back()))
        kv_caps_.push_back(bound - 1);
    kv_caps_.push_back(capacity);
    kv_caps_capacity_ = capacity;
    return kv_caps_;
  }

  StepShape shape_of(const ForwardBatch& b, const KvCache& kv) const {
    StepShape sh;
    sh.T = b.num_tokens();
    sh.S = b.num_seqs();
    sh.R = int64_t(b.logit_rows.size());
    for (int64_t s = 0; s < sh.S; ++s) {
      sh.max_q_len = std::max(sh.max_q_len, b.q_start[size_t(s) + 1] - b.q_start[size_t(s)]);
      sh.max_kv_len = std::max(sh.max_kv_len, b.kv_len[size_t(s)]);
    }
    // The scheduler plans running sequences oldest first and admits new ones after them, so a
    // mixed step's decode rows usually lead (the CUDA backend runs them on its decode kernel).
    while (sh.num_decode_seqs < sh.S &&
           b.q_start[size_t(sh.num_decode_seqs) + 1] - b.q_start[size_t(sh.num_decode_seqs)] == 1)
      ++sh.num_decode_seqs;
    bool decode =
        !buckets_.empty() && kv.scratch_page >= 0 && sh.T == sh.S && sh.R == sh.S && sh.S <= buckets_.back();
    for (int64_t r = 0; decode && r < sh.R; ++r) decode = b.logit_rows[size_t(r)] == r;
    if (decode) {
      sh.bucketed = true;
      sh.T = sh.S = sh.R = *std::lower_bound(buckets_.begin(), buckets_.end(), sh.S);
      sh.num_decode_seqs = int(sh.S);  // the padding rows are one-query sequences too
    }
    return sh;
  }

  // Packs the batch into the staging mirror at the page table's fixed stride, followed by padding
  // rows up to `seqs` sequences (one token each, writing the scratch page's first slot).
  void stage_inputs(const ForwardBatch& b, int64_t seqs, const KvCache& kv) {
    const StepInputsHost in = ws_.host_inputs();
    const int64_t T = b.num_tokens(), S = b.num_seqs(), P = ws_.capacity().page_stride;
    std::copy(b.tokens.begin(), b.tokens.end(), in.ids);
    std::copy(b.positions.begin(), b.positions.end(), in.positions);
    std::copy(b.slots.begin(), b.slots.end(), in.slots);
    std::copy(b.logit_rows.begin(), b.logit_rows.end(), in.rows);
    std::copy(b.q_start.begin(), b.q_start.begin() + S + 1, in.q_start);
    std::copy(b.kv_len.begin(), b.kv_len.end(), in.kv_len);
    std::copy(b.moves.begin(), b.moves.end(), in.moves);
    for (int64_t s = 0; s < S; ++s)
      std::copy_n(b.page_table.begin() + s * b.max_pages, b.max_pages, in.page_table + s * P);
    for (int64_t r = S; r < seqs; ++r) {
      const int64_t row = T + (r - S);
      in.ids[row] = 0;
      in.positions[row] = 0;
      in.slots[row] = kv.scratch_page * kv.page_size;
      in.rows[row] = int32_t(row);
      in.q_start[r + 1] = int32_t(row + 1);
      in.kv_len[r] = 1;
      in.page_table[r * P] = kv.scratch_page;
    }
  }

  // The decoder over the staged inputs: every op of a step, and nothing else (no copies, no
  // allocation), so that it can be captured as a graph.
  void run_layers(const StepShape& sh, KvCache& kv) {
    const int64_t T = sh.T, S = sh.S, R = sh.R;
    const Tensor ids = ws_.ids(T), pos = ws_.positions(T), slots = ws_.slots(T), rows = ws_.rows(R);
    AttentionBatch ab;
    ab.q_start = ws_.q_start(S);
    ab.kv_len = ws_.kv_len(S);
    ab.page_table = ws_.page_table(S);
    ab.num_seqs = int(S);
    ab.max_pages = int(ws_.capacity().page_stride);
    ab.page_size = kv.page_size;
    ab.max_q_len = sh.max_q_len;
    ab.max_kv_len = sh.max_kv_len;
    ab.num_decode_seqs = sh.num_decode_seqs;

    const int64_t qd = cfg_.q_dim(), kvd = cfg_.kv_dim();
    const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
    const float eps = float(cfg_.rms_norm_eps);
    const float scale = float(1.0 / std::sqrt(double(hd)));
    const Tensor h = ws_.h(T), y = ws_.y(T), qkv = ws_.qkv(T), gu = ws_.gate_up(T), act = ws_.act(T);
    const Tensor attn = ws_.attn(T);
    const Tensor attn2(attn.data, attn.dtype, {T, qd}, attn.device);
    const Tensor q = head_view(qkv, 0, nh, hd), k = head_view(qkv, qd, nkv, hd),
                 v = head_view(qkv, qd + kvd, nkv, hd);
    // The residual stream alternates between two buffers: each add_rms_norm_linear reads one and
    // writes the sum to the other (backend.h says why).
    Tensor x = ws_.x(T), x_next = ws_.x2(T);
    auto add_norm_linear = [&](const Tensor& norm, const Weight& w, const Tensor* bias, const Tensor& out) {
      be_.add_rms_norm_linear(x, y, norm, eps, x_next, h, w, bias, out);
      std::swap(x, x_next);
    };

    be_.embedding(embed_, ids, x);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const LayerWeights& w = layers_[l];
      const Tensor* qkv_bias = w.has_qkv_bias ? &w.qkv_bias : nullptr;
      if (l == 0) {
        be_.rms_norm(x, w.input_norm, eps, h);
        be_.linear(h, w.qkv, qkv_bias, qkv);
      } else {
        add_norm_linear(w.input_norm, w.qkv, qkv_bias, qkv);  // + the previous layer's MLP output
      }
      const Tensor* next[] = {&w.o, &w.gate_up, &w.down};  // read after the attention, which reads little
      be_.prefetch(next, T);
      be_.rope_attention(q, k, v, cfg_.qk_norm ? &w.q_norm : nullptr, cfg_.qk_norm ? &w.k_norm : nullptr, eps,
                         pos, cos_sin_, slots, kv.k_layer(int(l)), kv.v_layer(int(l)), ab, scale, attn);
      be_.linear(attn2, w.o, w.has_o_bias ? &w.o_bias : nullptr, y);
      if (shard_.comm) shard_.comm->all_reduce_sum(y);  // row-parallel o: sum over the ranks' heads
      be_.add_rms_norm_mlp(x, y, w.post_norm, eps, x_next, h, w.gate_up, gu, act, w.down, y);
      std::swap(x, x_next);
      if (shard_.comm) shard_.comm->all_reduce_sum(y);  // row-parallel down: sum over the MLP slices
    }
    if (layers_.empty())
      be_.rms_norm(x, final_norm_, eps, h);
    else
      be_.add_rms_norm(x, y, final_norm_, eps, h);
    if (R > 0 && lm_head_.data) {
      const Tensor g = ws_.gathered(R), logits = ws_.logits(R);
      be_.gather_rows(h, rows, g);
      be_.linear(g, lm_head_, nullptr, logits);
    }
  }

  // Identifies a cache by its first buffer (graphs hold its addresses).
  static const void* cache_id(const KvCache& kv) { return kv.k.empty() ? nullptr : kv.k[0].data(); }

  // Host-side checks of everything the kernels index with, so a bad batch is an error, never a
  // wild read or write.
  Status validate(const ForwardBatch& b, const KvCache& kv) const {
    const int64_t T = b.num_tokens(), S = b.num_seqs();
    auto bad = [](const std::string& m) { return invalid_argument("forward batch: " + m); };
    if (T == 0) return bad("no tokens");
    if (int64_t(b.positions.size()) != T || int64_t(b.slots.size()) != T)
      return bad("tokens, positions and slots differ in length");
    if (S < 1 || b.q_start[0] != 0 || b.q_start.back() != T)
      return bad("q_start must run from 0 to the token count");
    if (int64_t(b.kv_len.size()) != S) return bad("kv_len needs one entry per sequence");
    if (b.max_pages < 0 || int64_t(b.page_table.size()) < S * b.max_pages)
      return bad("page_table is smaller than num_seqs * max_pages");
    if (int64_t(kv.k.size()) != cfg_.num_layers || kv.num_kv_heads != cfg_.num_kv_heads ||
        kv.head_dim != cfg_.head_dim || kv.dtype != be_.compute_dtype() || kv.page_size <= 0)
      return bad("the KV cache was not allocated for this model");
    const int64_t n_slots = int64_t(kv.num_pages) * kv.page_size;
    // Moves: rows increasing (the token loop below walks them beside the rows), draws inside `draws`.
    if (b.moves.size() % 2 != 0) return bad("moves must be (row, draw) pairs");
    if (!b.moves.empty()) {
      if (b.num_moves() > S) return bad("more moves than sequences");
      if (!b.draws.data || b.draws.dtype != DType::i32 || b.draws.ndim != 2 || b.draws.device != be_.device())
        return bad("moves without an i32 [D, W] draws tensor on the backend's device");
      for (size_t i = 0; i < b.moves.size(); i += 2) {
        if (b.moves[i] < 0 || b.moves[i] >= T || (i > 0 && b.moves[i] <= b.moves[i - 2]))
          return bad("move rows must be increasing rows of the batch");
        if (b.moves[i + 1] < 0 || b.moves[i + 1] >= b.draws.size(0))
          return bad("move draw " + std::to_string(b.moves[i + 1]) + " outside the " +
                     std::to_string(b.draws.size(0)) + " draws");
      }
    }
    size_t next_move = 0;  // index into moves of the first move at row >= t
    for (int64_t t = 0; t < T; ++t) {
      while (next_move < b.moves.size() && b.moves[next_move] < t) next_move += 2;
      const bool moved = next_move < b.moves.size() && b.moves[next_move] == t;
      if ((b.tokens[size_t(t)] < 0 || b.tokens[size_t(t)] >= cfg_.vocab_size) && !moved)
        return bad("token id " + std::to_string(b.tokens[size_t(t)]) + " outside the vocabulary of " +
                   std::to_string(cfg_.vocab_size));
      if (b.slots[size_t(t)] < 0 || b.slots[size_t(t)] >= n_slots)
        return bad("slot " + std::to_string(b.slots[size_t(t)]) + " outside the KV cache");
    }
    for (int64_t s = 0; s < S; ++s) {
      const int64_t q0 = b.q_start[size_t(s)], q1 = b.q_start[size_t(s) + 1], L = b.kv_len[size_t(s)];
      if (q1 < q0) return bad("q_start is not non-decreasing");
      if (L < q1 - q0)
        return bad("kv_len of sequence " + std::to_string(s) + " is shorter than its query run");
      if (L > max_pos_)
        return bad("sequence " + std::to_string(s) + " reaches position " + std::to_string(L - 1) +
                   ", beyond the model's context of " + std::to_string(max_pos_) + " positions");
      if (cfg_.sliding_window > 0 && L > cfg_.sliding_window)
        return unsupported("sliding-window attention beyond " + std::to_string(cfg_.sliding_window) +
                           " tokens is not supported");
      const int64_t pages = (L + kv.page_size - 1) / kv.page_size;
      if (pages > b.max_pages)
        return bad("sequence " + std::to_string(s) + " needs more pages than max_pages");
      for (int64_t p = 0; p < pages; ++p) {
        const int32_t pg = b.page_table[size_t(s * b.max_pages + p)];
        if (pg < 0 || pg >= kv.num_pages) return bad("page " + std::to_string(pg) + " outside the KV cache");
      }
      for (int64_t i = q0; i < q1; ++i) {
        const int64_t want = L - (q1 - q0) + (i - q0);
        if (b.positions[size_t(i)] != want)
          return bad("position of row " + std::to_string(i) + " is " +
                     std::to_string(b.positions[size_t(i)]) + ", kv_len implies " + std::to_string(want));
        // The slot a row writes must be the one its position maps to through the page table.
        const int64_t slot =
            int64_t(b.page_table[size_t(s * b.max_pages + want / kv.page_size)]) * kv.page_size +
            want % kv.page_size;
        if (b.slots[size_t(i)] != slot)
          return bad("slot of row " + std::to_string(i) + " is " + std::to_string(b.slots[size_t(i)]) +
                     ", the page table maps its position to " + std::to_string(slot));
      }
    }
    for (int32_t r : b.logit_rows)
      if (r < 0 || r >= T) return bad("logit row " + std::to_string(r) + " outside the batch");
    return {};
  }

  ModelConfig cfg_;
  Backend& be_;
  ShardSpec shard_;
  bool keep_fp8_ = false;  // LoadOptions::keep_fp8
  std::vector<Buffer> owned_;
  size_t weight_bytes_ = 0;
  Tensor embed_, lm_head_, final_norm_, cos_sin_;
  std::vector<LayerWeights> layers_;
  int64_t max_pos_ = 0;
  Workspace ws_;
  std::vector<int64_t> buckets_;  // decode buckets (reserve_steps on a backend with graphs)
  std::map<std::pair<int64_t, int>, std::unique_ptr<Backend::StepGraph>> graphs_;  // by bucket, kv class
  uint64_t graphs_generation_ = 0;  // ws_.generation() at capture
  const void* graph_kv_ = nullptr;  // cache_id of the captured cache
  std::vector<int> kv_caps_;        // kv_class_caps at kv_caps_capacity_
  int kv_caps_capacity_ = -1;
};

}  // namespace

bool keeps_fp8(const Backend& backend, const LoadOptions& options) {
  return options.keep_fp8 && backend.weight_dtype(DType::fp8_e4m3) == DType::fp8_e4m3;
}

Result<std::unique_ptr<Model>> Model::from_config(const ModelConfig& config, const WeightStore& weights,
                                                  Backend& backend, const LoadOptions& options) {
  ASTRAI_RETURN_IF_ERROR(config.validate());
  ASTRAI_ASSIGN_OR_RETURN(WeightRefs refs, resolve_weights(config, weights));
  const auto t0 = std::chrono::steady_clock::now();
  auto model = std::make_unique<DecoderModel>(config, backend, ShardSpec{}, options.keep_fp8);
  ASTRAI_RETURN_IF_ERROR(model->load(refs));
  if (options.verbose && !config.quantization.method.empty())
    spdlog::info(
        "{}", quantization_note(config.quantization, backend.compute_dtype(), keeps_fp8(backend, options)));
  if (options.verbose)
    spdlog::info("loaded {} ({} layers, {:.1f} MB of weights on {}) in {:.2f} s", config.architecture,
                 config.num_layers, double(model->weight_bytes()) / 1e6, backend.name(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return std::unique_ptr<Model>(std::move(model));
}

Result<std::unique_ptr<Model>> make_shard(const ModelConfig& full, const WeightRefs& refs, Backend& backend,
                                          const ShardSpec& shard, const LoadOptions& options) {
  ASTRAI_ASSIGN_OR_RETURN(ModelConfig local, shard_config(full, shard.world));
  ASTRAI_RETURN_IF_ERROR(check_scale_cuts(refs, shard.world));
  auto model = std::make_unique<DecoderModel>(local, backend, shard, options.keep_fp8);
  ASTRAI_RETURN_IF_ERROR(model->load(refs));
  return std::unique_ptr<Model>(std::move(model));
}

Result<std::unique_ptr<Model>> Model::load(const std::filesystem::path& dir, Backend& backend,
                                           const LoadOptions& options) {
  ASTRAI_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir));
  ASTRAI_ASSIGN_OR_RETURN(WeightStore store, WeightStore::open(dir));
  return from_config(config, store, backend, options);
}

}  // namespace astrai
