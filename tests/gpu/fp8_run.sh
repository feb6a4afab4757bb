#!/usr/bin/env bash
# Not a ctest test: fp8 checkpoints on a GPU machine, after `source .gpu/env.sh` from gpu-bundle
# (astrai, astrai_backend_tests and astrai_gpu_tests bundled), from the repository root:
#   BUDGET=540 bash tests/gpu/fp8_run.sh
# Steps, in STEPS's order (each skipped once BUDGET seconds have passed):
#   tests    the gpu suite's fp8 cases first (widened bit for bit; kept: linear on fp8 weights
#            against float64, the fused decode ops, a kept checkpoint against its widened copy),
#            then the whole gpu suite
#   backend  the backend op tests' [gpu] cases (dequantize among them)
#   torch    on llama-1b: tests/gpu/fp8_vs_torch.py (PyTorch's fp8 checkpoint through astrai
#            score, widened: equal to its widened copy; kept with --fp8-weights keep; both against
#            transformers; load times), then `bench decode` on the fp8 checkpoint widened and kept
#            (batches DECODE_BATCHES, default 1,8,32, prompt 512)
#   big      the same on qwen3-8b (MODELS_BIG, default qwen3-8b): 8 GB of fp8 against 16 GB of bf16
# Results: $OUT/progress.txt and $OUT/fp8.tgz.
NAME=fp8
source tests/gpu/run_lib.sh
STEPS=${STEPS:-"tests torch big backend"}
M=$tmp/m; mkdir -p $M
# fp8_model PRESET: the checks above on one preset.
fp8_model() {
  local p=$1
  run_to 150 astrai init --preset $p --out $M/$p --dtype bf16 --device cpu > "$out/init_$p.log" 2>&1; log "init $p: exit $?"
  run_to 240 python3 tests/gpu/fp8_vs_torch.py $M/$p $M/${p}_q > "$out/torch_$p.txt" 2>&1
  log "fp8 vs torch $p: exit $? $(grep -E '^(CHECKPOINTS|LOAD|SAME|SCORE|KEPT)' $out/torch_$p.txt | tr '\n' ' ')"
  rm -rf $M/$p $M/${p}_q_widened
  for mode in widen keep; do
    run_to 150 astrai bench decode --device cuda --model $M/${p}_q_fp8 --fp8-weights $mode \
      --batch ${DECODE_BATCHES:-1,8,32} --prompt-len 512 --tokens 128 > "$out/decode_${p}_$mode.txt" 2>&1
    log "decode $p $mode: exit $? $(grep -E '^model|^weight read|^device copy' $out/decode_${p}_$mode.txt | tr '\n' ' ') $(awk '/^ *batch/{f=1} f' $out/decode_${p}_$mode.txt | head -5 | tr '\n' '|')"
  done
  rm -rf $M/${p}_q_fp8
}
log "start: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
for step in $STEPS; do
  case $step in
    tests)
      run_to 150 astrai_gpu_tests "*fp8*" > "$out/gpu_fp8.txt" 2>&1; log "gpu fp8 cases: exit $? $(tail -2 $out/gpu_fp8.txt | tr '\n' ' ')"
      run_to 200 astrai_gpu_tests > "$out/gpu_suite.txt" 2>&1; log "gpu suite: exit $? $(tail -2 $out/gpu_suite.txt | tr '\n' ' ')" ;;
    backend)
      run_to 150 astrai_backend_tests "[gpu]" > "$out/backend_gpu.txt" 2>&1; log "backend [gpu]: exit $? $(tail -2 $out/backend_gpu.txt | tr '\n' ' ')" ;;
    torch) fp8_model llama-1b ;;
    big) for p in ${MODELS_BIG:-qwen3-8b}; do fp8_model $p; done ;;
  esac
done
log "done"
