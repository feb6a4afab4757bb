# End-to-end check of `astrai --device cuda` against Hugging Face transformers in bf16 on the same
# safetensors (not a ctest test: run by hand on a GPU machine with torch + transformers).
#   astrai init --preset llama-1b --out /tmp/m/llama-1b --dtype bf16
#   python3 tests/gpu/e2e_vs_transformers.py /tmp/m/llama-1b /tmp/m/llama 6
# Usage: e2e_vs_transformers.py MODEL_DIR OUT_PREFIX [HEAD_SCALE]  (astrai on PATH; rewrites the
# model's safetensors in place, see 1.)
#  1. restricts the random model to the 95 printable ASCII tokens (zeroes the other embedding /
#     lm_head rows, so their logits are exactly 0 and never the argmax) so that generated text maps
#     1:1 onto token ids;
#  2. score: 1,000 random ASCII tokens through `astrai score --device cuda` vs transformers'
#     log_softmax of the same ids: max and mean |delta logprob|;
#  3. greedy: `astrai generate --device cuda --temperature 0 --max-tokens 256` vs transformers'
#     greedy generate: first divergence, and the reference's top-2 logit gap there (a near-tie?).
import json, subprocess, sys, random, os
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

model_dir, out = sys.argv[1], sys.argv[2]
# Optional: scale the kept rows of the LM head (the embedding when tied) so that a random init's
# near-flat logits (llama-1b: mean logprob ~ -ln V) become peaked enough for greedy to mean something.
head_scale = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
def sh(args, inp=None):
    r = subprocess.run(args, input=inp, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAILED:", " ".join(args), "\n", r.stdout[-3000:], r.stderr[-3000:], flush=True)
        raise SystemExit(1)
    return r.stdout

printable = "".join(chr(c) for c in range(32, 127))
ids = json.loads(sh(["astrai", "tokenize", "--model", model_dir, "--text", printable]))["ids"]
assert len(ids) == 95, f"expected 95 ids for 95 printable chars, got {len(ids)}"
id2ch = dict(zip(ids, printable))

cfg = json.load(open(os.path.join(model_dir, "config.json")))
for f in sorted(os.listdir(model_dir)):
    if f.endswith(".safetensors"):
        p = os.path.join(model_dir, f)
        t = load_file(p)
        keep = torch.zeros(cfg["vocab_size"], dtype=torch.bool)
        keep[ids] = True
        for name in ("model.embed_tokens.weight", "lm_head.weight"):
            if name in t:
                t[name][~keep] = 0
        head = "lm_head.weight" if "lm_head.weight" in t else "model.embed_tokens.weight"
        if head in t and head_scale != 1.0:
            t[head][keep] = (t[head][keep].float() * head_scale).to(t[head].dtype)
        save_file(t, p, metadata={"format": "pt"})

dev = "cuda"
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(dev).eval()

# ---- score ----
rng = random.Random(1234)
seq = [rng.choice(ids) for _ in range(1000)]
with open(out + "_score_in.jsonl", "w") as f:
    f.write(json.dumps({"id": "s", "ids": seq}) + "\n")
sh(["astrai", "score", "--model", model_dir, "--device", "cuda", "--input", out + "_score_in.jsonl",
    "--output", out + "_score_out.jsonl"])
res = json.loads(open(out + "_score_out.jsonl").readline())
astrai_lp = torch.tensor(res["logprobs"], dtype=torch.float64)
with torch.no_grad():
    logits = model(torch.tensor([seq], device=dev)).logits[0].float()
    lp = torch.log_softmax(logits, -1)[:-1].gather(1, torch.tensor(seq[1:], device=dev)[:, None])[:, 0]
ref_lp = lp.double().cpu()
assert astrai_lp.shape == ref_lp.shape, (astrai_lp.shape, ref_lp.shape)
d = (astrai_lp - ref_lp).abs()
print(f"SCORE {os.path.basename(model_dir)}: {len(seq)} tokens, |delta logprob| max {d.max():.4f} mean {d.mean():.5f}"
      f" (ref mean logprob {ref_lp.mean():.3f}, astrai {astrai_lp.mean():.3f})", flush=True)

# ---- greedy generate ----
prompt = "The quick brown fox jumps over the lazy dog. "
pids = json.loads(sh(["astrai", "tokenize", "--model", model_dir, "--text", prompt]))["ids"]
with open(out + "_gen_in.jsonl", "w") as f:
    f.write(json.dumps({"id": "g", "prompt": prompt}) + "\n")
sh(["astrai", "generate", "--model", model_dir, "--device", "cuda", "--input", out + "_gen_in.jsonl",
    "--output", out + "_gen_out.jsonl", "--temperature", "0", "--max-tokens", "256", "--ignore-eos",
    "--no-progress"])
text = json.loads(open(out + "_gen_out.jsonl").readline())["text"]
with torch.no_grad():
    g = model.generate(torch.tensor([pids], device=dev), max_new_tokens=256, do_sample=False,
                       min_new_tokens=256, pad_token_id=0)[0, len(pids):].tolist()
    full = torch.tensor([pids + g], device=dev)
    top2 = model(full).logits[0, len(pids) - 1:-1].float().topk(2, -1)
ref_text = "".join(id2ch.get(i, "?") for i in g)
n = min(len(text), len(ref_text))
first = next((i for i in range(n) if text[i] != ref_text[i]), None)
if first is None and len(text) != len(ref_text):
    first = n
if first is None:
    print(f"GREEDY {os.path.basename(model_dir)}: all {len(g)} tokens equal", flush=True)
else:
    gap = (top2.values[first, 0] - top2.values[first, 1]).item()
    same = sum(1 for i in range(n) if text[i] == ref_text[i])
    print(f"GREEDY {os.path.basename(model_dir)}: first divergence at token {first} of {len(g)} (astrai {len(text)} chars);"
          f" reference top-2 logit gap there {gap:.4f} ; {same}/{len(g)} positions equal", flush=True)
    print("  astrai:", repr(text[max(0, first - 10):first + 20]))
    print("  ref:   ", repr(ref_text[max(0, first - 10):first + 20]))
