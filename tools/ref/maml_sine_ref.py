#!/usr/bin/python3
"""maml_sine_ref.py - the PyTorch twin of examples/maml_sine.c: MAML on
sine waves in float64 with the same tasks and initial weights (both drawn
from PCG32, example_common.py), printing the same lines. The inner step is
torch.autograd.grad(create_graph=True), the meta-loss's backward goes
through it, and torch.optim.Adam makes the meta-update. Run with Debian's
interpreter, where python3-torch lives:

    /usr/bin/python3 tools/ref/maml_sine_ref.py

gen_example_fixtures.py writes its output to
tests/fixtures/examples/maml_sine.txt.
"""
import math

import torch
import torch.nn.functional as F

from example_common import PCG32, column, mlp_forward, mlp_init

K = 10
Q = 10
TASKS = 5
ITERS = 3000
PRINT_EVERY = 250
ALPHA = 0.01
META_LR = 1e-3
HELD_OUT = 5
GRID = 50
SIZES = [1, 40, 40, 1]


class Task:
    def __init__(self, rng, n_query):
        """Amplitude, phase, the support xs, the query xs (n_query 0: the grid)."""
        self.amp = rng.uniform(0.1, 5.0)
        self.phase = rng.uniform(0.0, math.pi)
        self.xs = [rng.uniform(-5.0, 5.0) for _ in range(K)]
        if n_query:
            self.xq = [rng.uniform(-5.0, 5.0) for _ in range(n_query)]
        else:
            self.xq = [-5.0 + 10.0 * i / (GRID - 1) for i in range(GRID)]
        self.ys = [self.amp * math.sin(x - self.phase) for x in self.xs]
        self.yq = [self.amp * math.sin(x - self.phase) for x in self.xq]


def adapt(params, t, create_graph):
    loss = F.mse_loss(mlp_forward(params, column(t.xs)), column(t.ys))
    g = torch.autograd.grad(loss, params, create_graph=create_graph)
    return [p - gi * ALPHA for p, gi in zip(params, g)]


def query_loss(params, t):
    return F.mse_loss(mlp_forward(params, column(t.xq)), column(t.yq))


def meta_step(params, rng, opt):
    total = None
    for _ in range(TASKS):
        t = Task(rng, Q)
        loss = query_loss(adapt(params, t, True), t)
        total = loss if total is None else total + loss
    meta_loss = total * (1.0 / TASKS)
    opt.zero_grad()
    meta_loss.backward()
    opt.step()
    return meta_loss.item()


def evaluate(params, t):
    fast = adapt(params, t, False)
    return query_loss(params, t).item(), query_loss(fast, t).item()


def report(params, untrained):
    rng = PCG32(7, 3)
    sums = [0.0] * 4
    for k in range(HELD_OUT):
        t = Task(rng, 0)
        b, a = evaluate(params, t)
        ub, ua = evaluate(untrained, t)
        print("task %d  A %.4f  phase %.4f  mse before %.12g  after one step %.12g"
              % (k, t.amp, t.phase, b, a))
        for i, v in enumerate((b, a, ub, ua)):
            sums[i] += v
    print("mean mse: MAML before %.12g  after one step %.12g"
          % (sums[0] / HELD_OUT, sums[1] / HELD_OUT))
    print("          untrained before %.12g  after one step %.12g"
          % (sums[2] / HELD_OUT, sums[3] / HELD_OUT))


def main():
    untrained = mlp_init(PCG32(2017, 3), SIZES)
    rng = PCG32(2017, 3)
    params = mlp_init(rng, SIZES)
    opt = torch.optim.Adam(params, lr=META_LR, betas=(0.9, 0.999))
    print("MAML, sine tasks: K %d, alpha %g, %d tasks a meta-batch, Adam lr %g"
          % (K, ALPHA, TASKS, META_LR))
    for it in range(1, ITERS + 1):
        loss = meta_step(params, rng, opt)
        if it % PRINT_EVERY == 0 or it == 1:
            print("iter %4d  meta-loss %.12g" % (it, loss))
    report(params, untrained)


if __name__ == "__main__":
    main()
