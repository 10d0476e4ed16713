/* nn/gpt_forward.c - the forward pass of every family, walked from its
 * table (gpt_family.c): embeddings, blocks (norm, attention, norm, MLP,
 * residuals), final norm and head; the loss and inference. The KV-cached
 * forward is in gpt_sample.c, which reuses the pieces declared in
 * gpt_internal.h. Everything is a chain of recorded ops: the gradients
 * come from the ops' backward rules (a tied head's gradient is the sum of
 * its two uses because the tape accumulates into the one leaf). */
#include "gpt_family.h"
#include "gpt_internal.h"
#include "moe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const CLS = "gpt";

/* ---- forward -------------------------------------------------------------------- */

/* ids is I64 (B, T) with 1 <= T <= max_t, values in [0, V). */
NB_HIDDEN bool nb_gpt_check_ids(nb_ctx *ctx, const nb_gpt *m, const nb_tensor *ids,
                                const char *what, int64_t max_t) {
    char s[64];
    if (!nb_ctx_ok(ctx)) return false;
    if (!m || !m->wte) {
        nb_ctx_fail(ctx, NB_ERR_STATE, "%s: model is %s", CLS, m ? "not initialised" : "NULL");
        return false;
    }
    if (!ids) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", CLS, what);
        return false;
    }
    if (ids->dtype != NB_I64 || ids->ndim != 2 || ids->shape[1] > max_t) {
        nb_ctx_fail(ctx, ids->dtype != NB_I64 ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                    "%s: %s is %s %s; expected i64 (B, T) with T <= %lld", CLS, what,
                    nb_dtype_name(ids->dtype), nb_shape_str(ids, s, sizeof s),
                    (long long)max_t);
        return false;
    }
    const int64_t *p = ids->data;
    for (size_t i = 0; i < ids->numel; i++)
        if (p[i] < 0 || p[i] >= m->cfg.vocab_size) {
            nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: %s[%zu] = %lld is outside [0, vocab_size %lld)",
                        CLS, what, i, (long long)p[i], (long long)m->cfg.vocab_size);
            return false;
        }
    return true;
}

/* tok_emb[ids] + pos_emb[pos0 .. pos0+T-1], then drop_emb: (B, T, C). */
NB_HIDDEN nb_tensor *nb_gpt_embed(nb_ctx *ctx, nb_gpt *m, const nb_tensor *ids, int64_t pos0) {
    const gpt_layout *l = nb_gpt_layout(&m->cfg);
    nb_tensor *x = NB_NN_SCOPED(ctx, l->s.tok, nb_embedding(ctx, m->wte, ids));
    if (l->pos == POS_ROPE) return x; /* positions are turned into q and k instead */
    int64_t t = ids->shape[1];
    nb_tensor *pos = nb_empty(ctx, NB_I64, 1, &t);
    if (!pos) return NULL;
    for (int64_t i = 0; i < t; i++) ((int64_t *)pos->data)[i] = pos0 + i;
    x = nb_add(ctx, x, NB_NN_SCOPED(ctx, l->s.pos, nb_embedding(ctx, m->wpe, pos)));
    return nb_gpt_dropout(ctx, m, x);
}

NB_HIDDEN nb_tensor *nb_gpt_dropout(nb_ctx *ctx, nb_gpt *m, nb_tensor *x) {
    if (m->cfg.dropout == 0 || !m->training || !nb_gpt_layout(&m->cfg)->resid_dropout) return x;
    return nb_dropout(ctx, x, m->cfg.dropout, true, m->rng);
}

/* ---- the linear layers ---------------------------------------------------------- */

/* y = x @ w^T + b for x (..., in), w (out, in), b (out) or NULL. Without
 * grad recording and with at most FEW_ROWS rows (sampling: one new token
 * per sequence), each output is a dot product along a contiguous row of w:
 * linear's gemm would first repack w^T, which for one row costs more than
 * the product. Otherwise, or when an operand carries a tangent (forward
 * mode, which the dot kernel would drop), nb_linear (recorded, with its
 * backward and its forward-mode rule). */
enum { FEW_ROWS = 8 };

typedef struct dot_job {
    const nb_tensor *x, *w, *b;
    nb_tensor *y;
    int64_t rows, in, out;
} dot_job;

/* Outputs [o0, o1) of every row: eight partial sums along k, then the
 * tail. Four outputs at a time, their rows of w read side by side while
 * the next four rows are asked for: one row at a time, the loads waited on
 * memory, and GPT-2 124M's sampling read its 495 MB of weights a token at 7
 * GB/s on the Intel Xeon of 2026-12-02, whose plain read stream gives 13;
 * four at a time with the prefetch, 10. Each output is computed the same
 * way whatever the grouping and the split, so neither changes a bit. */
#define DOT_SUM(a) (((a)[0] + (a)[4]) + ((a)[1] + (a)[5])) + (((a)[2] + (a)[6]) + ((a)[3] + (a)[7]))
#define DOT_ROWS(T)                                                                 \
    {                                                                               \
        const T *xp = j->x->data, *wp = j->w->data, *bp = j->b ? j->b->data : NULL; \
        T *yp = j->y->data;                                                         \
        const int64_t in = j->in, line = 64 / (int64_t)sizeof(T);                   \
        for (int64_t r = 0; r < j->rows; r++) {                                     \
            const T *xr = xp + r * in;                                              \
            T *yr = yp + r * j->out;                                                \
            int64_t o = o0;                                                         \
            for (; o + 4 <= o1; o += 4) {                                           \
                const T *w0 = wp + o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in; \
                T a0[8] = {0}, a1[8] = {0}, a2[8] = {0}, a3[8] = {0};               \
                int64_t k = 0;                                                      \
                for (; k + 8 <= in; k += 8) {                                       \
                    if (k % line == 0)                                              \
                        for (int q = 4; q < 8; q++) __builtin_prefetch(w0 + q * in + k); \
                    for (int l = 0; l < 8; l++) {                                   \
                        T xv = xr[k + l];                                           \
                        a0[l] += xv * w0[k + l], a1[l] += xv * w1[k + l];           \
                        a2[l] += xv * w2[k + l], a3[l] += xv * w3[k + l];           \
                    }                                                               \
                }                                                                   \
                T s0 = DOT_SUM(a0), s1 = DOT_SUM(a1), s2 = DOT_SUM(a2), s3 = DOT_SUM(a3); \
                for (; k < in; k++) {                                               \
                    T xv = xr[k];                                                   \
                    s0 += xv * w0[k], s1 += xv * w1[k], s2 += xv * w2[k], s3 += xv * w3[k]; \
                }                                                                   \
                yr[o] = bp ? s0 + bp[o] : s0, yr[o + 1] = bp ? s1 + bp[o + 1] : s1;  \
                yr[o + 2] = bp ? s2 + bp[o + 2] : s2, yr[o + 3] = bp ? s3 + bp[o + 3] : s3; \
            }                                                                       \
            for (; o < o1; o++) {                                                   \
                const T *wr = wp + o * in;                                          \
                T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                \
                int64_t k = 0;                                                      \
                for (; k + 8 <= in; k += 8)                                         \
                    for (int l = 0; l < 8; l++) acc[l] += xr[k + l] * wr[k + l];    \
                T sum = DOT_SUM(acc);                                               \
                for (; k < in; k++) sum += xr[k] * wr[k];                           \
                yr[o] = bp ? sum + bp[o] : sum;                                     \
            }                                                                       \
        }                                                                           \
    }

static void dot_range(void *arg, int64_t o0, int64_t o1) {
    const dot_job *j = arg;
    NB_DISPATCH(j->x->dtype, DOT_ROWS);
}
#undef DOT_ROWS
#undef DOT_SUM

NB_HIDDEN nb_tensor *nb_gpt_linear(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b) {
    if (!nb_ctx_ok(ctx) || !x || !w || nb_is_grad_enabled(ctx) || x->dtype != w->dtype ||
        (b && b->dtype != w->dtype) || x->shape[x->ndim - 1] != w->shape[1] || w->ndim != 2 ||
        nb_tangent(x) || nb_tangent(w) || (b && nb_tangent(b)))
        return nb_linear(ctx, x, w, b);
    const int64_t in = w->shape[1], out = w->shape[0], rows = (int64_t)x->numel / in;
    if (rows > FEW_ROWS) return nb_linear(ctx, x, w, b);
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out;
    nb_tensor *y = nb_empty(ctx, x->dtype, x->ndim, shape);
    if (!y) return NULL;
    dot_job j = {x, w, b, y, rows, in, out};
    /* a thread takes at least ~256k multiply-adds */
    nb_parallel_for(out, 1 + (INT64_C(1) << 18) / (in * rows), dot_range, &j);
    return y;
}

/* q, k, v (B, T, C) each -> causal attention over the heads -> c_proj. */
static nb_tensor *nano_heads(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor **part,
                             int64_t b, int64_t t) {
    int64_t C = m->cfg.n_embd, H = m->cfg.n_head, hd = C / H;
    double p = m->training ? m->cfg.dropout : 0.0;
    uint64_t seed = 0; /* two draws, high word first (a comma sequences them) */
    if (p > 0.0) seed = (uint64_t)nb_pcg32_next(m->rng) << 32, seed |= nb_pcg32_next(m->rng);
    for (int k = 0; k < 3; k++) part[k] = nb_view(ctx, part[k], NB_SHAPE(b, t, H, hd));
    NB_LIB_HERE(ctx);
    nb_tensor *y = nb_sdpa(ctx, part[0], part[1], part[2], NULL, true, 1.0 / sqrt((double)hd),
                           p, seed); /* (B, T, C) */
    return NB_NN_SCOPED(ctx, nb_gpt_layout(&m->cfg)->s.o,
                        nb_gpt_linear(ctx, y, blk->c_proj_w, blk->c_proj_b));
}

/* nanoGPT's CausalSelfAttention: c_attn, split q, k, v, heads, causal
 * softmax(q k^T / sqrt(hd)), attn_dropout, @ v, merge, c_proj, with the
 * middle as one fused nb_sdpa (no (B, H, T, T) weights): q, k, v (B, T, C)
 * read as (B, T, H, hd). In training with dropout > 0 the sdpa dropout seed
 * is two draws of the model's rng, high word first. h (B, T, C). */
static nb_tensor *nano_attention(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h) {
    int64_t b = h->shape[0], t = h->shape[1], C = m->cfg.n_embd;
    NB_LIB_HERE(ctx);
    /* q, k, v: split the (3C, C) weight for three linears, or the (B, T, 3C)
     * output of one (the same dot products, the same bits), whichever is
     * smaller: the weight for the character GPT (768 tokens, 128 channels),
     * the output for GPT-2 124M at B 4, T 64 (256 tokens, 768 channels). */
    const int64_t thirds[3] = {C, C, C};
    nb_tensor *w3[3] = {NULL, NULL, NULL}, *b3[3] = {NULL, NULL, NULL}, *part[3];
    if (b * t < C && nb_is_grad_enabled(ctx)) {
        nb_tensor *qkv = nb_gpt_linear(ctx, h, blk->c_attn_w, blk->c_attn_b);
        if (nb_split(ctx, qkv, 2, 3, thirds, part)) return NULL;
        return nano_heads(ctx, m, blk, part, b, t);
    }
    if (nb_split(ctx, blk->c_attn_w, 0, 3, thirds, w3)) return NULL;
    if (blk->c_attn_b && nb_split(ctx, blk->c_attn_b, 0, 3, thirds, b3)) return NULL;
    if (!nb_is_grad_enabled(ctx) && b * t <= FEW_ROWS) /* sampling: one token a sequence */
        for (int k = 0; k < 3; k++) part[k] = nb_gpt_linear(ctx, h, w3[k], b3[k]);
    else if (nb_linear_n(ctx, h, 3, w3, b3, part)) /* (B, T, C) each, one job */
        return NULL;
    return nano_heads(ctx, m, blk, part, b, t);
}

/* n linears of one x without biases: one job when recording or for many
 * rows (nb_linear_n), dot products for a few rows when sampling. With
 * one_by_one (the composed model the tape explorer records, use_fused
 * false) each product runs as its op is recorded, so the page's "check
 * this op", which moves an input between two records, sees it move. 0 or
 * -1. */
static int linears(nb_ctx *ctx, nb_tensor *x, int n, nb_tensor *const *w, nb_tensor **out,
                   bool one_by_one) {
    int64_t rows = x ? (int64_t)x->numel / x->shape[x->ndim - 1] : 0;
    if (!x || (!one_by_one && (nb_is_grad_enabled(ctx) || rows > FEW_ROWS)))
        return nb_linear_n(ctx, x, n, w, NULL, out);
    for (int k = 0; k < n; k++) out[k] = nb_gpt_linear(ctx, x, w[k], NULL);
    return nb_ctx_ok(ctx) ? 0 : -1;
}

NB_HIDDEN int nb_gpt_qkv(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h, int64_t pos0,
                         nb_tensor **q, nb_tensor **k, nb_tensor **v) {
    const nb_gpt_config *c = &m->cfg;
    const gpt_scopes *s = &nb_gpt_layout(c)->s;
    if (!h) return -1;
    const int64_t b = h->shape[0], t = h->shape[1], H = c->n_head, G = nb_gpt_kv_heads(c),
                  hd = nb_gpt_head_dim(c);
    nb_tensor *w[3] = {blk->wq, blk->wk, blk->wv}, *p[3];
    NB_LIB_HERE(ctx);
    if (linears(ctx, h, 3, w, p, !m->use_fused)) return -1;
    *q = nb_view(ctx, p[0], NB_SHAPE(b, t, H, hd));
    *k = nb_view(ctx, p[1], NB_SHAPE(b, t, G, hd));
    *v = nb_view(ctx, p[2], NB_SHAPE(b, t, G, hd));
    if (c->qk_norm) {
        *q = NB_NN_SCOPED(ctx, s->q_norm, nb_rms_norm(ctx, *q, blk->q_norm, c->norm_eps));
        *k = NB_NN_SCOPED(ctx, s->k_norm, nb_rms_norm(ctx, *k, blk->k_norm, c->norm_eps));
    }
    NB_LIB_HERE(ctx);
    *q = nb_rope(ctx, *q, m->rope_cos, m->rope_sin, pos0, NB_ROPE_THD);
    *k = nb_rope(ctx, *k, m->rope_cos, m->rope_sin, pos0, NB_ROPE_THD);
    return nb_ctx_ok(ctx) ? 0 : -1;
}

/* kv (B, G, T, hd) -> (B, H, T, hd), query head h reading kv head
 * h / (H / G): a gathered copy, for the composed attention only. */
static nb_tensor *kv_per_query_head(nb_ctx *ctx, nb_tensor *kv, int64_t H) {
    const int64_t B = kv->shape[0], G = kv->shape[1], T = kv->shape[2], hd = kv->shape[3];
    if (G == H) return kv;
    nb_tensor *idx = nb_empty(ctx, NB_I64, 1, (const int64_t[]){B * H});
    if (!idx) return NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) ((int64_t *)idx->data)[b * H + h] = b * G + h / (H / G);
    nb_tensor *rows = nb_index_select(ctx, nb_view(ctx, kv, NB_SHAPE(B * G, T * hd)), idx);
    return nb_view(ctx, rows, NB_SHAPE(B, H, T, hd));
}

/* The attention as composed ops (m->use_fused false), for the tape
 * explorer: scores (B, H, T, T) per query head, scaled, the causal and
 * window masks, softmax (the weights the page draws per head), dropout
 * (nb_dropout's mask, not nb_sdpa's), @ v, heads merged. q (B, T, H, hd),
 * k and v (B, T, Hkv, hd) -> (B, T, H hd); nb_sdpa_ex's values to rounding. */
static nb_tensor *gqa_composed(nb_ctx *ctx, nb_gpt *m, nb_tensor *q, nb_tensor *k, nb_tensor *v,
                               double p) {
    const int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], hd = q->shape[3];
    const int64_t W = m->cfg.window;
    const int perm[4] = {0, 2, 1, 3};
    NB_LIB_HERE(ctx);
    q = nb_permute(ctx, q, perm); /* (B, H, T, hd) */
    k = kv_per_query_head(ctx, nb_permute(ctx, k, perm), H);
    v = kv_per_query_head(ctx, nb_permute(ctx, v, perm), H);
    if (!q || !k || !v) return NULL;
    nb_tensor *sc = nb_scale(ctx, nb_matmul(ctx, q, nb_transpose(ctx, k, 2, 3)),
                             1.0 / sqrt((double)hd));
    sc = nb_causal_fill(ctx, sc, -INFINITY);
    if (W > 0 && W < T) { /* keys j <= i - window are out of the window */
        nb_tensor *out = nb_empty(ctx, NB_BOOL, 2, (const int64_t[]){T, T});
        if (!out) return NULL;
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++) ((uint8_t *)out->data)[i * T + j] = j <= i - W;
        sc = nb_masked_fill(ctx, sc, out, -INFINITY);
    }
    nb_tensor *w = nb_softmax(ctx, sc); /* (B, H, T, T) */
    if (p > 0.0) w = nb_dropout(ctx, w, p, true, m->rng);
    nb_tensor *y = nb_permute(ctx, nb_matmul(ctx, w, v), perm); /* (B, T, H, hd) */
    return nb_view(ctx, y, NB_SHAPE(B, T, H * hd));
}

/* Llama 3's and Qwen3's attention: q, k, v (nb_gpt_qkv), then one fused
 * causal nb_sdpa_ex reading the Hkv key/value heads in place for the H
 * query heads (grouped-query attention: no repeat of k or v), with the
 * sliding window, then Wo. Dropout on the attention weights as nanoGPT's
 * (the seed two draws of the model's rng). h (B, T, C) -> (B, T, C). */
static nb_tensor *gqa_attention(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h) {
    nb_tensor *q, *k, *v;
    if (nb_gpt_qkv(ctx, m, blk, h, 0, &q, &k, &v)) return NULL;
    double p = m->training ? m->cfg.dropout : 0.0;
    const gpt_scopes *s = &nb_gpt_layout(&m->cfg)->s;
    if (!m->use_fused)
        return NB_NN_SCOPED(ctx, s->o,
                            nb_gpt_linear(ctx, gqa_composed(ctx, m, q, k, v, p), blk->wo, NULL));
    uint64_t seed = 0; /* two draws, high word first (a comma sequences them) */
    if (p > 0.0) seed = (uint64_t)nb_pcg32_next(m->rng) << 32, seed |= nb_pcg32_next(m->rng);
    NB_LIB_HERE(ctx);
    nb_tensor *y = nb_sdpa_ex(ctx, q, k, v,
                              &(nb_sdpa_opts){.causal = true,
                                              .scale = 1.0 / sqrt((double)q->shape[3]),
                                              .dropout_p = p, .seed = seed,
                                              .window = m->cfg.window}); /* (B, T, H hd) */
    return NB_NN_SCOPED(ctx, s->o, nb_gpt_linear(ctx, y, blk->wo, NULL));
}

/* The attention of a block: the one place that picks the attention code. */
static nb_tensor *attention(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h) {
    const gpt_layout *l = nb_gpt_layout(&m->cfg);
    switch (l->att) {
    case ATT_MHA_MODULE: return NB_NN_SCOPED(ctx, l->s.att, nb_nn_mha_forward(ctx, &blk->att, h));
    case ATT_FUSED_QKV: return NB_NN_SCOPED(ctx, l->s.att, nano_attention(ctx, m, blk, h));
    default: return NB_NN_SCOPED(ctx, l->s.att, gqa_attention(ctx, m, blk, h));
    }
}

/* The gated MLP: silu(h W1^T) * (h W2^T), then W3; W1 and W2 in one job.
 * h (..., C) -> (..., C) with W1, W2 (hidden, C), W3 (C, hidden). */
static nb_tensor *gated_mlp(nb_ctx *ctx, const gpt_scopes *s, nb_tensor *h, nb_tensor *w1,
                            nb_tensor *w2, nb_tensor *w3, bool one_by_one) {
    nb_tensor *w[2] = {w1, w2}, *p[2];
    NB_LIB_HERE(ctx);
    if (linears(ctx, h, 2, w, p, one_by_one)) return NULL;
    nb_tensor *f = nb_mul(ctx, nb_silu(ctx, p[0]), p[1]);
    return NB_NN_SCOPED(ctx, s->proj, nb_gpt_linear(ctx, f, w3, NULL));
}

typedef struct expert_job {
    const nb_gpt_block *blk;
    const gpt_scopes *s;
    bool one_by_one; /* linears' flag: the composed model (use_fused false) */
} expert_job;

/* Expert e in a module of its own, "experts.E" under the MLP in both
 * layouts (Hugging Face's own path; the course keeps its experts in fc1.E,
 * fc2.E and fc3.E), so the tape explorer and the diagnostics name each. */
static nb_tensor *expert(nb_ctx *ctx, int e, nb_tensor *xe, void *user) {
    const expert_job *j = user;
    char name[32];
    snprintf(name, sizeof name, j->s->experts ? "%d" : "experts.%d", e);
    return NB_NN_SCOPED(ctx, name, gated_mlp(ctx, j->s, xe, j->blk->ex_gate[e], j->blk->ex_up[e],
                                             j->blk->ex_down[e], j->one_by_one));
}

/* Qwen3-MoE's MLP: router logits h Wg^T (N, E), their top k, a softmax
 * over those k (Hugging Face's softmax then top-k with norm_topk_prob, the
 * same numbers), and each token through its k experts only: all experts'
 * products as grouped ops (nb_moe_gated_grouped), or with expert_modules
 * or the composed model each expert as its own module (nb_moe_dispatch).
 * h (B, T, C) -> (B, T, C). */
static nb_tensor *moe_mlp(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h) {
    const gpt_scopes *s = &nb_gpt_layout(&m->cfg)->s;
    const int64_t C = m->cfg.n_embd, N = (int64_t)h->numel / C;
    NB_LIB_HERE(ctx);
    nb_tensor *x = nb_view(ctx, h, NB_SHAPE(N, C)), *idx = NULL;
    nb_tensor *logits = NB_NN_SCOPED(ctx, s->router, nb_gpt_linear(ctx, x, blk->router, NULL));
    NB_LIB_HERE(ctx);
    nb_tensor *gates = nb_softmax(ctx, nb_topk(ctx, logits, m->cfg.n_expert_per_tok, -1, &idx));
    nb_tensor *y;
    if (m->expert_modules || !m->use_fused) {
        expert_job j = {blk, s, !m->use_fused};
        y = NB_NN_SCOPED(ctx, s->experts,
                         nb_moe_dispatch(ctx, x, gates, idx, m->cfg.n_expert, expert, &j));
    } else {
        y = NB_NN_SCOPED(ctx, s->experts,
                         nb_moe_gated_grouped(ctx, x, gates, idx, m->cfg.n_expert, blk->ex_gate,
                                              blk->ex_up, blk->ex_down, s->proj));
    }
    NB_LIB_HERE(ctx);
    return nb_view(ctx, y, h->ndim, h->shape);
}

NB_HIDDEN nb_tensor *nb_gpt_mlp(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h) {
    const gpt_scopes *s = &nb_gpt_layout(&m->cfg)->s;
    if (!h) return NULL;
    if (m->cfg.n_expert > 0 && nb_gpt_layout(&m->cfg)->mlp == MLP_GATED)
        return moe_mlp(ctx, m, blk, h);
    if (nb_gpt_layout(&m->cfg)->mlp == MLP_GATED)
        return gated_mlp(ctx, s, h, blk->fc_w, blk->up_w, blk->proj_w, !m->use_fused);
    nb_gelu_approx g = nb_gpt_layout(&m->cfg)->gelu_from_cfg ? m->cfg.gelu : NB_GELU_TANH;
    NB_LIB_HERE(ctx);
    nb_tensor *f = NB_NN_SCOPED(ctx, s->fc, nb_gpt_linear(ctx, h, blk->fc_w, blk->fc_b));
    f = NB_NN_SCOPED(ctx, s->act, nb_gelu(ctx, f, g));
    return NB_NN_SCOPED(ctx, s->proj, nb_gpt_linear(ctx, f, blk->proj_w, blk->proj_b));
}

/* The family's norm over the last dim: LayerNorm (eps 1e-5) or RMSNorm. */
static nb_tensor *norm(nb_ctx *ctx, const nb_gpt *m, nb_tensor *x, nb_tensor *w, nb_tensor *b) {
    if (nb_gpt_layout(&m->cfg)->norm == NORM_RMS) return nb_rms_norm(ctx, x, w, m->cfg.norm_eps);
    return nb_layer_norm(ctx, x, w, b, 1e-5);
}

NB_HIDDEN nb_tensor *nb_gpt_block_norm1(nb_ctx *ctx, nb_gpt *m, int i, nb_tensor *x) {
    nb_gpt_block *blk = &m->blocks[i];
    return NB_NN_SCOPED(ctx, nb_gpt_layout(&m->cfg)->s.norm1,
                        norm(ctx, m, x, blk->ln1_w, blk->ln1_b));
}

NB_HIDDEN nb_tensor *nb_gpt_block_finish(nb_ctx *ctx, nb_gpt *m, int i, nb_tensor *x,
                                         nb_tensor *a) {
    nb_gpt_block *blk = &m->blocks[i];
    const gpt_scopes *s = &nb_gpt_layout(&m->cfg)->s;
    NB_LIB_HERE(ctx); x = nb_add(ctx, x, nb_gpt_dropout(ctx, m, a));
    nb_tensor *h = NB_NN_SCOPED(ctx, s->norm2, norm(ctx, m, x, blk->ln2_w, blk->ln2_b));
    nb_tensor *f = NB_NN_SCOPED(ctx, s->mlp, nb_gpt_mlp(ctx, m, blk, h));
    NB_LIB_HERE(ctx); return nb_add(ctx, x, nb_gpt_dropout(ctx, m, f));
}

/* Block i of the full forward (gpt_sample.c runs the cached one). */
static nb_tensor *block_body(nb_ctx *ctx, nb_gpt *m, int i, nb_tensor *x) {
    NB_LIB_HERE(ctx);
    nb_tensor *a = attention(ctx, m, &m->blocks[i], nb_gpt_block_norm1(ctx, m, i, x));
    return nb_gpt_block_finish(ctx, m, i, x, a);
}

/* ... in its scope, the state_dict's prefix of the block: "transformer.h.0"
 * or "trf_blocks.0" */
static nb_tensor *block_forward(nb_ctx *ctx, nb_gpt *m, int i, nb_tensor *x) {
    char name[48];
    snprintf(name, sizeof name, nb_gpt_layout(&m->cfg)->s.block, i);
    return NB_NN_SCOPED(ctx, name, block_body(ctx, m, i, x));
}

NB_HIDDEN nb_tensor *nb_gpt_head(nb_ctx *ctx, nb_gpt *m, nb_tensor *x) {
    const gpt_scopes *s = &nb_gpt_layout(&m->cfg)->s;
    NB_LIB_HERE(ctx);
    x = NB_NN_SCOPED(ctx, s->final_norm, norm(ctx, m, x, m->lnf_w, m->lnf_b));
    return NB_NN_SCOPED(ctx, s->head, nb_gpt_linear(ctx, x, m->head, NULL)); /* (B, T, V) */
}

/* The model's ops are recorded with their lines here (anomaly reports and
 * tape dumps name them); the caller's site comes back after. */
nb_tensor *nb_gpt_forward(nb_ctx *ctx, nb_gpt *m, const nb_tensor *ids) {
    if (!nb_gpt_check_ids(ctx, m, ids, "ids", m ? m->cfg.block_size : 0)) return NULL;
    nb_site_state caller = nb_ctx_site(ctx);
    NB_LIB_HERE(ctx);
    nb_tensor *x = nb_gpt_embed(ctx, m, ids, 0);
    for (int i = 0; i < m->cfg.n_layer && x; i++) x = block_forward(ctx, m, i, x);
    x = nb_gpt_head(ctx, m, x);
    nb_ctx_set_site_state(ctx, caller);
    return x;
}

nb_tensor *nb_gpt_loss(nb_ctx *ctx, nb_gpt *m, const nb_tensor *ids, const nb_tensor *targets,
                       nb_tensor **logits) {
    if (logits) *logits = NULL;
    if (!nb_gpt_check_ids(ctx, m, ids, "ids", m ? m->cfg.block_size : 0)) return NULL;
    if (!nb_gpt_check_ids(ctx, m, targets, "targets", m->cfg.block_size)) return NULL;
    if (!nb_same_shape(ids, targets)) {
        char a[64], b[64];
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: targets %s do not match ids %s", CLS,
                    nb_shape_str(targets, b, sizeof b), nb_shape_str(ids, a, sizeof a));
        return NULL;
    }
    nb_tensor *out = nb_gpt_forward(ctx, m, ids);
    if (logits) *logits = out;
    int64_t n = ids->numel, V = m->cfg.vocab_size;
    nb_tensor *flat = nb_view(ctx, out, NB_SHAPE(n, V));
    /* targets.view(-1): the same data, a 1-D header */
    nb_tensor tv = *targets;
    tv.ndim = 1;
    tv.shape[0] = n;
    tv.shape[1] = 1;
    tv.node = NULL;
    nb_site_state caller = nb_ctx_site(ctx);
    NB_LIB_HERE(ctx);
    nb_tensor *loss = nb_cross_entropy(ctx, flat, &tv);
    nb_ctx_set_site_state(ctx, caller);
    return loss;
}

nb_tensor *nb_gpt_infer(nb_ctx *ctx, nb_gpt *m, const nb_tensor *ids) {
    if (!nb_ctx_ok(ctx) || !m) return nb_gpt_forward(ctx, m, ids);
    bool grad = nb_set_grad_enabled(ctx, false), train = m->training;
    nb_gpt_train(m, false);
    nb_tensor *y = nb_gpt_forward(ctx, m, ids);
    nb_gpt_train(m, train);
    nb_set_grad_enabled(ctx, grad);
    return y;
}

