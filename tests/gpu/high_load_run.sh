#!/usr/bin/env bash
# Not a ctest test: where a high-load decode step goes, on a GPU machine, after `source .gpu/env.sh`
# from gpu-bundle (astrai, astrai_backend_tests and astrai_gpu_tests bundled), from the repository root:
#   BUDGET=540 STEPS="tests profile serve startup" bash tests/gpu/high_load_run.sh
# Steps, in this order (each skipped once BUDGET seconds have passed; STEPS picks some):
#   decode   `bench decode` of qwen3-8b at batch 64 / 128 / 256 and prompt 192 (a serve mix) and
#            llama-1b at batch 1 / 8 / 32 / 64 and prompt 512, for each binary in BINS (default astrai)
#            and each of the switches in SWITCHES (env assignments, ';'-separated) and of the flag
#            sets in DECODE_FLAGS (';'-separated, e.g. "--no-overlap;--overlap"; bench decode runs
#            overlapped on a GPU unless told --no-overlap); DECODE_SPECS (';'-separated
#            "model batches prompt") replaces those shapes; DECODE_ROUNDS=N runs the switches N
#            times, every other round in reverse order (A B B A ...)
#   e2e      tests/gpu/e2e_vs_transformers.py on a copy of llama-1b (LM head x6)
#   yarn     tests/model/reference.py's YaRN against transformers', then e2e_vs_transformers.py on a
#            qwen3-0.6b with YaRN over a 256-token original context (not in the default STEPS)
#   promptlp tests/gpu/prompt_logprobs_check.py: completions' prompt logprobs through the server
#            against astrai score on llama-1b (not in the default STEPS)
#   profile  ncu of one graphed decode step of qwen3-8b at batch 64 and 256 (PROFILE_BATCHES; `bench decode
#            --profile-step 2`, each graph node timed alone, clocks as found)
#   compare  for each of COMPARE_SPECS (';'-separated "model batch prompt", default llama-1b 32 512): ncu
#            of one graphed decode step of ours and of bench/torch_decode.py's torch.compile peer, each
#            kernel timed alone, condensed by tests/gpu/step_summary.py into GPU time by kind of
#            kernel (not in the default STEPS)
#   timeline for each of TIMELINE_SPECS (as COMPARE_SPECS), one decode step of ours and of the peer
#            as the device ran it (bench/kernel_trace.cpp's CUPTI kernel timeline; bundle
#            build/bin/libastrai_kernel_trace.so): span, gaps between kernels, time by kind (not in
#            the default STEPS); PEER=0 (here and in compare) leaves the peer out
#   serve    `bench serve` llama-1b, 32 streams, 128 / 256 tokens: TTFT and ITL per token, for each
#            of the switches in SERVE_SWITCHES
#   serve1   `bench serve` with one stream (16 requests): llama-1b 128 / 256 tokens, qwen3-8b 128 / 128
#            (the batch-1 decode path through the whole server; not in the default STEPS)
#   serve8b  `bench serve` qwen3-8b, 1,000 requests at once, 128 / 128 tokens, with the step profile,
#            for each of the switches in SERVE_SWITCHES and each of the server option sets in
#            SERVE_OPTIONS (';'-separated sets of space-separated KEY=VALUE, e.g. "max-batch-size=512")
#   attn     ncu's detailed sections of the decode attention kernel in a graphed step at batch 256
#   tables   `bench decode` of both models at batch 1..256, prompts 512 and 4k (qwen3-8b to batch 128 at
#            4k); TABLE_SPECS (';'-separated "model batches prompt") replaces those shapes
#   long     decode at 32k contexts: `bench decode` of llama-1b at batch 1 / 8 / 32 / 64 and qwen3-8b at
#            1 / 8 / 16 (what the cache holds), for each of LONG_SWITCHES (';'-separated env
#            assignments), then bench/torch_decode.py's torch.compile peer at the same shapes, then
#            ncu's detailed sections of one decode attention launch at llama-1b batch 64 (not in the
#            default STEPS)
#   peer     bench/torch_decode.py's torch.compile peer for each of PEER_SPECS (';'-separated "model
#            batches context", default llama-1b at batch 1..256 and 512 tokens), beside the tables (not
#            in the default STEPS; its set-up compiles each batch size, 15-50 s each)
#   prefill  `bench prefill` of both models at 1k / 8k / 32k for each of PREFILL_SWITCHES (';'-separated
#            env assignments; default: as built, and ASTRAI_PREFILL_ATTENTION=mma), with the board's
#            clocks and power sampled through each run (with_smi; the 32k prefill meets the power cap)
#   attnbench  builds bench/prefill_attention_bench.cu with nvcc and runs its float64 checks of
#            every prefill attention variant, then its kernel timings (--prefill-only; not in the
#            default STEPS)
#   attnprof ncu's full set on one wgmma prefill attention launch, 32k tokens, head_dim 128 and then
#            64 (the bench's --profile; builds the bench as attnbench does; not in the default STEPS)
#   rows     builds bench/prefill_rows_bench.cu with nvcc and runs it: the prefill forward's embedding,
#            add_rms_norm, swiglu and rope_kv_store beside a copy of their bytes (not in the default
#            STEPS)
#   startup  `astrai serve --device cuda` to the first /health 200, llama-1b and qwen3-8b, twice
#   attnsrc  ncu's full set with the source view (SASS lines: stalls, excess sectors and shared
#            wavefronts) of one decode attention launch in a graphed step of ATTNSRC_SPEC ("model batch
#            prompt", default llama-1b 64 4096); useful from a build with -DASTRAI_CUDA_LINEINFO=ON (not in
#            the default STEPS)
#   tests    the backend [gpu] cases and the gpu suite's forward / graph / step-loop cases; the
#            backend's attention cases again under each of TEST_SWITCHES (';'-separated)
#   faults   bad settings and exhausted device memory on the GPU: each case's exit status and its
#            last error lines (a crash, a signal or a hang is the defect; a clear error is the aim;
#            not in the default STEPS)
#   sanitize compute-sanitizer memcheck, racecheck and synccheck over the backend's decode, ragged
#            prefill, extend and mixed-step attention cases (not in the default STEPS; SANITIZE_TOOLS,
#            space-separated, and SANITIZE_CASES, ';'-separated test-name parts, pick some), then
#            over each of SANITIZE_SPECS (';'-separated whole Catch2 test specs, e.g. the GEMV's
#            "linear*(cuda)"; none by default)
# Logs go into $OUT/high_load.tgz, re-packed after every step (the device tool returns only a few
# files), one-line summaries into $OUT/progress.txt. Model directories are random bf16 presets
# from `astrai init`, written once under $TMPDIR/m.
NAME=high_load; source "$(dirname "$0")/run_lib.sh"
STEPS=${STEPS:-tests decode e2e profile serve serve8b attn tables prefill startup}
want() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
M=$tmp/m; mkdir -p $M
( for p in ${MODELS:-qwen3-8b llama-1b}; do  # MODELS: fewer presets for steps that need fewer
    [ -f $M/$p/config.json ] || astrai init --preset $p --out $M/$p --dtype bf16 --device cpu
  done ) > "$out/init.log" 2>&1 &
INIT=$!
log "start: $STEPS"
wait $INIT; log "init: $(tail -1 $out/init.log)"
if want decode; then
  IFS=';' read -ra sw0 <<< "${SWITCHES:-X=1}"
  IFS=';' read -ra fl <<< "${DECODE_FLAGS:- }"
  # DECODE_ROUNDS=N: the switches N times, every other round in reverse order, so that no setting
  # always runs first (a call's first run came out up to 2.7% ahead on the H200).
  sw=()
  for ((r = 0; r < ${DECODE_ROUNDS:-1}; ++r)); do
    if ((r % 2 == 0)); then sw+=("${sw0[@]}"); else for ((i = ${#sw0[@]} - 1; i >= 0; --i)); do sw+=("${sw0[i]}"); done; fi
  done
  for bin in ${BINS:-astrai}; do
    for s in "${sw[@]}"; do
      for f in "${fl[@]}"; do
        IFS=';' read -ra specs <<< "${DECODE_SPECS:-qwen3-8b 64,128,256 192;llama-1b 1,8,32,64 512}"
        for spec in "${specs[@]}"; do
          set -- $spec
          echo "== $bin [$s] [$f] $*" >> "$out/decode.txt"
          run_to 90 env $s $bin bench decode --device cuda --model $M/$1 --batch $2 --prompt-len $3 --tokens 32 $f \
            >> "$out/decode.txt" 2>&1
          log "decode $bin [$s] [$f] $1 $3: exit $? $(grep -E '^ +[0-9]' "$out/decode.txt" | tail -$(echo $2 | tr ',' ' ' | wc -w) | awk '{printf "B%s %s tok/s %s ms | ", $1, $3, $4}')"
        done
      done
    done
  done
fi
if want e2e; then
  rm -rf $M/e2e-llama-1b; cp -r $M/llama-1b $M/e2e-llama-1b  # the script rewrites the weights it is given
  run_to 120 python3 tests/gpu/e2e_vs_transformers.py $M/e2e-llama-1b $out/e2e_llama-1b 6 > "$out/e2e_llama-1b.txt" 2>&1
  log "e2e llama-1b: exit $? $(tail -6 $out/e2e_llama-1b.txt | tr '\n' ' ' | cut -c1-500)"
fi
if want yarn; then
  # YaRN against transformers: the oracle of tests/model/reference.py against transformers' own
  # inv_freq and attention factor, then astrai on a qwen3-0.6b whose config asks for YaRN over a
  # 256-token original context (factor 4; max_position_embeddings 512, so the 1,000 scored tokens
  # reach into the context YaRN opens).
  Y=$M/e2e-qwen3-yarn; rm -rf $Y
  astrai init --preset qwen3-0.6b --out $Y --dtype bf16 --device cpu > "$out/yarn_init.log" 2>&1
  python3 - $Y/config.json <<'PY' > "$out/yarn_oracle.txt" 2>&1
import json, sys, torch
sys.path.insert(0, "tests/model")
import reference
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
p = sys.argv[1]
c = json.load(open(p))
c["max_position_embeddings"] = 512
c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}
json.dump(c, open(p, "w"), indent=2)
def compare(rs, mpe):
  try:
    cfg = dict(c, rope_scaling=rs, max_position_embeddings=mpe)
    cfg.pop("rope_parameters", None)
    hf = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
    inv, af = ROPE_INIT_FUNCTIONS["yarn"](hf, "cpu")
    ours = reference.yarn_inv_freq(cfg, rs, cfg["head_dim"])
    print(rs, "max|d inv_freq|", float((inv.float() - ours).abs().max()), "rel",
          float(((inv.float() - ours).abs() / ours).max()), "attention factor", af,
          reference.rope_attention_factor(cfg))
  except Exception as e:
    print(rs, "FAILED:", type(e).__name__, e)
compare(c["rope_scaling"], 512)
compare({"rope_type": "yarn", "factor": 8.0, "beta_fast": 16, "beta_slow": 2, "mscale": 0.6, "mscale_all_dim": 1.3,
         "truncate": False}, 100)
compare({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 40960)
PY
  log "yarn oracle: exit $? $(tr '\n' ' ' < $out/yarn_oracle.txt | cut -c1-900)"
  run_to 150 python3 tests/gpu/e2e_vs_transformers.py $Y $out/e2e_qwen3_yarn 6 > "$out/e2e_qwen3_yarn.txt" 2>&1
  log "e2e qwen3-0.6b yarn: exit $? $(tail -6 $out/e2e_qwen3_yarn.txt | tr '\n' ' ' | cut -c1-500)"
fi
if want promptlp; then
  run_to 150 python3 tests/gpu/prompt_logprobs_check.py $M/llama-1b $out/promptlp > "$out/promptlp.txt" 2>&1
  log "prompt logprobs llama-1b: exit $? $(tail -4 $out/promptlp.txt | tr '\n' ' ' | cut -c1-600)"
fi
# ncu_step SECONDS NAME CMD...: ncu times each kernel of CMD's profiled range (a graphed step: `bench
# decode --profile-step`, torch_decode.py --profile-step) alone, at the board's own clocks, as CSV
# into $out/NAME.csv (stderr NAME.err).
ncu_step() {
  local t=$1 name=$2; shift 2
  run_to $t ncu --profile-from-start off --clock-control none --graph-profiling node --metrics gpu__time_duration.sum \
    --csv "$@" > "$out/$name.csv" 2> "$out/$name.err"
}
if want profile; then
  for b in ${PROFILE_BATCHES:-64 256}; do
    ncu_step 150 ncu_qwen3-8b_b$b astrai bench decode --device cuda --model $M/qwen3-8b --batch $b --prompt-len 192 \
      --tokens 4 --profile-step 2 --no-overlap
    log "ncu qwen3-8b B$b: exit $? $(wc -l < "$out/ncu_qwen3-8b_b$b.csv") lines"
  done
fi
# trace_step SECONDS NAME CMD...: the kernels of CMD's profiled range as the device ran them (starts
# and ends from libastrai_kernel_trace.so, bench/kernel_trace.cpp) as CSV into $out/NAME.csv (CMD's
# output NAME.log).
trace_step() {
  local t=$1 name=$2; shift 2
  CUDA_INJECTION64_PATH=$ASTRAI_BUNDLE/bin/libastrai_kernel_trace.so ASTRAI_KERNEL_TRACE=$out/$name.csv \
    run_to $t "$@" > "$out/$name.log" 2>&1
}
# step_pair KIND RECORD SPECS: for each "model batch prompt" of SPECS (';'-separated), one profiled
# decode step of ours and of the torch.compile peer recorded by RECORD (ncu_step or trace_step) into
# $out/KIND_{ours,peer}_TAG.csv, each condensed by tests/gpu/step_summary.py into KIND_*_TAG.txt.
# Ours step by step: overlapped, the profiled step's first kernel (take_tokens) would go out before
# the host launches the graph.
step_pair() {
  local kind=$1 record=$2 spec tag who f
  IFS=';' read -ra specs <<< "$3"
  for spec in "${specs[@]}"; do
    set -- $spec; tag=$1_b$2_p$3
    $record 150 ${kind}_ours_$tag astrai bench decode --device cuda --model $M/$1 --batch $2 --prompt-len $3 \
      --tokens 4 --profile-step 2 --no-overlap
    [ "${PEER:-1}" = 0 ] || $record 240 ${kind}_peer_$tag python3 bench/torch_decode.py --preset $1 --batch $2 \
      --context $3 --steps 8 --modes compile --profile-step
    for who in ours $([ "${PEER:-1}" = 0 ] || echo peer); do
      f=$out/${kind}_${who}_$tag.txt
      python3 tests/gpu/step_summary.py "$out/${kind}_${who}_$tag.csv" > "$f" 2>&1
      log "$kind $who $*: $(head -1 "$f" | cut -d: -f2) $(grep -m1 '^span' "$f")"
    done
  done
}
# One graphed decode step of ours and of the peer, each kernel timed alone (ncu), summed by kind.
want compare && step_pair compare ncu_step "${COMPARE_SPECS:-llama-1b 32 512}"
# The same step as the device ran it: its span, the gaps between kernels, the time by kind.
want timeline && step_pair timeline trace_step "${TIMELINE_SPECS:-llama-1b 32 512}"
# serve_run NAME SECONDS CMD...: CMD (an `astrai bench serve`, behind env where it sets switches), its
# levels bounded at 40 s, its server's log kept as $out/NAME.log and its output in $out/NAME.txt;
# then whatever server it left is stopped. Sets rc (CMD's exit status) and rows (its table's rows).
serve_run() {
  local name=$1 t=$2; shift 2
  run_to $t "$@" --level-seconds 40 --server-log "$out/$name.log" > "$out/$name.txt" 2>&1
  rc=$?; pkill -f "astrai serve" 2>/dev/null; sleep 1
  rows=$(grep -E '^ +[0-9]+ +[0-9]' "$out/$name.txt" | tr -s ' ')
}
if want serve; then
  IFS=';' read -ra sw <<< "${SERVE_SWITCHES:-X=1}"
  for s in "${sw[@]}"; do
    tag=$(echo "$s" | tr -c 'A-Za-z0-9=\n' '_')
    serve_run serve_llama-1b_$tag 120 env $s astrai bench serve --model $M/llama-1b --concurrency 32 --requests 320 \
      --prompt-tokens 128 --max-tokens 256
    log "serve llama-1b [$s]: exit $rc $rows"
  done
fi
if want serve1; then
  for spec in "llama-1b 256" "qwen3-8b 128"; do
    set -- $spec
    serve_run serve1_$1 120 astrai bench serve --model $M/$1 --concurrency 1 --requests 16 --prompt-tokens 128 --max-tokens $2
    log "serve $1, one stream: exit $rc $rows"
  done
fi
if want serve8b; then
  IFS=';' read -ra sw <<< "${SERVE_SWITCHES:-X=1}"
  IFS=';' read -ra so <<< "${SERVE_OPTIONS:- }"
  for s in "${sw[@]}"; do
    for o in "${so[@]}"; do
      tag=$(echo "$s $o" | tr -c 'A-Za-z0-9=\n' '_')
      opts=(); for kv in $o; do opts+=(--server-option "$kv"); done
      serve_run serve_qwen3-8b_$tag 150 env ASTRAI_STEP_PROFILE=1 $s astrai bench serve --model $M/qwen3-8b --concurrency 1000 \
        --requests 1000 --prompt-tokens 128 --max-tokens 128 "${opts[@]}"
      log "serve qwen3-8b [$s] [$o]: exit $rc $rows | $(grep -o 'decode: .*' "$out/serve_qwen3-8b_$tag.log" | cut -c1-120) | $(grep -o 'mixed: .*' "$out/serve_qwen3-8b_$tag.log" | cut -c1-120)"
    done
  done
fi
# ncu_attention MODEL BATCH PROMPT NAME: the decode attention kernel's first launch in one graphed
# decode step under ncu's detailed sections, into $out/NAME.txt.
ncu_attention() {
  run_to 150 ncu --profile-from-start off --graph-profiling node --kernel-name regex:decode_attention --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis astrai bench decode --device cuda --model $M/$1 --batch $2 --prompt-len $3 \
    --tokens 4 --profile-step 2 > "$out/$4.txt" 2>&1
  log "ncu attention $1 B$2 prompt $3: exit $? $(wc -l < "$out/$4.txt") lines"
}
if want attn; then
  ncu_attention qwen3-8b 256 192 ncu_attn_b256
fi
if want attnsrc; then  # the decode attention kernel's source view (a build with -DASTRAI_CUDA_LINEINFO=ON)
  set -- ${ATTNSRC_SPEC:-llama-1b 64 4096}
  run_to 200 ncu --profile-from-start off --graph-profiling node --kernel-name regex:decode_attention --launch-count 1 \
    --set full --import-source yes -o "$out/attnsrc" astrai bench decode --device cuda --model $M/$1 --batch $2 \
    --prompt-len $3 --tokens 4 --profile-step 2 > "$out/attnsrc_run.txt" 2>&1
  log "ncu source $*: exit $?"
  ncu --import "$out/attnsrc.ncu-rep" --page source --csv > "$out/attnsrc_source.csv" 2>&1
  ncu --import "$out/attnsrc.ncu-rep" --page details > "$out/attnsrc_details.txt" 2>&1
  log "ncu source pages: $(wc -l < "$out/attnsrc_source.csv") source lines"
fi
# torch_peer MODEL BATCHES CONTEXT NAME SECONDS: bench/torch_decode.py's torch.compile decoder at
# those shapes, into $out/NAME.txt, stopped after SECONDS.
torch_peer() {
  run_to $5 python3 bench/torch_decode.py --preset $1 --batch $2 --context $3 --steps 32 --modes compile \
    > "$out/$4.txt" 2>&1
  log "torch.compile $1 context $3: exit $? $(grep -E '^\| compile' "$out/$4.txt" | awk -F'|' '{printf "B%s %s tok/s |", $3, $4}')"
}
if want tables; then
  IFS=';' read -ra specs <<< "${TABLE_SPECS:-llama-1b 1,8,32,64,128,256 512;qwen3-8b 1,8,32,64,128,256 512;llama-1b 1,8,32,64,128,256 4096;qwen3-8b 1,8,32,64,128 4096}"
  for spec in "${specs[@]}"; do
    set -- $spec
    echo "== $*" >> "$out/tables.txt"
    run_to 120 astrai bench decode --device cuda --model $M/$1 --batch $2 --prompt-len $3 --tokens 32 >> "$out/tables.txt" 2>&1
    log "table $1 prompt $3: exit $? $(grep -E '^ +[0-9]' "$out/tables.txt" | tail -$(echo $2 | tr ',' ' ' | wc -w) | awk '{printf "B%s %s | ", $1, $3}')"
  done
fi
if want long; then
  IFS=';' read -ra sw <<< "${LONG_SWITCHES:-X=1}"
  long_specs=("llama-1b 1,8,32,64" "qwen3-8b 1,8,16")  # the batches the cache holds at 32k
  for s in "${sw[@]}"; do
    for spec in "${long_specs[@]}"; do
      set -- $spec
      echo "== $1 [$s]" >> "$out/long.txt"
      run_to 120 env $s astrai bench decode --device cuda --model $M/$1 --batch $2 --prompt-len 32768 --tokens 32 >> "$out/long.txt" 2>&1
      log "long $1 [$s]: exit $? $(grep -E '^ +[0-9]' "$out/long.txt" | tail -$(echo $2 | tr ',' ' ' | wc -w) | awk '{printf "B%s %s tok/s x%s | ", $1, $3, $6}')"
    done
  done
  for spec in "${long_specs[@]}"; do
    set -- $spec
    torch_peer $1 $2 32768 long_torch_$1 200
  done
  ncu_attention llama-1b 64 32768 ncu_attn_32k_b64
fi
if want peer; then
  IFS=';' read -ra specs <<< "${PEER_SPECS:-llama-1b 1,8,32,64,128,256 512}"
  for spec in "${specs[@]}"; do
    set -- $spec
    torch_peer $1 $2 $3 peer_$1_$3 400
  done
fi
if want prefill; then
  IFS=';' read -ra sw <<< "${PREFILL_SWITCHES:-X=1;ASTRAI_PREFILL_ATTENTION=mma}"
  for s in "${sw[@]}"; do
    for model in qwen3-8b llama-1b; do
      echo "== $model [$s]" >> "$out/prefill.txt"
      smi="$out/smi_prefill_${model}_$(echo "$s" | tr -c 'A-Za-z0-9=\n' '_').csv"
      with_smi "$smi" run_to 120 env $s astrai bench prefill --device cuda --model $M/$model --prompt-len 1024,8192,32768 >> "$out/prefill.txt" 2>&1
      log "prefill $model [$s]: exit $? $(grep -E '^ +[0-9]' "$out/prefill.txt" | tail -3 | awk '{printf "%s %s | ", $1, $5}')$(smi_summary "$smi")"
    done
  done
fi
# bench/prefill_attention_bench.cu built once a run for the attnbench and attnprof steps (nvcc line:
# the top of the file; -lineinfo for ncu's source view, which leaves the code as it is).
attn_bench() {
  [ -n "${attn_built:-}" ] && return 0
  attn_built=1
  run_to 240 nvcc -O3 -std=c++20 --expt-relaxed-constexpr -I. -gencode=arch=compute_90a,code=sm_90a -lineinfo \
    bench/prefill_attention_bench.cu gpu/attention.cu gpu/rope.cu gpu/rows.cpp gpu/scratch.cpp \
    src/backend/attention_shapes.cpp src/backend/rows.cpp src/core/tensor.cpp src/core/dtype.cpp \
    -o "$tmp/prefill_attention_bench" > "$out/attnbench_nvcc.txt" 2>&1
  log "attnbench build: exit $?"
}
if want attnbench; then
  attn_bench
  run_to 150 "$tmp/prefill_attention_bench" --check-only > "$out/attnbench_check.txt" 2>&1
  log "attnbench checks: exit $? $(grep -cE '^ +ok' "$out/attnbench_check.txt") ok, $(grep -cE '^ +FAIL' "$out/attnbench_check.txt") FAIL"
  run_to 200 "$tmp/prefill_attention_bench" --prefill-only > "$out/attnbench_prefill.txt" 2>&1
  log "attnbench timings: exit $? (attnbench_prefill.txt)"
fi
if want attnprof; then
  attn_bench
  for d in 128 64; do  # the third launch of each head_dim: skip 2, then 5 (3 at 128, 2 at 64)
    skip=$([ $d = 128 ] && echo 2 || echo 5)
    run_to 200 ncu --set full --import-source yes -k 'regex:paged_forward_(ws_)?kernel' --launch-skip $skip --launch-count 1 \
      -o "$out/attnprof_d$d" "$tmp/prefill_attention_bench" --profile > "$out/attnprof_d$d.txt" 2>&1
    log "attnprof d$d: exit $? $(ls -s "$out/attnprof_d$d.ncu-rep" 2>/dev/null)"
    ncu --import "$out/attnprof_d$d.ncu-rep" --page details > "$out/attnprof_d$d.details.txt" 2>&1
  done
fi
if want rows; then  # the prefill forward's row-wise kernels against a copy of their bytes (nvcc line: the file's top)
  run_to 240 nvcc -O3 -std=c++20 --expt-relaxed-constexpr -I. -gencode=arch=compute_90a,code=sm_90a \
    bench/prefill_rows_bench.cu gpu/norm.cu gpu/elementwise.cu gpu/rope.cu gpu/rows.cpp src/backend/rows.cpp \
    src/core/tensor.cpp src/core/dtype.cpp src/model/rope.cpp -o "$tmp/prefill_rows_bench" > "$out/rows_nvcc.txt" 2>&1
  log "rows build: exit $?"
  run_to 120 "$tmp/prefill_rows_bench" > "$out/rows.txt" 2>&1
  log "rows: exit $? $(grep -E '^(embedding|add_rms|swiglu|rope)' "$out/rows.txt" | awk '{printf "%s %s %s: %s us | ", $1, $2, $4, $8}')"
fi
if want startup; then
  for model in llama-1b qwen3-8b llama-1b qwen3-8b; do
    astrai serve --device cuda --model $M/$model --port 18181 > "$out/startup_$model.log" 2>&1 &
    pid=$!
    # Seconds from now to the first /health 200 (python3: the machine may have no curl); "exited" if
    # the server ends first (it does when the model fails to load, the reason last in its log).
    secs=$(python3 -c '
import sys, time, urllib.request
def gone(pid):  # exited: a zombie until the shell reaps it, or no process at all
    try: return open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError: return True
t0 = time.time()
while time.time() - t0 < 60:
    try:
        urllib.request.urlopen("http://127.0.0.1:18181/health", timeout=1); print("%.2f" % (time.time() - t0)); break
    except Exception:
        if gone(sys.argv[1]): print("exited"); break
        time.sleep(0.05)
else: print("never")' $pid)
    kill $pid; wait $pid 2>/dev/null
    log "startup $model: $secs s to /health; $(grep -iE 'captur|astrai: error' "$out/startup_$model.log" | tail -1 | cut -c1-200)"
  done
fi
if want tests; then
  run_to 150 astrai_backend_tests "[gpu]" > "$out/backend_tests.log" 2>&1
  log "backend [gpu]: exit $? $(grep -E 'test cases' "$out/backend_tests.log" | tail -1)"
  IFS=';' read -ra sw <<< "${TEST_SWITCHES:-}"
  for s in "${sw[@]}"; do  # the attention cases again under each switch (another kernel choice)
    tag=$(echo "$s" | tr -c 'A-Za-z0-9=\n' '_')
    run_to 150 env $s astrai_backend_tests "paged_attention* [gpu]" > "$out/backend_attention_$tag.log" 2>&1
    log "backend attention [$s]: exit $? $(grep -E 'test cases' "$out/backend_attention_$tag.log" | tail -1)"
  done
  run_to 150 astrai_gpu_tests "forward*,decode steps*,the step loop's*,cuda *" > "$out/gpu_tests.log" 2>&1
  log "gpu tests: exit $? $(grep -E 'test cases' "$out/gpu_tests.log" | tail -1)"
fi
if want faults; then
  # fault NAME SECONDS CMD...: CMD's exit status (124: still running at SECONDS) and its error lines.
  fault() {
    local name=$1 t=$2; shift 2
    run_to $t "$@" > "$out/fault_$name.txt" 2>&1
    local rc=$?
    log "fault $name: exit $rc | $(grep -aiE 'error|abort|terminate|segmentation|fault|what\(\)|cuda' "$out/fault_$name.txt" | grep -v '^\s*$' | tail -3 | cut -c1-240 | tr '\n' '|')"
  }
  printf '{"id": "a", "prompt": "hello there", "max_tokens": 8}\n{"id": "b", "prompt": "and again", "max_tokens": 8}\n' > $tmp/two.jsonl
  fault pool4 90 astrai bench serve --model $M/llama-1b --concurrency 4 --requests 8 --prompt-tokens 128 --max-tokens 64 \
    --server-option max-pages=4
  fault pool12 90 astrai bench serve --model $M/llama-1b --concurrency 4 --requests 8 --prompt-tokens 128 --max-tokens 64 \
    --server-option max-pages=12
  fault batch100k 120 astrai bench serve --model $M/llama-1b --concurrency 4 --requests 8 --prompt-tokens 128 --max-tokens 16 \
    --server-option max-batch-size=100000
  fault fraction 40 astrai serve --device cuda --model $M/llama-1b --kv-memory-fraction 1.5 --port 0
  fault tp4 40 astrai serve --device cuda --model $M/llama-1b --tp 4 --port 0
  fault modellen 60 astrai serve --device cuda --model $M/llama-1b --max-model-len 100000000 --port 0
  fault kv500g 60 astrai generate --device cuda --model $M/llama-1b --input $tmp/two.jsonl --output $tmp/o1.jsonl --kv-memory 500GiB
  fault decode100k 90 astrai bench decode --device cuda --model $M/llama-1b --batch 100000 --prompt-len 16 --tokens 2
  # Device memory taken by another process: a server holding 97% of what was free, then a load.
  astrai serve --device cuda --model $M/llama-1b --kv-memory-fraction 0.97 --port 18183 > "$out/fault_holder.txt" 2>&1 &
  holder=$!
  for i in $(seq 60); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:18183/health')" 2>/dev/null && break; sleep 1; done
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv >> "$out/fault_holder.txt"
  fault oom8b 90 astrai generate --device cuda --model $M/qwen3-8b --input $tmp/two.jsonl --output $tmp/o2.jsonl
  fault oomserve 60 astrai serve --device cuda --model $M/qwen3-8b --port 0
  kill $holder; wait $holder; log "holder: exit $?"
fi
if want sanitize; then
  # compute-sanitizer over the backend's attention cases (the decode kernel's cp.async ring, ldmatrix
  # and warp merges; the prefill kernels' stages and wgmma operands): memcheck, racecheck, synccheck.
  # SANITIZE_TOOLS and SANITIZE_CASES (';'-separated) pick some.
  IFS=';' read -ra cases <<< "${SANITIZE_CASES-in decode steps;for ragged prefill batches;for extends after long cached prefixes;in mixed decode and prefill steps}"
  IFS=';' read -ra specs <<< "${SANITIZE_SPECS:-}"
  for c in "${cases[@]}"; do [ -n "$c" ] && specs+=("paged_attention matches float64 attention $c* [gpu]"); done
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    for c in "${specs[@]}"; do
      tag=$(echo "$c" | tr -c 'A-Za-z0-9\n' '_' | cut -c1-80)
      run_to 330 compute-sanitizer --tool $tool astrai_backend_tests "$c" > "$out/sanitize_${tool}_$tag.txt" 2>&1
      log "compute-sanitizer $tool [$c]: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize_${tool}_$tag.txt" | tail -1) $(grep -E 'test cases' "$out/sanitize_${tool}_$tag.txt" | tail -1)"
    done
  done
fi
log end
