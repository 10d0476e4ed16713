#!/usr/bin/python3
"""gradient_penalty_ref.py - the PyTorch twin of examples/gradient_penalty.c:
a WGAN-GP critic trained in float64 on the same data from the same initial
weights (both drawn from PCG32, example_common.py), printing the same lines.
torch.autograd.grad(create_graph=True) gives the penalty's gradient, and
loss.backward() differentiates through it. Run with Debian's interpreter,
where python3-torch lives:

    /usr/bin/python3 tools/ref/gradient_penalty_ref.py

gen_example_fixtures.py writes its output to
tests/fixtures/examples/gradient_penalty.txt.
"""
import math

import torch

from example_common import PCG32, mlp_forward, mlp_init

N = 32
STEPS = 1000
PRINT_EVERY = 100
LAMBDA = 10.0
SIZES = [2, 16, 16, 1]


def make_batch(rng):
    real = []
    for k in range(N):
        real += [math.cos(2 * math.pi * k / N), math.sin(2 * math.pi * k / N)]
    fake = []
    for k in range(N):
        fake.append(0.5 + 0.3 * rng.normal())
        fake.append(0.25 + 0.3 * rng.normal())
    x_hat = []
    for k in range(N):
        eps = rng.double()
        for j in range(2):
            x_hat.append(eps * real[2 * k + j] + (1 - eps) * fake[2 * k + j])

    def t(v):
        return torch.tensor(v, dtype=torch.float64).reshape(N, 2)

    return t(real), t(fake), t(x_hat)


def critic_loss(params, real, fake, x_hat_values):
    d_real = mlp_forward(params, real).mean()
    d_fake = mlp_forward(params, fake).mean()
    x_hat = x_hat_values.clone().requires_grad_()
    d_hat = mlp_forward(params, x_hat)
    g, = torch.autograd.grad(d_hat, x_hat, torch.ones_like(d_hat), create_graph=True)
    norm = torch.sqrt((g * g).sum(dim=1))  # g.norm(2, dim=1), written as the C side has it
    penalty = ((norm - 1) ** 2).mean()
    loss = (d_fake - d_real) + penalty * LAMBDA
    return loss, penalty, d_real - d_fake, norm.mean()


def main():
    rng = PCG32(2017, 7)
    params = mlp_init(rng, SIZES)
    real, fake, x_hat = make_batch(rng)
    opt = torch.optim.Adam(params, lr=1e-3, betas=(0.5, 0.999))
    print("critic 2-16-16-1 tanh, %d real points on the unit circle, %d fake, lambda %g"
          % (N, N, LAMBDA))
    for step in range(STEPS + 1):
        loss, penalty, w_dist, grad_norm = critic_loss(params, real, fake, x_hat)
        if step % PRINT_EVERY == 0:
            print("step %3d  loss %.12g  penalty %.12g  wasserstein %.12g"
                  % (step, loss.item(), penalty.item(), w_dist.item()))
        if step == STEPS:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("mean |grad D(x_hat)| after %d steps: %.12g" % (STEPS, grad_norm.item()))


if __name__ == "__main__":
    main()
