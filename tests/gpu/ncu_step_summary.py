# Not a ctest test: condenses `ncu --csv --metrics gpu__time_duration.sum --graph-profiling node`
# output of one profiled decode step (ours: `astrai bench decode --profile-step`; the PyTorch peer:
# `bench/torch_decode.py --profile-step`) into the step's GPU time by kind of kernel and its
# costliest kernels, so that the two can be read side by side (tests/gpu/high_load_run.sh's
# `compare` step).
#
#   python3 tests/gpu/ncu_step_summary.py NCU_CSV [--top N]
#
# The file may hold the profiled program's own output before ncu's table: lines before the table's
# header, and lines that are not rows of it, are skipped.
import argparse, csv, re, sys
from collections import defaultdict

# Kinds, first match wins (kernel names of ours, cuBLASLt, Triton / Inductor and PyTorch's SDPA).
KINDS = [
    ("attention", r"attention|flash|fmha|sdpa|splitkv|combine_splits"),
    ("gemm", r"gemm|gemv|nvjet|xmma|cutlass|cublas|matmul|linear|splitk"),
    ("sample", r"sample|argmax|topk|sort"),
    ("norm", r"norm|rsqrt"),
    ("rope", r"rope|rotary"),
    ("activation", r"swiglu|silu|sigmoid|gelu"),
    ("embedding", r"embedding|gather"),
    ("other fused (triton)", r"triton"),
]
UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
         "second": 1e6}


def kind_of(name):
    low = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def read_rows(path):
    """(kernel name, microseconds) for each profiled kernel in the file."""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"') and '"Kernel Name"' in l), None)
    if start is None:
        return []
    header = next(csv.reader([lines[start]]))
    col = {h: i for i, h in enumerate(header)}
    rows = []
    for fields in csv.reader(l for l in lines[start + 1:] if l.startswith('"')):
        if len(fields) != len(header) or fields[col["Metric Name"]] != "gpu__time_duration.sum":
            continue
        unit = UNITS.get(fields[col["Metric Unit"]].strip())
        try:
            value = float(fields[col["Metric Value"]].replace(",", ""))
        except ValueError:
            continue
        if unit is not None:
            rows.append((fields[col["Kernel Name"]], value * unit))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    rows = read_rows(args.csv)
    if not rows:
        print(f"{args.csv}: no gpu__time_duration.sum rows")
        return 1
    total = sum(us for _, us in rows)
    print(f"{args.csv}: {len(rows)} kernels, {total:.1f} us of GPU time")
    kinds = defaultdict(lambda: [0.0, 0])
    names = defaultdict(lambda: [0.0, 0])
    for name, us in rows:
        for table in (kinds[kind_of(name)], names[name]):
            table[0] += us
            table[1] += 1
    print("| kind | us | share | kernels |")
    print("|---|---|---|---|")
    for kind, (us, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        print(f"| {kind} | {us:.1f} | {us / total:.1%} | {n} |")
    print(f"\n| kernel (top {args.top}) | us | count | us each |")
    print("|---|---|---|---|")
    for name, (us, n) in sorted(names.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"| {name[:90]} | {us:.1f} | {n} | {us / n:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
