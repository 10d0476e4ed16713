#!/usr/bin/python3
"""gen_attention_refs.py - PyTorch reference numbers for nabla's attention modules.

Builds the seed notebook's classes (shared/seeds/004) exactly as written,
seeded with torch.manual_seed(123), and prints a C header with their
parameters (named_parameters order and names) and outputs at full float32
precision. tests/check_attention.c loads the weights into nabla's modules and
compares outputs.

    /usr/bin/python3 tools/gen_attention_refs.py > tests/attention_refs.h

Examples include it too (examples/seed_*.c load these weights to print the
seeds' numbers), as do the seed 003 gradients at the end.

The only addition to the seed classes is MultiHeadAttention's optional
key_padding_mask (True = padding, masked like nn.MultiheadAttention), used for
the reference of nabla's nb_nn_mha_forward_masked; the seed path (mask None)
is unchanged.
"""
import torch
import torch.nn as nn

class SelfAttention_v1(nn.Module):
    def __init__(self, d_in , d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in , d_out))
        self.W_key = nn.Parameter(torch.rand(d_in , d_out))
        self.W_value = nn.Parameter(torch.rand(d_in , d_out))
    def forward(self,x):
        keys = x @ self.W_key
        values = x @ self.W_value
        queries = x @ self.W_query
        atten_score = queries @ keys.T
        atten_weights = torch.softmax(atten_score/keys.shape[-1] ** 0.5 , dim = -1)
        return atten_weights @ values

class SelfAttention_v2(nn.Module):
    def __init__(self, d_in , d_out , qkv_bias = False):
        super().__init__()
        self.W_query = nn.Linear(d_in , d_out , bias = qkv_bias)
        self.W_key = nn.Linear(d_in , d_out , bias = qkv_bias)
        self.W_value = nn.Linear(d_in , d_out , bias = qkv_bias)
    def forward(self,x):
        keys = self.W_key(x)
        values = self.W_value(x)
        queries = self.W_query(x)
        atten_score = queries @ keys.T
        atten_weights = torch.softmax(atten_score/keys.shape[-1] ** 0.5 , dim = -1)
        return atten_weights @ values

class CausalAttention(nn.Module):
    def __init__(self, d_in , d_out , context_length ,dropout_rate, qkv_bias = False ):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in , d_out , bias = qkv_bias)
        self.W_key = nn.Linear(d_in , d_out , bias = qkv_bias)
        self.W_value = nn.Linear(d_in , d_out , bias = qkv_bias)
        self.dropout = torch.nn.Dropout(dropout_rate)
        self.register_buffer('mask' ,torch.triu(torch.ones(context_length, context_length), diagonal=1) )
    def forward(self,x):
        b , num_tokens , d_in = x.shape
        keys = self.W_key(x)
        values = self.W_value(x)
        queries = self.W_query(x)
        atten_score = queries @ keys.transpose(1,2)
        atten_score = atten_score.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        atten_weights = torch.softmax(atten_score/keys.shape[-1] ** 0.5 , dim = -1)
        atten_weights = self.dropout(atten_weights)
        return atten_weights @ values

class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in , d_out , context_length, dropout , num_heads , qkv_bias = False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in , d_out , context_length, dropout , qkv_bias)
             for _ in range(num_heads)])
    def forward(self , x):
        return torch.cat( [head(x) for head in self.heads], dim = -1)

class MultiHeadAttention(nn.Module):
    def __init__(self , d_in , d_out , context_length , dropout , num_heads , qkv_bias = False):
        super().__init__()
        assert(d_out % num_heads == 0), "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in , d_out , bias = qkv_bias)
        self.W_key = nn.Linear(d_in , d_out , bias = qkv_bias)
        self.W_value = nn.Linear(d_in , d_out , bias = qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(d_out , d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length , context_length), diagonal=1))
    def forward(self , x, key_padding_mask=None):
        b , num_token , d_in = x.shape
        keys = self.W_key(x)
        values = self.W_value(x)
        queries = self.W_query(x)
        keys = keys.view(b , num_token , self.num_heads , self.head_dim )
        values = values.view(b , num_token , self.num_heads , self.head_dim )
        queries = queries.view(b , num_token , self.num_heads , self.head_dim )
        keys = keys.transpose(1,2)
        values = values.transpose(1,2)
        queries = queries.transpose(1,2)
        atten_score = queries @ keys.transpose(2,3)
        mask_bool = self.mask.bool()[:num_token , :num_token]
        atten_score.masked_fill_(mask_bool, -torch.inf)
        if key_padding_mask is not None:  # not in the seed: reference for nabla's masked forward
            atten_score.masked_fill_(key_padding_mask.view(b, 1, 1, num_token), -torch.inf)
        atten_weights = torch.softmax(atten_score/keys.shape[-1] ** 0.5 , dim = -1)
        self.last_weights = atten_weights
        atten_weights = self.dropout(atten_weights)
        context_vec = atten_weights @ values
        context_vec = context_vec.transpose(1,2)
        context_vec = context_vec.contiguous().view(b , num_token , self.d_out)
        return self.out_proj(context_vec)


inputs = torch.tensor(
    [[0.43, 0.15, 0.89],
     [0.55, 0.87, 0.66],
     [0.57, 0.85, 0.64],
     [0.22, 0.58, 0.33],
     [0.77, 0.25, 0.10],
     [0.05, 0.80, 0.55]])
batch = torch.stack((inputs, inputs), dim=0)          # the seed's batch (2, 6, 3)
batch2 = torch.stack((inputs, inputs.flip(0)), dim=0)  # two different sequences


def arr(name, t):
    vals = [float(v) for v in t.detach().reshape(-1)]
    body = ", ".join("%.9g" % v for v in vals)
    print("static const double %s[%d] = {%s};" % (name, len(vals), body))


def module(prefix, m, out):
    names = [n for n, _ in m.named_parameters()]
    print("/* %s: %s */" % (prefix, ", ".join(names)))
    print("static const char *const %s_names[%d] = {%s};" %
          (prefix, len(names), ", ".join('"%s"' % n for n in names)))
    for i, (n, p) in enumerate(m.named_parameters()):
        arr("%s_p%d" % (prefix, i), p)
    print("static const double *const %s_params[%d] = {%s};" %
          (prefix, len(names), ", ".join("%s_p%d" % (prefix, i) for i in range(len(names)))))
    arr(prefix + "_out", out)
    print()


print("/* attention_refs.h - generated by tools/gen_attention_refs.py (torch %s); do not edit."
      % torch.__version__)
print(" * Each module: parameter names and values in named_parameters order")
print(" * (weights of nn.Linear are (out, in)), then its output, row-major. */")
print("#ifndef ATTENTION_REFS_H\n#define ATTENTION_REFS_H\n")

with torch.no_grad():
    torch.manual_seed(123)
    m = SelfAttention_v1(3, 2)
    module("ref_sa1", m, m(inputs))

    torch.manual_seed(123)
    m = SelfAttention_v2(3, 2)
    module("ref_sa2", m, m(inputs))

    torch.manual_seed(123)
    m = CausalAttention(3, 2, 6, 0.0, qkv_bias=True)
    module("ref_ca_bias", m, m(batch2))

    torch.manual_seed(123)
    m = MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2)
    module("ref_wrap", m, m(batch))

    torch.manual_seed(123)
    m = MultiHeadAttention(3, 2, 6, 0.0, 2)
    module("ref_mha", m, m(batch))

    # key padding: sequence 1 has its last two positions padded
    torch.manual_seed(123)
    m = MultiHeadAttention(3, 4, 6, 0.0, 2, qkv_bias=True)
    kpm = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    out = m(batch2, key_padding_mask=kpm)
    module("ref_mha_pad", m, out)
    arr("ref_mha_pad_weights", m.last_weights)

    # seed 000 builds sa_v2 right after sa_v1 under one manual_seed(123), so
    # its Linear weights are the generator's next 18 numbers (the notebook
    # prints them rounded; rounded weights move the output's 4th decimal)
    torch.manual_seed(123)
    SelfAttention_v1(3, 2)
    m = SelfAttention_v2(3, 2)
    module("ref_sa2_000", m, m(inputs))

    # seed 004's CausalAttention(dropout 0.5) in eval mode: dropout is the
    # identity, so this is the output any dropout mask averages to
    torch.manual_seed(123)
    m = CausalAttention(3, 2, 6, 0.5)
    m.eval()
    module("ref_ca_eval", m, m(batch))

# seed 003 ("sky is blue"): gradients of sum(O) with respect to WQ, WK, WV,
# O = softmax(Q K^T / sqrt(2)) V, Q = E WQ, K = E WK, V = E WV, in float32
# and in float64 (from the same float32-rounded inputs).
print("/* seed 003 (sky is blue): d sum(O) / d WQ, WK, WV, each (2, 2) */")
for dt, suffix in ((torch.float32, "f32"), (torch.float64, "f64")):
    E = torch.tensor([[-1.0720, -0.5001], [-0.0120, -0.4311], [-0.0050, -0.5321]]).to(dt)
    W = [torch.tensor(w).to(dt).requires_grad_(True) for w in
         ([[-0.0271, -0.3840], [-0.3940, -0.6610]],
          [[-0.4109, 0.5777], [-0.1162, -0.1661]],
          [[-0.2045, 0.1210], [-0.1712, -0.4462]])]
    Q, K, V = E @ W[0], E @ W[1], E @ W[2]
    O = torch.softmax(Q @ K.T / 2 ** 0.5, dim=-1) @ V
    O.sum().backward()
    for name, w in zip(("wq", "wk", "wv"), W):
        arr("ref_sky_grad_%s_%s" % (name, suffix), w.grad)

print("#endif")
