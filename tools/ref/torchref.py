"""torchref.py - the PyTorch side shared by nabla's reference and benchmark tools.

It holds the seed notebook's attention classes and a safetensors writer, so
that tools/ref/gen_attention_refs.py, gen_fixtures.py, gen_train_fixtures.py,
bench_torch_demo.py and interop_check.py use one copy of each:

  SelfAttention_v1, SelfAttention_v2, CausalAttention,
  MultiHeadAttentionWrapper, MultiHeadAttention
      Mirror the classes of seed notebook 004 (shared/seeds/004) exactly:
      same constructor arguments, parameter and buffer names and creation
      order (so torch.manual_seed gives the same weights and state_dict keys),
      and the same operations in the same order (in-place masked_fill_,
      softmax of score / sqrt(keys.shape[-1]), dropout on the weights).
      Two additions, which leave the seed's path unchanged:
        - CausalAttention.forward and MultiHeadAttention.forward take an
          optional key_padding_mask (B, T) bool, True = padding, masked with
          -inf after the causal mask (as nn.MultiheadAttention does); the
          reference for nabla's masked forwards. None (the default) is the
          seed's forward.
        - both keep their softmax weights, before dropout, in
          self.last_weights, which the fixtures compare.

  rms_norm(x, normalized_shape, weight=None, eps=None), RMSNorm
      PyTorch 2.4's F.rms_norm and nn.RMSNorm, which torch 1.13 lacks, from
      their documented definition: x * rsqrt(mean(x^2) + eps) * weight over
      the trailing normalized_shape dims, eps None meaning the dtype's
      machine epsilon; the same operations in the same order as 2.4's CPU
      composite (mean of squares, add eps, rsqrt, multiply by x, then by
      weight), so the float32 roundings match.

  write_safetensors(path, tensors, metadata=None)
      Writes a safetensors file with json and struct only (the safetensors
      package is not needed).

The scripts are run as `/usr/bin/python3 tools/<script>.py`: Debian's
interpreter, which has python3-torch (torch 1.13); Python puts tools/ on
sys.path, so `from torchref import ...` needs nothing else.
"""
import json
import struct

import torch
import torch.nn as nn


# ---- the seed notebook's classes (shared/seeds/004) ----------------------------------

class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        values = x @ self.W_value
        queries = x @ self.W_query
        atten_score = queries @ keys.T
        atten_weights = torch.softmax(atten_score / keys.shape[-1] ** 0.5, dim=-1)
        context_vec = atten_weights @ values
        return context_vec


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        values = self.W_value(x)
        queries = self.W_query(x)
        atten_score = queries @ keys.T
        atten_weights = torch.softmax(atten_score / keys.shape[-1] ** 0.5, dim=-1)
        context_vec = atten_weights @ values
        return context_vec


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout_rate, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = torch.nn.Dropout(dropout_rate)
        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length),
                                                diagonal=1))

    def forward(self, x, key_padding_mask=None):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        values = self.W_value(x)
        queries = self.W_query(x)
        atten_score = queries @ keys.transpose(1, 2)
        atten_score = atten_score.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens],
                                               -torch.inf)
        if key_padding_mask is not None:  # not in the seed (see the module docstring)
            atten_score.masked_fill_(key_padding_mask.view(b, 1, num_tokens), -torch.inf)
        atten_weights = torch.softmax(atten_score / keys.shape[-1] ** 0.5, dim=-1)
        self.last_weights = atten_weights  # not in the seed
        atten_weights = self.dropout(atten_weights)
        context_vec = atten_weights @ values
        return context_vec


class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
             for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert (d_out % num_heads == 0), \
            "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x, key_padding_mask=None):
        b, num_token, d_in = x.shape
        keys = self.W_key(x)  # (b, num_token, d_out)
        values = self.W_value(x)
        queries = self.W_query(x)
        keys = keys.view(b, num_token, self.num_heads, self.head_dim)
        values = values.view(b, num_token, self.num_heads, self.head_dim)
        queries = queries.view(b, num_token, self.num_heads, self.head_dim)
        keys = keys.transpose(1, 2)  # (b, num_heads, num_token, head_dim)
        values = values.transpose(1, 2)
        queries = queries.transpose(1, 2)
        atten_score = queries @ keys.transpose(2, 3)  # (b, num_heads, num_token, num_token)
        mask_bool = self.mask.bool()[:num_token, :num_token]
        atten_score.masked_fill_(mask_bool, -torch.inf)
        if key_padding_mask is not None:  # not in the seed (see the module docstring)
            atten_score.masked_fill_(key_padding_mask.view(b, 1, 1, num_token), -torch.inf)
        atten_weights = torch.softmax(atten_score / keys.shape[-1] ** 0.5, dim=-1)
        self.last_weights = atten_weights  # not in the seed
        atten_weights = self.dropout(atten_weights)
        context_vec = atten_weights @ values  # (b, num_heads, num_token, head_dim)
        context_vec = context_vec.transpose(1, 2)  # (b, num_token, num_heads, head_dim)
        context_vec = context_vec.contiguous().view(b, num_token, self.d_out)
        context_vec = self.out_proj(context_vec)
        return context_vec


# ---- RMSNorm (PyTorch 2.4), for torch 1.13 ---------------------------------------------

def rms_norm(x, normalized_shape, weight=None, eps=None):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    dims = tuple(range(-len(normalized_shape), 0))
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    inv_rms = torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    y = x * inv_rms
    return y * weight if weight is not None else y


class RMSNorm(nn.Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)


# ---- safetensors with the standard library -------------------------------------------

ST_DTYPES = {torch.float32: ("F32", "f"), torch.float64: ("F64", "d"),
             torch.int64: ("I64", "q"), torch.bool: ("BOOL", "?")}


def write_safetensors(path, tensors, metadata=None):
    """Writes a safetensors file: an 8-byte little-endian header length, the
    JSON header (compact, "__metadata__" first, padded with spaces so the data
    starts 8-byte aligned), then each tensor's bytes, little-endian, in order.

    tensors: {name: tensor} or a list of (name, tensor) pairs, in file order;
    float32, float64, int64 or bool. metadata: {str: value}, each value written
    as str(value); no "__metadata__" entry when it is None or empty."""
    items = tensors.items() if isinstance(tensors, dict) else tensors
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, t in items:
        t = t.detach().cpu().contiguous()
        dtype, code = ST_DTYPES[t.dtype]
        values = t.reshape(-1).tolist()
        blob = struct.pack("<%d%s" % (len(values), code), *values)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
