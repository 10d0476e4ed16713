#!/usr/bin/python3
"""pinn_poisson_ref.py - the PyTorch twin of examples/pinn_poisson.c: a PINN
for u'' = -pi^2 sin(pi x), u(0) = u(1) = 0 in float64, from the same initial
weights (drawn from PCG32, example_common.py), printing the same lines. u'
and u'' are two torch.autograd.grad calls with create_graph=True, and
loss.backward() differentiates through both; torch.optim.Adam steps. Run
with Debian's interpreter, where python3-torch lives:

    /usr/bin/python3 tools/ref/pinn_poisson_ref.py

gen_example_fixtures.py writes its output to
tests/fixtures/examples/pinn_poisson.txt.
"""
import math

import torch
import torch.nn.functional as F

from example_common import PCG32, column, mlp_forward, mlp_init

N = 32
STEPS = 3000
PRINT_EVERY = 250
LR = 3e-3
GRID = 101
SIZES = [1, 16, 16, 1]


def pinn_loss(params, xc, f):
    x = xc.clone().requires_grad_()
    u = mlp_forward(params, x)
    du, = torch.autograd.grad(u, x, torch.ones_like(u), create_graph=True)
    d2u, = torch.autograd.grad(du, x, torch.ones_like(du), create_graph=True)
    pde = F.mse_loss(d2u, f)
    bc = (mlp_forward(params, column([0.0, 1.0])) ** 2).mean()
    return pde + bc, pde, bc


def max_error(params):
    xs = [i / 100.0 for i in range(GRID)]
    with torch.no_grad():
        u = mlp_forward(params, column(xs)).reshape(-1).tolist()
    return max(abs(ui - math.sin(math.pi * x)) for ui, x in zip(u, xs))


def main():
    rng = PCG32(2019, 5)
    params = mlp_init(rng, SIZES)
    xs = [(i + 1) / (N + 1.0) for i in range(N)]
    xc = column(xs)
    f = column([-(math.pi * math.pi) * math.sin(math.pi * x) for x in xs])
    opt = torch.optim.Adam(params, lr=LR, betas=(0.9, 0.999))
    print("PINN for u'' = -pi^2 sin(pi x), u(0) = u(1) = 0: tanh MLP 1-16-16-1, %d points" % N)
    for step in range(STEPS + 1):
        loss, pde, bc = pinn_loss(params, xc, f)
        if step % PRINT_EVERY == 0:
            print("step %4d  loss %.12g  pde %.12g  boundary %.12g"
                  % (step, loss.item(), pde.item(), bc.item()))
        if step == STEPS:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("max |u(x) - sin(pi x)| on %d points in [0, 1]: %.12g" % (GRID, max_error(params)))


if __name__ == "__main__":
    main()
