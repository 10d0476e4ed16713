#!/usr/bin/python3
"""bench_torch_gpt.py - times PyTorch's training step of the reference GPT
(tools/ref/gpt_ref.py) or of the Llama 3 / Qwen3 reference models
(tools/ref/arch_ref.py) for the configs `nabla-gpt bench` times, to compare with it.

    /usr/bin/python3 tools/bench/bench_torch_gpt.py --arch=gptmodel --n_layer=4 --n_head=4 \
        --n_embd=128 --block_size=64 --batch_size=12 [--vocab_size=65] [--steps=20]
        [--bias=1] [--seq_len=T]
    /usr/bin/python3 tools/bench/bench_torch_gpt.py --arch=qwen3 ... [--n_kv_head=K]
        [--head_dim=D] [--hidden_dim=F] [--qk_norm=1] [--n_expert=E --n_expert_per_tok=k
        --moe_hidden_dim=M] [--tie=1]

llama3 and qwen3 are arch_ref.py's models (RoPE theta 500000 / 1e6, no
scaling; GQA with --n_kv_head heads, 0: n_head; head_dim 0: n_embd / n_head;
hidden_dim 0: 4 n_embd); with --n_expert > 0 the MLP is its mixture of
experts, run as the course runs it (a loop over the experts, each on its own
tokens).

A step is nabla-gpt bench's: forward, cross-entropy, backward, clip_grad_norm_
(1.0), AdamW (nanoGPT's two weight-decay groups, lr 1e-3), on one fixed random
batch, dropout 0, float32, after 3 warm-up steps; the batch is (batch_size, seq_len) tokens
(seq_len 0: block_size), as GPT-2 124M's step at llm.c's B=4, T=64 in a block of 1024; --steps of them in --rounds
rounds (5), and the figure is the median round's time per step, as nabla-gpt
bench's. Each thread mode runs in its
own process, because OMP_NUM_THREADS and OPENBLAS_NUM_THREADS must be set before
torch is imported (torch.set_num_threads does not reach Debian's OpenBLAS):
1 thread, 2 threads, and 2 threads with OMP_WAIT_POLICY=PASSIVE, each also with
OpenBLAS's best core type for the CPU (torch_modes.py). It prints
one line per mode and then

    torch_best_ms_per_step=X mode=M peak_rss_mb=R

(R: the smallest peak resident set of the three modes' processes, the figure
least in nabla's favour when make bench-gpt compares memory)

(with --mode=NAME it times that mode only, in this process: what the parent
runs).
"""
import argparse
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_modes import MODES, env  # noqa: E402


def time_one(a):
    import torch  # imported here: the thread variables are already set
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    torch.manual_seed(1337)
    if a.arch in ("llama3", "qwen3"):
        from arch_ref import ArchModel
        cfg = dict(family=a.arch, vocab_size=a.vocab_size, context_length=a.block_size,
                   emb_dim=a.n_embd, n_heads=a.n_head, n_layers=a.n_layer,
                   n_kv_groups=a.n_kv_head or a.n_head, head_dim=a.head_dim or None,
                   hidden_dim=a.hidden_dim or 4 * a.n_embd, qk_norm=bool(a.qk_norm),
                   rope_base=500000.0 if a.arch == "llama3" else 1e6, tie=bool(a.tie),
                   num_experts=a.n_expert, num_experts_per_tok=a.n_expert_per_tok,
                   moe_intermediate_size=a.moe_hidden_dim)
        model = ArchModel(cfg, torch.float32)
    else:
        from gpt_ref import make_model
        cfg = dict(vocab_size=a.vocab_size, block_size=a.block_size, n_layer=a.n_layer,
                   n_head=a.n_head, n_embd=a.n_embd, dropout=0.0, bias=bool(a.bias),
                   qkv_bias=False)
        model = make_model(a.arch, cfg).float()
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
    t = a.seq_len or a.block_size
    x = torch.randint(0, a.vocab_size, (a.batch_size, t))
    y = torch.randint(0, a.vocab_size, (a.batch_size, t))

    def step():
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    for _ in range(3):
        step()
    # the steps in --rounds rounds, the median round's time per step: what
    # nabla-gpt bench reports
    per = max(1, a.steps // a.rounds)
    rounds = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(per):
            step()
        rounds.append((time.perf_counter() - t0) * 1e3 / per)
    rounds.sort()
    n = len(rounds)
    return rounds[n // 2] if n % 2 else (rounds[n // 2 - 1] + rounds[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k, v in (("n_layer", 4), ("n_head", 4), ("n_embd", 128), ("block_size", 64),
                 ("batch_size", 12), ("vocab_size", 65), ("steps", 20), ("rounds", 5),
                 ("bias", 0), ("seq_len", 0), ("n_kv_head", 0), ("head_dim", 0),
                 ("hidden_dim", 0), ("qk_norm", 0), ("tie", 0), ("n_expert", 0),
                 ("n_expert_per_tok", 2), ("moe_hidden_dim", 0)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--arch", default="gptmodel", choices=["gptmodel", "nanogpt", "llama3", "qwen3"])
    ap.add_argument("--mode", choices=sorted(MODES))
    a = ap.parse_args()
    if a.mode:
        ms = time_one(a)
        print("%.3f %.1f" % (ms, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
        return
    best, rss = None, None
    for name in MODES:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--mode=" + name] +
                             [arg for arg in sys.argv[1:] if not arg.startswith("--mode")],
                             env=env(name), check=True, capture_output=True,
                             text=True).stdout
        ms, mb = (float(v) for v in out.split()[-2:])
        rss = mb if rss is None else min(rss, mb)
        print("torch %s thread mode %s: %.3f ms/step" % (a.arch, name, ms))
        if best is None or ms < best[0]:
            best = (ms, name)
    print("torch_best_ms_per_step=%.3f mode=%s peak_rss_mb=%.1f" % (best + (rss,)))


if __name__ == "__main__":
    main()
