"""PyTorch's reference for bench/train_attention_bench.cu: scaled_dot_product_attention(is_causal=True)
forward and backward in bf16 on the same shapes (8 sequences of 2,048 tokens, 32 heads, 8 KV heads,
head_dim 64 and 128), CUDA events, median of the repetitions, TFLOP/s with the same FLOP count
(causal half: forward 4 * pairs * D * H, backward 2.5 times that).

With --prefill, the reference for bench/prefill_attention_bench.cu instead: the causal forward of one
sequence of 1k, 8k and 32k tokens at 32 heads, 8 KV heads, head_dim 128 and 64 (contiguous K/V: SDPA
has no paged cache, so this is the bound a paged kernel aims at).

    python3 bench/torch_attention.py [--reps 10] [--prefill]
"""
import argparse

import torch
import torch.nn.functional as F


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def kernel_names(fn, top=3):
    """The CUDA kernels that take the most device time in one call of fn (which backend SDPA picked)."""
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()

        def device_us(e):
            return getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))

        return [e.key for e in sorted(prof.key_averages(), key=device_us, reverse=True)[:top]]
    except Exception as e:  # the profiler is a nicety here
        return [f"(profiler: {e})"]


def prefill(reps):
    heads, kv_heads = 32, 8
    for d in (128, 64):
        for seq in (1024, 8192, 32768):
            fwd_flop = 4 * seq * (seq + 1) / 2 * d * heads
            q = torch.randn(1, heads, seq, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, kv_heads, seq, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(1, kv_heads, seq, d, device="cuda", dtype=torch.bfloat16)

            def fwd():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

            with torch.no_grad():
                f = median_ms(fwd, reps)
                names = kernel_names(fwd, top=1)
            print(f"torch sdpa prefill d {d} n {seq:6d}: {f:8.3f} ms {fwd_flop / f * 1e-9:6.1f} TFLOP/s  "
                  f"({names[0][:70]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--prefill", action="store_true")
    args = ap.parse_args()
    if args.prefill:
        print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
        prefill(args.reps)
        return
    batch, seq, heads, kv_heads = 8, 2048, 32, 8
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for d in (64, 128):
        pairs = batch * seq * (seq + 1) / 2
        fwd_flop = 4 * pairs * d * heads
        bwd_flop = 2.5 * fwd_flop
        q = torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(batch, kv_heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(batch, kv_heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16)
        for label, gqa in (("enable_gqa", True), ("repeat_interleave", False)):
            def fwd():
                if gqa:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                rep = heads // kv_heads
                return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                      is_causal=True)

            def fwd_bwd():
                out = fwd()
                torch.autograd.grad(out, (q, k, v), do)

            try:
                with torch.no_grad():
                    f = median_ms(fwd, args.reps)
                fb = median_ms(fwd_bwd, args.reps)
            except RuntimeError as e:  # a backend without GQA support
                print(f"d {d} {label}: {e}")
                continue
            b = fb - f
            names = kernel_names(fwd_bwd)
            print(f"torch sdpa d {d} {label:17s} fwd {f:7.3f} ms {fwd_flop / f * 1e-9:6.1f} TFLOP/s | "
                  f"bwd {b:7.3f} ms {bwd_flop / b * 1e-9:6.1f} TFLOP/s | fwd+bwd {fb:7.3f} ms "
                  f"{(fwd_flop + bwd_flop) / fb * 1e-9:6.1f} TFLOP/s")
            print(f"  kernels: {' | '.join(n[:90] for n in names)}")


if __name__ == "__main__":
    main()
