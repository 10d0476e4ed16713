"""example_common.py - what the PyTorch twins of the second-order examples
(tools/ref/<name>_ref.py, listed in gen_example_fixtures.py) share with
their C originals (examples/mlp_by_hand.h): the PCG32 generator of
nabla/random.h, replayed bit for bit, so both sides start from the same data
and weights without a file between them; the MLP's initial weights drawn
from it as nb_uniform draws them; and its forward pass with F.linear.
"""
import math

import torch
import torch.nn.functional as F

M64 = (1 << 64) - 1
PCG_MULT = 6364136223846793005


class PCG32:
    """nb_pcg32: O'Neill's pcg32 (64-bit LCG, XSH-RR output)."""

    def __init__(self, initstate, initseq):
        self.state = 0
        self.inc = ((initseq << 1) | 1) & M64
        self.next()
        self.state = (self.state + initstate) & M64
        self.next()

    def next(self):
        old = self.state
        self.state = (old * PCG_MULT + self.inc) & M64
        xorshifted = (((old >> 18) ^ old) >> 27) & 0xFFFFFFFF
        rot = old >> 59
        return ((xorshifted >> rot) | (xorshifted << ((32 - rot) & 31))) & 0xFFFFFFFF

    def double(self):
        """nb_pcg32_double: 53 bits from two draws, in [0, 1)."""
        hi = self.next() >> 5
        lo = self.next() >> 6
        return float((hi << 26) | lo) * 2.0 ** -53

    def uniform(self, lo, hi):
        """One value of nb_uniform(..., lo, hi, rng) in float64."""
        return lo + (hi - lo) * self.double()

    def normal(self):
        """nb_pcg32_normal: Box-Muller, 1 - u keeping the log's argument in (0, 1]."""
        u1 = 1.0 - self.double()
        u2 = self.double()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586476925 * u2)


def uniform_tensor(rng, shape, lo, hi):
    n = 1
    for d in shape:
        n *= d
    vals = [rng.uniform(lo, hi) for _ in range(n)]
    return torch.tensor(vals, dtype=torch.float64).reshape(shape)


def mlp_init(rng, sizes):
    """mlp_init: per layer, weight (out, in) then bias (out), from
    U(-1/sqrt(in), 1/sqrt(in)); returns the leaf tensors [w0, b0, w1, ...]."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / math.sqrt(fan_in)
        params.append(uniform_tensor(rng, (fan_out, fan_in), -bound, bound).requires_grad_())
        params.append(uniform_tensor(rng, (fan_out,), -bound, bound).requires_grad_())
    return params


def mlp_forward(params, x):
    """mlp_forward: tanh after every layer but the last."""
    n_layers = len(params) // 2
    h = x
    for l in range(n_layers):
        h = F.linear(h, params[2 * l], params[2 * l + 1])
        if l + 1 < n_layers:
            h = torch.tanh(h)
    return h


def column(values):
    """A list of floats as an (N, 1) float64 tensor."""
    return torch.tensor(values, dtype=torch.float64).reshape(-1, 1)
