#!/usr/bin/env bash
# Not a ctest test: the one-GPU figures of docs/performance.md ("The final tree") in one call on a
# GPU machine, after `source .gpu/env.sh` from gpu-bundle (astrai, astrai_backend_tests and
# astrai_gpu_tests bundled), run from the repository root:
#   BUDGET=500 bash tests/gpu/final_tree_run.sh
# The gpu test suites, device ceilings, `bench decode` (prompt 512 and 4k, with and without the
# decode attention's PDL, eager, and at temperature 1), `bench prefill` (1k / 8k / 32k), `bench
# serve` (llama-1b 32 streams; qwen3-8b 1,000 requests at max batch 256 / 512 / 1,024),
# compute-sanitizer memcheck and racecheck on the attention and sample cases, and the transformers
# comparison (tests/gpu/e2e_vs_transformers.py) on three models, each step skipped once BUDGET
# seconds have passed. Logs go into $OUT/final_tree.tgz, re-packed after every step (the device
# tool returns only a few files, and a run cut by its time limit keeps what it had), the one-line
# summaries into $OUT/progress.txt. Model directories are random bf16 presets from `astrai init`,
# written once under $TMPDIR/m.
NAME=final_tree; source "$(dirname "$0")/run_lib.sh"
nvidia-smi > "$out/smi.txt" 2>&1
M=$tmp/m; mkdir -p $M
( [ -f $M/llama-1b/config.json ] || astrai init --preset llama-1b --out $M/llama-1b --dtype bf16 --device cpu
  [ -f $M/qwen3-8b/config.json ] || astrai init --preset qwen3-8b --out $M/qwen3-8b --dtype bf16 --device cpu
  [ -f $M/qwen3-0.6b/config.json ] || astrai init --preset qwen3-0.6b --out $M/qwen3-0.6b --dtype bf16 --device cpu ) > "$out/init.log" 2>&1 &
INIT=$!
log start
run_to 120 astrai_backend_tests "[gpu]" > "$out/backend_tests.log" 2>&1; log "backend [gpu]: exit $? $(grep -E 'test cases' "$out/backend_tests.log" | tail -1)"
run_to 150 astrai_gpu_tests "forward*,decode steps replayed*,the step loop's*,cuda *,astrai train --device cuda*" > "$out/gpu_tests.log" 2>&1; log "gpu tests: exit $? $(grep -E 'test cases' "$out/gpu_tests.log" | tail -1)"
wait $INIT; log "init: $(tail -2 $out/init.log | tr '\n' ' ')"
run_to 40 python3 tests/gpu/device_ceilings.py > "$out/ceilings.txt" 2>&1; log "ceilings: $(tr '\n' ' ' < $out/ceilings.txt | cut -c1-200)"
bd() { local tag=$1 model=$2 pl=$3; shift 3; echo "== $tag $model prompt $pl $*" >> "$out/decode.txt"
  run_to 60 env "$@" astrai bench decode --device cuda --model $M/$model --batch 1,8,32,64 --prompt-len $pl --tokens 64 $EXTRA >> "$out/decode.txt" 2>&1
  log "decode $tag $model $pl: $(grep -E '^ +[0-9]' "$out/decode.txt" | tail -4 | awk '{printf "%s %s | ", $1, $3}')"; }
EXTRA=""
for model in llama-1b qwen3-8b; do
  bd final $model 512 X=1
  bd nopdl $model 512 ASTRAI_ATTENTION_PDL=0
  bd final $model 4096 X=1
done
EXTRA="--no-cuda-graphs" bd eager llama-1b 512 X=1
EXTRA="--temperature 1" bd t1 llama-1b 256 X=1
for model in qwen3-8b llama-1b; do
  run_to 90 astrai bench prefill --device cuda --model $M/$model --prompt-len 1024,8192,32768 > "$out/prefill_$model.txt" 2>&1
  log "prefill $model: exit $? $(grep -E '^ +[0-9]' "$out/prefill_$model.txt" | awk '{printf "%s %s | ", $1, $5}')"
done
bs() { local tag=$1 model=$2 c=$3 n=$4 pt=$5 mt=$6; shift 6
  run_to 120 env "$@" astrai bench serve --model $M/$model --concurrency $c --requests $n --prompt-tokens $pt --max-tokens $mt \
     --level-seconds 40 --server-log "$out/serve_${tag}_$model.log" $SOPT > "$out/serve_${tag}_$model.txt" 2>&1
  rc=$?; pkill -f "astrai serve" 2>/dev/null; sleep 1
  log "serve $tag $model: exit $rc $(grep -E '^ +[0-9]+ +[0-9]' "$out/serve_${tag}_$model.txt" | tr -s ' ')"; }
SOPT=""; bs final llama-1b 32 320 128 256 ASTRAI_STEP_PROFILE=1
SOPT=""; bs b256 qwen3-8b 1000 1000 128 128 ASTRAI_STEP_PROFILE=1
SOPT="--server-option max-batch-size=512"; bs b512 qwen3-8b 1000 1000 128 128 X=1
SOPT="--server-option max-batch-size=1024"; bs b1024 qwen3-8b 1000 1000 128 128 X=1
run_to 120 python3 tests/gpu/e2e_vs_transformers.py $M/llama-1b $out/e2e_llama-1b 6 > "$out/e2e_llama-1b.txt" 2>&1; log "e2e llama-1b: exit $? $(tail -6 $out/e2e_llama-1b.txt | tr '\n' ' ' | cut -c1-500)"
run_to 90 compute-sanitizer --tool memcheck astrai_backend_tests 'paged_attention matches*[gpu]~*32k*,sample: the GPU draws*,rope_kv_store*[gpu]'  > "$out/memcheck.log" 2>&1; log "memcheck: exit $? $(grep -E 'ERROR SUMMARY|test cases' $out/memcheck.log | tail -2 | tr '\n' ' ')"
run_to 60 python3 tests/gpu/e2e_vs_transformers.py $M/qwen3-0.6b $out/e2e_qwen3-0.6b > "$out/e2e_qwen3-0.6b.txt" 2>&1; log "e2e qwen3-0.6b: exit $? $(tail -6 $out/e2e_qwen3-0.6b.txt | tr '\n' ' ' | cut -c1-500)"
run_to 60 compute-sanitizer --tool racecheck astrai_backend_tests 'paged_attention matches float64 causal*[gpu],paged_attention matches float64 attention in*[gpu]'  > "$out/racecheck.log" 2>&1; log "racecheck: exit $? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|test cases' $out/racecheck.log | tail -2 | tr '\n' ' ')"
run_to 120 python3 tests/gpu/e2e_vs_transformers.py $M/qwen3-8b $out/e2e_qwen3-8b > "$out/e2e_qwen3-8b.txt" 2>&1; log "e2e qwen3-8b: exit $? $(tail -6 $out/e2e_qwen3-8b.txt | tr '\n' ' ' | cut -c1-500)"
log end
