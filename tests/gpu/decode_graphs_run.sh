#!/usr/bin/env bash
# Not a ctest test: one call on a GPU machine (after `source .gpu-<name>/env.sh` from gpu-bundle)
# that runs the gpu test cases, measures the device ceilings and times `bench decode` of llama-1b
# with and without CUDA graphs, plus the per-op GPU times of an eager batch-1 run. Logs go to $OUT.
set -u
out=${OUT:-/tmp}
tmp=${TMPDIR:-/tmp}
export ASTRAI_TEST_TMP=$tmp/astrai-test
mkdir -p "$ASTRAI_TEST_TMP"
ASTRAI_BIN=$(command -v astrai)
export ASTRAI_BIN
nvidia-smi -L
astrai_gpu_tests "[gpu]" >"$out/gpu_tests.log" 2>&1
echo "gpu tests: exit $?"; tail -4 "$out/gpu_tests.log"
astrai_backend_tests "[gpu]" >"$out/backend_tests.log" 2>&1
echo "backend gpu tests: exit $?"; tail -3 "$out/backend_tests.log"
python3 "$(dirname "$0")/device_ceilings.py" 2>&1 | tee "$out/ceilings.log"
m=$tmp/llama-1b
[ -f "$m/config.json" ] || astrai init --preset llama-1b --out "$m" --dtype bf16 --device cpu >/dev/null
for flag in "" --no-cuda-graphs; do
  astrai bench decode --device cuda --model "$m" --batch 1,8,32,64 --prompt-len 128 --tokens 128 $flag \
    >>"$out/bench.log" 2>&1
  astrai bench decode --device cuda --model "$m" --batch 1,8 --prompt-len 4096 --tokens 64 $flag \
    >>"$out/bench.log" 2>&1
done
grep -v '^{' "$out/bench.log" | grep -E "^ +[0-9]|graphs|error" 
ASTRAI_CUDA_OP_TIMES=1 astrai bench decode --device cuda --model "$m" --batch 1 --tokens 64 --no-cuda-graphs \
  >"$out/optimes.log" 2>&1
tail -20 "$out/optimes.log"
