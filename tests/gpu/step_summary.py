# Not a ctest test: condenses the kernels of one profiled decode step (ours: `astrai bench decode
# --profile-step`; the PyTorch peer: `bench/torch_decode.py --profile-step`) into the step's GPU time
# by kind of kernel and its costliest kernels, so that the two can be read side by side
# (tests/gpu/high_load_run.sh's `compare` and `timeline` steps). It reads either
#   - `ncu --csv --metrics gpu__time_duration.sum --graph-profiling node` output: each kernel timed
#     alone (replayed, caches flushed). The file may hold the program's own output before ncu's
#     table: lines before the table's header, and lines that are not rows of it, are skipped; or
#   - a kernel timeline from build/bin/libastrai_kernel_trace.so (bench/kernel_trace.cpp): the
#     kernels as the device ran them. Then it also gives the step's span from the first kernel's
#     start to the last one's end, the time no kernel ran (gaps) and the longest gaps. A kernel
#     launched programmatically (PDL) starts before the one it waits for ends: its time includes
#     that wait, so the times by kind overlap there; the span and the gaps do not, nor does what
#     each kernel adds to the step (its end minus the latest end before it on the main stream),
#     the column the timeline's tables are ranked by.
#
#   python3 tests/gpu/step_summary.py CSV [--top N] [--range R]
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


def read_timeline(path, which):
    """(kernel name, start us, end us, stream) of profiler range `which` of a kernel_trace CSV, by start."""
    with open(path, newline="") as f:
        rows = [(r["name"], int(r["start_ns"]) / 1e3, int(r["end_ns"]) / 1e3, r["stream"])
                for r in csv.DictReader(f) if int(r["range"]) == which]
    return sorted(rows, key=lambda r: r[1])


def added_times(timeline):
    """What each kernel of the main stream (the one with the most kernels) adds to the step: its end
    minus the latest end before it, the gap before it included; 0 for a side stream's kernels. Unlike
    durations these do not overlap where kernels start early (PDL), and they sum to the main stream's
    span."""
    counts = defaultdict(int)
    for _, _, _, stream in timeline:
        counts[stream] += 1
    main = max(counts, key=counts.get)
    reach, added = None, []
    for _, start, end, stream in timeline:
        if stream != main:
            added.append(0.0)
            continue
        added.append(end - start if reach is None else max(0.0, end - reach))
        reach = end if reach is None else max(reach, end)
    return added


def print_timeline(timeline, top):
    """The span, the busy time (the union of the kernels' intervals) and the longest gaps."""
    span = timeline[-1][2] - timeline[0][1]
    busy, reach, gaps = 0.0, timeline[0][1], []
    prev = None
    for name, start, end, _ in timeline:
        if start > reach and prev is not None:
            gaps.append((start - reach, prev, name))
        busy += max(0.0, end - max(start, reach))
        if end > reach:
            reach, prev = end, name
        elif prev is None:
            prev = name
    idle = span - busy
    print(f"span {span:.1f} us: kernels running {busy:.1f} us, none running {idle:.1f} us "
          f"({idle / span:.1%}) in {len(gaps)} gaps, {idle / max(len(gaps), 1):.2f} us each")
    print(f"\n| gap, us (top {top}) | after | before |")
    print("|---|---|---|")
    for us, after, before in sorted(gaps, key=lambda g: -g[0])[:top]:
        print(f"| {us:.2f} | {after[:60]} | {before[:60]} |")
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--range", type=int, default=0, help="a kernel timeline's profiler range")
    args = ap.parse_args()
    with open(args.csv, errors="replace") as f:
        trace = f.readline().startswith("range,start_ns,")
    if trace:
        timeline = read_timeline(args.csv, args.range)
        rows = [(t[0], t[2] - t[1], a) for t, a in zip(timeline, added_times(timeline))]
    else:
        rows = [(name, us, None) for name, us in read_rows(args.csv)]
    if not rows:
        print(f"{args.csv}: no kernels" + ("" if trace else " (no gpu__time_duration.sum rows)"))
        return 1
    total = sum(r[1] for r in rows)
    print(f"{args.csv}: {len(rows)} kernels, {total:.1f} us of GPU time")
    if trace:
        print_timeline(timeline, args.top)
    # Timelines also give what each adds to the step (added_times), and rank by it.
    kinds = defaultdict(lambda: [0.0, 0, 0.0])
    names = defaultdict(lambda: [0.0, 0, 0.0])
    for name, us, added in rows:
        for table in (kinds[kind_of(name)], names[name]):
            table[0] += us
            table[1] += 1
            table[2] += added or 0.0
    key = (lambda kv: -kv[1][2]) if trace else (lambda kv: -kv[1][0])
    extra = " adds, us |" if trace else ""
    print("| kind | us | share | kernels |" + extra)
    print("|---|---|---|---|" + ("---|" if trace else ""))
    for kind, (us, n, added) in sorted(kinds.items(), key=key):
        print(f"| {kind} | {us:.1f} | {us / total:.1%} | {n} |" + (f" {added:.1f} |" if trace else ""))
    print(f"\n| kernel (top {args.top}) | us | count | us each |" + extra)
    print("|---|---|---|---|" + ("---|" if trace else ""))
    for name, (us, n, added) in sorted(names.items(), key=key)[:args.top]:
        print(f"| {name[:90]} | {us:.1f} | {n} | {us / n:.2f} |" + (f" {added:.1f} |" if trace else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
