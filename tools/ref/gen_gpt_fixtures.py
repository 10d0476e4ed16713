#!/usr/bin/python3
"""gen_gpt_fixtures.py - PyTorch training runs of the reference GPTs
(tools/ref/gpt_ref.py), replayed by nabla's GPT (tests/check_gpt_parity.c) and by
`nabla-gpt train --init=... --batches=...`.

    /usr/bin/python3 tools/ref/gen_gpt_fixtures.py [OUTDIR]      (default tests/fixtures/gpt)

Files (safetensors; float tensors of the state_dicts are F64):

  batches.safetensors   x, y: I64 (N, B, T), N = 20 iterations, B = 4, T = 6,
                        tokens in [0, 13): y is x shifted by one position of
                        one random token stream (as get_batch makes them).
                        Iteration i trains on batch i. With
                        gradient_accumulation_steps = k (k divides B), batch
                        i is split along B into k micro-batches of B/k rows
                        (rows j*B/k .. (j+1)*B/k - 1 are micro-batch j); each
                        micro-batch's mean loss is divided by k before its
                        backward, as nanoGPT does. k micro-batches are thus one
                        batch of B rows, only summed differently.
  init_<model>.safetensors
                        the model's state_dict at init (F64), under the
                        layout's names (nanoGPT: lm_head.weight stored too,
                        equal to transformer.wte.weight; GPTModel: the "mask"
                        buffers left out). Metadata: arch, n_head.
  <run>_<dtype>.safetensors   (dtype f64 or f32)
                        loss (20) F64: iteration i's loss (the mean of its
                        micro-batch losses, before the update), in the run's
                        dtype, widened;
                        lr (20) F64: the learning rate of iteration i;
                        the final weights under the state_dict names, in the
                        run's dtype.
                        Metadata: "init" (the init file), "batches", "args":
                        the nabla-gpt train flags of the run (nanoGPT's names,
                        --key=value), "torch" (version).
  grad2_<model>.safetensors  (F64)
                        second order on batch 0: loss = model(x[0], y[0]);
                        grad.<name> = d loss / d param (create_graph=True),
                        grad2.<name> = d (sum over params of sum(grad^2)) /
                        d param, for every named parameter (the tied head
                        once, as transformer.wte.weight). Metadata: "init".

Each iteration (nanoGPT's train.py loop, dropout 0):
    lr = get_lr(it) if decay_lr else learning_rate; set on every group
    for micro in range(k): loss = model(x_micro, y_micro)[1] / k; loss.backward()
    if grad_clip != 0: clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step(); optimizer.zero_grad(set_to_none=True)
with torch.optim.AdamW(groups, lr, betas=(beta1, beta2), eps=1e-8,
foreach=False): nanoGPT's groups (weight_decay on parameters with >= 2 dims,
0 on the others) or, with weight_decay_1d, one group with every parameter
(the course's AdamW(model.parameters(), weight_decay=...)). A f32 run
converts the init to float32 first (model.float()).

The muon runs (`nabla-gpt train --optimizer=muon`) group the parameters as
muon.py's MuonWithAuxAdam example does: Muon (tools/ref/muon_ref.py,
lr muon_lr, momentum muon_momentum, nesterov, 5 steps, weight_decay) for the
2-D weights inside the blocks; torch.optim.AdamW (lr, betas, eps 1e-10,
weight_decay, foreach=False) for the embeddings, the head and every gain
and bias. Each iteration sets AdamW's lr to get_lr(it) and Muon's to
get_lr(it) * (muon_lr / learning_rate).
"""
import math
import os
import sys

import torch

from gpt_ref import make_model
from muon_ref import Muon
from torchref import write_safetensors

ITERS, B, T, V = 20, 4, 6, 13

MODELS = {
    # name: (arch, cfg, seed)
    "gptmodel_qkv": ("gptmodel", dict(vocab_size=V, block_size=8, n_layer=2, n_head=2,
                                       n_embd=8, dropout=0.0, qkv_bias=True), 11),
    "gptmodel": ("gptmodel", dict(vocab_size=V, block_size=8, n_layer=2, n_head=2, n_embd=8,
                                   dropout=0.0, qkv_bias=False), 12),
    "nanogpt_bias": ("nanogpt", dict(vocab_size=V, block_size=8, n_layer=2, n_head=2, n_embd=8,
                                      dropout=0.0, bias=True), 13),
    "nanogpt_nobias": ("nanogpt", dict(vocab_size=V, block_size=8, n_layer=2, n_head=2,
                                        n_embd=8, dropout=0.0, bias=False), 14),
}

BASE = dict(learning_rate=1e-2, weight_decay=0.1, weight_decay_1d=False, beta1=0.9, beta2=0.95,
            grad_clip=0.0, decay_lr=False, warmup_iters=0, lr_decay_iters=ITERS, min_lr=1e-3,
            gradient_accumulation_steps=1, optimizer="adamw", muon_lr=0.02, muon_momentum=0.95)

RUNS = [
    # name, model, overrides
    ("gptmodel_qkv_course", "gptmodel_qkv", dict(weight_decay_1d=True)),
    ("gptmodel_cosine_clip", "gptmodel", dict(decay_lr=True, warmup_iters=4, lr_decay_iters=15,
                                              grad_clip=0.5)),
    ("nanogpt_bias_accum", "nanogpt_bias", dict(learning_rate=5e-2, decay_lr=True, warmup_iters=3, grad_clip=1.0,
                                                gradient_accumulation_steps=2)),
    ("nanogpt_nobias_course", "nanogpt_nobias", dict(learning_rate=5e-2, weight_decay_1d=True, grad_clip=0.2,
                                                     gradient_accumulation_steps=4)),
    ("gptmodel_muon", "gptmodel", dict(optimizer="muon", decay_lr=True, warmup_iters=4,
                                       lr_decay_iters=15, grad_clip=1.0)),
    ("nanogpt_muon", "nanogpt_bias", dict(optimizer="muon", muon_lr=0.03, muon_momentum=0.9,
                                          weight_decay=0.05, gradient_accumulation_steps=2)),
]


def get_lr(it, o):
    """nanoGPT's get_lr."""
    if it < o["warmup_iters"]:
        return o["learning_rate"] * (it + 1) / (o["warmup_iters"] + 1)
    if it > o["lr_decay_iters"]:
        return o["min_lr"]
    decay_ratio = (it - o["warmup_iters"]) / (o["lr_decay_iters"] - o["warmup_iters"])
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return o["min_lr"] + coeff * (o["learning_rate"] - o["min_lr"])


def state_dict(model):
    return [(k, v) for k, v in model.state_dict().items() if not k.endswith(".mask")]


def make_batches():
    g = torch.Generator().manual_seed(1234)
    stream = torch.randint(0, V, (ITERS, B, T + 1), generator=g)
    return stream[:, :, :T].contiguous(), stream[:, :, 1:].contiguous()


def muon_param(name, p):
    """Muon's share under MuonWithAuxAdam's grouping: the blocks' matrices."""
    return p.dim() >= 2 and name.startswith(("trf_blocks.", "transformer.h."))


class MuonWithAdamW:
    """Muon on the blocks' matrices, AdamW on the rest; set_lr scales both."""

    def __init__(self, model, o):
        named = list(model.named_parameters())  # tied weights listed once
        self.muon = Muon([p for n, p in named if muon_param(n, p)], lr=o["muon_lr"],
                         momentum=o["muon_momentum"], weight_decay=o["weight_decay"])
        self.adamw = torch.optim.AdamW([p for n, p in named if not muon_param(n, p)],
                                       lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]),
                                       eps=1e-10, weight_decay=o["weight_decay"], foreach=False)
        self.per_lr = o["muon_lr"] / o["learning_rate"]
        self.param_groups = []

    def set_lr(self, lr):
        self.adamw.param_groups[0]["lr"] = lr
        self.muon.lr = lr * self.per_lr

    def step(self):
        self.muon.step()
        self.adamw.step()

    def zero_grad(self, set_to_none=True):
        self.muon.zero_grad()
        self.adamw.zero_grad(set_to_none=True)


def optimizer(model, o):
    if o["optimizer"] == "muon":
        return MuonWithAdamW(model, o)
    params = [p for p in model.parameters()]  # tied weights listed once
    if o["weight_decay_1d"]:
        groups = [{"params": params, "weight_decay": o["weight_decay"]}]
    else:
        groups = [{"params": [p for p in params if p.dim() >= 2],
                   "weight_decay": o["weight_decay"]},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]),
                             eps=1e-8, foreach=False)


def train(model, o, x, y):
    opt = optimizer(model, o)
    k = o["gradient_accumulation_steps"]
    losses, lrs = [], []
    for it in range(ITERS):
        lr = get_lr(it, o) if o["decay_lr"] else o["learning_rate"]
        if o["optimizer"] == "muon":
            opt.set_lr(lr)
        for group in opt.param_groups:
            group["lr"] = lr
        total = 0.0
        for micro in range(k):
            rows = slice(micro * B // k, (micro + 1) * B // k)
            _, loss = model(x[it, rows], y[it, rows])
            total += loss.item()
            (loss / k).backward()
        if o["grad_clip"] != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total / k)
        lrs.append(lr)
    return losses, lrs


def second_order(mname, arch, cfg, init, x, y, out):
    """Gradients and gradients of gradients of one batch's loss (float64)."""
    model = make_model(arch, cfg).double()
    with torch.no_grad():
        own = model.state_dict()
        for k, v in init:
            own[k].copy_(v)
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    _, loss = model(x[0], y[0])
    grads = torch.autograd.grad(loss, params, create_graph=True)
    total = sum((g * g).sum() for g in grads)
    grads2 = torch.autograd.grad(total, params)
    tensors = [("loss", loss.detach().reshape(1))]
    tensors += [("grad." + n, g.detach()) for n, g in zip(names, grads)]
    tensors += [("grad2." + n, g) for n, g in zip(names, grads2)]
    write_safetensors(os.path.join(out, "grad2_%s.safetensors" % mname), tensors,
                      {"init": "init_%s.safetensors" % mname, "torch": torch.__version__})


def flags(arch, cfg, o, dtype):
    a = ["--arch=%s" % arch, "--n_head=%d" % cfg["n_head"], "--dropout=0.0",
         "--dtype=%s" % dtype, "--max_iters=%d" % ITERS, "--batch_size=%d" % B,
         "--block_size=%d" % cfg["block_size"]]
    for key in ("learning_rate", "weight_decay", "beta1", "beta2", "grad_clip", "min_lr"):
        a.append("--%s=%r" % (key, o[key]))
    if o["optimizer"] != "adamw":
        a.append("--optimizer=%s" % o["optimizer"])
        for key in ("muon_lr", "muon_momentum"):
            a.append("--%s=%r" % (key, o[key]))
    for key in ("weight_decay_1d", "decay_lr"):
        a.append("--%s=%s" % (key, o[key]))
    for key in ("warmup_iters", "lr_decay_iters", "gradient_accumulation_steps"):
        a.append("--%s=%d" % (key, o[key]))
    return " ".join(a)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/gpt"
    os.makedirs(out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    x, y = make_batches()
    write_safetensors(os.path.join(out, "batches.safetensors"), [("x", x), ("y", y)])
    inits = {}
    for name, (arch, cfg, seed) in MODELS.items():
        torch.manual_seed(seed)
        model = make_model(arch, cfg).double()
        inits[name] = [(k, v.clone()) for k, v in state_dict(model)]
        write_safetensors(os.path.join(out, "init_%s.safetensors" % name), inits[name],
                          {"arch": arch, "n_head": cfg["n_head"]})
        second_order(name, arch, cfg, inits[name], x, y, out)
    for run, mname, over in RUNS:
        arch, cfg, _ = MODELS[mname]
        o = dict(BASE, **over)
        for dname, dt in (("f64", torch.float64), ("f32", torch.float32)):
            model = make_model(arch, cfg).to(dt)
            with torch.no_grad():
                own = model.state_dict()
                for k, v in inits[mname]:
                    own[k].copy_(v.to(dt))
            losses, lrs = train(model, o, x, y)
            tensors = [("loss", torch.tensor(losses, dtype=torch.float64)),
                       ("lr", torch.tensor(lrs, dtype=torch.float64))] + state_dict(model)
            meta = {"init": "init_%s.safetensors" % mname, "batches": "batches.safetensors",
                    "args": flags(arch, cfg, o, "float64" if dname == "f64" else "float32"),
                    "torch": torch.__version__}
            write_safetensors(os.path.join(out, "%s_%s.safetensors" % (run, dname)), tensors,
                              meta)
            print("%s %s: loss %.6f -> %.6f" % (run, dname, losses[0], losses[-1]))


if __name__ == "__main__":
    main()
