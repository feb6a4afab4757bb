#!/usr/bin/python3
"""Float64 PyTorch autograd gradients of a decoder's training loss, for the TrainModel gradient tests.

The decoder is tests/model/reference.py's (its weight loading, RoPE table and RMSNorm are reused),
batched and generalised to packed documents: each token has its own RoPE position, and token t of
row b attends to keys j of the same row with doc_start[b, t] <= j <= t. The loss is
torch.nn.functional.cross_entropy over all rows (ignore_index -100, label_smoothing, mean over the
non-ignored targets) times `scale`; every weight's gradient is d(scale * loss) / d(weight).

  grad_reference.py MODEL_DIR BATCH.json OUT.bin [MODEL_DIR BATCH.json OUT.bin ...]
    BATCH.json: {"batch", "seq_len", "tokens", "targets", "positions", "doc_start" (flat, row-major),
                 "label_smoothing", "scale", "names": [weight names in output order]}
    OUT.bin:    the gradients of "names", in order, flattened, raw little-endian float64
    stdout:     one line {"loss": mean loss (unscaled)} per triple, in order
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
import reference as ref  # noqa: E402


def loss_of(cfg, w, b):
    arch = cfg["architectures"][0]
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    qkv_bias = arch == "Qwen2ForCausalLM" or (arch != "MistralForCausalLM" and cfg.get("attention_bias", False))
    o_bias = arch in ("LlamaForCausalLM", "Qwen3ForCausalLM") and cfg.get("attention_bias", False)
    qk_norm = arch == "Qwen3ForCausalLM"

    B, T = b["batch"], b["seq_len"]
    tokens = torch.tensor(b["tokens"], dtype=torch.int64).view(B, T)
    targets = torch.tensor(b["targets"], dtype=torch.int64)
    pos = torch.tensor(b["positions"], dtype=torch.int64).view(B, T)
    doc = torch.tensor(b["doc_start"], dtype=torch.int64).view(B, T)
    cos, sin = ref.rope_cos_sin(cfg, hd, int(pos.max()) + 1)
    cos, sin = cos[pos][:, :, None, :], sin[pos][:, :, None, :]  # [B, T, 1, hd]
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = (j <= i)[None] & (j >= doc[:, :, None])  # [B, T, T]
    mask = torch.zeros(B, T, T, dtype=torch.float64).masked_fill(~allowed, float("-inf"))[:, None]

    def lin(inp, name, bias):
        y = inp @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    x = w["model.embed_tokens.weight"][tokens]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = ref.rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj", qkv_bias).view(B, T, nh, hd)
        k = lin(h, p + "self_attn.k_proj", qkv_bias).view(B, T, nkv, hd)
        v = lin(h, p + "self_attn.v_proj", qkv_bias).view(B, T, nkv, hd)
        if qk_norm:
            q = ref.rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = ref.rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + ref.rotate_half(q) * sin
        k = k * cos + ref.rotate_half(k) * sin
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, hd]
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        scores = q @ k.transpose(2, 3) * hd**-0.5 + mask
        a = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, nh * hd)
        x = x + lin(a, p + "self_attn.o_proj", o_bias)
        h = ref.rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = lin(h, p + "mlp.gate_proj", False)
        u = lin(h, p + "mlp.up_proj", False)
        x = x + lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj", False)
    x = ref.rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    logits = (x @ head.T).view(B * T, -1)
    return torch.nn.functional.cross_entropy(
        logits, targets, ignore_index=-100, label_smoothing=b["label_smoothing"], reduction="mean"
    )


def run(model_dir, batch_path, out_path):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    with open(batch_path) as f:
        b = json.load(f)
    w = ref.load_weights(model_dir)
    for t in w.values():
        t.requires_grad_(True)
    loss = loss_of(cfg, w, b)
    (loss * b["scale"]).backward()
    with open(out_path, "wb") as f:
        for name in b["names"]:
            g = w[name].grad
            if g is None:
                g = torch.zeros_like(w[name])
            g.detach().numpy().astype("<f8").tofile(f)
    print(json.dumps({"loss": loss.item()}), flush=True)


def main(argv):
    args = argv[1:]
    if not args or len(args) % 3:
        raise SystemExit(__doc__)
    for i in range(0, len(args), 3):
        run(*args[i : i + 3])


if __name__ == "__main__":
    main(sys.argv)
