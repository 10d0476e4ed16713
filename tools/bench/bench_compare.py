#!/usr/bin/python3
"""nabla against PyTorch on MultiHeadAttention training steps (make bench-compare).

For each config, interleaved: build/bin/nabla-bench-mha (1 and 2 threads,
one process per config) then tools/bench/bench_torch_mha.py (its three thread
modes, each also with OpenBLAS's best core type; one process each). Prints
every line they print, then per config the ratio nabla/PyTorch of nabla's
better thread count to PyTorch's best mode, and the peak-RSS ratio at the
largest config.

    /usr/bin/python3 tools/bench/bench_compare.py [--build build] [--configs a,b] [--seconds S]
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_modes import MODES, THREADS  # noqa: E402


def thread_mode(mode):
    """The thread mode ("1", "2", "2-passive") of a mode with or without a core type."""
    return next(k for k, v in THREADS.items() if v == MODES[mode][:2])


CONFIGS = ["seed", "small", "medium", "large"]
TARGETS = {"seed": 0.02, "small": 0.25, "medium": 0.5, "large": 0.6}
RSS_TARGET = 0.25


def fields(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(r.stdout)
    sys.stdout.flush()
    if r.returncode:
        sys.exit(f"bench_compare: {' '.join(cmd)} exited {r.returncode}")
    return [fields(line) for line in r.stdout.splitlines() if "ms_per_step=" in line]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--seconds", default="0.25", help="time per round")
    a = ap.parse_args()
    nabla_bin = os.path.join(a.build, "bin", "nabla-bench-mha")
    rows = []
    for c in a.configs.split(","):
        nb = run([nabla_bin, "--config", c, "--seconds", a.seconds])
        pt = run([sys.executable, os.path.join(HERE, "bench_torch_mha.py"), "--config", c,
                  "--seconds", a.seconds])
        rows.append((c, nb, pt))
    print()
    print(f"{'config':8} {'nabla 1t':>10} {'nabla 2t':>10} {'torch 1':>10} {'torch 2':>10} "
          f"{'torch 2p':>10} {'ratio':>7} {'target':>7}")
    for c, nb, pt in rows:
        nbt = {int(r["threads"]): float(r["ms_per_step"]) for r in nb}
        ptm = {}  # each thread mode's best over OpenBLAS's core types (torch_modes.py)
        for r in pt:
            k = thread_mode(r["mode"])
            ptm[k] = min(ptm.get(k, float("inf")), float(r["ms_per_step"]))
        ratio = min(nbt.values()) / min(ptm.values())
        cells = [nbt.get(1), nbt.get(2), ptm.get("1"), ptm.get("2"), ptm.get("2-passive")]
        text = " ".join(f"{v:10.4g}" if v is not None else f"{'-':>10}" for v in cells)
        target = TARGETS.get(c)
        mark = "" if target is None else (" ok" if ratio <= target else " MISS")
        print(f"{c:8} {text} {ratio:7.3f} {target if target else '-':>7}{mark}")
    print()
    print("CPU time per step on one thread (a check that holds up when other programs load "
          "the machine):")
    for c, nb, pt in rows:
        n1 = [float(r["cpu_ms_per_step"]) for r in nb if r["threads"] == "1"]
        p1 = [float(r["cpu_ms_per_step"]) for r in pt if thread_mode(r["mode"]) == "1"]
        if n1 and p1:
            print(f"{c:8} nabla {n1[0]:10.4g} ms  PyTorch {min(p1):10.4g} ms  "
                  f"ratio {n1[0] / min(p1):.3f}")
    c, nb, pt = rows[-1]
    nb_rss = max(float(r["peak_rss_mb"]) for r in nb)
    pt_rss = min(float(r["peak_rss_mb"]) for r in pt)
    ratio = nb_rss / pt_rss
    print(f"peak RSS at {c}: nabla {nb_rss:.1f} MB, PyTorch {pt_rss:.1f} MB (smallest mode), "
          f"ratio {ratio:.3f} (target <= {RSS_TARGET}){' ok' if ratio <= RSS_TARGET else ' MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
