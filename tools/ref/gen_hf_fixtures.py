#!/usr/bin/python3
"""gen_hf_fixtures.py - small GPT-2 checkpoints in Hugging Face's layout, and
what nanoGPT's model.py (tools/ref/gpt_ref.py) computes from them, for
nabla's HF loader (src/nn/gpt_hf.c, tests/check_gpt_hf.c).

    /usr/bin/python3 tools/ref/gen_hf_fixtures.py [OUTDIR]    (default tests/fixtures/hf)

transformers is not needed: the files are written by hand under the names
and layout Hugging Face's GPT-2 uses (transformers' modeling_gpt2.py, and
nanoGPT's from_pretrained for which weights are transposed):

  [transformer.]wte.weight (V, C), [transformer.]wpe.weight (n_positions, C),
  [transformer.]h.{i}.ln_1.weight / .bias (C),
  [transformer.]h.{i}.attn.c_attn.weight (C, 3C) / .bias (3C)   Conv1D: (in, out)
  [transformer.]h.{i}.attn.c_proj.weight (C, C) / .bias (C)     Conv1D
  [transformer.]h.{i}.ln_2.weight / .bias,
  [transformer.]h.{i}.mlp.c_fc.weight (C, 4C) / .bias (4C)      Conv1D
  [transformer.]h.{i}.mlp.c_proj.weight (4C, C) / .bias (C)     Conv1D
  [transformer.]ln_f.weight / .bias,
  lm_head.weight (V, C)   (GPT2LMHeadModel only; the same values as wte)
  [transformer.]h.{i}.attn.bias (1, 1, n_positions, n_positions), the causal
  mask buffer, and [transformer.]h.{i}.attn.masked_bias () = -1e4 (older
  transformers saved both; loaders ignore them).

The weights are float32 (as on the Hub) and random (not nanoGPT's init: the
logits should be O(1), so that a float32 tolerance means something).

Checkpoints (two widths and head counts):
  lmhead/model.safetensors   GPT2LMHeadModel names ("transformer." prefix,
                             lm_head.weight present), n_embd 32, 4 heads,
                             2 layers, vocab 100, n_positions 16, attn.bias
                             F32 and masked_bias; lmhead/config.json beside it.
  base/model.safetensors     GPT2Model names (no prefix, no lm_head), n_embd
                             48, 6 heads, 3 layers, vocab 90, n_positions 16,
                             attn.bias BOOL; no config.json (48 is not a
                             standard width: n_head must be given).

ref.safetensors, for each checkpoint NAME (lmhead, base):
  NAME.ids (2, 16) I64, NAME.logits (2, 16, V) F64: the logits of nanoGPT's
      model.py in float64 on the checkpoint's weights, with its MLP GELU
      switched to the tanh approximation (GPT-2's gelu_new);
  NAME.x, NAME.y (20, 4, 8) I64: the fine-tune's batches (y is x shifted by
      one in one random stream);
  NAME.loss (20) F64: the loss of each of 20 AdamW steps in float64 (before
      its update), dropout 0, torch.optim.AdamW(lr 3e-3, betas (0.9, 0.95),
      eps 1e-8, weight_decay 0.1, foreach=False) with nanoGPT's groups
      (weight decay on the parameters with >= 2 dims, 0 on the others; the
      tied wte/lm_head counted once).
  Metadata: the fine-tune's settings and the torch version.
"""
import json
import os
import sys

import torch
import torch.nn as nn

from gpt_ref import NanoGPT
from torchref import write_safetensors

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
ITERS, B, T = 20, 4, 8
LR, BETAS, WD = 3e-3, (0.9, 0.95), 0.1

CKPTS = [
    # name, cfg, seed, prefix, lm_head, buffer dtype, config.json
    ("lmhead", dict(vocab_size=100, block_size=16, n_layer=2, n_head=4, n_embd=32), 21, True,
     True, torch.float32, True),
    ("base", dict(vocab_size=90, block_size=16, n_layer=3, n_head=6, n_embd=48), 22, False,
     False, torch.bool, False),
]


def reference(cfg):
    """nanoGPT's GPT with GPT-2's tanh GELU."""
    model = NanoGPT(dict(cfg, dropout=0.0, bias=True))
    for block in model.transformer.h:
        block.mlp.gelu = nn.GELU(approximate="tanh")
    return model


def randomize(model, g):
    """O(1) logits: weights N(0, 0.15), biases N(0, 0.05), LayerNorm weights
    1 + N(0, 0.1), embeddings N(0, 0.5); float32."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name or "ln_f" in name:
                if name.endswith("weight"):
                    p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "wte" in name or "wpe" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def hf_state_dict(model, cfg, prefix, lm_head, buf_dtype):
    """model's float32 weights under Hugging Face's names and layout."""
    sd = model.state_dict()
    t = cfg["block_size"]
    out = []
    pre = "transformer." if prefix else ""
    for k, v in sd.items():
        if k.endswith(".mask") or k == "lm_head.weight":
            continue
        name = pre + k[len("transformer."):]
        if any(k.endswith(c) for c in CONV1D):
            v = v.t().contiguous()  # nn.Linear (out, in) -> Conv1D (in, out)
        out.append((name, v.float()))
        if k.endswith("attn.c_proj.bias"):  # the buffers, after the block's attention
            layer = k.split(".")[2]
            mask = torch.tril(torch.ones(t, t, dtype=torch.float32)).view(1, 1, t, t)
            out.append(("%sh.%s.attn.bias" % (pre, layer), mask.to(buf_dtype)))
            if buf_dtype == torch.float32:
                out.append(("%sh.%s.attn.masked_bias" % (pre, layer), torch.tensor(-1e4)))
    if lm_head:
        out.append(("lm_head.weight", sd["lm_head.weight"].float()))
    return out


def config_json(cfg):
    """The fields of Hugging Face's GPT2Config that matter here."""
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
            "n_ctx": cfg["block_size"], "n_positions": cfg["block_size"],
            "n_embd": cfg["n_embd"], "n_head": cfg["n_head"], "n_layer": cfg["n_layer"],
            "vocab_size": cfg["vocab_size"], "resid_pdrop": 0.1, "embd_pdrop": 0.1,
            "attn_pdrop": 0.1}


def fine_tune(model, x, y):
    params = list(model.parameters())  # the tied weight once
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WD},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=1e-8, foreach=False)
    losses = []
    for it in range(ITERS):
        _, loss = model(x[it], y[it])
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/hf"
    torch.use_deterministic_algorithms(True)
    ref = []
    for name, cfg, seed, prefix, lm_head, buf_dtype, with_config in CKPTS:
        os.makedirs(os.path.join(out, name), exist_ok=True)
        torch.manual_seed(seed)
        g = torch.Generator().manual_seed(seed)
        model = reference(cfg)
        randomize(model, g)
        write_safetensors(os.path.join(out, name, "model.safetensors"),
                          hf_state_dict(model, cfg, prefix, lm_head, buf_dtype),
                          {"format": "pt"})
        cpath = os.path.join(out, name, "config.json")
        if with_config:
            with open(cpath, "w") as f:
                json.dump(config_json(cfg), f, indent=2)
                f.write("\n")
        elif os.path.exists(cpath):
            os.remove(cpath)
        model = model.double()
        V, S = cfg["vocab_size"], cfg["block_size"]
        ids = torch.randint(0, V, (2, S), generator=g)
        with torch.no_grad():
            logits, _ = model(ids)
        stream = torch.randint(0, V, (ITERS, B, T + 1), generator=g)
        x, y = stream[:, :, :T].contiguous(), stream[:, :, 1:].contiguous()
        losses = fine_tune(model, x, y)
        ref += [(name + ".ids", ids), (name + ".logits", logits), (name + ".x", x),
                (name + ".y", y), (name + ".loss", torch.tensor(losses, dtype=torch.float64))]
        print("%s: logits in [%.3f, %.3f], loss %.6f -> %.6f" % (
            name, logits.min().item(), logits.max().item(), losses[0], losses[-1]))
    meta = {"lr": repr(LR), "betas": "%r,%r" % BETAS, "weight_decay": repr(WD), "eps": "1e-08",
            "groups": "nanogpt", "iters": ITERS, "torch": torch.__version__}
    write_safetensors(os.path.join(out, "ref.safetensors"), ref, meta)


if __name__ == "__main__":
    main()
