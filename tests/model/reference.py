#!/usr/bin/python3
"""Independent float64 PyTorch forward of the Hugging Face Llama / Mistral / Qwen2 / Qwen3 decoders.

Written from the transformers modeling code's semantics (not from astrai's code):
  RMSNorm     x * rsqrt(mean(x^2) + eps) * w
  attention   q/k/v projections (bias: Qwen2 q/k/v always; Llama/Qwen3 all four when
              attention_bias), Qwen3 per-head q_norm/k_norm before RoPE, rotate_half RoPE,
              repeat_kv for GQA, softmax(q k^T * head_dim^-0.5 + causal mask) v, o_proj
  MLP         down(silu(gate(x)) * up(x))
  RoPE table  as transformers builds it, in float32 even for a float64 model: inv_freq
              (default / linear / llama3 / yarn), angle = position * inv_freq, cos and sin of it
              (times YaRN's attention factor).
Everything else runs in float64 on weights widened exactly from F32 / BF16 / F16.

  reference.py logits MODEL_DIR IDS.json OUT.bin   IDS.json: a list of token ids, or a list of such
                                                   lists (independent sequences); writes the logits
                                                   [total tokens, vocab] as raw little-endian float64
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

DT = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data = buf[8 + n :]
    out = {}
    for name, v in header.items():
        b, e = v["data_offsets"]
        a = np.frombuffer(data[b:e], dtype=DT[v["dtype"]]).reshape(v["shape"])
        if v["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(a.astype(np.float64))
    return out


def load_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for fn in files:
        w.update(read_safetensors(os.path.join(model_dir, fn)))
    return w


def rope_inv_freq(cfg, head_dim):
    base = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(dtype=torch.float) / head_dim))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        inv_freq = inv_freq / rs["factor"]
    elif kind == "llama3":
        factor = rs["factor"]
        low, high = rs["low_freq_factor"], rs["high_freq_factor"]
        old_ctx = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
        wavelen = 2 * math.pi / inv_freq
        llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * llama / factor + smooth * llama
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv_freq = torch.where(medium, smoothed, llama)
    elif kind == "yarn":
        inv_freq = yarn_inv_freq(cfg, rs, head_dim)
    elif kind != "default":
        raise SystemExit("reference.py: unsupported rope type %r" % kind)
    return inv_freq


# YaRN as transformers computes it (the factor as given; the ramp over the original context).
def yarn_inv_freq(cfg, rs, dim):
    base, factor = cfg.get("rope_theta", 10000.0), rs["factor"]
    orig = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp
    return interpolation * (1 - keep) + extrapolation * keep


def rope_attention_factor(cfg):
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) != "yarn":
        return 1.0
    if rs.get("attention_factor"):
        return rs["attention_factor"]
    factor = rs["factor"]

    def mscale(m):
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    if rs.get("mscale") and rs.get("mscale_all_dim"):
        return mscale(rs["mscale"]) / mscale(rs["mscale_all_dim"])
    return mscale(1)


def rope_cos_sin(cfg, head_dim, n):
    inv_freq = rope_inv_freq(cfg, head_dim).float()
    pos = torch.arange(n, dtype=torch.int64).float()
    freqs = (inv_freq[:, None] @ pos[None, :]).transpose(0, 1)  # [n, D/2], float32
    emb = torch.cat((freqs, freqs), dim=-1)
    af = rope_attention_factor(cfg)
    return (emb.cos() * af).double(), (emb.sin() * af).double()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def forward(model_dir, ids):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    arch = cfg["architectures"][0]
    w = load_weights(model_dir)
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    qkv_bias = arch == "Qwen2ForCausalLM" or (arch != "MistralForCausalLM" and cfg.get("attention_bias", False))
    o_bias = arch in ("LlamaForCausalLM", "Qwen3ForCausalLM") and cfg.get("attention_bias", False)
    qk_norm = arch == "Qwen3ForCausalLM"

    T = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.int64)]
    cos, sin = rope_cos_sin(cfg, hd, T)
    cos, sin = cos[:, None, :], sin[:, None, :]  # broadcast over heads
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)

    def lin(inp, name, bias):
        y = inp @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj", qkv_bias).view(T, nh, hd)
        k = lin(h, p + "self_attn.k_proj", qkv_bias).view(T, nkv, hd)
        v = lin(h, p + "self_attn.v_proj", qkv_bias).view(T, nkv, hd)
        if qk_norm:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, T, hd]
        k = k.repeat_interleave(nh // nkv, dim=0)  # repeat_kv: head h reads kv head h // (nh / nkv)
        v = v.repeat_interleave(nh // nkv, dim=0)
        scores = q @ k.transpose(1, 2) * hd**-0.5 + mask
        a = torch.softmax(scores, dim=-1) @ v  # [heads, T, hd]
        a = a.transpose(0, 1).reshape(T, nh * hd)
        x = x + lin(a, p + "self_attn.o_proj", o_bias)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = lin(h, p + "mlp.gate_proj", False)
        u = lin(h, p + "mlp.up_proj", False)
        x = x + lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj", False)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return x @ head.T


def main(argv):
    if len(argv) != 5 or argv[1] != "logits":
        raise SystemExit(__doc__)
    with open(argv[3]) as f:
        ids = json.load(f)
    seqs = ids if ids and isinstance(ids[0], list) else [ids]
    logits = torch.cat([forward(argv[2], s) for s in seqs], dim=0)
    logits.numpy().astype("<f8").tofile(argv[4])
    print(json.dumps({"shape": list(logits.shape)}))


if __name__ == "__main__":
    main(sys.argv)
