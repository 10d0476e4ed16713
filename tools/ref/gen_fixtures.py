#!/usr/bin/python3
"""gen_fixtures.py - PyTorch parity fixtures for nabla's ops, modules and
optimizers, written to tests/fixtures/parity/ as safetensors files.

Run with Debian's interpreter, where python3-torch lives (CI has no torch and
only reads the committed files):

    /usr/bin/python3 tools/ref/gen_fixtures.py

It deletes the *.safetensors files in that directory first, so a case that
was removed here does not linger. With three arguments,

    /usr/bin/python3 tools/ref/gen_fixtures.py OPS_DEF OP OUT_DIR

it writes only the case of op OP's NB_OP row in the op list OPS_DEF (a copy
of the tree with the op added, as tools/ref/gen_add_op_fixture.sh makes)
into OUT_DIR.

Every case is written twice, <case>.f64.safetensors and
<case>.f32.safetensors. The inputs are drawn once in float64 and rounded to
float32 for the f32 file; PyTorch then computes natively in that dtype.

Op and module cases (metadata "kind" = "op" or "module") hold

    in.<k>          the inputs, in argument order (I64 class indices and
                    token ids, BOOL masks, or floating tensors)
    param.<name>    module parameters under their state_dict names
    out[.<x>]       the outputs ("out"; "out.0", "out.1" for split;
                    "out.indices" for max_dim and topk; "out.attn_weights")
    grad_out[.<x>]  a fixed random cotangent for each differentiated output
                    (an output without one, like "out.indices", is only
                    compared)
    grad.<k>        d/d in.<k> of L = sum over outputs of sum(out * grad_out),
                    for every floating input
    grad.param.<n>  dL/d param.<n>

and "__metadata__" with "kind", "case", "dtype", "op" or "module", and the
arguments (dim, keepdim, p, ...) as strings; floats are written with repr(),
so they read back exactly.

Trajectory cases ("kind" = "trajectory") train the seeds' MultiHeadAttention
(d_in = d_out = 8, 2 heads, context_length 6, dropout 0, no qkv bias) for 20
steps on fixed x (2, 6, 8) and target y (2, 6, 8) with mean-squared error,
with SGD, Adam or AdamW (foreach=False: PyTorch's single-tensor update, the
one nabla reproduces). They hold x, y, init.param.<name>, losses (20) (loss
before each step) and final.param.<name>.

The safetensors files are written by tools/ref/torchref.py's write_safetensors,
with json and struct (the safetensors package is not needed): 8-byte
little-endian header length, the JSON header padded with spaces to a multiple
of 8, then the tensors' bytes.
"""
import math
import os
import sys
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from op_list import read_rows
from torchref import (CausalAttention, MultiHeadAttention, MultiHeadAttentionWrapper, RMSNorm,
                      SelfAttention_v1, SelfAttention_v2, rms_norm, write_safetensors)

DTYPES = (("f64", torch.float64), ("f32", torch.float32))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "parity")
EMITTED_OPS = set()  # the ops some case was written for


# ---- random inputs -----------------------------------------------------------

class Draw:
    """float64 draws from a generator seeded by the case name."""

    def __init__(self, case):
        self.g = torch.Generator().manual_seed(zlib.crc32(case.encode()))

    def normal(self, *shape):
        return torch.randn(shape, generator=self.g, dtype=torch.float64)

    def uniform(self, lo, hi, *shape):
        return lo + (hi - lo) * torch.rand(shape, generator=self.g, dtype=torch.float64)

    def away(self, *shape):
        """|x| in [0.2, 1.2] with a random sign: no kinks of relu or ties of max."""
        sign = torch.where(torch.rand(shape, generator=self.g) < 0.5, -1.0, 1.0)
        return sign.double() * self.uniform(0.2, 1.2, *shape)

    def positive(self, *shape):
        return self.uniform(0.5, 2.0, *shape)

    def ints(self, hi, *shape):
        return torch.randint(0, hi, shape, generator=self.g, dtype=torch.int64)

    def mask(self, *shape):
        return torch.rand(shape, generator=self.g) < 0.4


def fmt(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return ",".join(str(int(x)) for x in v)
    return str(v)


def cast(t, dt):
    return t.to(dt) if t.is_floating_point() else t


def emit(case, dtn, kind, what, args, tensors):
    key = {"op": "op", "module": "module", "trajectory": "optim"}[kind]
    if kind == "op":
        EMITTED_OPS.add(what)
    meta = {"kind": kind, "case": case, "dtype": dtn, key: what,
            "torch": torch.__version__}
    meta.update({k: fmt(v) for k, v in args.items()})
    write_safetensors(os.path.join(OUT_DIR, "%s.%s.safetensors" % (case, dtn)), tensors, meta)


def differentiate(outs, grad_outs, leaves):
    """Gradients of sum_k sum(outs[k] * grad_outs[k]) w.r.t. leaves (zeros for
    leaves the outputs do not depend on)."""
    gs = torch.autograd.grad([outs[k] for k in grad_outs], leaves,
                             [grad_outs[k] for k in grad_outs], allow_unused=True,
                             retain_graph=True)
    return [torch.zeros_like(l) if g is None else g for l, g in zip(leaves, gs)]


def second_order(outs, grad_outs, leaves):
    """Gradients w.r.t. leaves of s = sum_j sum(g_j * g_j), where g are the
    gradients of sum_k sum(outs[k] * grad_outs[k]) taken with create_graph
    (zeros where s does not depend on a leaf)."""
    names = list(grad_outs)
    g1 = torch.autograd.grad([outs[k] for k in names], leaves, [grad_outs[k] for k in names],
                             create_graph=True, allow_unused=True)
    terms = [(g * g).sum() for g in g1 if g is not None and g.requires_grad]
    if not terms:
        return [torch.zeros_like(x) for x in leaves]
    g2 = torch.autograd.grad(sum(terms), leaves, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g.detach() for x, g in zip(leaves, g2)]


# ---- op cases ------------------------------------------------------------------

def op_case(case, op, inputs, fn, args=None, consts=()):
    """inputs: list of float64 / int / bool tensors; fn(*inputs) returns a
    tensor or a dict name -> tensor ("out", "out.0", ...). The float inputs
    whose indices are in consts (rope's tables) take no gradient."""
    args = args or {}
    d = Draw(case + ".grad_out")
    grad_outs64 = {}  # drawn once, in float64, rounded for f32
    for dtn, dt in DTYPES:
        ins = [cast(x, dt).clone() for x in inputs]
        diff = [x.is_floating_point() and k not in consts for k, x in enumerate(ins)]
        leaves = [x for x, dx in zip(ins, diff) if dx]
        for x in leaves:
            x.requires_grad_(True)
        res = fn(*ins)
        outs = res if isinstance(res, dict) else {"out": res}
        grad_outs = {}
        for name, o in outs.items():
            if o.is_floating_point():
                if name not in grad_outs64:
                    grad_outs64[name] = d.normal(*o.shape)
                grad_outs[name] = grad_outs64[name].to(dt)
        grads = differentiate(outs, grad_outs, leaves)
        tensors = [("in.%d" % k, x.detach()) for k, x in enumerate(ins)]
        tensors += [(n, o.detach()) for n, o in outs.items()]
        tensors += [(n.replace("out", "grad_out", 1), g) for n, g in grad_outs.items()]
        gi = iter(grads)
        for k, x in enumerate(ins):
            if diff[k]:
                tensors.append(("grad.%d" % k, next(gi).detach()))
        if dtn == "f64":  # second order: the gradients of the gradients' squares
            g2 = iter(second_order(outs, grad_outs, leaves))
            for k, x in enumerate(ins):
                if diff[k]:
                    tensors.append(("grad2.%d" % k, next(g2)))
        emit(case, dtn, "op", op, args, tensors)


# ---- the op list's rows ------------------------------------------------------------
# An NB_OP row of include/nabla/ops.def gives its op's inputs (domain and
# shape) and its PyTorch expression over the list x of inputs; its fixture is
# the case named after the op. Further cases of the same op reuse the row's
# expression with other inputs (row_case).

DOMAINS = {"REAL": Draw.normal, "AWAY": Draw.away, "POSITIVE": Draw.positive}


def row_fn(row):
    return lambda *x: eval(row.torch, {"torch": torch, "F": F, "math": math}, {"x": x})


def row_case(rows, case, op, make_inputs=None):
    """The case `case` of row op: its expression on make_inputs(Draw(case)),
    or on the row's own inputs."""
    row = rows[op]
    d = Draw(case)
    inputs = (make_inputs(d) if make_inputs else
              [DOMAINS[dom](d, *shape) for dom, shape in row.inputs])
    op_case(case, op, inputs, row_fn(row))


def check_hand_ops(rows):
    """Every NB_OP_HAND op of the list needs a case written above."""
    missing = [r.name for r in rows if r.hand and r.name not in EMITTED_OPS]
    if missing:
        raise SystemExit("gen_fixtures.py: op %s is NB_OP_HAND in ops.def but has no case "
                         "in op_cases()" % ", ".join(missing))


def causal_mask(t1, t2):
    return torch.triu(torch.ones(t1, t2), diagonal=1).bool()


def op_cases():
    rows = {row.name: row for row in read_rows()}

    def c(case, op, make_inputs, fn, args=None):
        op_case(case, op, make_inputs(Draw(case)), fn, args)

    def r(case, op, make_inputs):
        row_case(rows, case, op, make_inputs)

    # every NB_OP row's own case, named after the op
    for row in rows.values():
        if not row.hand:
            row_case(rows, row.name, row.name)

    # elementwise binary, with broadcasting
    r("add_same", "add", lambda d: [d.normal(2, 3, 4), d.normal(2, 3, 4)])
    r("add_bcast_row", "add", lambda d: [d.normal(2, 3, 4), d.normal(4)])
    r("add_bcast_both", "add", lambda d: [d.normal(2, 1, 4), d.normal(3, 1)])
    r("add_scalar_tensor", "add", lambda d: [d.normal(2, 3), d.normal()])
    r("sub_same", "sub", lambda d: [d.normal(2, 3, 4), d.normal(2, 3, 4)])
    r("sub_bcast", "sub", lambda d: [d.normal(3, 1), d.normal(2, 3, 4)])
    r("mul_same", "mul", lambda d: [d.normal(2, 3, 4), d.normal(2, 3, 4)])
    r("mul_bcast", "mul", lambda d: [d.normal(2, 3, 4), d.normal(1, 3, 1)])
    r("div_same", "div", lambda d: [d.normal(2, 3, 4), d.away(2, 3, 4)])
    r("div_bcast", "div", lambda d: [d.away(3, 4), d.away(2, 1, 4)])

    # elementwise unary
    c("pow_2.5", "pow", lambda d: [d.positive(2, 3, 4)], lambda x: x ** 2.5, {"p": 2.5})
    c("pow_3_signed", "pow", lambda d: [d.normal(2, 3, 4)], lambda x: x ** 3.0, {"p": 3.0})
    c("pow_-1.5", "pow", lambda d: [d.positive(2, 3, 4)], lambda x: x ** -1.5, {"p": -1.5})
    c("pow_0", "pow", lambda d: [torch.tensor([[0.0, -1.5, 2.0], [0.0, 0.5, 3.0]])],
      lambda x: x ** 0.0, {"p": 0.0})  # gradient 0 everywhere, 0 included

    def extreme(d):  # saturated tails, where exp over- or underflows
        return [torch.tensor([[-200.0, -40.0, -12.0, 0.0], [12.0, 40.0, 200.0, 1e-3]])]
    r("sigmoid_extreme", "sigmoid", extreme)
    r("tanh_extreme", "tanh", extreme)
    r("exp_extreme", "exp",
      lambda d: [torch.tensor([[-200.0, -40.0, -12.0], [12.0, 40.0, 80.0]])])
    # gradient 0 at 0, as PyTorch's threshold_backward
    r("relu_at_zero", "relu", lambda d: [torch.tensor([[0.0, -1.5, 2.0], [0.0, 0.5, -0.0]])])
    c("gelu_none", "gelu", lambda d: [d.normal(2, 3, 4) * 2],
      lambda x: F.gelu(x, approximate="none"), {"approximate": "none"})
    c("gelu_tanh", "gelu", lambda d: [d.normal(2, 3, 4) * 2],
      lambda x: F.gelu(x, approximate="tanh"), {"approximate": "tanh"})
    c("gelu_none_extreme", "gelu", extreme, lambda x: F.gelu(x, approximate="none"),
      {"approximate": "none"})
    c("gelu_tanh_extreme", "gelu", extreme, lambda x: F.gelu(x, approximate="tanh"),
      {"approximate": "tanh"})

    # reductions
    c("sum_dim1", "sum_dim", lambda d: [d.normal(2, 3, 4)],
      lambda x: x.sum(1), {"dim": 1, "keepdim": False})
    c("sum_dim-1_keepdim", "sum_dim", lambda d: [d.normal(2, 3, 4)],
      lambda x: x.sum(-1, keepdim=True), {"dim": -1, "keepdim": True})
    c("mean_dim0_keepdim", "mean_dim", lambda d: [d.normal(2, 3, 4)],
      lambda x: x.mean(0, keepdim=True), {"dim": 0, "keepdim": True})
    c("mean_dim2", "mean_dim", lambda d: [d.normal(2, 3, 4)],
      lambda x: x.mean(2), {"dim": 2, "keepdim": False})

    def max_dim(dim, keepdim):
        def f(x):
            v, i = x.max(dim, keepdim=keepdim)
            return {"out": v, "out.indices": i}
        return f
    c("max_dim-1", "max_dim", lambda d: [d.normal(2, 3, 4)], max_dim(-1, False),
      {"dim": -1, "keepdim": False})
    c("max_dim1_keepdim", "max_dim", lambda d: [d.normal(2, 3, 4)], max_dim(1, True),
      {"dim": 1, "keepdim": True})
    # ties: PyTorch's CPU kernel returns the first maximum and sends it the gradient
    ties = [[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, -2.0, -1.0, -5.0]]
    c("max_dim_ties", "max_dim", lambda d: [torch.tensor(ties)], max_dim(-1, False),
      {"dim": -1, "keepdim": False})

    def topk(k, dim):
        def f(x):
            v, i = torch.topk(x, k, dim)
            return {"out": v, "out.indices": i}
        return f
    c("topk_k3_dim-1", "topk", lambda d: [d.normal(2, 3, 6)], topk(3, -1), {"k": 3, "dim": -1})
    c("topk_k2_dim0", "topk", lambda d: [d.normal(5, 4)], topk(2, 0), {"k": 2, "dim": 0})
    c("topk_k20_dim1", "topk", lambda d: [d.normal(2, 24, 2)], topk(20, 1), {"k": 20, "dim": 1})
    # ties: torch.topk leaves the order of equal values to its selection
    # algorithm (it does not keep the lower index first); nabla orders them
    # by index, which is torch.sort(stable=True)'s order: the reference here
    def topk_stable(k, dim):
        def f(x):
            i = torch.sort(x, stable=True, dim=dim, descending=True)[1].narrow(dim, 0, k)
            return {"out": x.gather(dim, i), "out.indices": i}
        return f
    topk_ties = [[1.0, 3.0, 3.0, 0.0, 3.0, 1.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
                 [-1.0, -2.0, -1.0, -5.0, -2.0, -1.0]]
    c("topk_ties", "topk", lambda d: [torch.tensor(topk_ties)], topk_stable(4, -1),
      {"k": 4, "dim": -1})
    c("topk_ties_k20", "topk", lambda d: [d.ints(3, 2, 30).double()], topk_stable(20, -1),
      {"k": 20, "dim": -1})

    # the row gather and scatter-add of a mixture-of-experts layer
    c("index_select", "index_select",
      lambda d: [d.normal(5, 2, 3), torch.tensor([4, 0, 4, 2, 1, 4, 0])],
      lambda x, idx: x.index_select(0, idx))
    c("index_select_2d", "index_select", lambda d: [d.normal(6, 4), torch.tensor([5, 5, 3])],
      lambda x, idx: x.index_select(0, idx))
    c("index_add", "index_add",
      lambda d: [d.normal(4, 3), torch.tensor([3, 0, 3, 1, 3, 2]), d.normal(6, 3)],
      lambda base, idx, src: base.index_add(0, idx, src))
    c("index_add_3d", "index_add",
      lambda d: [d.normal(3, 2, 2), torch.tensor([2, 2, 0, 2]), d.normal(4, 2, 2)],
      lambda base, idx, src: base.index_add(0, idx, src))

    # matrix product
    r("matmul_2d", "matmul", lambda d: [d.normal(3, 4), d.normal(4, 5)])
    r("matmul_batched", "matmul", lambda d: [d.normal(2, 3, 4), d.normal(2, 4, 5)])
    r("matmul_bcast_b", "matmul", lambda d: [d.normal(2, 3, 4), d.normal(4, 5)])
    r("matmul_bcast_a", "matmul", lambda d: [d.normal(3, 4), d.normal(2, 4, 5)])
    r("matmul_4d", "matmul", lambda d: [d.normal(2, 2, 3, 4), d.normal(2, 2, 4, 3)])
    r("matmul_4d_bcast", "matmul", lambda d: [d.normal(2, 1, 3, 4), d.normal(1, 3, 4, 2)])

    # shape ops
    c("transpose_12", "transpose", lambda d: [d.normal(2, 3, 4)],
      lambda x: x.transpose(1, 2), {"dim0": 1, "dim1": 2})
    c("transpose_neg", "transpose", lambda d: [d.normal(2, 3, 4)],
      lambda x: x.transpose(-1, 0), {"dim0": -1, "dim1": 0})
    c("permute_3d", "permute", lambda d: [d.normal(2, 3, 4)],
      lambda x: x.permute(2, 0, 1), {"perm": [2, 0, 1]})
    c("permute_4d", "permute", lambda d: [d.normal(2, 3, 2, 4)],
      lambda x: x.permute(1, 3, 0, 2), {"perm": [1, 3, 0, 2]})
    c("reshape_infer", "reshape", lambda d: [d.normal(2, 3, 4)],
      lambda x: x.reshape(4, -1), {"shape": [4, -1]})
    c("reshape_4d", "reshape", lambda d: [d.normal(2, 12)],
      lambda x: x.reshape(2, 3, 2, 2), {"shape": [2, 3, 2, 2]})
    c("concat_dim1", "concat", lambda d: [d.normal(2, 1, 4), d.normal(2, 2, 4), d.normal(2, 3, 4)],
      lambda *xs: torch.cat(xs, 1), {"dim": 1})
    c("concat_last", "concat", lambda d: [d.normal(2, 3), d.normal(2, 2)],
      lambda *xs: torch.cat(xs, -1), {"dim": -1})

    def split(sizes, dim):
        def f(x):
            return {"out.%d" % k: p for k, p in enumerate(torch.split(x, sizes, dim))}
        return f
    c("split_dim1", "split", lambda d: [d.normal(2, 6, 4)], split([1, 2, 3], 1),
      {"dim": 1, "sizes": [1, 2, 3]})
    c("split_last", "split", lambda d: [d.normal(3, 5)], split([4, 1], -1),
      {"dim": -1, "sizes": [4, 1]})

    # masking and softmax
    c("masked_fill", "masked_fill", lambda d: [d.normal(2, 3, 4), d.mask(3, 4)],
      lambda x, m: x.masked_fill(m, -2.0), {"value": -2.0})
    c("masked_fill_-inf", "masked_fill", lambda d: [d.normal(2, 3, 4), d.mask(2, 1, 4)],
      lambda x, m: x.masked_fill(m, -math.inf), {"value": -math.inf})
    c("causal_fill", "causal_fill", lambda d: [d.normal(2, 3, 5)],
      lambda x: x.masked_fill(causal_mask(3, 5), -2.5), {"value": -2.5})
    c("causal_fill_softmax", "causal_fill_softmax", lambda d: [d.normal(2, 2, 4, 4)],
      lambda x: torch.softmax(x.masked_fill(causal_mask(4, 4), -math.inf), -1),
      {"value": -math.inf})
    r("softmax_large", "softmax", lambda d: [d.normal(2, 3, 4) * 40])
    r("log_softmax_large", "log_softmax", lambda d: [d.normal(2, 3, 4) * 40])

    # losses
    c("cross_entropy_2d", "cross_entropy", lambda d: [d.normal(5, 4), d.ints(4, 5)],
      F.cross_entropy)
    c("cross_entropy_3d", "cross_entropy", lambda d: [d.normal(2, 3, 4), d.ints(4, 2, 3)],
      lambda x, t: F.cross_entropy(x.reshape(-1, 4), t.reshape(-1)))
    c("cross_entropy_1d", "cross_entropy", lambda d: [d.normal(4), d.ints(4)],
      F.cross_entropy)
    c("cross_entropy_large", "cross_entropy", lambda d: [d.normal(5, 4) * 50, d.ints(4, 5)],
      F.cross_entropy)

    # neural-network ops
    c("linear_bias", "linear", lambda d: [d.normal(2, 3, 4), d.normal(5, 4), d.normal(5)],
      F.linear, {"bias": True})
    c("linear_nobias", "linear", lambda d: [d.normal(3, 4), d.normal(5, 4)],
      F.linear, {"bias": False})
    c("grouped_linear", "grouped_linear",
      lambda d: [d.normal(6, 4), d.normal(5, 4), d.normal(5, 4), d.normal(5, 4)],
      lambda x, *w: torch.cat([F.linear(p, wg) for p, wg in zip(torch.split(x, [2, 1, 3]), w)]),
      {"rows": [2, 1, 3]})
    c("embedding", "embedding",
      lambda d: [d.normal(6, 4), torch.tensor([[1, 4, 1], [0, 5, 4]])],
      lambda w, ids: F.embedding(ids, w))
    c("layer_norm", "layer_norm", lambda d: [d.normal(2, 3, 4), d.normal(4), d.normal(4)],
      lambda x, w, b: F.layer_norm(x, (4,), w, b, 1e-5), {"eps": 1e-5, "affine": True})
    c("layer_norm_flat_row", "layer_norm",
      lambda d: [torch.cat([d.normal(1, 4), torch.full((1, 4), 0.75)]), d.normal(4), d.normal(4)],
      lambda x, w, b: F.layer_norm(x, (4,), w, b, 1e-5), {"eps": 1e-5, "affine": True})
    c("layer_norm_noaffine", "layer_norm", lambda d: [d.normal(2, 3, 5) * 3 + 1],
      lambda x: F.layer_norm(x, (5,), None, None, 1e-3), {"eps": 1e-3, "affine": False})
    c("rms_norm", "rms_norm", lambda d: [d.normal(2, 3, 4), d.normal(4)],
      lambda x, w: rms_norm(x, (4,), w, 1e-5), {"eps": 1e-5})
    c("rms_norm_noweight", "rms_norm", lambda d: [d.normal(2, 3, 5) * 3 + 1],
      lambda x: rms_norm(x, (5,), None, 1e-6), {"eps": 1e-6})
    c("rms_norm_small_row", "rms_norm",
      lambda d: [torch.cat([d.normal(1, 6) * 1e-3, d.normal(2, 6)]), d.normal(6)],
      lambda x, w: rms_norm(x, (6,), w, 1e-2), {"eps": 1e-2})
    c("dropout_p0_train", "dropout", lambda d: [d.normal(2, 3, 4)],
      lambda x: F.dropout(x, 0.0, True), {"p": 0.0, "train": True})
    c("dropout_eval", "dropout", lambda d: [d.normal(2, 3, 4)],
      lambda x: F.dropout(x, 0.5, False), {"p": 0.5, "train": False})

    # fused attention: q (B, Tq, H, hd), k (B, Tk, Hkv, hd), v (B, Tk, Hkv, hdv)
    # [, key padding mask (B, Tk)] -> (B, Tq, H * hdv), composed here (torch
    # 1.13 has no F.scaled_dot_product_attention); dropout 0. Grouped heads
    # (Hkv < H): k and v repeat_interleave'd to H heads; a window w hides
    # keys j <= i - w (on top of causal).
    def sdpa(causal, scale, window=0):
        def f(q, k, v, pad=None):
            r = q.shape[2] // k.shape[2]
            k, v = (t.repeat_interleave(r, dim=2) for t in (k, v))
            qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
            s = qh @ kh.transpose(-2, -1)
            if causal:
                s = s.masked_fill(causal_mask(q.shape[1], k.shape[1]), -math.inf)
            if window > 0:
                below = torch.tril(torch.ones(q.shape[1], k.shape[1]), diagonal=-window).bool()
                s = s.masked_fill(below, -math.inf)
            if pad is not None:
                s = s.masked_fill(pad[:, None, None, :], -math.inf)
            o = torch.softmax(s * scale, -1) @ vh
            return o.transpose(1, 2).reshape(q.shape[0], q.shape[1], -1)
        return f

    c("sdpa_causal", "sdpa",
      lambda d: [d.normal(2, 5, 2, 3), d.normal(2, 5, 2, 3), d.normal(2, 5, 2, 4)],
      sdpa(True, 3 ** -0.5), {"causal": True, "scale": 3 ** -0.5})
    c("sdpa_cross_padded", "sdpa",
      lambda d: [d.normal(2, 3, 2, 3), d.normal(2, 6, 2, 3), d.normal(2, 6, 2, 2),
                 torch.tensor([[False] * 6, [False] * 4 + [True] * 2])],
      sdpa(False, 0.7), {"causal": False, "scale": 0.7})
    c("sdpa_gqa_mqa", "sdpa",
      lambda d: [d.normal(2, 5, 4, 3), d.normal(2, 5, 1, 3), d.normal(2, 5, 1, 4)],
      sdpa(True, 0.6), {"causal": True, "scale": 0.6})
    c("sdpa_gqa_window_padded", "sdpa",
      lambda d: [d.normal(2, 9, 4, 3), d.normal(2, 9, 2, 3), d.normal(2, 9, 2, 2),
                 torch.tensor([[False] * 9, [False] * 4 + [True] + [False] * 2 + [True] * 2])],
      sdpa(True, 0.7, 3), {"causal": True, "scale": 0.7, "window": 3})
    c("sdpa_window_cross", "sdpa",
      lambda d: [d.normal(2, 4, 2, 3), d.normal(2, 7, 2, 3), d.normal(2, 7, 2, 2)],
      sdpa(True, 0.5, 2), {"causal": True, "scale": 0.5, "window": 2})

    # rotary position embeddings: x (..., T, hd) or, thd, (..., T, H, hd);
    # tables (max_T, hd) of any values (the op is this formula for any
    # tables), rows pos0 .. pos0 + T - 1 read. Interleaved pairs (2i, 2i+1)
    # are the halves' rotation of x's even entries then its odd ones.
    def rotate_half(v):
        h = v.shape[-1] // 2
        return torch.cat([-v[..., h:], v[..., :h]], -1)

    def rope(pos0, interleaved, thd):
        def f(x, cos, sin):
            t = x.shape[-3] if thd else x.shape[-2]
            c, s = cos[pos0:pos0 + t], sin[pos0:pos0 + t]
            if thd:
                c, s = c[:, None, :], s[:, None, :]
            if not interleaved:
                return x * c + rotate_half(x) * s
            h = x.shape[-1] // 2
            xh = torch.cat([x[..., 0::2], x[..., 1::2]], -1)
            y = xh * c + rotate_half(xh) * s
            return torch.stack([y[..., :h], y[..., h:]], -1).flatten(-2)
        return f

    def rope_case(case, x_shape, max_t, pos0, interleaved=False, thd=False):
        hd = x_shape[-1]
        op_case(case, "rope", (lambda d: [d.normal(*x_shape), d.uniform(-1, 1, max_t, hd),
                                          d.uniform(-1, 1, max_t, hd)])(Draw(case)),
                rope(pos0, interleaved, thd),
                {"pos0": pos0, "interleaved": interleaved, "thd": thd}, consts=(1, 2))

    rope_case("rope", (2, 5, 6), 5, 0)
    rope_case("rope_pos0", (2, 2, 4, 8), 9, 3)
    rope_case("rope_interleaved", (3, 4, 6), 7, 2, interleaved=True)
    rope_case("rope_thd", (2, 4, 3, 4), 6, 1, thd=True)
    rope_case("rope_thd_interleaved", (1, 3, 2, 8), 8, 5, interleaved=True, thd=True)

    # five and six dims: broadcasting, reductions, permute, the batched product
    r("add_5d_bcast", "add", lambda d: [d.normal(2, 1, 3, 1, 2), d.normal(2, 1, 4, 1)])
    r("mul_6d_bcast", "mul", lambda d: [d.normal(2, 1, 2, 1, 3, 2), d.normal(1, 2, 1, 2, 1, 2)])
    c("masked_fill_5d", "masked_fill", lambda d: [d.normal(2, 2, 1, 3, 2), d.mask(2, 1, 1, 3, 1)],
      lambda x, m: x.masked_fill(m, -1.5), {"value": -1.5})
    c("sum_dim_5d", "sum_dim", lambda d: [d.normal(2, 3, 2, 2, 3)],
      lambda x: x.sum(2), {"dim": 2, "keepdim": False})
    c("mean_dim_6d_keepdim", "mean_dim", lambda d: [d.normal(2, 2, 3, 1, 2, 2)],
      lambda x: x.mean(-2, keepdim=True), {"dim": -2, "keepdim": True})
    c("max_dim_5d", "max_dim", lambda d: [d.normal(2, 2, 3, 2, 2)], max_dim(1, False),
      {"dim": 1, "keepdim": False})
    c("permute_5d", "permute", lambda d: [d.normal(2, 3, 1, 2, 4)],
      lambda x: x.permute(4, 1, 3, 0, 2), {"perm": [4, 1, 3, 0, 2]})
    c("permute_6d", "permute", lambda d: [d.normal(2, 1, 3, 2, 2, 3)],
      lambda x: x.permute(5, 0, 3, 1, 4, 2), {"perm": [5, 0, 3, 1, 4, 2]})
    r("matmul_5d_bcast", "matmul", lambda d: [d.normal(2, 1, 2, 3, 4), d.normal(3, 1, 4, 2)])
    r("matmul_6d", "matmul", lambda d: [d.normal(2, 1, 2, 1, 2, 3), d.normal(1, 2, 1, 2, 3, 2)])


# ---- modules ---------------------------------------------------------------------
# The seed notebook's attention classes come from tools/ref/torchref.py, with the
# key-padding mask nabla adds to its masked forwards (True = padding, masked
# like nn.MultiheadAttention) and the weights kept in last_weights.


def module_case(case, name, make, args, make_inputs, forward=None, extra_outs=None,
                randomise=True):
    """make(): the module, in float64, PyTorch-initialised under a fixed seed;
    randomise also redraws every parameter (so LayerNorm's 1s and 0s and
    zero biases become informative). forward(m, *inputs) defaults to m(*inputs);
    extra_outs(m) gives outputs compared without a gradient."""
    torch.manual_seed(zlib.crc32(case.encode()))
    m0 = make().double()
    d = Draw(case)
    if randomise:
        with torch.no_grad():
            for p in m0.parameters():
                p.copy_(d.normal(*p.shape) * 0.5)
    inputs = make_inputs(d)
    pnames = [n for n, _ in m0.named_parameters()]
    dg = Draw(case + ".grad_out")
    grad_out64 = None
    for dtn, dt in DTYPES:
        m = make().to(dt)
        m.load_state_dict({k: v.to(dt) for k, v in m0.state_dict().items()})
        m.eval() if not args.get("training", True) else m.train()
        ins = [cast(x, dt).clone() for x in inputs]
        leaves = [x for x in ins if x.is_floating_point()]
        for x in leaves:
            x.requires_grad_(True)
        out = forward(m, *ins) if forward else m(*ins)
        if grad_out64 is None:
            grad_out64 = dg.normal(*out.shape)
        grad_out = grad_out64.to(dt)
        params = [p for _, p in m.named_parameters()]
        grads = differentiate({"out": out}, {"out": grad_out}, leaves + params)
        tensors = [("in.%d" % k, x.detach()) for k, x in enumerate(ins)]
        tensors += [("param." + n, p.detach()) for n, p in zip(pnames, params)]
        tensors += [("out", out.detach())]
        if extra_outs:
            tensors += [(n, t.detach()) for n, t in extra_outs(m).items()]
        tensors += [("grad_out", grad_out)]
        gi = iter(grads)
        for k, x in enumerate(ins):
            if x.is_floating_point():
                tensors.append(("grad.%d" % k, next(gi).detach()))
        for n in pnames:
            tensors.append(("grad.param." + n, next(gi).detach()))
        if dtn == "f64":  # second order, as for ops
            g2 = iter(second_order({"out": out}, {"out": grad_out}, leaves + params))
            for k, x in enumerate(ins):
                if x.is_floating_point():
                    tensors.append(("grad2.%d" % k, next(g2)))
            for n in pnames:
                tensors.append(("grad2.param." + n, next(g2)))
        emit(case, dtn, "module", name, args, tensors)


def module_cases():
    def x3(d):  # (B, T, d_in)
        return [d.normal(2, 6, 3)]
    module_case("nn_linear", "Linear", lambda: nn.Linear(4, 5),
                {"in_features": 4, "out_features": 5, "bias": True},
                lambda d: [d.normal(2, 3, 4)])
    module_case("nn_linear_nobias", "Linear", lambda: nn.Linear(4, 5, bias=False),
                {"in_features": 4, "out_features": 5, "bias": False},
                lambda d: [d.normal(3, 4)])
    module_case("nn_layer_norm", "LayerNorm", lambda: nn.LayerNorm(4),
                {"dim": 4, "eps": 1e-5, "elementwise_affine": True},
                lambda d: [d.normal(2, 3, 4)])
    module_case("nn_layer_norm_noaffine", "LayerNorm",
                lambda: nn.LayerNorm(6, eps=1e-3, elementwise_affine=False),
                {"dim": 6, "eps": 1e-3, "elementwise_affine": False},
                lambda d: [d.normal(2, 6) * 2 - 1])
    module_case("nn_rms_norm", "RMSNorm", lambda: RMSNorm(4, eps=1e-5),
                {"dim": 4, "eps": 1e-5, "elementwise_affine": True},
                lambda d: [d.normal(2, 3, 4)])
    module_case("nn_rms_norm_noaffine", "RMSNorm",
                lambda: RMSNorm(6, eps=1e-6, elementwise_affine=False),
                {"dim": 6, "eps": 1e-6, "elementwise_affine": False},
                lambda d: [d.normal(2, 6) * 2 - 1])
    module_case("nn_embedding", "Embedding", lambda: nn.Embedding(7, 3),
                {"num_embeddings": 7, "embedding_dim": 3},
                lambda d: [torch.tensor([[2, 6, 2, 0], [5, 2, 1, 6]])])
    module_case("nn_gelu", "GELU", lambda: nn.GELU(), {"approximate": "none"},
                lambda d: [d.normal(2, 3, 4) * 2])
    module_case("nn_gelu_tanh", "GELU", lambda: nn.GELU(approximate="tanh"),
                {"approximate": "tanh"}, lambda d: [d.normal(2, 3, 4) * 2])
    module_case("nn_dropout_eval", "Dropout", lambda: nn.Dropout(0.5),
                {"p": 0.5, "training": False}, lambda d: [d.normal(2, 3, 4)])
    module_case("self_attention_v1", "SelfAttention_v1", lambda: SelfAttention_v1(3, 2),
                {"d_in": 3, "d_out": 2}, lambda d: [d.normal(6, 3)], randomise=False)
    module_case("self_attention_v2", "SelfAttention_v2", lambda: SelfAttention_v2(3, 2),
                {"d_in": 3, "d_out": 2, "qkv_bias": False}, lambda d: [d.normal(6, 3)])
    module_case("self_attention_v2_bias", "SelfAttention_v2",
                lambda: SelfAttention_v2(3, 4, qkv_bias=True),
                {"d_in": 3, "d_out": 4, "qkv_bias": True}, lambda d: [d.normal(5, 3)])
    ca = {"d_in": 3, "d_out": 2, "context_length": 6, "dropout": 0.5, "qkv_bias": False,
          "training": False}
    module_case("causal_attention_eval", "CausalAttention",
                lambda: CausalAttention(3, 2, 6, 0.5), ca, x3)
    module_case("causal_attention_bias_short", "CausalAttention",
                lambda: CausalAttention(3, 4, 6, 0.0, qkv_bias=True),
                dict(ca, d_out=4, dropout=0.0, qkv_bias=True, training=True),
                lambda d: [d.normal(2, 4, 3)])
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    module_case("causal_attention_kpm", "CausalAttention",
                lambda: CausalAttention(3, 2, 6, 0.0), dict(ca, dropout=0.0, training=True,
                                                             key_padding_mask=True),
                lambda d: [d.normal(2, 6, 3), pad],
                forward=lambda m, x, kpm: m(x, key_padding_mask=kpm),
                extra_outs=lambda m: {"out.attn_weights": m.last_weights})
    module_case("mha_wrapper", "MultiHeadAttentionWrapper",
                lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2),
                {"d_in": 3, "d_out": 2, "context_length": 6, "dropout": 0.0,
                 "num_heads": 2, "qkv_bias": False}, x3)
    mha = {"d_in": 3, "d_out": 4, "context_length": 6, "dropout": 0.0, "num_heads": 2,
           "qkv_bias": False}
    module_case("mha", "MultiHeadAttention", lambda: MultiHeadAttention(3, 4, 6, 0.0, 2),
                mha, x3)
    module_case("mha_qkv_bias", "MultiHeadAttention",
                lambda: MultiHeadAttention(3, 4, 6, 0.0, 2, qkv_bias=True),
                dict(mha, qkv_bias=True), x3)
    module_case("mha_eval_short", "MultiHeadAttention",
                lambda: MultiHeadAttention(4, 6, 6, 0.3, 3),
                dict(mha, d_in=4, d_out=6, dropout=0.3, num_heads=3, training=False),
                lambda d: [d.normal(2, 5, 4)])
    module_case("mha_kpm", "MultiHeadAttention",
                lambda: MultiHeadAttention(3, 4, 6, 0.0, 2, qkv_bias=True),
                dict(mha, qkv_bias=True, key_padding_mask=True),
                lambda d: [d.normal(2, 6, 3), pad],
                forward=lambda m, x, kpm: m(x, key_padding_mask=kpm),
                extra_outs=lambda m: {"out.attn_weights": m.last_weights})


# ---- training trajectories --------------------------------------------------------

TRAJ_STEPS = 20
# (name, constructor, every option it ends up with, as the C replay reads them)
TRAJ_OPTIMS = (
    ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False),
     {"lr": 0.1, "momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False}),
    ("adam", lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=False),
     {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}),
    ("adamw", lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=False),
     {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}),
)


def trajectory_cases():
    case0 = "train_mha"
    torch.manual_seed(zlib.crc32(case0.encode()))
    m0 = MultiHeadAttention(8, 8, 6, 0.0, 2, qkv_bias=False).double()
    d = Draw(case0)
    x64, y64 = d.normal(2, 6, 8), d.normal(2, 6, 8)
    pnames = [n for n, _ in m0.named_parameters()]
    margs = {"d_in": 8, "d_out": 8, "context_length": 6, "dropout": 0.0, "num_heads": 2,
             "qkv_bias": False, "steps": TRAJ_STEPS}
    for oname, make_opt, oargs in TRAJ_OPTIMS:
        case = "%s_%s" % (case0, oname)
        for dtn, dt in DTYPES:
            m = MultiHeadAttention(8, 8, 6, 0.0, 2, qkv_bias=False).to(dt)
            m.load_state_dict({k: v.to(dt) for k, v in m0.state_dict().items()})
            x, y = x64.to(dt), y64.to(dt)
            init = [("init.param." + n, p.detach().clone()) for n, p in m.named_parameters()]
            opt = make_opt(list(m.parameters()))
            g = opt.param_groups[0]
            for k, v in oargs.items():  # the options really are those the file states
                have = g["betas"][int(k[-1]) - 1] if k.startswith("beta") else g[k]
                assert have == v, (oname, k, have, v)
            losses = []
            for _ in range(TRAJ_STEPS):
                opt.zero_grad()
                loss = F.mse_loss(m(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            tensors = [("x", x), ("y", y)] + init + [("losses", torch.stack(losses))]
            tensors += [("final.param." + n, p.detach()) for n, p in m.named_parameters()]
            assert [n for n, _ in m.named_parameters()] == pnames
            emit(case, dtn, "trajectory", oname, dict(margs, **oargs), tensors)


def only_row(ops_def, op, out_dir):
    """The fixtures of one NB_OP row of another op list (a tree with an op
    added) into out_dir, leaving the files there alone."""
    global OUT_DIR
    rows = {row.name: row for row in read_rows(ops_def)}
    if op not in rows or rows[op].hand:
        raise SystemExit("gen_fixtures.py: %s has no NB_OP row in %s" % (op, ops_def))
    OUT_DIR = out_dir
    os.makedirs(out_dir, exist_ok=True)
    row_case(rows, op, op)
    print("wrote %s.f64.safetensors and %s.f32.safetensors to %s" % (op, op, out_dir))


def main():
    torch.set_num_threads(1)
    if len(sys.argv) > 1:
        if len(sys.argv) != 4:
            raise SystemExit("usage: gen_fixtures.py [OPS_DEF OP OUT_DIR]")
        return only_row(*sys.argv[1:])
    os.makedirs(OUT_DIR, exist_ok=True)
    for f in os.listdir(OUT_DIR):
        if f.endswith(".safetensors"):
            os.remove(os.path.join(OUT_DIR, f))
    op_cases()
    module_cases()
    trajectory_cases()
    check_hand_ops(read_rows())
    files = sorted(f for f in os.listdir(OUT_DIR) if f.endswith(".safetensors"))
    total = sum(os.path.getsize(os.path.join(OUT_DIR, f)) for f in files)
    print("wrote %d files, %d bytes, to %s" % (len(files), total, OUT_DIR))


if __name__ == "__main__":
    main()
