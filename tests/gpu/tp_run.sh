#!/usr/bin/env bash
# Not a ctest test: the tensor-parallel runs of docs/performance.md ("Tensor parallel") in one call
# on a machine with two GPUs (after `source .gpu-<name>/env.sh` from gpu-bundle). Everything goes
# to stdout and to one file, $OUT/tp.log (the device tool returns only a few files). The random
# preset directories are written first, untimed (qwen3-8b is 16 GB of disk writes).
set -u
out=${OUT:-/tmp}
tmp=${TMPDIR:-/tmp}
log=$out/tp.log
exec > >(tee -a "$log") 2>&1
export ASTRAI_TEST_TMP=$tmp/astrai-test NCCL_DEBUG=WARN
mkdir -p "$ASTRAI_TEST_TMP"
nvidia-smi -L
t0=$(date +%s)
for p in llama-1b qwen3-8b; do
  [ -f "$tmp/$p/config.json" ] || astrai init --preset $p --out "$tmp/$p" --dtype bf16 >/dev/null
done
echo "presets written in $(($(date +%s) - t0)) s"
timeout 90 astrai_gpu_tests "tensor-parallel*"
echo "tp gpu tests: exit $?"
for p in qwen3-8b llama-1b; do
  for tp in 2 1; do
    echo "== $p --tp $tp"
    timeout 120 astrai bench decode --device cuda --model "$tmp/$p" --batch 1,32 --prompt-len 512 --tokens 64 --tp $tp
    echo "exit $?"
  done
done
