"""gpt_ref.py - PyTorch reference GPTs for nabla's GPT (include/nabla/gpt.h), in
its two layouts, written for nabla from the published descriptions:

  GPTModel(cfg)   the course's GPTModel (the seed notebooks' next chapter):
                  tok_emb, pos_emb, drop_emb, trf_blocks (TransformerBlock:
                  norm1, att = the seed's MultiHeadAttention from torchref.py,
                  drop_shortcut, norm2, ff = FeedForward with tanh GELU),
                  final_norm, out_head (no bias, untied). LayerNorm has
                  `scale` and `shift`, eps 1e-5, biased variance.
  NanoGPT(cfg)    nanoGPT's GPT: transformer.{wte, wpe, drop, h, ln_f} and
                  lm_head tied to wte; CausalSelfAttention with a fused c_attn
                  split into q, k, v, c_proj, attention and residual dropout;
                  MLP c_fc -> exact GELU -> c_proj; LayerNorm with an optional
                  bias; nanoGPT's init (N(0, 0.02), zero biases, c_proj
                  weights N(0, 0.02 / sqrt(2 n_layer))).

cfg is a dict: vocab_size, block_size, n_layer, n_head, n_embd, dropout,
qkv_bias (GPTModel), bias (NanoGPT). Both forward(idx, targets=None) return
(logits, loss) with loss = F.cross_entropy(logits.view(-1, V), targets.view(-1)).

load_state_dict_any(path, n_head) builds the right model from a safetensors
file written by nabla (or by gen_gpt_fixtures.py), inferring the layout and the
sizes from the names and shapes, as nb_gpt_config_from_state_dict does.
"""
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

from torchref import MultiHeadAttention


# ---- the course's GPTModel -----------------------------------------------------------

class LayerNormSS(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * ((x - mean) / torch.sqrt(var + self.eps)) + self.shift


class GELUTanh(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(c, 4 * c), GELUTanh(), nn.Linear(4 * c, c))

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.att = MultiHeadAttention(c, c, cfg["block_size"], cfg["dropout"], cfg["n_head"],
                                      cfg.get("qkv_bias", False))
        self.ff = FeedForward(c)
        self.norm1 = LayerNormSS(c)
        self.norm2 = LayerNormSS(c)
        self.drop_shortcut = nn.Dropout(cfg["dropout"])

    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.pos_emb = nn.Embedding(cfg["block_size"], cfg["n_embd"])
        self.drop_emb = nn.Dropout(cfg["dropout"])
        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg) for _ in range(cfg["n_layer"])])
        self.final_norm = LayerNormSS(cfg["n_embd"])
        self.out_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device))
        x = self.final_norm(self.trf_blocks(self.drop_emb(x)))
        logits = self.out_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


# ---- nanoGPT's layout ----------------------------------------------------------------

class LayerNormB(nn.Module):
    def __init__(self, c, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.n_head = cfg["n_head"]
        self.c_attn = nn.Linear(c, 3 * c, bias=cfg["bias"])
        self.c_proj = nn.Linear(c, c, bias=cfg["bias"])
        self.attn_dropout = nn.Dropout(cfg["dropout"])
        self.resid_dropout = nn.Dropout(cfg["dropout"])
        t = cfg["block_size"]
        self.register_buffer("mask", torch.tril(torch.ones(t, t)).view(1, 1, t, t),
                             persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        hd = c // self.n_head
        q = q.view(b, t, self.n_head, hd).transpose(1, 2)
        k = k.view(b, t, self.n_head, hd).transpose(1, 2)
        v = v.view(b, t, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.c_fc = nn.Linear(c, 4 * c, bias=cfg["bias"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c, c, bias=cfg["bias"])
        self.dropout = nn.Dropout(cfg["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNormB(cfg["n_embd"], cfg["bias"])
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNormB(cfg["n_embd"], cfg["bias"])
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg["vocab_size"], cfg["n_embd"]),
            wpe=nn.Embedding(cfg["block_size"], cfg["n_embd"]),
            drop=nn.Dropout(cfg["dropout"]),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])]),
            ln_f=LayerNormB(cfg["n_embd"], cfg["bias"])))
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg["n_layer"]))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def make_model(arch, cfg):
    return GPTModel(cfg) if arch == "gptmodel" else NanoGPT(cfg)


# ---- loading nabla's files -------------------------------------------------------------

ST_TORCH = {"F32": (torch.float32, "f", 4), "F64": (torch.float64, "d", 8),
            "I64": (torch.int64, "q", 8)}


def read_safetensors(path):
    """{name: tensor} and the metadata dict of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        dt, code, size = ST_TORCH[h["dtype"]]
        a, b = h["data_offsets"]
        vals = struct.unpack("<%d%s" % ((b - a) // size, code), raw[8 + n + a:8 + n + b])
        out[name] = torch.tensor(vals, dtype=dt).reshape(h["shape"])
    return out, meta


def config_from_state_dict(sd, n_head):
    nano = "transformer.wte.weight" in sd
    wte = sd["transformer.wte.weight" if nano else "tok_emb.weight"]
    wpe = sd["transformer.wpe.weight" if nano else "pos_emb.weight"]
    blk = "transformer.h.%d.ln_1.weight" if nano else "trf_blocks.%d.norm1.scale"
    n_layer = 0
    while blk % n_layer in sd:
        n_layer += 1
    cfg = dict(vocab_size=wte.shape[0], n_embd=wte.shape[1], block_size=wpe.shape[0],
               n_layer=n_layer, n_head=n_head, dropout=0.0,
               bias="transformer.ln_f.bias" in sd,
               qkv_bias="trf_blocks.0.att.W_query.bias" in sd)
    return ("nanogpt" if nano else "gptmodel"), cfg


def load_state_dict_any(path, n_head, dtype=torch.float64):
    sd, meta = read_safetensors(path)
    arch, cfg = config_from_state_dict(sd, n_head)
    model = make_model(arch, cfg).to(dtype)
    own = model.state_dict()
    missing = [k for k in own if k not in sd and not k.endswith(".mask")]
    if missing:
        raise SystemExit("%s: missing %s" % (path, ", ".join(missing)))
    with torch.no_grad():
        for k, v in own.items():
            if k in sd:
                v.copy_(sd[k].to(dtype))
    return model, arch, cfg, meta
