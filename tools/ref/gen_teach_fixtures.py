#!/usr/bin/python3
"""gen_teach_fixtures.py - PyTorch's numbers for examples/teach_scalar.c,
written to tests/fixtures/teach_scalar.txt (one line per tensor: name, value,
gradient, in %.17g). Run with Debian's interpreter, where python3-torch
lives (CI has no torch and only reads the committed file):

    /usr/bin/python3 tools/ref/gen_teach_fixtures.py

The neuron is micrograd's classic o = tanh(x1*w1 + x2*w2 + b), in float64
0-d tensors, every intermediate's gradient kept with retain_grad().
"""
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "teach_scalar.txt")


def main():
    def leaf(v):
        return torch.tensor(v, dtype=torch.float64, requires_grad=True)

    x1, x2, w1, w2, b = leaf(2.0), leaf(0.0), leaf(-3.0), leaf(1.0), leaf(6.8813735870195432)
    x1w1 = x1 * w1
    x2w2 = x2 * w2
    x1w1x2w2 = x1w1 + x2w2
    n = x1w1x2w2 + b
    o = torch.tanh(n)
    named = [("x1", x1), ("w1", w1), ("x2", x2), ("w2", w2), ("b", b), ("x1w1", x1w1),
             ("x2w2", x2w2), ("x1w1x2w2", x1w1x2w2), ("n", n), ("o", o)]
    for _, t in named:
        if not t.is_leaf:
            t.retain_grad()
    o.backward()
    with open(OUT, "w") as f:
        f.write("# torch %s: name value grad of o = tanh(x1*w1 + x2*w2 + b)\n" % torch.__version__)
        for name, t in named:
            f.write("%s %.17g %.17g\n" % (name, t.item(), t.grad.item()))


if __name__ == "__main__":
    main()
