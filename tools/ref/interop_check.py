#!/usr/bin/python3
"""interop_check.py - checks that safetensors files pass between PyTorch and
nabla in both directions, using the few lines of Python the nabla-train
documentation shows (save_safetensors / load_safetensors below: json, struct
and torch only; the safetensors package is not needed).

    /usr/bin/python3 tools/ref/interop_check.py [BUILD_DIR]

BUILD_DIR holds bin/nabla-train (default: $NB_BUILD_DIR, else ./build next
to tools/). The checks:

  1. Bits, PyTorch -> nabla -> PyTorch. A MultiHeadAttention's state_dict
     (the seed notebook's class, from tools/ref/torchref.py) and data are written by save_safetensors (in F64, and in F32);
     nabla-train reads them and runs one SGD step with lr 0, which leaves
     the parameters exactly as they were, and writes OUT; load_safetensors
     must give back every parameter bit for bit, in the same dtype.
  2. Values. nabla-train trains 20 Adam steps in f64 from PyTorch's INIT;
     OUT is read back, loaded into a PyTorch model with load_state_dict, and
     compared with PyTorch's own 20 steps (weights and per-step losses
     within 1e-9 relative), and the loaded model's output with the trained
     PyTorch model's.
  3. Metadata written by nabla is read back as strings.

Prints what it checked; exits 0 when everything agrees, 1 on any mismatch,
2 when nabla-train cannot be run.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

from torchref import MultiHeadAttention


# ---- the documented snippets (keep in sync with the README) -------------------------
# These two stay here rather than in tools/ref/torchref.py: this script tests the
# README's stdlib-only snippet itself, so it must run exactly that text.
def save_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} (float32, float64, int64, bool) and optional
    {str: str} metadata as a safetensors file. Standard library + torch."""
    codes = {torch.float32: ("F32", "f"), torch.float64: ("F64", "d"),
             torch.int64: ("I64", "q"), torch.bool: ("BOOL", "?")}
    header = {"__metadata__": dict(metadata)} if metadata else {}
    blobs, offset = [], 0
    for name, t in tensors.items():
        dtype, code = codes[t.dtype]
        values = t.detach().cpu().reshape(-1).tolist()
        blob = struct.pack("<%d%s" % (len(values), code), *values)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode("utf-8")
    head += b" " * (-(8 + len(head)) % 8)  # data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def load_safetensors(path):
    """Returns ({name: tensor}, {metadata}) of a safetensors file
    (little-endian host assumed, as x86 and ARM are)."""
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64,
              "BOOL": torch.bool, "F16": torch.float16, "BF16": torch.bfloat16}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[info["dtype"]])
        tensors[name] = t.reshape(info["shape"])
    return tensors, metadata
# ---------------------------------------------------------------------------------------


FAILURES = []


def check(ok, what):
    print("  %s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        FAILURES.append(what)


def run_train(tool, *args):
    p = subprocess.run([tool, *args], capture_output=True, text=True)
    if p.returncode != 0:
        print("nabla-train failed (exit %d): %s" % (p.returncode, p.stderr.strip()))
        sys.exit(1)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    build = (sys.argv[1] if len(sys.argv) > 1 else
             os.environ.get("NB_BUILD_DIR") or os.path.join(here, "..", "..", "build"))
    tool = os.path.join(build, "bin", "nabla-train")
    if not os.access(tool, os.X_OK):
        print("interop_check: %s not found; run make (or pass the build directory)" % tool)
        return 2
    torch.manual_seed(0)
    B, T, d_in, d_out, heads = 2, 5, 4, 6, 3
    model = MultiHeadAttention(d_in, d_out, T, 0.0, heads, qkv_bias=True).double()
    x = torch.randn(B, T, d_in, dtype=torch.float64)
    y = torch.randn(B, T, d_out, dtype=torch.float64)
    common = ["--heads", str(heads), "--qkv-bias"]

    with tempfile.TemporaryDirectory() as tmp:
        init, data, out = (os.path.join(tmp, n) for n in ("init.st", "data.st", "out.st"))

        print("1. bits: PyTorch writes, nabla reads and writes, PyTorch reads")
        for dname, dt in (("f64", torch.float64), ("f32", torch.float32)):
            sd = {k: v.to(dt) for k, v in model.state_dict().items()}
            save_safetensors(init, sd)
            save_safetensors(data, {"x": x.to(dt), "y": y.to(dt)})
            run_train(tool, "--init", init, "--data", data, *common, "--optim", "sgd",
                      "--lr", "0", "--steps", "1", "--dtype", dname, "--out", out)
            back, _ = load_safetensors(out)
            for name, t in sd.items():
                if name == "mask":
                    continue
                got = back.get(name)
                check(got is not None and got.dtype == t.dtype and got.shape == t.shape
                      and got.reshape(-1).view(torch.uint8).tolist()
                      == t.reshape(-1).view(torch.uint8).tolist(),
                      "%s %s: same bits" % (dname, name))

        print("2. values: 20 Adam steps in nabla (f64) against PyTorch's")
        save_safetensors(init, model.state_dict())
        save_safetensors(data, {"x": x, "y": y})
        run_train(tool, "--init", init, "--data", data, *common, "--optim", "adam",
                  "--lr", "0.01", "--steps", "20", "--dtype", "f64", "--out", out)
        trained, meta = load_safetensors(out)
        ref = MultiHeadAttention(d_in, d_out, T, 0.0, heads, qkv_bias=True).double()
        ref.load_state_dict(model.state_dict())
        opt = torch.optim.Adam(ref.parameters(), lr=0.01, foreach=False)
        losses = []
        for _ in range(20):
            loss = F.mse_loss(ref(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        for name, p in ref.named_parameters():
            err = ((trained[name] - p.detach()).abs().max() / p.detach().abs().max()).item()
            check(err <= 1e-9, "%s within 1e-9 of PyTorch (%.1e)" % (name, err))
        lerr = max(abs(a - b) / abs(b) for a, b in zip(trained["loss"].tolist(), losses))
        check(len(losses) == trained["loss"].numel() and lerr <= 1e-9,
              "20 per-step losses within 1e-9 (%.1e)" % lerr)
        loaded = MultiHeadAttention(d_in, d_out, T, 0.0, heads, qkv_bias=True).double()
        params = {k: v for k, v in trained.items() if k != "loss"}
        missing, unexpected = loaded.load_state_dict(params, strict=False)
        check(missing == ["mask"] and unexpected == [],
              "load_state_dict(strict=False) misses only the mask buffer")
        with torch.no_grad():
            diff = (loaded(x) - ref(x)).abs().max().item()
        check(diff <= 1e-9, "the loaded model computes what PyTorch's trained one does (%.1e)"
              % diff)

        print("3. metadata written by nabla")
        check(meta.get("optimizer") == "adam" and meta.get("steps") == "20"
              and meta.get("dtype") == "f64" and meta.get("generator", "").startswith(
                  "nabla-train "), "OUT metadata: %s" % json.dumps(meta))

    print("interop_check: %s" % ("all agree" if not FAILURES else
                                "%d MISMATCHES" % len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
