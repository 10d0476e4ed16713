#!/usr/bin/python3
"""gen_arch_fixtures.py - PyTorch runs of the Llama 3, Qwen3 and Qwen3-MoE
reference models (tools/ref/arch_ref.py), replayed by nabla
(tests/check_gpt_arch_parity.c: nb_gpt_load, and `nabla-gpt train
--init_from=DIR/model.safetensors --batches=FILE`).

    /usr/bin/python3 tools/ref/gen_arch_fixtures.py [OUTDIR]    (default tests/fixtures/arch)

Models (each a model directory OUTDIR/<model>/, two layers, vocabulary 19,
context 8):
  llama3_course   Llama 3, course names + cfg.json: C 16, 2 heads of 8, 1 kv
                  head (multi-query), Llama 3 RoPE scaling (theta 10000,
                  factor 8, low 1, high 4, original context 64: the 4
                  frequencies fall in all three of its bands), untied head
  llama3_hf       Llama 3, HF names + config.json (LlamaForCausalLM): C 16,
                  4 heads of 4, 2 kv heads, rope_scaling llama3 (theta 5e5,
                  factor 32, low 1, high 4, original 8192), tied head
  qwen3_course    Qwen3, course names + cfg.json: C 12, 4 heads of 6
                  (head_dim != C / n_heads), 2 kv heads, qk_norm, untied
  qwen3_hf        Qwen3, HF names + config.json (Qwen3ForCausalLM): C 16,
                  2 heads of 12, 1 kv head, qk_norm, tied head
  qwen3moe_course Qwen3-MoE, course names: C 12, 4 heads of 4, 2 kv heads,
                  top-2 of 4 experts of width 8, untied
  qwen3moe_hf     Qwen3-MoE, HF names (Qwen3MoeForCausalLM): C 16, 2 heads
                  of 8, 1 kv head, top-2 of 4 experts of width 12, untied,
                  sliding-window attention over the last 4 keys in every
                  layer (use_sliding_window, max_window_layers 0)

Files (safetensors; float tensors F64 unless said):
  batches.safetensors   x, y: I64 (20, 4, 6), tokens in [0, 19), y is x shifted
                        by one position of one random token stream.
  finetune_batches.safetensors  x, y: I64 (5, 2, 8), the same kind.
  <model>/model.safetensors   the weights at init under the layout's names
                        (metadata format "pt"), with <model>/cfg.json (the
                        course's cfg dict) or <model>/config.json (HF's) beside.
                        Init: Embedding N(0, 0.5^2), Linear PyTorch's default,
                        every RMSNorm gain 1 + N(0, 0.1^2) (so a gain that is
                        not applied shows).
  <model>/adamw_<dtype>.safetensors  (dtype f64 or f32)
                        logits (4, 6, 19): the forward of batch 0 at init, in
                        the run's dtype (widened);
                        loss (20), lr (20): iteration i's mean loss before its
                        update and its learning rate;
                        the final weights under the layout's names, in the
                        run's dtype (a tied head once, as tok_emb).
                        Metadata: "args" (nanoGPT-named flags of the run, as
                        nabla-gpt takes them), "batches", "torch".
  <model>/grad2.safetensors
                        loss (1); grad.<name> = d loss / d param (create_graph)
                        and grad2.<name> = d (sum over params of sum(grad^2)) /
                        d param, on batch 0, float64.
  llama3_course/muon_<dtype>, llama3_hf/muon_<dtype>
                        20 steps of --optimizer=muon: loss, lr, final weights.
  llama3_hf/finetune_<dtype>, qwen3_hf/finetune_<dtype>
                        5 steps on finetune_batches: loss, lr, final weights.

Each iteration (nanoGPT's train.py loop, as gen_gpt_fixtures.py):
    lr = get_lr(it) if decay_lr else learning_rate
    for micro in range(k): loss = model(x_micro, y_micro)[1] / k; loss.backward()
    if grad_clip != 0: clip_grad_norm_(params, grad_clip)
    optimizer.step(); optimizer.zero_grad(set_to_none=True)
AdamW is torch.optim.AdamW(eps 1e-8, foreach=False) with nanoGPT's groups
(weight decay on the >= 2-D parameters only) or, with weight_decay_1d, on
every parameter. Muon runs group as MuonWithAuxAdam does and nabla-gpt
--optimizer=muon (tools/support/gpt_optim.c): Muon (tools/ref/muon_ref.py)
for the >= 2-D parameters inside the blocks (names trf_blocks.* or
model.layers.*: W_query, W_key, W_value, out_proj, fc1-3; a MoE's router and
experts too), AdamW (eps 1e-10, weight_decay on all) for tok_emb, out_head
and every RMSNorm gain; Muon's lr is get_lr(it) * muon_lr / learning_rate.
A f32 run converts the float64 init to float32 first; its final weights
must lie within 2e-6 of the float64 run's (the seeds are chosen so: a step
of Adam on a gradient near zero would otherwise turn float32 rounding into
a difference of 1e-4 no two implementations agree on).

The MoE runs check that no token's k-th and (k+1)-th router logits come
within 1e-4 of each other anywhere in a run (a near tie could route
differently in float32 in nabla and PyTorch), and that every expert gets a
token in every forward (an idle expert has no gradient in PyTorch, so its
AdamW step is skipped, where nabla's gradient is zero and AdamW still steps).

RoPE tables: float64, rounded once (arch_ref.py); Hugging Face computes
the angles in float32.
"""
import json
import math
import os
import sys

import torch

from arch_ref import ArchModel, course_cfg_json, hf_config_json, named_parameters
from gen_gpt_fixtures import get_lr
from muon_ref import Muon
from torchref import write_safetensors

ITERS, B, T, V, CTX = 20, 4, 6, 19, 8
FT_ITERS, FT_B, FT_T = 5, 2, 8

MODELS = {
    # name: (cfg, hf layout, seed)
    "llama3_course": (dict(family="llama3", vocab_size=V, context_length=CTX, emb_dim=16,
                           n_heads=2, n_layers=2, hidden_dim=24, n_kv_groups=1, rope_base=10000.0,
                           rope_freq=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                          original_context_length=64)), False, 21),
    "llama3_hf": (dict(family="llama3", vocab_size=V, context_length=CTX, emb_dim=16, n_heads=4,
                       n_layers=2, hidden_dim=20, n_kv_groups=2, rope_base=500000.0, tie=True,
                       rope_freq=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                      original_context_length=8192)), True, 22),
    "qwen3_course": (dict(family="qwen3", vocab_size=V, context_length=CTX, emb_dim=12, n_heads=4,
                          head_dim=6, n_layers=2, hidden_dim=20, n_kv_groups=2, qk_norm=True,
                          rope_base=1e6), False, 27),
    "qwen3_hf": (dict(family="qwen3", vocab_size=V, context_length=CTX, emb_dim=16, n_heads=2,
                      head_dim=12, n_layers=2, hidden_dim=20, n_kv_groups=1, qk_norm=True,
                      rope_base=1e6, tie=True), True, 24),
    "qwen3moe_course": (dict(family="qwen3", vocab_size=V, context_length=CTX, emb_dim=12,
                             n_heads=4, head_dim=4, n_layers=2, hidden_dim=24, n_kv_groups=2,
                             qk_norm=True, rope_base=1e6, num_experts=4, num_experts_per_tok=2,
                             moe_intermediate_size=8), False, 30),
    "qwen3moe_hf": (dict(family="qwen3", vocab_size=V, context_length=CTX, emb_dim=16, n_heads=2,
                         head_dim=8, n_layers=2, hidden_dim=32, n_kv_groups=1, qk_norm=True,
                         rope_base=1e6, num_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=12, window=4), True, 26),
}

BASE = dict(learning_rate=1e-2, weight_decay=0.1, weight_decay_1d=False, beta1=0.9, beta2=0.95,
            grad_clip=0.0, decay_lr=False, warmup_iters=0, lr_decay_iters=ITERS, min_lr=1e-3,
            gradient_accumulation_steps=1, optimizer="adamw", muon_lr=0.02, muon_momentum=0.95)

RUNS = [
    # run (file <model>/<run>_<dtype>), model, overrides
    ("adamw", "llama3_course", dict(decay_lr=True, warmup_iters=4, lr_decay_iters=15,
                                    grad_clip=1.0)),
    ("adamw", "llama3_hf", dict(learning_rate=5e-3, weight_decay_1d=True)),
    ("adamw", "qwen3_course", dict(decay_lr=True, warmup_iters=3, grad_clip=0.5,
                                   gradient_accumulation_steps=2)),
    ("adamw", "qwen3_hf", dict()),
    ("adamw", "qwen3moe_course", dict(grad_clip=1.0)),
    ("adamw", "qwen3moe_hf", dict(decay_lr=True, warmup_iters=2, lr_decay_iters=12)),
    ("muon", "llama3_course", dict(optimizer="muon", decay_lr=True, warmup_iters=4,
                                   lr_decay_iters=15, grad_clip=1.0)),
    ("muon", "llama3_hf", dict(optimizer="muon", muon_lr=0.03, muon_momentum=0.9,
                               weight_decay=0.05, gradient_accumulation_steps=2)),
    ("finetune", "llama3_hf", dict(learning_rate=3e-3, weight_decay=0.1)),
    ("finetune", "qwen3_hf", dict(learning_rate=3e-3, weight_decay=0.1, grad_clip=1.0)),
]


def make_batches(n, b, t, seed):
    g = torch.Generator().manual_seed(seed)
    stream = torch.randint(0, V, (n, b, t + 1), generator=g)
    return stream[:, :, :t].contiguous(), stream[:, :, 1:].contiguous()


def build(cfg, seed):
    """The model at init, float64: PyTorch's default draws, then the
    embedding rescaled to std 0.5 and every gain moved off 1."""
    torch.manual_seed(seed)
    model = ArchModel(cfg, torch.float64)
    with torch.no_grad():
        model.tok_emb.weight.normal_(0.0, 0.5)
        for name, p in model.named_parameters():
            if name.endswith((".scale", "norm.weight", "norm1.weight", "norm2.weight")):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model


def clone_to(cfg, init, dtype):
    model = ArchModel(cfg, dtype)
    with torch.no_grad():
        for (_, p), (_, v) in zip(model.named_parameters(), init.named_parameters()):
            p.copy_(v.to(dtype))
    return model


class RouterWatch:
    """Smallest gap between the k-th and (k+1)-th router logit seen, and the
    fewest tokens any expert received in one forward."""

    def __init__(self, model):
        self.gap, self.fewest = math.inf, math.inf
        for block in model.trf_blocks:
            ff = block.ff
            if hasattr(ff, "gate"):
                ff.gate.register_forward_hook(self.hook(ff.k))

    def hook(self, k):
        def fn(_module, _inp, out):
            if out.size(-1) > k:
                s = out.detach().sort(dim=-1, descending=True).values
                self.gap = min(self.gap, (s[..., k - 1] - s[..., k]).min().item())
                chosen = out.detach().topk(k, dim=-1).indices.reshape(-1)
                counts = torch.bincount(chosen, minlength=out.size(-1))
                self.fewest = min(self.fewest, counts.min().item())
        return fn


def muon_param(name, p):
    """Muon's share: the >= 2-D parameters inside the blocks (either layout)."""
    return p.dim() >= 2 and name.startswith(("trf_blocks.", "model.layers."))


class MuonWithAdamW:
    def __init__(self, named, o):
        self.muon = Muon([p for n, p in named if muon_param(n, p)], lr=o["muon_lr"],
                         momentum=o["muon_momentum"], weight_decay=o["weight_decay"])
        self.adamw = torch.optim.AdamW([p for n, p in named if not muon_param(n, p)],
                                       lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]),
                                       eps=1e-10, weight_decay=o["weight_decay"], foreach=False)
        self.per_lr = o["muon_lr"] / o["learning_rate"]

    def set_lr(self, lr):
        self.adamw.param_groups[0]["lr"] = lr
        self.muon.lr = lr * self.per_lr

    def step(self):
        self.muon.step()
        self.adamw.step()

    def zero_grad(self):
        self.muon.zero_grad()
        self.adamw.zero_grad(set_to_none=True)


class AdamW:
    def __init__(self, named, o):
        params = [p for _, p in named]
        if o["weight_decay_1d"]:
            groups = [{"params": params, "weight_decay": o["weight_decay"]}]
        else:
            groups = [{"params": [p for p in params if p.dim() >= 2],
                       "weight_decay": o["weight_decay"]},
                      {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        self.opt = torch.optim.AdamW(groups, lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]),
                                     eps=1e-8, foreach=False)

    def set_lr(self, lr):
        for g in self.opt.param_groups:
            g["lr"] = lr

    def step(self):
        self.opt.step()

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)


def train(model, named, o, x, y, iters):
    opt = MuonWithAdamW(named, o) if o["optimizer"] == "muon" else AdamW(named, o)
    k = o["gradient_accumulation_steps"]
    b = x.shape[1]
    losses, lrs = [], []
    for it in range(iters):
        lr = get_lr(it, o) if o["decay_lr"] else o["learning_rate"]
        opt.set_lr(lr)
        total = 0.0
        for micro in range(k):
            rows = slice(micro * b // k, (micro + 1) * b // k)
            _, loss = model(x[it, rows], y[it, rows])
            total += loss.item()
            (loss / k).backward()
        if o["grad_clip"] != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
        opt.step()
        opt.zero_grad()
        losses.append(total / k)
        lrs.append(lr)
    return losses, lrs


def flags(o, dtype, iters, b):
    """The run as nabla-gpt train flags (nanoGPT's names)."""
    a = ["--dtype=%s" % dtype, "--dropout=0.0", "--max_iters=%d" % iters, "--batch_size=%d" % b]
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


def second_order(model, hf, x, y, path):
    named = named_parameters(model, hf)
    params = [p for _, p in named]
    _, loss = model(x[0], y[0])
    grads = torch.autograd.grad(loss, params, create_graph=True)
    total = sum((g * g).sum() for g in grads)
    grads2 = torch.autograd.grad(total, params)
    tensors = [("loss", loss.detach().reshape(1))]
    tensors += [("grad." + n, g.detach()) for (n, _), g in zip(named, grads)]
    tensors += [("grad2." + n, g) for (n, _), g in zip(named, grads2)]
    write_safetensors(path, tensors, {"torch": torch.__version__})


def check_moe_loop(model):
    """The per-expert loop equals the dense form (every expert on every token,
    weighted by the top-k softmax scattered back to E columns), float64."""
    torch.manual_seed(0)
    for block in model.trf_blocks:
        ff = block.ff
        h = torch.randn(3, 5, ff.gate.in_features, dtype=torch.float64)
        s = ff.gate(h)
        top, idx = torch.topk(s, ff.k, dim=-1)
        w = torch.zeros_like(s).scatter(-1, idx, torch.softmax(top, -1))
        dense = sum(w[..., e:e + 1] * ff.fc3[e](torch.nn.functional.silu(ff.fc1[e](h)) *
                                                 ff.fc2[e](h)) for e in range(len(ff.fc1)))
        assert (ff(h) - dense).abs().max().item() < 1e-14


def write_model_dir(out, name, cfg, hf, model):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), named_parameters(model, hf),
                      {"format": "pt"})
    conf, text = ("config.json", hf_config_json(cfg)) if hf else ("cfg.json", course_cfg_json(cfg))
    with open(os.path.join(d, conf), "w") as f:
        json.dump(text, f, indent=2)
        f.write("\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/arch"
    os.makedirs(out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    x, y = make_batches(ITERS, B, T, 4321)
    write_safetensors(os.path.join(out, "batches.safetensors"), [("x", x), ("y", y)])
    fx, fy = make_batches(FT_ITERS, FT_B, FT_T, 8765)
    write_safetensors(os.path.join(out, "finetune_batches.safetensors"), [("x", fx), ("y", fy)])
    inits = {}
    for name, (cfg, hf, seed) in MODELS.items():
        inits[name] = build(cfg, seed)
        write_model_dir(out, name, cfg, hf, inits[name])
        if cfg.get("num_experts", 0) > 0:
            check_moe_loop(inits[name])
        second_order(clone_to(cfg, inits[name], torch.float64), hf, x, y,
                     os.path.join(out, name, "grad2.safetensors"))
    for run, mname, over in RUNS:
        cfg, hf, _ = MODELS[mname]
        o = dict(BASE, **over)
        finetune = run == "finetune"
        bx, by = (fx, fy) if finetune else (x, y)
        iters = FT_ITERS if finetune else ITERS
        for dname, dt in (("f64", torch.float64), ("f32", torch.float32)):
            model = clone_to(cfg, inits[mname], dt)
            watch = RouterWatch(model)
            with torch.no_grad():
                logits, _ = model(bx[0])
            named = named_parameters(model, hf)
            losses, lrs = train(model, named, o, bx, by, iters)
            assert watch.gap > 1e-4, "%s %s: router near tie %g" % (mname, run, watch.gap)
            # an expert with no token has no gradient in PyTorch (AdamW skips it
            # that step) but a zero one in nabla: keep every expert busy
            assert watch.fewest > 0, "%s %s: an expert got no token" % (mname, run)
            tensors = [("loss", torch.tensor(losses, dtype=torch.float64)),
                       ("lr", torch.tensor(lrs, dtype=torch.float64))]
            if run == "adamw":
                tensors.append(("logits", logits))
            tensors += [(n, p.detach()) for n, p in named]
            meta = {"batches": "finetune_batches.safetensors" if finetune else "batches.safetensors",
                    "args": flags(o, "float64" if dname == "f64" else "float32", iters, bx.shape[1]),
                    "torch": torch.__version__}
            write_safetensors(os.path.join(out, mname, "%s_%s.safetensors" % (run, dname)), tensors,
                              meta)
            if dname == "f64":
                final64 = [p.detach().clone() for _, p in named]
            else:
                # float32's own rounding moves the weights this far from float64:
                # if it is near the 1e-5 the test allows, some step is
                # ill-conditioned (an Adam step on a gradient near zero) and no
                # two float32 implementations would agree to 1e-5
                drift = max((p.detach().double() - q).abs().max().item()
                            for (_, p), q in zip(named, final64))
                assert drift < 2e-6, "%s %s: float32 drifts %g from float64" % (mname, run, drift)
            print("%s %s %s: loss %.6f -> %.6f%s" % (mname, run, dname, losses[0], losses[-1],
                  "" if watch.gap == math.inf else ", router gap %.2g" % watch.gap))


if __name__ == "__main__":
    main()
