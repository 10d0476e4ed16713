#!/usr/bin/python3
"""Times PyTorch on the WGAN-GP critic step that nabla-bench-gp times.

A tanh MLP critic 2 -> H -> H -> 1 (float32) on B real and B fake points:
loss = mean(D(fake)) - mean(D(real)) + 10 mean((|grad_x D(x_hat)| - 1)^2),
the gradient with torch.autograd.grad(create_graph=True), backward, SGD;
and the same step without the penalty.

    /usr/bin/python3 tools/bench/bench_torch_gp.py [--hidden H] [--batch B]

One child process per mode (1 thread; 2 threads; 2 threads with
OMP_WAIT_POLICY=PASSIVE; each also with OpenBLAS's best core type for the CPU,
torch_modes.py), the thread variables set before importing torch;
each prints

    torch hidden=H batch=B mode=M gp_ms_per_step=X plain_ms_per_step=Y

the best of 5 rounds after a warm-up, as nabla-bench-gp reports its own.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_modes import MODES, env, threads  # noqa: E402


def child(mode, hidden, batch, seconds):
    import time

    import torch

    torch.set_num_threads(threads(mode))
    torch.manual_seed(42)
    D = torch.nn.Sequential(torch.nn.Linear(2, hidden), torch.nn.Tanh(),
                            torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                            torch.nn.Linear(hidden, 1))
    opt = torch.optim.SGD(D.parameters(), lr=1e-4)
    real = torch.randn(batch, 2) * 0.2 + 1
    fake = torch.randn(batch, 2)
    eps = torch.rand(batch, 1)

    def step(gp):
        loss = D(fake).mean() - D(real).mean()
        if gp:
            xh = (eps * real + (1 - eps) * fake).requires_grad_(True)
            g, = torch.autograd.grad(D(xh).sum(), xh, create_graph=True)
            norm = torch.sqrt((g * g).sum(1) + 1e-12)
            loss = loss + 10 * ((norm - 1) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def best(gp):
        out = float("inf")
        for _ in range(5):
            n, t0 = 0, time.perf_counter()
            while True:
                step(gp)
                n += 1
                t = time.perf_counter()
                if n >= 2 and t - t0 >= seconds:
                    break
            out = min(out, (t - t0) / n * 1e3)
        return out

    step(True), step(False)
    gp, plain = best(True), best(False)
    print(f"torch hidden={hidden} batch={batch} mode={mode} gp_ms_per_step={gp:.4g} "
          f"plain_ms_per_step={plain:.4g}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=0.25)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.hidden, a.batch, a.seconds)
        return 0
    status = 0
    for mode in MODES:
        status |= subprocess.run([sys.executable, os.path.abspath(__file__), "--hidden",
                                  str(a.hidden), "--batch", str(a.batch), "--seconds",
                                  str(a.seconds), "--child", mode], env=env(mode)).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
