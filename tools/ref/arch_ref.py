"""arch_ref.py - PyTorch reference models of the Llama 3 and Qwen3 families
(Qwen3-MoE is Qwen3 with experts), written from their published definitions
in the structure of the course's llama3.py and qwen3.py, for nabla's parity
fixtures (tools/ref/gen_arch_fixtures.py) and benchmarks
(tools/bench/bench_torch_gpt.py). For ids (B, T), C = emb_dim, H heads of
head_dim hd, Hkv key/value heads:

    x = tok_emb[ids]                                              (B, T, C)
    n_layers times:
        h = norm1(x)                                   RMSNorm over C
        q = W_query h (B, H, T, hd); k = W_key h, v = W_value h (B, Hkv, T, hd)
        q, k = q_norm(q), k_norm(k)                    RMSNorm over hd (Qwen3)
        q, k = rope(q), rope(k)                        split halves, positions 0..T-1
        k, v repeated to H heads (each of H / Hkv query heads reads one)
        x = x + out_proj(softmax(q k^T / sqrt(hd) + causal mask) v)
                                                       (window > 0: query i also
                                                        masks keys <= i - window)
        h = norm2(x)
        x = x + fc3(silu(fc1 h) * fc2 h)               gated MLP (or the MoE below)
    logits = out_head(final_norm(x))                   out_head = tok_emb when tied

MoE (num_experts > 0): router logits s = gate(h) (B, T, E); the top
num_experts_per_tok of them (ties to the lower index, torch.topk's order);
p = softmax over those k; out = sum_k p_k expert_k(h). It runs as the course
does: a loop over the experts, each on the tokens routed to it only
(index_select in, index_add_ out), not all experts on every token.

Choices that make the float64 runs exact to 1e-10 against nabla:
  - RMSNorm (torch 1.13 has no nn.RMSNorm) is torchref.rms_norm, in the
    input's dtype; the course's Qwen3 RMSNorm casts to float32 first, a
    bfloat16 convenience that would cap float64 parity at 1e-7.
  - RoPE's cos/sin tables are computed in float64 and rounded once to the
    model's dtype, as nb_rope_tables does. Hugging Face and the course
    compute the angles in float32 (inv_freq float32, position * inv_freq in
    float32), off by about position * 1e-7 radians; at the fixtures' 6
    positions that is below float32's own rounding of the tables.

Parameter names. The model's own are the course's (its state_dict):
  tok_emb.weight (V, C); trf_blocks.N.att.W_query.weight (H*hd, C),
  .att.W_key.weight / .att.W_value.weight (Hkv*hd, C), .att.out_proj.weight
  (C, H*hd), Qwen3 .att.q_norm.scale / .att.k_norm.scale (hd);
  .ff.fc1.weight / .ff.fc2.weight (hidden, C), .ff.fc3.weight (C, hidden);
  MoE .ff.gate.weight (E, C), .ff.fc1.E.weight, .ff.fc2.E.weight,
  .ff.fc3.E.weight; norms Llama 3 .norm1.weight / .norm2.weight /
  final_norm.weight (nn.RMSNorm's name), Qwen3 .norm1.scale / .norm2.scale /
  final_norm.scale (the course's own RMSNorm); out_head.weight (V, C).
hf_name() maps them to Hugging Face's (LlamaForCausalLM, Qwen3ForCausalLM,
Qwen3MoeForCausalLM); the tied head is tok_emb.weight alone (HF leaves
lm_head.weight out when tie_word_embeddings).

cfg (the course's cfg dict keys): vocab_size, context_length, emb_dim,
n_heads, n_layers, hidden_dim, n_kv_groups (the number of key/value heads),
head_dim (None: emb_dim // n_heads), qk_norm, rope_base, rope_freq (None or
{factor, low_freq_factor, high_freq_factor, original_context_length}),
num_experts, num_experts_per_tok, moe_intermediate_size; and three of this
file's: family ("llama3" or "qwen3": names and RMSNorm eps 1e-5 / 1e-6),
tie (head tied to tok_emb) and window (sliding-window attention in every
layer, Hugging Face's use_sliding_window with max_window_layers 0).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from torchref import rms_norm


# ---- RoPE ------------------------------------------------------------------------------

def rope_frequencies(head_dim, theta, freq=None):
    """f_i = theta^(-2i / head_dim) for i < head_dim / 2, float64, with Llama 3's
    scaling when freq is a rope_freq dict: wavelength w_i = 2 pi / f_i,
    L = original_context_length; w_i > L / low_freq_factor: f_i / factor;
    w_i < L / high_freq_factor: f_i; between: (1 - s) f_i / factor + s f_i,
    s = (L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor)."""
    f = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if freq is None:
        return f
    factor, low, high = freq["factor"], freq["low_freq_factor"], freq["high_freq_factor"]
    length = freq["original_context_length"]
    wavelength = 2 * math.pi / f
    s = (length / wavelength - low) / (high - low)
    between = (1 - s) * f / factor + s * f
    kept = torch.where(wavelength < length / high, f, between)
    return torch.where(wavelength > length / low, f / factor, kept)


def rope_tables(head_dim, n_pos, theta, freq, dtype):
    """cos, sin (n_pos, head_dim): the angle p f_i in columns i and i + hd/2,
    computed in float64, rounded once to dtype."""
    angle = torch.arange(n_pos, dtype=torch.float64)[:, None] * rope_frequencies(
        head_dim, theta, freq)[None, :]
    angle = torch.cat([angle, angle], -1)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x (B, H, T, hd): x cos + rotate_half(x) sin, rotate_half(x) = cat(-x2, x1)."""
    T, half = x.shape[2], x.shape[3] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat([-x2, x1], -1)
    return x * cos[:T] + rotated * sin[:T]


# ---- the parts ---------------------------------------------------------------------------

class Norm(nn.Module):
    """RMSNorm with a gain named `weight` (Llama 3, nn.RMSNorm) or `scale` (Qwen3)."""

    def __init__(self, dim, eps, gain_name):
        super().__init__()
        self.eps, self.gain_name = eps, gain_name
        setattr(self, gain_name, nn.Parameter(torch.ones(dim)))

    def forward(self, x):
        return rms_norm(x, x.shape[-1], getattr(self, self.gain_name), self.eps)


class GroupedQueryAttention(nn.Module):
    def __init__(self, cfg, head_dim, eps, gain_name):
        super().__init__()
        C, H, Hkv = cfg["emb_dim"], cfg["n_heads"], cfg["n_kv_groups"]
        assert H % Hkv == 0
        self.H, self.Hkv, self.hd = H, Hkv, head_dim
        self.window = cfg.get("window", 0)
        self.W_query = nn.Linear(C, H * head_dim, bias=False)
        self.W_key = nn.Linear(C, Hkv * head_dim, bias=False)
        self.W_value = nn.Linear(C, Hkv * head_dim, bias=False)
        self.out_proj = nn.Linear(H * head_dim, C, bias=False)
        if cfg.get("qk_norm"):
            self.q_norm = Norm(head_dim, eps, gain_name)
            self.k_norm = Norm(head_dim, eps, gain_name)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.W_query(x).view(B, T, self.H, self.hd).transpose(1, 2)
        k = self.W_key(x).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        v = self.W_value(x).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = self.H // self.Hkv
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(2, 3)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        if self.window:  # query i sees keys i - window + 1 .. i
            mask = mask | torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-self.window)
        scores = scores.masked_fill(mask, -torch.inf)
        w = torch.softmax(scores / self.hd ** 0.5, dim=-1)
        ctx = (w @ v).transpose(1, 2).reshape(B, T, self.H * self.hd)
        return self.out_proj(ctx)


class FeedForward(nn.Module):
    """fc3(silu(fc1 x) * fc2 x)."""

    def __init__(self, C, hidden):
        super().__init__()
        self.fc1 = nn.Linear(C, hidden, bias=False)
        self.fc2 = nn.Linear(C, hidden, bias=False)
        self.fc3 = nn.Linear(hidden, C, bias=False)

    def forward(self, x):
        return self.fc3(F.silu(self.fc1(x)) * self.fc2(x))


class MoEFeedForward(nn.Module):
    """A router and num_experts gated MLPs; each token runs through its top k."""

    def __init__(self, cfg):
        super().__init__()
        C, E, hidden = cfg["emb_dim"], cfg["num_experts"], cfg["moe_intermediate_size"]
        self.k = cfg["num_experts_per_tok"]
        assert 1 <= self.k <= E
        self.gate = nn.Linear(C, E, bias=False)
        self.fc1 = nn.ModuleList([nn.Linear(C, hidden, bias=False) for _ in range(E)])
        self.fc2 = nn.ModuleList([nn.Linear(C, hidden, bias=False) for _ in range(E)])
        self.fc3 = nn.ModuleList([nn.Linear(hidden, C, bias=False) for _ in range(E)])

    def forward(self, x):
        B, T, C = x.shape
        h = x.reshape(B * T, C)
        top, idx = torch.topk(self.gate(h), self.k, dim=-1)        # (N, k)
        p = torch.softmax(top, dim=-1)
        out = torch.zeros_like(h)
        for e in range(len(self.fc1)):
            token, slot = (idx == e).nonzero(as_tuple=True)          # tokens routed to e
            if token.numel() == 0:
                continue
            xe = h.index_select(0, token)
            ye = self.fc3[e](F.silu(self.fc1[e](xe)) * self.fc2[e](xe))
            out = out.index_add(0, token, ye * p[token, slot].unsqueeze(-1))
        return out.reshape(B, T, C)


class Block(nn.Module):
    def __init__(self, cfg, head_dim, eps, gain_name):
        super().__init__()
        self.att = GroupedQueryAttention(cfg, head_dim, eps, gain_name)
        if cfg.get("num_experts", 0) > 0:
            self.ff = MoEFeedForward(cfg)
        else:
            self.ff = FeedForward(cfg["emb_dim"], cfg["hidden_dim"])
        self.norm1 = Norm(cfg["emb_dim"], eps, gain_name)
        self.norm2 = Norm(cfg["emb_dim"], eps, gain_name)

    def forward(self, x, cos, sin):
        x = x + self.att(self.norm1(x), cos, sin)
        return x + self.ff(self.norm2(x))


class ArchModel(nn.Module):
    """Llama 3 (family "llama3") or Qwen3 / Qwen3-MoE ("qwen3"), see the top."""

    def __init__(self, cfg, dtype=torch.float64):
        super().__init__()
        self.cfg = dict(cfg)
        llama = cfg["family"] == "llama3"
        eps, gain_name = (1e-5, "weight") if llama else (1e-6, "scale")
        C = cfg["emb_dim"]
        hd = cfg.get("head_dim") or C // cfg["n_heads"]
        assert hd % 2 == 0
        self.tok_emb = nn.Embedding(cfg["vocab_size"], C)
        self.trf_blocks = nn.ModuleList([Block(cfg, hd, eps, gain_name)
                                         for _ in range(cfg["n_layers"])])
        self.final_norm = Norm(C, eps, gain_name)
        if cfg.get("tie"):
            self.out_head = None
        else:
            self.out_head = nn.Linear(C, cfg["vocab_size"], bias=False)
        self.to(dtype)
        cos, sin = rope_tables(hd, cfg["context_length"], cfg["rope_base"], cfg.get("rope_freq"),
                               dtype)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids, targets=None):
        x = self.tok_emb(ids)
        for block in self.trf_blocks:
            x = block(x, self.cos, self.sin)
        x = self.final_norm(x)
        head = self.tok_emb.weight if self.out_head is None else self.out_head.weight
        logits = x @ head.T
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


# ---- names and configs --------------------------------------------------------------------

_HF_PARTS = [  # course suffix -> Hugging Face suffix, inside a block
    ("att.W_query.weight", "self_attn.q_proj.weight"),
    ("att.W_key.weight", "self_attn.k_proj.weight"),
    ("att.W_value.weight", "self_attn.v_proj.weight"),
    ("att.out_proj.weight", "self_attn.o_proj.weight"),
    ("att.q_norm.scale", "self_attn.q_norm.weight"),
    ("att.k_norm.scale", "self_attn.k_norm.weight"),
    ("norm1.weight", "input_layernorm.weight"), ("norm1.scale", "input_layernorm.weight"),
    ("norm2.weight", "post_attention_layernorm.weight"),
    ("norm2.scale", "post_attention_layernorm.weight"),
    ("ff.fc1.weight", "mlp.gate_proj.weight"), ("ff.fc2.weight", "mlp.up_proj.weight"),
    ("ff.fc3.weight", "mlp.down_proj.weight"), ("ff.gate.weight", "mlp.gate.weight"),
]
_HF_EXPERT = {"fc1": "gate_proj", "fc2": "up_proj", "fc3": "down_proj"}


def hf_name(name):
    """A course state_dict name -> Hugging Face's."""
    if name == "tok_emb.weight":
        return "model.embed_tokens.weight"
    if name in ("final_norm.weight", "final_norm.scale"):
        return "model.norm.weight"
    if name == "out_head.weight":
        return "lm_head.weight"
    parts = name.split(".")
    assert parts[0] == "trf_blocks", name
    layer, rest = parts[1], ".".join(parts[2:])
    prefix = "model.layers.%s." % layer
    for course, hf in _HF_PARTS:
        if rest == course:
            return prefix + hf
    # ff.fc1.E.weight -> mlp.experts.E.gate_proj.weight
    if parts[2] == "ff" and parts[3] in _HF_EXPERT and len(parts) == 6:
        return prefix + "mlp.experts.%s.%s.weight" % (parts[4], _HF_EXPERT[parts[3]])
    raise KeyError(name)


def named_parameters(model, hf):
    """(name, parameter) in creation order, the tied head once, in a layout."""
    return [(hf_name(n) if hf else n, p) for n, p in model.named_parameters()]


def course_cfg_json(cfg):
    """The course's cfg dict for cfg.json (dtype as a string)."""
    keys = ["vocab_size", "context_length", "emb_dim", "n_heads", "n_layers", "hidden_dim",
            "n_kv_groups", "rope_base"]
    out = {k: cfg[k] for k in keys}
    if cfg["family"] == "llama3":
        out["rope_freq"] = cfg.get("rope_freq")
    else:
        out["head_dim"] = cfg.get("head_dim") or cfg["emb_dim"] // cfg["n_heads"]
        out["qk_norm"] = bool(cfg.get("qk_norm"))
        if cfg.get("num_experts", 0) > 0:
            for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
                out[k] = cfg[k]
    out["dtype"] = "float64"
    return out


def hf_config_json(cfg):
    """Hugging Face's config.json for the model (LlamaForCausalLM, Qwen3ForCausalLM,
    Qwen3MoeForCausalLM)."""
    llama = cfg["family"] == "llama3"
    moe = cfg.get("num_experts", 0) > 0
    out = {
        "architectures": ["LlamaForCausalLM" if llama else
                          "Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"],
        "model_type": "llama" if llama else "qwen3_moe" if moe else "qwen3",
        "vocab_size": cfg["vocab_size"],
        "hidden_size": cfg["emb_dim"],
        "num_hidden_layers": cfg["n_layers"],
        "num_attention_heads": cfg["n_heads"],
        "num_key_value_heads": cfg["n_kv_groups"],
        "head_dim": cfg.get("head_dim") or cfg["emb_dim"] // cfg["n_heads"],
        "intermediate_size": cfg["hidden_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": cfg["context_length"],
        "rms_norm_eps": 1e-5 if llama else 1e-6,
        "rope_theta": float(cfg["rope_base"]),
        "tie_word_embeddings": bool(cfg.get("tie")),
        "attention_bias": False,
        "torch_dtype": "float64",
    }
    freq = cfg.get("rope_freq")
    out["rope_scaling"] = None if freq is None else {
        "rope_type": "llama3", "factor": freq["factor"],
        "low_freq_factor": freq["low_freq_factor"], "high_freq_factor": freq["high_freq_factor"],
        "original_max_position_embeddings": freq["original_context_length"]}
    if llama:
        out["mlp_bias"] = False
    else:
        out["use_sliding_window"] = bool(cfg.get("window"))
        if cfg.get("window"):
            out.update(sliding_window=cfg["window"], max_window_layers=0)
    if moe:
        out.update(num_experts=cfg["num_experts"], num_experts_per_tok=cfg["num_experts_per_tok"],
                   moe_intermediate_size=cfg["moe_intermediate_size"], norm_topk_prob=True,
                   decoder_sparse_step=1, mlp_only_layers=[])
    return out
