# Sourced by the tests/gpu/*_run.sh scripts (one GPU call each, not ctest tests) after they set NAME:
# the call's time budget and its logs. Sets final ($OUT), tmp ($TMPDIR), out (this run's log
# folder), T0 and BUDGET (seconds, default 540); defines left (seconds left), log (a line into
# $OUT/progress.txt, then pack), pack (every log into $OUT/$NAME.tgz: the device tool returns only a
# few files, and a run cut by its time limit keeps what was packed) and run_to SECONDS CMD... (CMD
# under a timeout of at most the time left; skipped, status 99, once none is left); packs on exit.
# with_smi FILE CMD... runs CMD with nvidia-smi sampling the board every 50 ms into FILE (SM clock,
# power, its limit, temperature, throttle reasons: 0x4 is the software power cap), and smi_summary
# FILE condenses that to the SM clock range and the peak power of the samples under load (over 150 W).
set -u
final=${OUT:-/tmp/out}; tmp=${TMPDIR:-/tmp}; out=$tmp/${NAME}_out; rm -rf "$out"; mkdir -p "$out" "$final"
T0=$(date +%s); BUDGET=${BUDGET:-540}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
pack() { tar czf "$final/$NAME.tgz" -C "$out" . 2>/dev/null; cp "$out/progress.txt" "$final/" 2>/dev/null; }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$out/progress.txt"; pack; }
trap pack EXIT
run_to() { local t=$1; shift; local l; l=$(left); [ "$l" -le 5 ] && { log "SKIP (no time): $*"; return 99; }
  [ "$t" -gt "$l" ] && t=$l; timeout "$t" "$@"; }
with_smi() { local f=$1; shift
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader,nounits -lms 50 > "$f" 2>&1 &
  local p=$! rc; "$@"; rc=$?; kill $p 2>/dev/null; wait $p 2>/dev/null; return $rc; }
smi_summary() { awk -F', ' '$3 > 150 { n++; if (lo == "" || $2 < lo) lo = $2; if ($2 > hi) hi = $2; if ($3 > pw) pw = $3;
    if ($6 != "0x0000000000000000") cap++ }
  END { if (n) printf "SM %s-%s MHz, up to %s W, %d of %d loaded samples throttled", lo, hi, pw, cap, n;
        else printf "no loaded samples" }' "$1"; }
export ASTRAI_TEST_TMP=$tmp/astrai-test; mkdir -p "$ASTRAI_TEST_TMP"
export ASTRAI_BIN=$(command -v astrai)
