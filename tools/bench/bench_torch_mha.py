#!/usr/bin/python3
"""Times PyTorch on the training step that nabla-bench-mha times.

The seeds' MultiHeadAttention (tools/ref/torchref.py: causal, dropout 0.1,
out_proj with bias, no qkv bias, d_in = d_out = D) on one batch x (B, T, D):
forward, MSE loss against a fixed target, backward, Adam (lr 1e-3).

    /usr/bin/python3 tools/bench/bench_torch_mha.py --config large [--seconds S]

runs one child process per mode (1 thread; 2 threads; 2 threads with
OMP_WAIT_POLICY=PASSIVE; each also with OpenBLAS's best core type for the
CPU, torch_modes.py), each setting OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS before importing torch (torch.set_num_threads does not
reach Debian's OpenBLAS), and prints one line per mode:

    torch config=NAME mode=M ms_per_step=X peak_rss_mb=Y cpu_ms_per_step=Z

with the median of 5 rounds after warm-up, the child's peak RSS (VmHWM)
and its CPU time per step (all threads).
"""
import argparse
import os
import subprocess
import sys

CONFIGS = {  # B, T, D, heads: the same table as tools/bench/nabla-bench-mha.c
    "seed": (2, 6, 2, 2),
    "small": (8, 32, 64, 4),
    "medium": (16, 128, 256, 8),
    "large": (8, 256, 512, 8),
}
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_modes import MODES, env, threads  # noqa: E402
ROUNDS = 5


def peak_rss_mb():
    """VmHWM (it starts afresh at exec, unlike ru_maxrss), in MB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child(config, mode, seconds):
    """Runs in a process whose thread variables were set before this import."""
    import time

    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
    from torchref import MultiHeadAttention

    torch.set_num_threads(threads(mode))
    torch.manual_seed(42)
    B, T, D, H = CONFIGS[config]
    model = MultiHeadAttention(D, D, T, 0.1, H, qkv_bias=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(B, T, D) * 2 - 1
    target = torch.rand(B, T, D) * 2 - 1

    def step():
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()

    cpu = [0.0, 0]  # CPU seconds of the timed rounds, their steps

    def round_time(secs, timed=True):
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while True:
            step()
            n += 1
            t = time.perf_counter()
            if n >= 2 and t - t0 >= secs:
                if timed:
                    cpu[0] += time.process_time() - c0
                    cpu[1] += n
                return (t - t0) / n

    round_time(seconds / 2, timed=False)  # warm-up
    times = sorted(round_time(seconds) for _ in range(ROUNDS))
    rss = peak_rss_mb()
    print(f"torch config={config} mode={mode} ms_per_step={times[ROUNDS // 2] * 1e3:.5g} "
          f"peak_rss_mb={rss:.1f} cpu_ms_per_step={cpu[0] / cpu[1] * 1e3:.5g}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=CONFIGS, required=True)
    ap.add_argument("--modes", default=",".join(MODES),
                    help="comma-separated subset of " + ", ".join(MODES))
    ap.add_argument("--seconds", type=float, default=0.25, help="time per round")
    ap.add_argument("--child", metavar="MODE", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.config, a.child, a.seconds)
        return 0
    status = 0
    for mode in a.modes.split(","):
        if mode not in MODES:
            ap.error(f"unknown mode {mode!r}")
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--config", a.config,
                            "--seconds", str(a.seconds), "--child", mode], env=env(mode))
        status |= r.returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
