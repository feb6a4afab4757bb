#!/usr/bin/python3
"""An independent safetensors reader/writer (numpy + json; torch only for bfloat16 rounding).

  st_io.py write OUT SEED [NOPAD_OUT] write random tensors of every dtype, print what was written
                                       (and the same tensors with an unpadded header to NOPAD_OUT)
  st_io.py dump FILE                   read FILE strictly as the reference library does, print it
  st_io.py init-dir DIR                print {name: [dtype, shape, mean, std]} of DIR's weights
                                       (model.safetensors or shards via the index)

Printed JSON: {"metadata": {...}, "header_len": N, "tensors": {name: {"dtype", "shape", "values"}}}
with values as a flat list of floats/ints (bf16 and f16 widened to float exactly).
"""
import json
import os
import struct
import sys

import numpy as np

NP = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BF16": np.uint16}


def read(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    assert 8 + n <= len(buf), "header length past end of file"
    header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = buf[8 + n :]
    # The reference library requires the tensors to tile the data buffer exactly, in offset order.
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    pos = 0
    for b, e, k in spans:
        assert b == pos, "offsets of %s do not continue at %d" % (k, pos)
        pos = e
    assert pos == len(data), "data buffer has %d bytes, tensors cover %d" % (len(data), pos)
    out = {}
    for k, v in header.items():
        b, e = v["data_offsets"]
        a = np.frombuffer(data[b:e], dtype=NP[v["dtype"]]).reshape(v["shape"])
        out[k] = (v["dtype"], list(v["shape"]), a)
    return out, meta, n


def widen(dtype, a):
    if dtype == "BF16":  # bf16 bits are the top half of an f32 (flattened: 0-d arrays can't be viewed)
        flat = (a.reshape(-1).astype(np.uint32) << 16).view(np.float32)
        return flat.astype(np.float64).reshape(a.shape)
    if dtype in ("F32", "F16"):
        return a.astype(np.float64)
    return a.astype(np.int64)


def write(path, tensors, meta, pad=True):
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for k, (dtype, shape, a) in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[k] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode("utf-8")
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def as_json(tensors, meta, n):
    return {
        "metadata": meta,
        "header_len": n,
        "tensors": {
            k: {"dtype": d, "shape": s, "values": widen(d, a).reshape(-1).tolist()} for k, (d, s, a) in tensors.items()
        },
    }


def random_tensors(seed):
    import torch

    rng = np.random.default_rng(seed)
    t = {}
    for i, dtype in enumerate(["F32", "BF16", "F16", "I32", "I64", "U8", "F32", "BF16"]):
        shape = [int(x) for x in rng.integers(1, 6, size=int(rng.integers(1, 4)))]
        x = rng.standard_normal(shape).astype(np.float32) * 3
        if dtype == "BF16":
            a = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        elif dtype in ("I32", "I64"):
            a = rng.integers(-(2**31), 2**31 - 1, size=shape).astype(NP[dtype])
        elif dtype == "U8":
            a = rng.integers(0, 256, size=shape).astype(np.uint8)
        else:
            a = x.astype(NP[dtype])
        t["layer.%d.%s" % (i, dtype.lower())] = (dtype, shape, a)
    t["scalar"] = ("F32", [], np.array(rng.standard_normal(), dtype=np.float32))
    t["empty"] = ("F32", [0, 4], np.zeros((0, 4), dtype=np.float32))
    return t


def main():
    cmd = sys.argv[1]
    if cmd == "write":
        t = random_tensors(int(sys.argv[3]))
        meta = {"format": "pt", "seed": sys.argv[3]}
        write(sys.argv[2], t, meta)
        if len(sys.argv) > 4:
            write(sys.argv[4], t, meta, pad=False)
        _, _, n = read(sys.argv[2])
        print(json.dumps(as_json(t, meta, n)))
    elif cmd == "dump":
        print(json.dumps(as_json(*read(sys.argv[2]))))
    elif cmd == "init-dir":
        d = sys.argv[2]
        idx = os.path.join(d, "model.safetensors.index.json")
        files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
        out = {}
        for fn in files:
            t, _, _ = read(os.path.join(d, fn))
            for k, (dt, s, a) in t.items():
                w = widen(dt, a)
                out[k] = [dt, s, float(w.mean()), float(w.std())]
        print(json.dumps(out))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
