#!/usr/bin/python3
"""Times PyTorch on the same training step as `make demo-reverse` (examples/demo_reverse.c).

The model and batch match the demo's defaults: token + position embeddings
(vocab 11, 16 positions, d_model 32), the seeds' MultiHeadAttention (from
tools/ref/torchref.py; 4 heads, causal, dropout 0.1 on the weights, out_proj), a
residual, LayerNorm, a Linear head, cross-entropy on the 8 answer positions,
AdamW lr 3e-3, batch 32.

Run with Debian's interpreter, which has python3-torch:
    /usr/bin/python3 tools/bench/bench_torch_demo.py [--threads N] [--steps N]
It prints microseconds per step, to compare with the demo's own figure and
`build/bin/nabla-bench demo`.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
from torchref import MultiHeadAttention  # noqa: E402


class Model(nn.Module):
    def __init__(self, vocab, T, d, heads, dropout):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.attn = MultiHeadAttention(d, d, T, dropout, heads)
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        return self.head(self.norm(x + self.attn(x)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(42)
    n, V = 8, 11
    model = Model(V, 2 * n, a.d_model, 4, 0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    src = torch.randint(0, 10, (a.batch, n))
    ids = torch.cat([src, torch.full((a.batch, 1), 10), src.flip(1)[:, :-1]], dim=1)
    targets = src.flip(1).reshape(-1)

    def step():
        logits = model(ids)[:, n:, :].reshape(-1, V)
        loss = nn.functional.cross_entropy(logits, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    for _ in range(20):  # warm-up
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = (time.perf_counter() - t0) / a.steps
    print(f"pytorch {torch.__version__}, {a.threads} thread(s), batch {a.batch}, "
          f"d_model {a.d_model}: {dt * 1e6:.0f} us/step ({1 / dt:.0f} steps/s)")


if __name__ == "__main__":
    main()
