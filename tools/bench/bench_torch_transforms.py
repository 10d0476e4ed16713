#!/usr/bin/python3
"""bench_torch_transforms.py - times functorch's jvp and vmap(grad) on the
shapes nabla-bench-transforms times, to compare with it.

    /usr/bin/python3 tools/bench/bench_torch_transforms.py [--seconds S]

  jvp_gpt  functorch.jvp of the cpu-baby GPT's loss (tools/ref/gpt_ref.py,
           nanoGPT layout, 4/4/128, no biases, vocab 65, batch 12 x 64,
           dropout 0) along a random tangent of every parameter
  psg_mha  functorch.vmap(grad(loss), in_dims=(None, 0, 0)) of the seeds'
           MultiHeadAttention (tools/ref/torchref.py; T 32, D 64, 4 heads,
           no qkv bias, dropout 0) with an MSE loss, at B 64

float32, the median of 5 rounds of at least --seconds (0.25) after warm-up.
Each thread mode runs in its own process, because OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS must be set before torch is imported: 1 thread, 2
threads, 2 threads with OMP_WAIT_POLICY=PASSIVE, each also with OpenBLAS's
best core type for the CPU (torch_modes.py). It prints one line per row
and mode, then the best mode of each row:

    torch row=NAME mode=M ms=X
    torch_best row=NAME ms=X mode=M
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_modes import MODES, env  # noqa: E402
ROWS = ("jvp_gpt", "psg_mha")
ROUNDS = 5


def median_ms(fn, seconds):
    for _ in range(2):
        fn()
    rounds = []
    for _ in range(ROUNDS):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            t = time.perf_counter() - t0
            if t >= seconds:
                break
        rounds.append(t * 1e3 / n)
    return sorted(rounds)[ROUNDS // 2]


def time_rows(seconds):
    import torch  # imported here: the thread variables are already set
    import functorch
    import torch.nn.functional as F
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "ref"))
    from gpt_ref import make_model
    from torchref import MultiHeadAttention
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    torch.manual_seed(1337)
    out = {}

    cfg = dict(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, dropout=0.0,
               bias=False, qkv_bias=False)
    model = make_model("nanogpt", cfg).float().eval()
    fmodel, params, buffers = functorch.make_functional_with_buffers(model)
    x = torch.randint(0, 65, (12, 64))
    y = torch.randint(0, 65, (12, 64))
    tangents = tuple(torch.randn_like(p) for p in params)

    def loss_of(*p):
        return fmodel(p, buffers, x, y)[1]

    def jvp():
        with torch.no_grad():
            return functorch.jvp(loss_of, tuple(params), tangents)[1]
    out["jvp_gpt"] = median_ms(jvp, seconds)

    mha = MultiHeadAttention(64, 64, 32, 0.0, 4).float()
    fmha, mp, mbuf = functorch.make_functional_with_buffers(mha)
    ax, ay = torch.randn(64, 32, 64), torch.randn(64, 32, 64)

    def sample_loss(p, xb, yb):
        return F.mse_loss(fmha(p, mbuf, xb[None]), yb[None])
    per_sample = functorch.vmap(functorch.grad(sample_loss), in_dims=(None, 0, 0))
    out["psg_mha"] = median_ms(lambda: per_sample(tuple(mp), ax, ay), seconds)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.25)
    ap.add_argument("--mode", choices=sorted(MODES))
    a = ap.parse_args()
    if a.mode:
        r = time_rows(a.seconds)
        print(" ".join("%s=%.3f" % (k, r[k]) for k in ROWS))
        return
    best = {}
    for name in MODES:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--mode=" + name,
                              "--seconds=%g" % a.seconds],
                             env=env(name), check=True, capture_output=True,
                             text=True).stdout.split()[-len(ROWS):]
        for field in out:
            row, ms = field.split("=")
            ms = float(ms)
            print("torch row=%s mode=%s ms=%.3f" % (row, name, ms))
            if row not in best or ms < best[row][0]:
                best[row] = (ms, name)
    for row in ROWS:
        print("torch_best row=%s ms=%.3f mode=%s" % (row, best[row][0], best[row][1]))


if __name__ == "__main__":
    main()
