#!/usr/bin/env bash
# Not a ctest test: one call on a GPU machine (after `source .gpu-<name>/env.sh` from gpu-bundle)
# that runs the gpu test cases (and compute-sanitizer memcheck on the graph cases), measures the
# device ceilings and times `bench decode` of llama-1b with and without CUDA graphs, plus the
# per-op GPU times of an eager batch-1 run. Logs go to $OUT.
set -u
out=${OUT:-/tmp}
tmp=${TMPDIR:-/tmp}
export ASTRAI_TEST_TMP=$tmp/astrai-test
mkdir -p "$ASTRAI_TEST_TMP"
ASTRAI_BIN=$(command -v astrai)
export ASTRAI_BIN
nvidia-smi -L
astrai_gpu_tests "[gpu]" >"$out/gpu_tests.log" 2>&1
echo "gpu tests: exit $?"; grep -E "passed|failed" "$out/gpu_tests.log"
astrai_backend_tests "[gpu]" >"$out/backend_tests.log" 2>&1
echo "backend gpu tests: exit $?"; grep -E "passed|failed" "$out/backend_tests.log"
timeout 200 compute-sanitizer --tool memcheck astrai_gpu_tests "decode steps replayed*" >"$out/memcheck.log" 2>&1
echo "memcheck: exit $?"; grep -E "ERROR SUMMARY|passed|failed" "$out/memcheck.log" | tail -3
python3 "$(dirname "$0")/device_ceilings.py" 2>&1 | tee "$out/ceilings.log"
m=$tmp/llama-1b
[ -f "$m/config.json" ] || astrai init --preset llama-1b --out "$m" --dtype bf16 --device cpu >/dev/null
# Step by step (--no-overlap), as these tables were first taken: the graphs' gain per step, the host
# waiting for each step's tokens.
b() { astrai bench decode --device cuda --model "$m" --no-overlap "$@" >>"$out/bench.log" 2>&1; }
for flag in "" --no-cuda-graphs; do
  b --batch 1,8,32,64 --prompt-len 128 --tokens 128 $flag
  b --batch 1,8 --prompt-len 4096 --tokens 64 $flag
done
b --batch 1,8,32 --prompt-len 128 --tokens 128 --max-model-len 131072
grep -v '^{' "$out/bench.log" | grep -E "^ +[0-9]|graphs|rror"
# Kernel durations of graphed decode steps (each graph node profiled on its own): ncu, clocks as found.
for b in 1 8; do
  timeout 150 ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv \
    astrai bench decode --device cuda --model "$m" --batch $b --prompt-len 128 --tokens 2 \
    >"$out/ncu_b$b.csv" 2>"$out/ncu_b$b.err"
  echo "ncu batch $b: exit $? ($(wc -l <"$out/ncu_b$b.csv") lines)"
done
