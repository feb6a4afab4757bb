#!/usr/bin/env bash
# Not a ctest test: one call on a GPU machine (after `source .gpu-<name>/env.sh` from gpu-bundle)
# from the repository root that runs the gpu test cases, then times decode of the llama-1b and qwen3-8b presets at batch 1
# and 32 (prompt 512) beside the PyTorch torch.compile peer, the copy bandwidth (the floor) and,
# where the bundle carries one, `astrai-base` (the tree before the fusions) for a before/after in the
# same call. Runs with ASTRAI_NO_PDL=1 (no programmatic dependent launch) and ASTRAI_GEMM_TUNE=1
# (the timed cuBLASLt pick) separate those two from the rest. Logs go to $OUT.
set -u
out=${OUT:-/tmp}
tmp=${TMPDIR:-/tmp}
root=$(pwd)  # the repository root (tests/gpu/device_ceilings.py, bench/torch_decode.py)
export ASTRAI_TEST_TMP=$tmp/astrai-test
mkdir -p "$ASTRAI_TEST_TMP"
ASTRAI_BIN=$(command -v astrai)
export ASTRAI_BIN
nvidia-smi -L
t0=$(date +%s)
timeout 150 astrai_backend_tests "[gpu]" >"$out/backend_tests.log" 2>&1
echo "backend gpu tests: exit $?"; grep -E "passed|failed" "$out/backend_tests.log" | tail -3
timeout 200 astrai_gpu_tests "[gpu]" >"$out/gpu_tests.log" 2>&1
echo "gpu tests: exit $?"; grep -E "passed|failed" "$out/gpu_tests.log" | tail -3
timeout 25 compute-sanitizer --tool memcheck astrai_backend_tests "*rope_kv_store*,*swiglu_linear*" \
  >"$out/memcheck.log" 2>&1
echo "memcheck of the fused ops: exit $?"; grep -E "ERROR SUMMARY|passed|failed" "$out/memcheck.log" | tail -2
echo "tests took $(($(date +%s) - t0)) s"
[ "${SKIP_BENCH:-0}" = 1 ] && exit 0
timeout 60 python3 "$root/tests/gpu/device_ceilings.py" 2>&1 | tee "$out/ceilings.log"
b() {  # label, binary, env..., -- bench args
  local label=$1 bin=$2
  shift 2
  echo "== $label: $*" >>"$out/bench.log"
  timeout 120 env "$@" >>"$out/bench.log" 2>&1 || echo "$label failed: $?" >>"$out/bench.log"
}
for p in llama-1b qwen3-8b; do
  args=(bench decode --device cuda --preset "$p" --batch 1,32 --prompt-len 512 --tokens 128)
  if command -v astrai-base >/dev/null; then b "$p base" astrai-base astrai-base "${args[@]}"; fi
  b "$p new" astrai astrai "${args[@]}"
  b "$p new, no PDL" astrai ASTRAI_NO_PDL=1 astrai "${args[@]}"
  b "$p new, tuned GEMM" astrai ASTRAI_GEMM_TUNE=1 astrai "${args[@]}"
done
grep -E "^==|^ +[0-9]|rror|failed" "$out/bench.log"
echo "astrai benches took $(($(date +%s) - t0)) s"
[ "${SKIP_TORCH:-0}" = 1 ] && exit 0
for p in llama-1b qwen3-8b; do
  timeout 70 python3 "$root/bench/torch_decode.py" --preset "$p" --batch 1,32 --context 512 --steps 64 \
    --modes compile >"$out/torch_$p.log" 2>&1
  echo "torch $p: exit $?"; tail -5 "$out/torch_$p.log"
done
echo "all took $(($(date +%s) - t0)) s"
