#!/usr/bin/env bash
# Not a ctest test: fp8 checkpoints on a GPU machine, after `source .gpu/env.sh` from gpu-bundle
# (astrai, astrai_backend_tests and astrai_gpu_tests bundled), from the repository root:
#   BUDGET=540 bash tests/gpu/fp8_run.sh
# Steps (each skipped once BUDGET seconds have passed; STEPS picks some):
#   tests  the backend op tests' [gpu] cases (dequantize among them) and the gpu suite (the fp8
#          checkpoint against its widened copy, bit for bit, on cuda)
#   torch  tests/gpu/fp8_vs_torch.py on llama-1b: PyTorch's fp8 checkpoint through astrai score
#          against its widened copy (equal) and transformers (bf16 noise), with load times
#   big    the same on qwen3-8b (MODELS_BIG, default qwen3-8b): 8 GB of fp8 against 16 GB of bf16
# Results: $OUT/progress.txt and $OUT/fp8.tgz.
NAME=fp8
source tests/gpu/run_lib.sh
STEPS=${STEPS:-"tests torch big"}
M=$tmp/m; mkdir -p $M
has() { [[ " $STEPS " == *" $1 "* ]]; }
log "start: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
if has tests; then
  run_to 200 astrai_backend_tests "[gpu]" > "$out/backend_gpu.txt" 2>&1; log "backend [gpu]: exit $? $(tail -2 $out/backend_gpu.txt | tr '\n' ' ')"
  run_to 240 astrai_gpu_tests > "$out/gpu_suite.txt" 2>&1; log "gpu suite: exit $? $(tail -2 $out/gpu_suite.txt | tr '\n' ' ')"
fi
if has torch; then
  run_to 90 astrai init --preset llama-1b --out $M/llama-1b --dtype bf16 --device cpu > "$out/init.log" 2>&1
  run_to 150 python3 tests/gpu/fp8_vs_torch.py $M/llama-1b $M/llama > "$out/torch_llama-1b.txt" 2>&1
  log "fp8 vs torch llama-1b: exit $? $(grep -E '^(CHECKPOINTS|LOAD|SAME|SCORE)' $out/torch_llama-1b.txt | tr '\n' ' ')"
  rm -rf $M/llama_fp8 $M/llama_widened
fi
if has big; then
  for p in ${MODELS_BIG:-qwen3-8b}; do
    run_to 150 astrai init --preset $p --out $M/$p --dtype bf16 --device cpu > "$out/init_$p.log" 2>&1; log "init $p: exit $?"
    run_to 240 python3 tests/gpu/fp8_vs_torch.py $M/$p $M/${p}_q > "$out/torch_$p.txt" 2>&1
    log "fp8 vs torch $p: exit $? $(grep -E '^(CHECKPOINTS|LOAD|SAME|SCORE)' $out/torch_$p.txt | tr '\n' ' ')"
  done
fi
log "done"
