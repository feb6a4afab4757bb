# Not a ctest test: run by hand on a GPU machine beside `astrai bench decode --device cuda`, whose
# decode floor is the weight (+ KV) bytes over the copy bandwidth measured here.
# The two ceilings for the decode benchmark, measured on this card in this run:
# device-to-device copy bandwidth (bytes read + written over time, 4 GiB buffers, median of 20)
# and a large bf16 GEMM's rate (8192^3, median of 20), both timed with CUDA events.
import torch
def median_ms(fn, reps=20):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]
n = 4 << 30
src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
dst = torch.empty_like(src)
ms = median_ms(lambda: dst.copy_(src))
print(f"D2D copy: {n / 2**30:.0f} GiB in {ms:.3f} ms = {2 * n / ms / 1e6:.0f} GB/s (read + write)")
del src, dst
m = 8192
a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
ms = median_ms(lambda: a @ b)
print(f"bf16 GEMM {m}^3: {ms:.3f} ms = {2 * m**3 / ms / 1e9:.0f} TFLOP/s")
