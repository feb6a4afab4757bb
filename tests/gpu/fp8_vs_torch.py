# An fp8 checkpoint made by PyTorch, loaded by `astrai --device cuda` (not a ctest test: run by hand,
# or by tests/gpu/fp8_run.sh, on a GPU machine with torch + transformers).
#   astrai init --preset llama-1b --out /tmp/m/llama-1b --dtype bf16
#   python3 tests/gpu/fp8_vs_torch.py /tmp/m/llama-1b /tmp/m/llama
# Usage: fp8_vs_torch.py BF16_MODEL_DIR OUT_PREFIX  (astrai on PATH). Writes OUT_PREFIX_fp8 and
# OUT_PREFIX_widened beside it:
#  1. fp8: every *_proj.weight quantized as transformers' fine-grained FP8 and Qwen3-FP8 store them
#     (torch.float8_e4m3fn, one f32 `weight_scale_inv` per 128 x 128 block: amax / 448), the config
#     with Qwen3-8B-FP8's quantization_config; the rest as in the bf16 model;
#  2. widened: the bf16 checkpoint of what PyTorch dequantizes it to, (q.float() * scale).bfloat16();
#  3. score: 1,000 random tokens through `astrai score --device cuda` on both: the logprobs must be
#     equal (the same bf16 weights, so the same kernels' output), and against transformers' bf16
#     forward on the widened checkpoint: max and mean |delta logprob| (bf16 noise);
#  4. the load time `astrai score` logs for each;
#  5. kept: the fp8 checkpoint with --fp8-weights keep (its projections stay fp8 on the device):
#     |delta logprob| against the widened checkpoint's and against transformers'.
import json, os, random, re, shutil, subprocess, sys
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

model_dir, out = sys.argv[1], sys.argv[2]
fp8_dir, wide_dir = out + "_fp8", out + "_widened"
B = 128


def sh(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAILED:", " ".join(args), "\n", r.stdout[-3000:], r.stderr[-3000:], flush=True)
        raise SystemExit(1)
    return r.stdout + r.stderr


def quantize(w):
    R, C = w.shape
    sr, sc = (R + B - 1) // B, (C + B - 1) // B
    wp = torch.zeros(sr * B, sc * B, dtype=torch.float32, device=w.device)
    wp[:R, :C] = w.float()
    blocks = wp.view(sr, B, sc, B)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = amax / 448.0
    q = (blocks / scale[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    wide = (q.float() * scale[:, None, :, None]).to(torch.bfloat16)
    return (q.view(sr * B, sc * B)[:R, :C].contiguous(), scale.contiguous(),
            wide.view(sr * B, sc * B)[:R, :C].contiguous())


for d in (fp8_dir, wide_dir):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
for f in sorted(os.listdir(model_dir)):
    p = os.path.join(model_dir, f)
    if f.endswith(".safetensors"):
        t = load_file(p, device="cuda")
        q8, wide = {}, {}
        for name, w in t.items():
            if name.endswith("_proj.weight") and w.dim() == 2:
                q, s, wd = quantize(w)
                q8[name], q8[name + "_scale_inv"], wide[name] = q.cpu(), s.cpu(), wd.cpu()
            else:
                q8[name] = wide[name] = w.cpu()
        save_file(q8, os.path.join(fp8_dir, f), metadata={"format": "pt"})
        save_file(wide, os.path.join(wide_dir, f), metadata={"format": "pt"})
        del t, q8, wide
        torch.cuda.empty_cache()  # astrai sizes its KV cache from the free memory
    elif f == "model.safetensors.index.json":
        index = json.load(open(p))
        for k in [k for k in index["weight_map"] if k.endswith("_proj.weight")]:
            index["weight_map"][k + "_scale_inv"] = index["weight_map"][k]
        json.dump(index, open(os.path.join(fp8_dir, f), "w"))
        shutil.copy(p, os.path.join(wide_dir, f))
    elif f == "config.json":
        cfg = json.load(open(p))
        shutil.copy(p, os.path.join(wide_dir, f))
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": [B, B]}
        json.dump(cfg, open(os.path.join(fp8_dir, f), "w"), indent=2)
    elif os.path.isfile(p):
        shutil.copy(p, os.path.join(fp8_dir, f))
        shutil.copy(p, os.path.join(wide_dir, f))


def gb(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors")) / 1e9


print(f"CHECKPOINTS fp8 {gb(fp8_dir):.2f} GB, widened bf16 {gb(wide_dir):.2f} GB", flush=True)

rng = random.Random(1234)
seq = [rng.randrange(cfg["vocab_size"]) for _ in range(1000)]
inp = out + "_score_in.jsonl"
with open(inp, "w") as f:
    f.write(json.dumps({"id": "s", "ids": seq}) + "\n")
lps = {}
for name, d, flags in (("fp8", fp8_dir, []), ("widened", wide_dir, []), ("kept", fp8_dir, ["--fp8-weights", "keep"])):
    log = sh(["astrai", "score", "--model", d, "--device", "cuda", "--input", inp, "--output",
              f"{out}_{name}_score.jsonl", "--log-level", "debug"] + flags)  # debug: the load line
    m = re.search(r"loaded .* in ([0-9.]+) s", log)
    print(f"LOAD {name}: {m.group(0) if m else '(no load line)'}", flush=True)
    lps[name] = torch.tensor(json.loads(open(f"{out}_{name}_score.jsonl").readline())["logprobs"],
                             dtype=torch.float64)
diff = (lps["fp8"] - lps["widened"]).abs()
print(f"SAME fp8 vs widened: {int((diff != 0).sum())} of {len(diff)} logprobs differ, max |delta| "
      f"{diff.max():.3g}", flush=True)

model = AutoModelForCausalLM.from_pretrained(wide_dir, dtype=torch.bfloat16).to("cuda").eval()
with torch.no_grad():
    logits = model(torch.tensor([seq], device="cuda")).logits[0].float()
    lp = torch.log_softmax(logits, -1)[:-1].gather(1, torch.tensor(seq[1:], device="cuda")[:, None])[:, 0]
ref = lp.double().cpu()
d = (lps["fp8"] - ref).abs()
print(f"SCORE fp8 vs transformers (bf16, widened weights): {len(seq)} tokens, |delta logprob| max "
      f"{d.max():.4f} mean {d.mean():.5f} (ref mean logprob {ref.mean():.3f}, astrai {lps['fp8'].mean():.3f})",
      flush=True)
k = (lps["kept"] - ref).abs()
kw = (lps["kept"] - lps["widened"]).abs()
print(f"KEPT fp8 kept vs transformers: |delta logprob| max {k.max():.4f} mean {k.mean():.5f}; vs widened: "
      f"max {kw.max():.4f} mean {kw.mean():.5f}", flush=True)
bad = int((diff != 0).sum())
sys.exit(1 if bad else 0)
