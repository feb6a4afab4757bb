# Sourced by the tests/gpu/*_run.sh scripts (one GPU call each, not ctest tests) after they set NAME:
# the call's time budget and its logs. Sets final ($OUT), tmp ($TMPDIR), out (this run's log
# folder), T0 and BUDGET (seconds, default 540); defines left (seconds left), log (a line into
# $OUT/progress.txt, then pack), pack (every log into $OUT/$NAME.tgz: the device tool returns only a
# few files, and a run cut by its time limit keeps what was packed) and run_to SECONDS CMD... (CMD
# under a timeout of at most the time left; skipped, status 99, once none is left); packs on exit.
set -u
final=${OUT:-/tmp/out}; tmp=${TMPDIR:-/tmp}; out=$tmp/${NAME}_out; rm -rf "$out"; mkdir -p "$out" "$final"
T0=$(date +%s); BUDGET=${BUDGET:-540}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
pack() { tar czf "$final/$NAME.tgz" -C "$out" . 2>/dev/null; cp "$out/progress.txt" "$final/" 2>/dev/null; }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$out/progress.txt"; pack; }
trap pack EXIT
run_to() { local t=$1; shift; local l; l=$(left); [ "$l" -le 5 ] && { log "SKIP (no time): $*"; return 99; }
  [ "$t" -gt "$l" ] && t=$l; timeout "$t" "$@"; }
export ASTRAI_TEST_TMP=$tmp/astrai-test; mkdir -p "$ASTRAI_TEST_TMP"
export ASTRAI_BIN=$(command -v astrai)
