#include "src/model/weights.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "src/core/float_elements.h"

namespace astrai {

namespace {

std::string layer_prefix(int64_t i) {
  return "model.layers." + std::to_string(i) + ".";
}

std::string file_of(const SafeTensor& t) {
  return std::filesystem::path(t.file).filename().string();
}

// The scale of fp8 matrix w ([R, C]) and the blocks its shape implies.
Result<WeightScale> find_scale(const ModelConfig& c, const WeightStore& store, const SafeTensor& w) {
  const SafeTensor* s = store.find(w.name + "_scale_inv");
  if (!s) s = store.find(w.name + "_scale");
  if (!s)
    return invalid_argument(file_of(w) + ": tensor '" + w.name + "' is F8_E4M3 but the checkpoint has no '" +
                            w.name + "_scale_inv' or '" + w.name + "_scale' beside it");
  if (!is_float_dtype(s->dtype))
    return unsupported(file_of(*s) + ": tensor '" + s->name + "' has dtype " +
                       std::string(safetensors_dtype_name(s->dtype)) + ", expected F32, BF16 or F16");
  const int64_t R = w.shape[0], C = w.shape[1];
  WeightScale out{s, R, C};  // one value
  const auto& d = s->shape;
  if (s->numel() == 1) return out;
  if (s->numel() == R && (d.size() == 1 || (d.size() == 2 && d[1] == 1))) {
    out.block_rows = 1;  // one a row
    return out;
  }
  const int64_t br = c.quantization.block_rows, bc = c.quantization.block_cols;
  if (br > 0 && d.size() == 2 && d[0] == (R + br - 1) / br && d[1] == (C + bc - 1) / bc) {
    out.block_rows = br;
    out.block_cols = bc;
    return out;
  }
  std::string blocks = br > 0 ? ", [" + std::to_string((R + br - 1) / br) + ", " +
                                    std::to_string((C + bc - 1) / bc) + "] (blocks of " + std::to_string(br) +
                                    " x " + std::to_string(bc) + ")"
                              : " or blocks, which need config.json's quantization_config block size";
  return invalid_argument(file_of(*s) + ": tensor '" + s->name + "' has shape " + s->shape_str() +
                          ", expected [1], [" + std::to_string(R) + "] (one a row)" + blocks + " for '" +
                          w.name + "' " + w.shape_str());
}

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> weight_shapes(const ModelConfig& c) {
  const int64_t H = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({"model.embed_tokens.weight", {V, H}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = layer_prefix(i);
    out.push_back({p + "input_layernorm.weight", {H}});
    out.push_back({p + "self_attn.q_proj.weight", {q, H}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, H}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, H}});
    out.push_back({p + "self_attn.o_proj.weight", {H, q}});
    if (c.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}});
      out.push_back({p + "self_attn.k_proj.bias", {kv}});
      out.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.o_proj_bias) out.push_back({p + "self_attn.o_proj.bias", {H}});
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {H}});
    out.push_back({p + "mlp.gate_proj.weight", {F, H}});
    out.push_back({p + "mlp.up_proj.weight", {F, H}});
    out.push_back({p + "mlp.down_proj.weight", {H, F}});
  }
  out.push_back({"model.norm.weight", {H}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {V, H}});
  return out;
}

Result<WeightRefs> resolve_weights(const ModelConfig& c, const WeightStore& store) {
  WeightRefs w;
  auto get = [&](const std::string& name, const std::vector<int64_t>& shape) -> Result<const SafeTensor*> {
    ASTRAI_ASSIGN_OR_RETURN(const SafeTensor* t, store.get(name, shape));
    if (t->dtype == DType::fp8_e4m3 && shape.size() == 2) {
      ASTRAI_ASSIGN_OR_RETURN(w.scales[t], find_scale(c, store, *t));
      return t;
    }
    if (!is_float_dtype(t->dtype))
      return unsupported(
          file_of(*t) + ": tensor '" + name + "' has dtype " + std::string(safetensors_dtype_name(t->dtype)) +
          (shape.size() == 2 ? ", expected F32, BF16, F16 or F8_E4M3" : ", expected F32, BF16 or F16"));
    return t;
  };
  const int64_t H = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  ASTRAI_ASSIGN_OR_RETURN(w.embed, get("model.embed_tokens.weight", {V, H}));
  w.layers.resize(size_t(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = layer_prefix(i);
    LayerWeightRefs& l = w.layers[size_t(i)];
    ASTRAI_ASSIGN_OR_RETURN(l.input_norm, get(p + "input_layernorm.weight", {H}));
    ASTRAI_ASSIGN_OR_RETURN(l.q, get(p + "self_attn.q_proj.weight", {q, H}));
    ASTRAI_ASSIGN_OR_RETURN(l.k, get(p + "self_attn.k_proj.weight", {kv, H}));
    ASTRAI_ASSIGN_OR_RETURN(l.v, get(p + "self_attn.v_proj.weight", {kv, H}));
    ASTRAI_ASSIGN_OR_RETURN(l.o, get(p + "self_attn.o_proj.weight", {H, q}));
    if (c.attention_bias) {
      ASTRAI_ASSIGN_OR_RETURN(l.q_bias, get(p + "self_attn.q_proj.bias", {q}));
      ASTRAI_ASSIGN_OR_RETURN(l.k_bias, get(p + "self_attn.k_proj.bias", {kv}));
      ASTRAI_ASSIGN_OR_RETURN(l.v_bias, get(p + "self_attn.v_proj.bias", {kv}));
    }
    if (c.o_proj_bias) {
      ASTRAI_ASSIGN_OR_RETURN(l.o_bias, get(p + "self_attn.o_proj.bias", {H}));
    }
    if (c.qk_norm) {
      ASTRAI_ASSIGN_OR_RETURN(l.q_norm, get(p + "self_attn.q_norm.weight", {c.head_dim}));
      ASTRAI_ASSIGN_OR_RETURN(l.k_norm, get(p + "self_attn.k_norm.weight", {c.head_dim}));
    }
    ASTRAI_ASSIGN_OR_RETURN(l.post_norm, get(p + "post_attention_layernorm.weight", {H}));
    ASTRAI_ASSIGN_OR_RETURN(l.gate, get(p + "mlp.gate_proj.weight", {F, H}));
    ASTRAI_ASSIGN_OR_RETURN(l.up, get(p + "mlp.up_proj.weight", {F, H}));
    ASTRAI_ASSIGN_OR_RETURN(l.down, get(p + "mlp.down_proj.weight", {H, F}));
  }
  ASTRAI_ASSIGN_OR_RETURN(w.final_norm, get("model.norm.weight", {H}));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    ASTRAI_ASSIGN_OR_RETURN(w.lm_head, get("lm_head.weight", {V, H}));
  }
  return w;
}

std::optional<StackedScales> stack_scales(std::initializer_list<WeightPart> parts, int64_t C) {
  StackedScales out;
  bool aligned = true;
  size_t i = 0;
  for (const WeightPart& p : parts) {
    if (!p.scale || !p.scale->scale) return std::nullopt;
    const int64_t bc = std::min(p.scale->block_cols, C), br = p.scale->block_rows;
    if (out.block_cols == 0) {
      out.block_cols = bc;
      out.block_rows = br;
    }
    if (bc != out.block_cols) return std::nullopt;
    aligned = aligned && br == out.block_rows && (++i == parts.size() || p.t->shape[0] % br == 0);
  }
  if (!aligned) out.block_rows = 1;
  out.cols = (C + out.block_cols - 1) / out.block_cols;
  for (const WeightPart& p : parts) {
    const SafeTensor& s = *p.scale->scale;
    const int64_t R = p.t->shape[0], br = p.scale->block_rows;
    const int64_t rows = aligned ? (R + br - 1) / br : R;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t sr = aligned ? r : r / br;
      for (int64_t c = 0; c < out.cols; ++c) {
        const float v = load_as_f32(s.data, s.dtype, sr * out.cols + c);
        if (!std::isfinite(v) || std::fabs(v) >= 65536.0f) return std::nullopt;
        out.grid.push_back(v);
      }
    }
  }
  return out;
}

}  // namespace astrai
