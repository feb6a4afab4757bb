#!/usr/bin/env bash
# Not a ctest test: the server tests (tests/net: SDK clients, WebSocket, disconnects, many streams)
# against servers on the GPU (ASTRAI_TEST_SERVE_ARGS="--device cuda"), on a GPU machine, after
# `source .gpu/env.sh` from gpu-bundle (astrai and astrai_net_tests bundled), from the repository
# root:
#   BUDGET=540 bash tests/gpu/server_run.sh
# The cases that drive the SDK clients run node scripts (tests/net/*.mjs) with tests/node's npm
# packages (about 570 MB with the headless browser: past the device tool's carry limit), so where
# the machine lacks them those cases fail and the rest (raw sockets, C++ clients) still run.
# Logs go into $OUT/server.tgz, one-line summaries into $OUT/progress.txt.
NAME=server; source "$(dirname "$0")/run_lib.sh"
export ASTRAI_TEST_SERVE_ARGS="--device cuda" ASTRAI_SOURCE_DIR=$PWD
log "node: $(command -v node || echo none); nvidia-smi: $(nvidia-smi -L 2>/dev/null | head -1)"
run_to $(( BUDGET - 20 )) astrai_net_tests > "$out/net_tests.log" 2>&1
log "net tests against --device cuda: exit $? $(grep -E 'test cases' "$out/net_tests.log" | tail -1)"
grep -E "^-{5,}$" -A2 "$out/net_tests.log" | grep -vE "^-{5,}$|^--$" | sort -u | head -40 > "$out/cases.txt"
log "failed or reported cases: $(wc -l < "$out/cases.txt")"
log end
