#!/usr/bin/env python3
"""speedrun.py - `make speedrun` and `make speedrun-baseline` (docs/speedrun.md).

Runs the speedrun configs on nanoGPT's data/shakespeare_char, three seeds
each, as `nabla-gpt train CONFIG --threads=2 --seed=S --out_dir=DIR`, and
times each run from its start to the end of its final evaluation (the
moment the whole-split line of --eval_full is printed). Prints one line a
run and, per target, the record: the worst of the seeds (the slowest time,
the highest losses). The runs' log.jsonl stay in build/speedrun/, where
tools/bench/speedrun_svg.py reads them for docs/speedrun.svg.

  speedrun.py --build build [--baseline] [--input input.txt] [--seeds 1337,1,2]
              [--only 188|5min]

--baseline runs the AdamW baseline instead: nanoGPT README's CPU recipe
(config/train_shakespeare_char.py with its command-line overrides) with the
same final measurement, for 2000 iterations (target A) and for 285 seconds
of steps on the clock (--max_time, target B).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"

# What the record measures, added to every run (the configs set them too).
MEASURE = ["--threads=2", "--eval_iters=200", "--eval_full=True"]

RECORD = {
    "188": ["config/speedrun_shakespeare_char_188.py"],
    "5min": ["config/speedrun_shakespeare_char_5min.py"],
}

# nanoGPT README's CPU recipe as docs/gpt.md runs it, evaluated once at the
# end as the record is (its 20-batch evaluations every 250 steps are left out).
CPU_RECIPE = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
              "--log_interval=100", "--block_size=64", "--batch_size=12", "--n_layer=4",
              "--n_head=4", "--n_embd=128", "--dropout=0.0", "--eval_interval=0"]
BASELINE = {
    "188": CPU_RECIPE + ["--max_iters=2000", "--lr_decay_iters=2000"],
    # on the clock, as the record: its cosine over 285 s of steps, then the
    # final evaluation (about 6 s for this model on 2 threads)
    "5min": CPU_RECIPE + ["--max_iters=1000000", "--max_time=285"],
}

FULL = re.compile(r"^step (\d+): val loss over the whole split ([0-9.]+)")
EVAL = re.compile(r"^step (\d+): (?:train loss ([0-9.]+), )?val loss ([0-9.]+)$")


def prepare(prog, given):
    """data/shakespeare_char, made by `nabla-gpt prepare` when missing."""
    if os.path.exists("data/shakespeare_char/val.bin"):
        return
    src = given or "data/shakespeare_char/input.txt"
    if not os.path.exists(src):
        os.makedirs("data/shakespeare_char", exist_ok=True)
        print(f"speedrun: downloading {URL}", flush=True)
        subprocess.run(["curl", "-fsSL", "-o", src, URL], check=True)
    subprocess.run([prog, "prepare", f"--data={src}", "--out_dir=data/shakespeare_char"],
                   check=True)


def run_one(prog, args, out_dir, seed):
    """One run: (seconds to the end of the final evaluation, val, val_full, iters)."""
    cmd = [prog, "train"] + args + MEASURE + [f"--seed={seed}", f"--out_dir={out_dir}", "--force"]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    t_end, val, full, iters = None, None, None, None
    for line in p.stdout:
        m = EVAL.match(line)
        if m:
            iters, val = int(m.group(1)), float(m.group(3))
        m = FULL.match(line)
        if m:
            t_end, full = time.monotonic() - t0, float(m.group(2))
    if p.wait() != 0 or t_end is None:
        sys.exit(f"speedrun: {' '.join(cmd)} failed (exit {p.returncode})")
    return t_end, val, full, iters


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        return m.group(1).strip() if m else "unknown"
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--baseline", action="store_true")
    ap.add_argument("--input", default="")
    ap.add_argument("--seeds", default="1337,1,2")
    ap.add_argument("--only", choices=sorted(RECORD), default=None)
    a = ap.parse_args()
    prog = os.path.join(a.build, "bin", "nabla-gpt")
    prepare(prog, a.input)
    which = "baseline" if a.baseline else "record"
    table = BASELINE if a.baseline else RECORD
    seeds = [int(s) for s in a.seeds.split(",")]
    load = os.getloadavg()[0]
    print(f"speedrun: {which}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"CPU {cpu_name()}, {os.cpu_count()} CPUs, load {load:.2f}", flush=True)
    results = {}
    for target in [a.only] if a.only else sorted(table):
        rows = []
        for seed in seeds:
            out_dir = os.path.join(a.build, "speedrun", f"{which}-{target}-s{seed}")
            t, val, full, iters = run_one(prog, table[target], out_dir, seed)
            rows.append((seed, t, val, full, iters))
            print(f"speedrun: {which} {target} seed {seed}: {t:.2f} s to the end of the final "
                  f"evaluation, {iters} iterations, val loss {val:.4f} (200 batches), "
                  f"{full:.4f} (whole val split)", flush=True)
        results[target] = rows
    print(f"\nspeedrun: {which}, the worst of {len(seeds)} seeds "
          f"(load {load:.2f} before, {os.getloadavg()[0]:.2f} after):")
    for target, rows in results.items():
        print(f"  {target}: {max(r[1] for r in rows):.2f} s, val loss "
              f"{max(r[2] for r in rows):.4f}, whole val split {max(r[3] for r in rows):.4f} "
              f"({rows[0][4]} iterations; command: nabla-gpt train {' '.join(table[target])} "
              f"{' '.join(MEASURE)})")
    with open(os.path.join(a.build, "speedrun", f"{which}.json"), "w") as f:
        json.dump({t: [dict(zip(("seed", "seconds", "val", "val_full", "iters"), r))
                       for r in rows] for t, rows in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
