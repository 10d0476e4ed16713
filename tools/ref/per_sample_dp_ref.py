#!/usr/bin/python3
"""per_sample_dp_ref.py - the PyTorch twin of examples/per_sample_dp.c:
DP-SGD on the same attention classifier in float64, from the same weights,
data and noise (PCG32, example_common.py), printing the same lines. The
per-sample gradients are functorch's vmap(grad(loss), in_dims=(None, 0, 0));
clipping, noise and the step follow the C loop. Run with Debian's
interpreter, where python3-torch lives:

    /usr/bin/python3 tools/ref/per_sample_dp_ref.py

gen_example_fixtures.py writes its output to
tests/fixtures/examples/per_sample_dp.txt.
"""
import math

import functorch
import torch
import torch.nn.functional as F

from example_common import PCG32, uniform_tensor

N, B, T, D, K = 16, 8, 4, 4, 2
STEPS, PRINT_EVERY = 40, 5
LR, CLIP, SIGMA = 0.5, 1.0, 0.5
SHAPES = [(D, D), (D, D), (D, D), (K, D), (K,)]


def sample_loss(params, x, label):
    wq, wk, wv, wo, bo = params
    q, k, v = F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)
    s = (q @ k.T) * (1.0 / math.sqrt(D))
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -math.inf)
    pooled = (torch.softmax(s, -1) @ v).mean(0).reshape(1, D)
    return F.cross_entropy(F.linear(pooled, wo, bo), label.reshape(1))


def main():
    rng, noise = PCG32(2016, 3), PCG32(1234, 5)
    bound = 1.0 / math.sqrt(D)
    params = [uniform_tensor(rng, s, -bound, bound) for s in SHAPES]
    xs = torch.tensor([rng.normal() for _ in range(N * T * D)], dtype=torch.float64)
    xs = xs.reshape(N, T, D)
    labels = (xs[:, :, 0].sum(1) > 0).long()
    print("attention classifier (T %d, D %d, %d classes), %d samples, batches of %d; "
          "clip %g, noise %g, lr %g" % (T, D, K, N, B, CLIP, SIGMA, LR))
    per_sample = functorch.vmap(functorch.grad(sample_loss), in_dims=(None, 0, 0))
    for step in range(STEPS + 1):
        if step % PRINT_EVERY == 0:
            loss = sum(sample_loss(params, xs[n], labels[n]).item() for n in range(N)) / N
            print("step %2d  loss %.12g" % (step, loss))
        if step == STEPS:
            break
        first = (step % (N // B)) * B
        g = per_sample(params, xs[first:first + B], labels[first:first + B])
        norms = torch.sqrt(sum((gj.reshape(B, -1) ** 2).sum(1) for gj in g))
        factor = torch.clamp(CLIP / (norms + 1e-6), max=1.0)
        new = []
        for p, gj in zip(params, g):
            total = (gj * factor.reshape((B,) + (1,) * p.dim())).sum(0)
            z = torch.tensor([noise.normal() for _ in range(p.numel())], dtype=torch.float64)
            new.append(p - LR * (total + SIGMA * CLIP * z.reshape(p.shape)) / B)
        params = new
        if step % PRINT_EVERY == 0:
            print("         mean clipped norm %.12g" % ((norms * factor).sum().item() / B))


if __name__ == "__main__":
    main()
