#!/usr/bin/python3
"""gen_train_fixtures.py - PyTorch's own training runs, as references for
tools/nabla-train (tests/check_train_tool.c).

Run with Debian's interpreter, where python3-torch lives:

    /usr/bin/python3 tools/ref/gen_train_fixtures.py [OUTDIR]

OUTDIR defaults to tests/fixtures/train. For each case it writes

    <case>_init.safetensors   MultiHeadAttention(...).state_dict() (including
                              the "mask" buffer nabla-train ignores), drawn
                              with torch.manual_seed
    <case>_data.safetensors   x (B, T, d_in) ~ N(0, 1) and y (B, T, d_out)

and for each optimizer and each dtype (f64, f32) a reference file

    <case>_<optim>_<dtype>.safetensors

with the trained parameters under the state_dict names and `loss` (STEPS),
each step's loss before its update, in the run's dtype. Its metadata holds
the nabla-train flags of the run ("args", without --init, --data and --out),
the INIT and DATA file names and the torch version. Each step is

    loss = F.mse_loss(mha(x), y); opt.zero_grad(); loss.backward(); opt.step()

with dropout 0 and PyTorch's single-tensor optimizers (foreach=False), whose
update order nabla follows. A f32 run converts the file's values to f32
first (model.float(), x.float()), as nabla-train --dtype f32 does.

The model is the seed notebook's MultiHeadAttention and the files are written
with json and struct only (the safetensors package is not needed), both from
tools/ref/torchref.py.
"""
import os
import sys

import torch
import torch.nn.functional as F

from torchref import MultiHeadAttention, write_safetensors

STEPS = 50


# ---- the runs ------------------------------------------------------------------------
# (case, d_in, d_out, heads, qkv_bias, B, T, seed, init dtype in the file, data dtype)
CASES = [
    ("small", 4, 6, 3, True, 2, 5, 123, torch.float64, torch.float32),
    ("square", 8, 8, 2, False, 2, 6, 7, torch.float32, torch.float64),
]

# (optim, flags, constructor)
OPTIMS = [
    ("sgd", "--optim sgd --lr 0.05 --momentum 0.9",
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, foreach=False)),
    ("adam", "--optim adam --lr 0.01 --weight-decay 0.001",
     lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.001, foreach=False)),
    ("adamw", "--optim adamw --lr 0.01",
     lambda p: torch.optim.AdamW(p, lr=0.01, foreach=False)),
]

DTYPES = [("f64", torch.float64), ("f32", torch.float32)]


def make_case(outdir, case, d_in, d_out, heads, qkv_bias, B, T, seed, init_dt, data_dt):
    torch.manual_seed(seed)
    model = MultiHeadAttention(d_in, d_out, T, 0.0, heads, qkv_bias)
    init = {k: v.to(init_dt) for k, v in model.state_dict().items()}
    x = torch.randn(B, T, d_in, dtype=torch.float64).to(data_dt)
    y = torch.randn(B, T, d_out, dtype=torch.float64).to(data_dt)
    init_name, data_name = case + "_init.safetensors", case + "_data.safetensors"
    write_safetensors(os.path.join(outdir, init_name), init)
    write_safetensors(os.path.join(outdir, data_name), {"x": x, "y": y})

    for optim, flags, make_opt in OPTIMS:
        for dname, dt in DTYPES:
            m = MultiHeadAttention(d_in, d_out, T, 0.0, heads, qkv_bias).to(dt)
            m.load_state_dict({k: v.to(dt) for k, v in init.items()})
            xs, ys = x.to(dt), y.to(dt)
            opt = make_opt(m.parameters())
            losses = []
            for _ in range(STEPS):
                loss = F.mse_loss(m(xs), ys)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            out = {k: v for k, v in m.state_dict().items() if k != "mask"}
            out["loss"] = torch.stack(losses)
            args = "--heads %d%s %s --steps %d --dtype %s" % (
                heads, " --qkv-bias" if qkv_bias else "", flags, STEPS, dname)
            meta = {"args": args, "init": init_name, "data": data_name,
                    "torch_version": torch.__version__}
            name = "%s_%s_%s.safetensors" % (case, optim, dname)
            write_safetensors(os.path.join(outdir, name), out, meta)
            print("%s: loss %.6g -> %.6g" % (name, losses[0].item(), losses[-1].item()))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "tests", "fixtures",
                                                                "train")
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    for c in CASES:
        make_case(outdir, *c)


if __name__ == "__main__":
    main()
