#!/usr/bin/python3
"""Writes tests/fixtures/optim.txt: reference trajectories of PyTorch's
SGD, Adam and AdamW (single-tensor implementation, foreach=False) and of
clip_grad_norm_, for tests/check_optim.c.

Run with Debian's interpreter, where python3-torch lives:

    /usr/bin/python3 tools/ref/gen_optim_fixtures.py

The problem: parameters W (3, 4) and b (4) from fixed numbers, fixed data
x (5, 3) and targets y (5, 4), and

    loss = ((tanh(x @ W + b) - y) ** 2).sum()

For each optimizer configuration and each dtype (f64 and f32, computed
natively in that dtype by PyTorch) it runs 10 steps. The gradient depends on
the trajectory, so each step's gradient is recorded too: the C test feeds the
recorded gradient to nabla's optimizer and compares the parameters after
every step, which tests the optimizer alone, independent of nabla's ops.

File format, one record a line ('#' starts a comment line):

    <key> <n> <v1> ... <vn>

with every value written by repr(), which round-trips exactly (f32 values are
written as the doubles they convert to). Keys:

    <cfg>.<dt>.opts            the configuration (order below)
    <cfg>.<dt>.init.<p>        initial value of parameter p (W or b)
    <cfg>.<dt>.s<k>.grad.<p>   gradient fed to step k (1..10); a missing line
                               means p.grad was None for that step
    <cfg>.<dt>.s<k>.<p>        p after step k
    clip.<dt>.*                clip_grad_norm_ inputs and results

SGD opts: lr momentum dampening weight_decay nesterov maximize
Adam/AdamW opts: lr beta1 beta2 eps weight_decay amsgrad maximize
"""
import os

import torch

STEPS = 10

X = [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
     [0.22, 0.58, 0.33], [0.77, 0.25, 0.10]]
Y = [[0.1, -0.2, 0.3, 0.0], [-0.4, 0.5, 0.2, -0.1], [0.3, 0.1, -0.3, 0.6],
     [0.0, -0.5, 0.4, 0.2], [0.7, 0.2, -0.1, -0.6]]
W0 = [[0.25, -0.5, 0.75, 0.1], [-0.3, 0.45, 0.05, -0.8], [0.6, -0.15, -0.35, 0.9]]
B0 = [0.05, -0.1, 0.2, -0.25]

# (name, kind, options, steps at which b.grad is None)
CONFIGS = [
    ("sgd_plain", "sgd", dict(lr=0.1), ()),
    ("sgd_momentum", "sgd", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01), ()),
    ("sgd_nesterov", "sgd", dict(lr=0.05, momentum=0.9, nesterov=True), ()),
    ("sgd_maximize", "sgd", dict(lr=0.02, momentum=0.5, weight_decay=0.01, maximize=True), ()),
    ("sgd_skip", "sgd", dict(lr=0.05, momentum=0.9, dampening=0.1), (1, 5, 6)),
    ("adam_default", "adam", dict(lr=0.01), ()),
    ("adam_amsgrad_wd", "adam", dict(lr=0.05, weight_decay=0.1, amsgrad=True), ()),
    ("adam_maximize", "adam", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, maximize=True), ()),
    ("adam_skip", "adam", dict(lr=0.03, amsgrad=True), (1, 5, 6)),
    ("adamw_default", "adamw", dict(lr=0.01), ()),
    ("adamw_amsgrad", "adamw", dict(lr=0.1, weight_decay=0.05, amsgrad=True), ()),
]

DTYPES = [("f64", torch.float64), ("f32", torch.float32)]


def loss_fn(x, y, W, b):
    return ((torch.tanh(x @ W + b) - y) ** 2).sum()


def opts_values(kind, o):
    if kind == "sgd":
        return [o["lr"], o.get("momentum", 0.0), o.get("dampening", 0.0),
                o.get("weight_decay", 0.0), float(o.get("nesterov", False)),
                float(o.get("maximize", False))]
    betas = o.get("betas", (0.9, 0.999))
    wd = o.get("weight_decay", 0.01 if kind == "adamw" else 0.0)
    return [o["lr"], betas[0], betas[1], o.get("eps", 1e-8), wd,
            float(o.get("amsgrad", False)), float(o.get("maximize", False))]


def make_optimizer(kind, params, o):
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind]
    return cls(params, foreach=False, **o)


class Writer:
    def __init__(self, f):
        self.f = f

    def put(self, key, values):
        if isinstance(values, torch.Tensor):
            values = values.detach().reshape(-1).tolist()
        values = [float(v) for v in values]
        self.f.write("%s %d %s\n" % (key, len(values), " ".join(repr(v) for v in values)))


def run_config(w, name, kind, o, skips):
    for dtn, dt in DTYPES:
        x = torch.tensor(X, dtype=dt)
        y = torch.tensor(Y, dtype=dt)
        W = torch.tensor(W0, dtype=dt, requires_grad=True)
        b = torch.tensor(B0, dtype=dt, requires_grad=True)
        opt = make_optimizer(kind, [W, b], o)
        pre = "%s.%s" % (name, dtn)
        w.put(pre + ".opts", opts_values(kind, o))
        w.put(pre + ".init.W", W)
        w.put(pre + ".init.b", b)
        for k in range(1, STEPS + 1):
            opt.zero_grad(set_to_none=True)
            loss_fn(x, y, W, b).backward()
            if k in skips:
                b.grad = None
            w.put("%s.s%d.grad.W" % (pre, k), W.grad)
            if b.grad is not None:
                w.put("%s.s%d.grad.b" % (pre, k), b.grad)
            opt.step()
            w.put("%s.s%d.W" % (pre, k), W)
            w.put("%s.s%d.b" % (pre, k), b)


def run_clip(w):
    for dtn, dt in DTYPES:
        for tag, max_norm in (("small", 0.5), ("large", 100.0)):
            x = torch.tensor(X, dtype=dt)
            y = torch.tensor(Y, dtype=dt)
            W = torch.tensor(W0, dtype=dt, requires_grad=True)
            b = torch.tensor(B0, dtype=dt, requires_grad=True)
            loss_fn(x, y, W, b).backward()
            pre = "clip_%s.%s" % (tag, dtn)
            w.put(pre + ".grad.W", W.grad)
            w.put(pre + ".grad.b", b.grad)
            w.put(pre + ".max_norm", [max_norm])
            total = torch.nn.utils.clip_grad_norm_([W, b], max_norm)
            w.put(pre + ".total", [total.item()])
            w.put(pre + ".clipped.W", W.grad)
            w.put(pre + ".clipped.b", b.grad)


def main():
    torch.set_num_threads(1)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "tests", "fixtures", "optim.txt")
    with open(path, "w") as f:
        f.write("# Generated by tools/ref/gen_optim_fixtures.py with torch %s; do not edit.\n"
                % torch.__version__)
        f.write("# Format: <key> <n> <values...>; see the generator's docstring.\n")
        w = Writer(f)
        for name, kind, o, skips in CONFIGS:
            run_config(w, name, kind, o, skips)
        run_clip(w)
    print("wrote", path)


if __name__ == "__main__":
    main()
