# Prompt logprobs through `astrai serve --device cuda` (completions with echo and logprobs, the
# lm-evaluation-harness request) against `astrai score --device cuda` on the same ids (not a ctest
# test: run by tests/gpu/high_load_run.sh's promptlp step on a GPU machine).
# Usage: prompt_logprobs_check.py MODEL_DIR OUT_PREFIX  (astrai on PATH)
import json, random, socket, subprocess, sys, time, urllib.request

model, out = sys.argv[1], sys.argv[2]
rng = random.Random(7)
ids = [rng.randrange(1, 250) for _ in range(600)]  # the preset's byte-level tokenizer: ids < 259
with open(out + "_in.jsonl", "w") as f:
    f.write(json.dumps({"id": 1, "ids": ids}) + "\n")
subprocess.run(["astrai", "score", "--model", model, "--device", "cuda", "--input", out + "_in.jsonl",
                "--output", out + "_out.jsonl"], check=True, capture_output=True)
ref = json.loads(open(out + "_out.jsonl").readline())["logprobs"]

s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
# max_batch_size 32: the prompt's chunks get at most 32 logit rows a step (every other row waits).
srv = subprocess.Popen(["astrai", "serve", "--model", model, "--device", "cuda", "--port", str(port),
                        "--max-batch-size", "32"], stdout=open(out + "_serve.log", "w"), stderr=subprocess.STDOUT)
try:
    for _ in range(240):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200: break
        except Exception:
            time.sleep(0.5)
    def post(body):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req, timeout=120).read())
    t0 = time.time()
    r = post({"prompt": [ids], "max_tokens": 1, "logprobs": 5, "echo": True, "temperature": 0})
    secs = time.time() - t0
    lp = r["choices"][0]["logprobs"]
    got = lp["token_logprobs"]
    assert got[0] is None and len(got) == len(ids) + 1, (got[:3], len(got))
    d = [abs(a - b) for a, b in zip(got[1:len(ids)], ref)]
    tops_ok = all(len(t) >= 1 for t in lp["top_logprobs"][1:])
    print(f"prompt logprobs: {len(d)} tokens in {secs:.2f} s, max |d| vs score {max(d):.4f}, mean {sum(d)/len(d):.5f}, "
          f"top lists ok {tops_ok}")
    # The same ids twice at once and a plain request beside: batched prompt rows.
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(3) as ex:
        fs = [ex.submit(post, {"prompt": ids, "max_tokens": 4, "logprobs": 2, "echo": True, "temperature": 0}),
              ex.submit(post, {"prompt": ids[:100], "max_tokens": 16, "temperature": 0}),
              ex.submit(post, {"prompt": ids, "max_tokens": 4, "logprobs": 2, "echo": True, "temperature": 0})]
        rs = [f.result() for f in fs]
    a, b = rs[0]["choices"][0]["logprobs"]["token_logprobs"], rs[2]["choices"][0]["logprobs"]["token_logprobs"]
    d2 = [abs(x - y) for x, y in zip(a[1:len(ids)], ref)]
    print(f"concurrent: max |d| vs score {max(d2):.4f}; the two equal: {a == b}; plain text len {len(rs[1]['choices'][0]['text'])}")
finally:
    srv.terminate(); srv.wait(30)
