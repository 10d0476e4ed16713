#!/usr/bin/python3
"""gen_grad_fixtures.py - PyTorch's second-order numbers for tests/check_grad.c.

    /usr/bin/python3 tools/ref/gen_grad_fixtures.py     # writes tests/fixtures/grad/

hessian.safetensors: a tanh MLP's cross-entropy loss on fixed data,
    loss = cross_entropy(tanh(x @ W1^T + b1) @ W2^T + b2, t)
with x (5, 8), t (5) in [0, 6), W1 (12, 8), b1 (12), W2 (6, 12), b2 (6): 186
parameters. "H" is torch.autograd.functional.hessian of the loss with
respect to the parameters flattened in that order (186, 186), in float64.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchref import write_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "grad")
SHAPES = [(12, 8), (12,), (6, 12), (6,)]


def loss_of(flat, x, t):
    ps, at = [], 0
    for s in SHAPES:
        n = 1
        for d in s:
            n *= d
        ps.append(flat[at:at + n].reshape(s))
        at += n
    w1, b1, w2, b2 = ps
    return F.cross_entropy(torch.tanh(x @ w1.T + b1) @ w2.T + b2, t)


def main():
    torch.manual_seed(20261126)
    x = torch.randn(5, 8, dtype=torch.float64)
    t = torch.randint(0, 6, (5,))
    params = [torch.randn(*s, dtype=torch.float64) * 0.5 for s in SHAPES]
    flat = torch.cat([p.reshape(-1) for p in params])
    h = torch.autograd.functional.hessian(lambda f: loss_of(f, x, t), flat)
    os.makedirs(OUT, exist_ok=True)
    tensors = [("x", x), ("t", t), ("W1", params[0]), ("b1", params[1]), ("W2", params[2]),
               ("b2", params[3]), ("loss", loss_of(flat, x, t).detach()), ("H", h)]
    write_safetensors(os.path.join(OUT, "hessian.safetensors"), tensors,
                      {"torch": torch.__version__})
    print("wrote %s: H %s, max |H| %.3g" % (OUT, tuple(h.shape), h.abs().max()))


if __name__ == "__main__":
    main()
