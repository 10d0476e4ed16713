#!/usr/bin/python3
"""gen_functorch_fixtures.py - functorch's transforms for tests/check_transforms.c.

    /usr/bin/python3 tools/ref/gen_functorch_fixtures.py   # writes tests/fixtures/functorch/

One file, transforms.safetensors, float64 throughout, from Debian's
python3-torch 1.13 and its functorch (jvp, jacrev, jacfwd, hessian, vmap).
Each case's inputs are stored beside the results; the C suite rebuilds the
same function with nabla's ops and compares within 1e-10. Names are
"<case>.<what>", results numbered by argnum ("mlp.jacrev.2" is
d f / d W2). Cases:

  mlp       f(x, W1, b1, W2, b2) = tanh(x W1^T + b1) W2^T + b2, x (3, 4),
            W1 (5, 4), W2 (2, 5): jacrev, jacfwd, and jvp along u0..u4
  softmax   softmax(x, -1), x (2, 5): jacrev
  ln        layer_norm(x, (5,), w, b, 1e-5), x (3, 5): jacrev
  gelu      gelu(x) and gelu(x, 'tanh'), x (6): jacfwd, the hessian of
            sum(gelu(x)^3) and jvp along u
  ce        cross_entropy(logits, t), logits (3, 4): jacrev, hessian (as
            jacrev(jacrev): see jacrev2)
  bmm       a @ b, a (2, 3, 4), b (2, 4, 2): jacrev
  sdpa      causal attention by hand (torch 1.13 has no sdpa):
            softmax(q k^T / sqrt(4), causal) v, q, k, v (1, 2, 3, 4): jacrev
  bcast     (a * b).sum(4).sum(3), a (2, 1, 3, 1, 2), b (1, 2, 1, 2, 1),
            a rank-5 broadcast (the Jacobian keeps to 8 dims): jacrev
  hess      the mlp's cross_entropy against t (3,): hessian over
            (W1, b1, W2, b2), "hess.I.J" (jacrev(jacrev) too)
  psg_mlp   vmap(grad(loss), in_dims=(None, 0, 0)), loss the mlp's
            cross_entropy on one sample, x (4, 4), t (4): "psg_mlp.grad.J"
  psg_mha   the same for the seeds' MultiHeadAttention(4, 4, 3, 0.0, 2)
            (no qkv bias), loss mse(mha(x[None]), y[None]), x and y
            (5, 3, 4); parameters in state_dict order
  psg_lm    a token model: embedding (6, 4), layer_norm (w, b), rms_norm
            (w, eps 1e-6), linear head (6, 4) with bias, loss the
            cross_entropy of the next tokens; ids (4, 3), targets (4, 3)
"""
import os
import sys

import functorch
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchref import MultiHeadAttention, rms_norm, write_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "functorch")
D = torch.float64


def rnd(*shape, scale=1.0):
    return torch.randn(*shape, dtype=D) * scale


def mlp(x, w1, b1, w2, b2):
    return torch.tanh(x @ w1.T + b1) @ w2.T + b2


def sdpa_causal(q, k, v):
    t = q.shape[-2]
    s = q @ k.transpose(-2, -1) / 4 ** 0.5
    s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), -torch.inf)
    return torch.softmax(s, -1) @ v


def jacrev2(f, argnums=0):
    """functorch.hessian is jacfwd(jacrev); torch 1.13 has no forward-mode
    rule for log_softmax's backward, so cross-entropy's is jacrev(jacrev)."""
    return functorch.jacrev(functorch.jacrev(f, argnums=argnums), argnums=argnums)


def put(out, name, value):
    if isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            put(out, "%s.%d" % (name, i), v)
    else:
        out.append((name, value.detach().contiguous()))


def main():
    torch.manual_seed(20261128)
    out = []
    args = lambda f, n: tuple(range(n))  # noqa: E731

    m = (rnd(3, 4), rnd(5, 4, scale=0.5), rnd(5), rnd(2, 5, scale=0.5), rnd(2))
    put(out, "mlp.in", m)
    put(out, "mlp.jacrev", functorch.jacrev(mlp, argnums=args(mlp, 5))(*m))
    put(out, "mlp.jacfwd", functorch.jacfwd(mlp, argnums=args(mlp, 5))(*m))
    u = tuple(rnd(*a.shape) for a in m)
    put(out, "mlp.u", u)
    put(out, "mlp.jvp", functorch.jvp(mlp, m, u)[1])

    x = rnd(2, 5)
    put(out, "softmax.x", x)
    put(out, "softmax.jac", functorch.jacrev(lambda a: torch.softmax(a, -1))(x))

    ln = (rnd(3, 5), rnd(5), rnd(5))
    put(out, "ln.in", ln)
    lnf = lambda a, w, b: F.layer_norm(a, (5,), w, b, 1e-5)  # noqa: E731
    put(out, "ln.jac", functorch.jacrev(lnf, argnums=(0, 1, 2))(*ln))

    g = rnd(6)
    ug = rnd(6)
    put(out, "gelu.x", g)
    put(out, "gelu.u", ug)
    for tag, approx in (("gelu", "none"), ("gelu_tanh", "tanh")):
        fg = lambda a, ap=approx: F.gelu(a, approximate=ap)  # noqa: E731
        put(out, tag + ".jac", functorch.jacfwd(fg)(g))
        put(out, tag + ".hess", functorch.hessian(lambda a, fg=fg: (fg(a) ** 3).sum())(g))
        put(out, tag + ".jvp", functorch.jvp(fg, (g,), (ug,))[1])

    logits, t = rnd(3, 4), torch.tensor([2, 0, 3])
    put(out, "ce.logits", logits)
    put(out, "ce.t", t)
    cef = lambda a: F.cross_entropy(a, t)  # noqa: E731
    put(out, "ce.jac", functorch.jacrev(cef)(logits))
    put(out, "ce.hess", jacrev2(cef)(logits))

    bm = (rnd(2, 3, 4), rnd(2, 4, 2))
    put(out, "bmm.in", bm)
    put(out, "bmm.jac", functorch.jacrev(torch.matmul, argnums=(0, 1))(*bm))

    qkv = (rnd(1, 2, 3, 4), rnd(1, 2, 3, 4), rnd(1, 2, 3, 4))
    put(out, "sdpa.in", qkv)
    put(out, "sdpa.jac", functorch.jacrev(sdpa_causal, argnums=(0, 1, 2))(*qkv))

    bc = (rnd(2, 1, 3, 1, 2), rnd(1, 2, 1, 2, 1))
    put(out, "bcast.in", bc)
    bcf = lambda a, b: (a * b).sum(4).sum(3)  # noqa: E731
    put(out, "bcast.jac", functorch.jacrev(bcf, argnums=(0, 1))(*bc))

    ht = torch.tensor([1, 0, 1])
    put(out, "hess.t", ht)
    hl = lambda w1, b1, w2, b2: F.cross_entropy(mlp(m[0], w1, b1, w2, b2), ht)  # noqa: E731
    h = jacrev2(hl, argnums=(0, 1, 2, 3))(*m[1:])
    for i in range(4):
        for j in range(4):
            put(out, "hess.%d.%d" % (i, j), h[i][j])

    px, pt = rnd(4, 4), torch.tensor([1, 0, 0, 1])
    put(out, "psg_mlp.x", px)
    put(out, "psg_mlp.t", pt)

    def mlp_loss(p, xb, tb):
        return F.cross_entropy(mlp(xb[None], *p), tb[None])
    put(out, "psg_mlp.grad",
        functorch.vmap(functorch.grad(mlp_loss), in_dims=(None, 0, 0))(m[1:], px, pt))

    mha = MultiHeadAttention(4, 4, 3, 0.0, 2).to(D)
    fmha, mp, mbuf = functorch.make_functional_with_buffers(mha)
    names = [n for n, _ in mha.named_parameters()]
    ax, ay = rnd(5, 3, 4), rnd(5, 3, 4)
    put(out, "psg_mha.x", ax)
    put(out, "psg_mha.y", ay)
    for n, p in zip(names, mp):
        put(out, "psg_mha.param." + n, p)

    def mha_loss(p, xb, yb):
        return F.mse_loss(fmha(p, mbuf, xb[None]), yb[None])
    gm = functorch.vmap(functorch.grad(mha_loss), in_dims=(None, 0, 0))(mp, ax, ay)
    put(out, "psg_mha.grad", gm)

    lm = (rnd(6, 4), rnd(4), rnd(4), rnd(4), rnd(6, 4, scale=0.5), rnd(6))
    ids, tg = torch.randint(0, 6, (4, 3)), torch.randint(0, 6, (4, 3))
    put(out, "psg_lm.param", lm)
    put(out, "psg_lm.ids", ids)
    put(out, "psg_lm.tg", tg)

    def lm_loss(p, ib, tb):
        emb, lw, lb, rw, hw, hb = p
        h = F.layer_norm(F.embedding(ib, emb), (4,), lw, lb, 1e-5)
        h = rms_norm(h, (4,), rw, 1e-6)
        return F.cross_entropy(F.linear(h, hw, hb), tb)
    put(out, "psg_lm.grad",
        functorch.vmap(functorch.grad(lm_loss), in_dims=(None, 0, 0))(lm, ids, tg))

    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "transforms.safetensors")
    write_safetensors(path, out, {"torch": torch.__version__, "functorch": functorch.__version__})
    print("wrote %s: %d tensors, %d bytes" % (path, len(out), os.path.getsize(path)))


if __name__ == "__main__":
    main()
