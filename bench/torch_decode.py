# PyTorch peers for `astrai bench decode --device cuda` (not a test: run by hand on a GPU machine
# with torch, and transformers for the eager peer). Decode tokens/s of one model shape at several
# batch sizes, with every sequence at the same context length, measured three ways in one run:
#
#   graph    our static-cache decoder (below), one decode step captured into a CUDA graph per batch
#            size and replayed: PyTorch's kernels without launch overhead
#   compile  the same step under torch.compile(mode="reduce-overhead", fullgraph=True): Inductor's
#            fused kernels replayed as CUDA graphs (the gpt-fast recipe), the strong peer
#   hf       transformers eager (AutoModelForCausalLM.from_config, bf16, its default cache), one
#            forward per token: what most users run
#
# and the bandwidth floor of the same run: weight bytes + the KV bytes a step reads, over the
# device-to-device copy bandwidth (bytes read + written) measured here.
#
#   python3 bench/torch_decode.py --preset llama-1b --batch 1,8,32 --context 512 [--modes graph,compile,hf]
#   python3 bench/torch_decode.py --config MODEL_DIR/config.json ...
#
# --profile-step: after the timed steps, one more step (graph or compile) between
# cudaProfilerStart and Stop, so that `ncu --profile-from-start off --graph-profiling node` records
# that step's kernels alone, as `astrai bench decode --profile-step` does for ours
# (tests/gpu/high_load_run.sh's `compare` step).
#
# Weights are random bf16 (decode speed does not depend on their values); the shapes are the
# contract's presets or any Llama / Qwen2 / Qwen3 config.json. The static decoder reads the whole
# cache of `context + steps` positions each step under a mask (as gpt-fast does); the floor counts
# only the `context` positions in use, so it favours nobody.
import argparse, json, math, sys, time

import torch
import torch.nn.functional as F

# The contract's presets (docs: ../shared/design/contract.md, src/model/presets.cpp).
PRESETS = {
    "llama-1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=64, intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True,
                     qk_norm=False, rope_theta=500000.0, rms_norm_eps=1e-5, model_type="llama"),
    "qwen3-0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True,
                       qk_norm=True, rope_theta=1000000.0, rms_norm_eps=1e-6, model_type="qwen3"),
    "qwen3-8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False,
                     qk_norm=True, rope_theta=1000000.0, rms_norm_eps=1e-6, model_type="qwen3"),
}


def load_config(args):
    if args.preset:
        return dict(PRESETS[args.preset])
    with open(args.config) as f:
        c = json.load(f)
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    c["qk_norm"] = c.get("model_type") == "qwen3"
    c.setdefault("tie_word_embeddings", False)
    c.setdefault("rope_theta", 10000.0)
    c.setdefault("rms_norm_eps", 1e-6)
    return c


class StaticDecoder(torch.nn.Module):
    """One decode step over a preallocated KV cache (per layer [B, KVH, T, D]), all shapes fixed.
    Weights and caches are registered buffers, so torch.compile's CUDA graphs keep their addresses
    and the cache writes are in-place buffer updates (as in gpt-fast)."""

    def __init__(self, c, batch, cache_len, dev):
        super().__init__()
        self.c, self.B, self.T = c, batch, cache_len
        H, D = c["hidden_size"], c["head_dim"]
        NH, KVH, FF, V, L = (c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"],
                             c["vocab_size"], c["num_hidden_layers"])
        bf = torch.bfloat16
        r = lambda *s: (torch.randn(*s, device=dev, dtype=bf) * 0.02)
        one = lambda n: torch.ones(n, device=dev, dtype=bf)
        self.register_buffer("embed", r(V, H))
        if not c["tie_word_embeddings"]:
            self.register_buffer("lm_head", r(V, H))
        self.register_buffer("final_norm", one(H))
        for l in range(L):
            for name, t in dict(ln1=one(H), ln2=one(H), qkv=r((NH + 2 * KVH) * D, H), o=r(H, NH * D),
                                gate_up=r(2 * FF, H), down=r(H, FF)).items():
                self.register_buffer(f"{name}{l}", t)
            if c["qk_norm"]:
                self.register_buffer(f"qn{l}", one(D))
                self.register_buffer(f"kn{l}", one(D))
            self.register_buffer(f"k{l}", torch.randn(batch, KVH, cache_len, D, device=dev, dtype=bf))
            self.register_buffer(f"v{l}", torch.randn(batch, KVH, cache_len, D, device=dev, dtype=bf))
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        ang = torch.arange(cache_len, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
        self.register_buffer("cos", torch.cos(ang))  # [T, D/2]
        self.register_buffer("sin", torch.sin(ang))
        self.weight_bytes = sum(t.numel() * t.element_size() for n, t in self.named_buffers()
                                if not (n[0] in "kv" and n[1:].isdigit()) and n not in ("cos", "sin"))
        # PyTorch >= 2.5 reads grouped KV heads in place; older versions get them repeated.
        self.gqa_native = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")

    def rms(self, x, w):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"])).to(x.dtype) * w

    def rope(self, x, pos):  # x [B, heads, D], pos [B]; rotate-half pairing (i, i + D/2)
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    def forward(self, tokens, pos):  # tokens [B], pos [B] (position of each new token) -> logits [B, V]
        c, B = self.c, self.B
        NH, KVH, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        x = self.embed[tokens]
        rows = torch.arange(B, device=tokens.device)
        mask = (torch.arange(self.T, device=tokens.device)[None, :] <= pos[:, None])[:, None, None, :]
        for l in range(c["num_hidden_layers"]):
            w = lambda n: getattr(self, f"{n}{l}")
            h = self.rms(x, w("ln1"))
            qkv = h @ w("qkv").t()
            q = qkv[:, : NH * D].view(B, NH, D)
            k = qkv[:, NH * D : (NH + KVH) * D].view(B, KVH, D)
            v = qkv[:, (NH + KVH) * D :].view(B, KVH, D)
            if c["qk_norm"]:
                q, k = self.rms(q, w("qn")), self.rms(k, w("kn"))
            q, k = self.rope(q, pos), self.rope(k, pos)
            kc, vc = w("k"), w("v")
            kc[rows, :, pos] = k
            vc[rows, :, pos] = v
            if self.gqa_native:
                o = F.scaled_dot_product_attention(q[:, :, None, :], kc, vc, attn_mask=mask, enable_gqa=True)
            else:
                g = NH // KVH
                o = F.scaled_dot_product_attention(q[:, :, None, :], kc.repeat_interleave(g, 1),
                                                   vc.repeat_interleave(g, 1), attn_mask=mask)
            x = x + o.reshape(B, NH * D) @ w("o").t()
            h = self.rms(x, w("ln2"))
            gate, up = (h @ w("gate_up").t()).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ w("down").t()
        head = self.embed if c["tie_word_embeddings"] else self.lm_head
        return self.rms(x, self.final_norm) @ head.t()


def model_weight_bytes(c):
    H, D, NH, KVH, FF, V, L = (c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"],
                               c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"])
    per_layer = 2 * H + (NH + 2 * KVH) * D * H + H * NH * D + 3 * FF * H + (2 * D if c["qk_norm"] else 0)
    return 2 * (L * per_layer + V * H * (1 if c["tie_word_embeddings"] else 2) + H)


def bandwidth_gbs(dev):
    n = 2 << 30
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); dst.copy_(src); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    del src, dst
    return 2 * n / (ts[len(ts) // 2] / 1e3) / 1e9


def time_steps(run_step, steps):
    """One timed block of `steps` decode steps (after the caller's warm-up); seconds per step."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        run_step(i)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def bench_static(c, B, ctx, steps, mode, dev, profile=False):
    m = StaticDecoder(c, B, ctx + steps + 8, dev).eval()
    tokens = torch.randint(0, c["vocab_size"], (B,), device=dev)
    pos = torch.full((B,), ctx, device=dev, dtype=torch.long)
    if mode == "compile":
        fn = torch.compile(m, mode="reduce-overhead", fullgraph=True)
        t0 = time.time()
        for i in range(3):
            pos.fill_(ctx + i)
            fn(tokens, pos)
        torch.cuda.synchronize()
        setup = time.time() - t0

        def run(i):
            pos.fill_(ctx + i)
            tokens.copy_(fn(tokens, pos).argmax(-1))
    else:
        t0 = time.time()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                m(tokens, pos)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = m(tokens, pos)
            nxt = out.argmax(-1)
        setup = time.time() - t0

        def run(i):
            pos.fill_(ctx + i)
            g.replay()
            tokens.copy_(nxt)
    sec = time_steps(run, steps)
    if profile:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        run(steps)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    kv_bytes = 2 * c["num_hidden_layers"] * B * ctx * c["num_key_value_heads"] * c["head_dim"] * 2
    return sec, setup, m.weight_bytes, kv_bytes


@torch.inference_mode()
def bench_static_nograd(*a):
    return bench_static(*a)


def bench_hf(c, B, ctx, steps, dev):
    from transformers import AutoConfig, AutoModelForCausalLM
    mt = c.get("model_type", "llama")
    hc = AutoConfig.for_model(mt, hidden_size=c["hidden_size"], num_hidden_layers=c["num_hidden_layers"],
                              num_attention_heads=c["num_attention_heads"],
                              num_key_value_heads=c["num_key_value_heads"], head_dim=c["head_dim"],
                              intermediate_size=c["intermediate_size"], vocab_size=c["vocab_size"],
                              tie_word_embeddings=c["tie_word_embeddings"], rope_theta=c["rope_theta"],
                              rms_norm_eps=c["rms_norm_eps"], max_position_embeddings=ctx + steps + 64)
    model = AutoModelForCausalLM.from_config(hc).to(dev, dtype=torch.bfloat16).eval()
    ids = torch.randint(0, c["vocab_size"], (B, ctx), device=dev)
    with torch.no_grad():
        out = model(ids, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        state = {"past": past, "tok": tok}

        def run(i):
            o = model(state["tok"], past_key_values=state["past"], use_cache=True)
            state["past"], state["tok"] = o.past_key_values, o.logits[:, -1].argmax(-1, keepdim=True)
        for i in range(3):
            run(i)
        sec = time_steps(run, steps)
    del model
    return sec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--config")
    ap.add_argument("--batch", default="1,8,32")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--modes", default="graph,compile,hf")
    ap.add_argument("--json", help="append one JSON object per row to this file")
    ap.add_argument("--profile-step", action="store_true",
                    help="one more step of the graph / compile modes inside the profiler range (ncu)")
    args = ap.parse_args()
    if not args.preset and not args.config:
        ap.error("give --preset or --config")
    c = load_config(args)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    bw = bandwidth_gbs(dev)
    name = args.preset or args.config
    print(f"# {name} on {torch.cuda.get_device_name()}: copy bandwidth {bw:.0f} GB/s, context {args.context}, "
          f"torch {torch.__version__}", flush=True)
    print("| mode | batch | tok/s | ms/step | floor ms/step | share of floor | setup s |")
    print("|---|---|---|---|---|---|---|", flush=True)
    for B in [int(b) for b in args.batch.split(",")]:
        for mode in args.modes.split(","):
            try:
                if mode == "hf":
                    sec = bench_hf(c, B, args.context, args.steps, dev)
                    setup = float("nan")
                    weight_bytes = None
                else:
                    sec, setup, weight_bytes, kv_bytes = bench_static_nograd(
                        c, B, args.context, args.steps, mode, dev, args.profile_step)
            except Exception as e:  # a peer that fails is reported, not fatal
                print(f"| {mode} | {B} | failed: {type(e).__name__}: {str(e)[:200]} |", flush=True)
                torch.cuda.empty_cache()
                continue
            if weight_bytes is None:
                weight_bytes = model_weight_bytes(c)
                kv_bytes = 2 * c["num_hidden_layers"] * B * args.context * c["num_key_value_heads"] * c["head_dim"] * 2
            floor = (weight_bytes + kv_bytes) / (bw * 1e9)
            row = dict(model=name, mode=mode, batch=B, context=args.context, tok_s=B / sec, ms_step=sec * 1e3,
                       floor_ms=floor * 1e3, share=floor / sec, setup_s=setup, bandwidth_gbs=bw)
            print(f"| {mode} | {B} | {B / sec:,.0f} | {sec * 1e3:.3f} | {floor * 1e3:.3f} | {floor / sec:.0%} | "
                  f"{setup:.1f} |", flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(row) + "\n")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
