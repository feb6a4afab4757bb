#!/usr/bin/env python3
"""PyTorch doing the training step `astrai bench train` times, on the same model shape.

  python3 bench/torch_train.py --config MODEL_DIR/config.json [--batch 8] [--seq-len 2048]
                               [--steps 10] [--warmup 3] [--device cuda|cpu] [--compile]
                               [--threads N] [--peak TFLOPS]

The step: forward of B random sequences, cross-entropy in f32 over the full logits, backward,
clip_grad_norm_(1.0), AdamW (fused on CUDA; betas 0.9/0.95, wd 0.1). Precision as ours: on CUDA f32
master parameters and optimizer state with bf16 autocast for the compute; on the CPU f32. The model
is a plain Llama/Qwen3 decoder (RMSNorm, RoPE, GQA, SwiGLU, tied or untied head) written here so
that Debian's torch 1.13 runs it too (attention: scaled_dot_product_attention where torch has it,
else an explicit causal softmax). MFU uses the same FLOP count as `astrai bench train`.
Prints one JSON line.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# scaled_dot_product_attention takes grouped K/V itself from torch 2.5.
SDPA_GQA = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight.to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, hd = c["hidden_size"], c["head_dim"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], hd
        self.input_layernorm = RMSNorm(H, c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(H, c["rms_norm_eps"])
        self.qkv = nn.Linear(H, (self.nh + 2 * self.nkv) * hd, bias=False)
        self.o = nn.Linear(self.nh * hd, H, bias=False)
        self.gate_up = nn.Linear(H, 2 * c["intermediate_size"], bias=False)
        self.down = nn.Linear(c["intermediate_size"], H, bias=False)
        self.qk_norm = c.get("model_type") == "qwen3"
        if self.qk_norm:
            self.q_norm = RMSNorm(hd, c["rms_norm_eps"])
            self.k_norm = RMSNorm(hd, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        qkv = self.qkv(self.input_layernorm(x))
        q, k, v = qkv.split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        q = q.view(B, T, self.nh, self.hd)
        k = k.view(B, T, self.nkv, self.hd)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        if SDPA_GQA:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=rep > 1)
        elif hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                               is_causal=True)
        else:  # torch < 2.0
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            a = torch.softmax(s.float(), dim=-1).to(v.dtype) @ v
        x = x + self.o(a.transpose(1, 2).reshape(B, T, -1))
        g, u = self.gate_up(self.post_attention_layernorm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.head = None if c.get("tie_word_embeddings", False) else nn.Linear(c["hidden_size"], c["vocab_size"],
                                                                                bias=False)

    def forward(self, ids, cos, sin):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        return x @ self.embed.weight.t().to(x.dtype) if self.head is None else self.head(x)


def flops_per_token(c, T):
    H, F_ = c["hidden_size"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    per_layer = H * (q + 2 * kv) + q * H + 3 * H * F_
    L = c["num_hidden_layers"]
    return 6 * (L * per_layer + c["vocab_size"] * H) + 6 * L * q * T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--peak", type=float, default=0.0, help="bf16 GEMM peak TFLOP/s for the MFU column")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    c = json.load(open(a.config))
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = Decoder(c).to(dev)
    for p in model.parameters():
        if p.dim() == 2:
            nn.init.normal_(p, std=0.02)
    hd, T = c["head_dim"], a.seq_len
    inv = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2, device=dev).float() / hd))
    f = torch.outer(torch.arange(T, device=dev).float(), inv)
    emb = torch.cat((f, f), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    cuda = dev.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if cuda else {}))
    fwd = torch.compile(model) if a.compile else model
    ids = torch.randint(0, c["vocab_size"], (a.batch, T + 1), device=dev)
    x, y = ids[:, :-1], ids[:, 1:]

    def step():
        opt.zero_grad(set_to_none=True)
        if cuda:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = fwd(x, cos.to(torch.bfloat16), sin.to(torch.bfloat16))
        else:
            logits = fwd(x, cos, sin)
        loss = F.cross_entropy(logits.float().view(-1, c["vocab_size"]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    if cuda:
        torch.cuda.synchronize()
    s = time.perf_counter() - t0
    tps = a.batch * T * a.steps / s
    tflops = tps * flops_per_token(c, T) / 1e12
    peak = a.peak
    if cuda and peak == 0:
        m = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        m @ m
        torch.cuda.synchronize()
        best = 1e30
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(10):
                m @ m.t()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t) / 10)
        peak = 2 * 8192**3 / best / 1e12
    print(json.dumps({"bench": "torch_train", "torch": torch.__version__, "device": str(dev),
                      "compile": a.compile, "precision": "bf16 autocast, f32 master" if cuda else "f32",
                      "batch": a.batch, "seq_len": T, "steps": a.steps, "ms_per_step": 1e3 * s / a.steps,
                      "tokens_per_s": tps, "model_tflops": tflops, "peak_tflops": peak,
                      "mfu": tflops / peak if peak else 0.0, "last_loss": float(loss),
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
