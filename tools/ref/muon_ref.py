"""muon_ref.py - Muon written from the published algorithm (Keller Jordan's
muon.py, as issue 35 spells it), in PyTorch, for nabla's parity fixtures
(tools/ref/gen_gpt_fixtures.py). Everything runs in the parameter's dtype
(no bfloat16 cast), with the operations in the order nabla's
src/optim/muon.c performs them:

    buf = buf * momentum + (1 - momentum) * g
    u   = g + momentum * (buf - g)          (nesterov; buf otherwise)
    X   = u viewed as (shape[0], rest), transposed when it is tall
    X   = X / (||X||_F + 1e-7)
    ns_steps times: A = X X^T; B = b A + c (A A); X = a X + B X
    u   = X (transposed back) * max(1, rows / cols) ** 0.5
    p   = p * (1 - lr * weight_decay);  p = p + (-lr) * u
"""
import torch

NS_A, NS_B, NS_C = 3.4445, -4.7750, 2.0315


def newton_schulz(g, steps):
    """The orthogonalized 2-D g (any orientation), in g's dtype."""
    x = g
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        a = x @ x.T
        b = NS_B * a + NS_C * (a @ a)
        x = NS_A * x + b @ x
    return x.T if tall else x


class Muon:
    """One group of parameters with >= 2 dims; state: momentum_buffer."""

    def __init__(self, params, lr=0.02, momentum=0.95, nesterov=True, ns_steps=5,
                 weight_decay=0.0):
        self.params = list(params)
        self.lr, self.momentum, self.nesterov = lr, momentum, nesterov
        self.ns_steps, self.weight_decay = ns_steps, weight_decay
        self.buf = {}

    @torch.no_grad()
    def step(self):
        mu = self.momentum
        for p in self.params:
            if p.grad is None:
                continue
            g = p.grad
            buf = self.buf.setdefault(p, torch.zeros_like(p))
            buf.copy_(buf * mu + (1 - mu) * g)
            u = g + mu * (buf - g) if self.nesterov else buf.clone()
            rows = p.shape[0]
            cols = p.numel() // rows
            x = newton_schulz(u.reshape(rows, cols), self.ns_steps)
            x = x * max(1.0, rows / cols) ** 0.5
            if self.weight_decay != 0:
                p.mul_(1 - self.lr * self.weight_decay)
            p.add_(x.reshape(p.shape), alpha=-self.lr)

    def zero_grad(self):
        for p in self.params:
            p.grad = None
