/* nn/gpt.c - the GPT model in its two layouts (the course's GPTModel and
 * nanoGPT's GPT): config, init under the layout's state_dict names,
 * loading a state_dict, and the forward pass (training, loss, inference).
 * The KV-cached forward and generation are in gpt_sample.c, the summary in
 * gpt_summary.c. Everything is a chain of recorded ops: the gradients come
 * from the ops' backward rules (the tied head's gradient is the sum of its
 * two uses because the tape accumulates into the one leaf). */
#include "gpt_internal.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static const char *const CLS = "gpt";

nb_gpt_config nb_gpt_config_default(nb_gpt_arch arch) {
    nb_gpt_config c = {.arch = arch, .vocab_size = 50257, .block_size = 1024, .n_layer = 12,
                       .n_head = 12, .n_embd = 768, .dropout = 0.1, .bias = true,
                       .qkv_bias = false, .dtype = NB_F32, .no_grad = false,
                       .gelu = NB_GELU_TANH};
    if (arch == NB_GPT_NANOGPT) {
        c.vocab_size = 50304;
        c.dropout = 0.0;
        c.gelu = NB_GELU_NONE;
    }
    return c;
}

/* ---- config checks ----------------------------------------------------------- */

static nb_status check_config(nb_ctx *pctx, const nb_gpt_config *c, const nb_pcg32 *rng) {
    if (!c) return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: config is NULL", CLS);
    if (c->arch != NB_GPT_GPTMODEL && c->arch != NB_GPT_NANOGPT)
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: unknown arch %d", CLS, (int)c->arch);
    const char *what[] = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd"};
    int64_t v[] = {c->vocab_size, c->block_size, c->n_layer, c->n_head, c->n_embd};
    for (int i = 0; i < 5; i++)
        if (v[i] < 1)
            return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: %s %lld must be positive", CLS, what[i],
                               (long long)v[i]);
    if (c->n_embd % c->n_head)
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: n_embd %lld is not divisible by n_head %d",
                           CLS, (long long)c->n_embd, c->n_head);
    if (c->n_layer > 10000 || c->n_embd > (INT64_C(1) << 24) ||
        c->vocab_size > (INT64_C(1) << 31) || c->block_size > (INT64_C(1) << 24))
        return nb_ctx_fail(pctx, NB_ERR_SIZE, "%s: config too large (n_layer %d, n_embd %lld, "
                           "vocab_size %lld, block_size %lld)", CLS, c->n_layer,
                           (long long)c->n_embd, (long long)c->vocab_size,
                           (long long)c->block_size);
    if (!(c->dropout >= 0.0 && c->dropout < 1.0))
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: dropout %g is outside [0, 1)", CLS,
                           c->dropout);
    if (c->dropout > 0 && !rng)
        return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: dropout %g needs an rng", CLS, c->dropout);
    if (c->gelu != NB_GELU_NONE && c->gelu != NB_GELU_TANH)
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: unknown gelu %d", CLS, (int)c->gelu);
    if (c->dtype != NB_F32 && c->dtype != NB_F64)
        return nb_ctx_fail(pctx, NB_ERR_DTYPE, "%s: dtype %s, parameters must be f32 or f64",
                           CLS, nb_dtype_name(c->dtype));
    return NB_OK;
}

/* ---- building ---------------------------------------------------------------- */

/* The state of one init: where names and tensors go, how values are drawn. */
typedef struct builder {
    nb_gpt *m;
    nb_ctx *pctx;
    nb_pcg32 *rng; /* draws; NULL leaves zeros */
} builder;

/* A name printed into pctx. */
static const char *name_of(builder *b, const char *fmt, ...) NB_PRINTF_LIKE(2, 3);
static const char *name_of(builder *b, const char *fmt, ...) {
    char buf[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = strlen(buf) + 1;
    char *s = nb_ctx_alloc(b->pctx, n);
    if (s) memcpy(s, buf, n);
    return s;
}

/* Lists t (a new leaf in pctx) under `name` in params and state_dict. */
static nb_tensor *add(builder *b, const char *name, nb_tensor *t) {
    if (!t || !name) return NULL;
    if (!b->m->cfg.no_grad && !nb_requires_grad(t)) return NULL;
    t->name = name;
    if (nb_list_insert(&b->m->params, name, t) || nb_list_insert(&b->m->state_dict, name, t)) {
        nb_ctx_fail(b->pctx, NB_ERR_VALUE, "%s: cannot list '%s'", CLS, name);
        return NULL;
    }
    return t;
}

typedef enum fill { F_ZERO, F_ONE, F_NORMAL, F_UNIFORM } fill;

/* A new parameter of shape (d0[, d1]) filled by `how` (std or bound `a`). */
static nb_tensor *param(builder *b, const char *name, int64_t d0, int64_t d1, fill how,
                        double a) {
    int nd = d1 ? 2 : 1;
    int64_t shape[2] = {d0, d1};
    nb_dtype dt = b->m->cfg.dtype;
    nb_tensor *t;
    if (how == F_ONE)
        t = nb_ones(b->pctx, dt, nd, shape);
    else if (!b->rng || how == F_ZERO)
        t = nb_zeros(b->pctx, dt, nd, shape);
    else if (how == F_NORMAL)
        t = nb_normal(b->pctx, dt, nd, shape, 0.0, a, b->rng);
    else
        t = nb_uniform(b->pctx, dt, nd, shape, -a, a, b->rng);
    return add(b, name, t);
}

/* nn.Linear(in, out, bias) with PyTorch's init. */
static void torch_linear(builder *b, const char *prefix, int64_t in, int64_t out, bool bias,
                         nb_tensor **w, nb_tensor **bs) {
    double bound = 1.0 / sqrt((double)in);
    *w = param(b, name_of(b, "%s.weight", prefix), out, in, F_UNIFORM, bound);
    if (bias) *bs = param(b, name_of(b, "%s.bias", prefix), out, 0, F_UNIFORM, bound);
}

/* The course's TransformerBlock: att (MultiHeadAttention), ff, norm1, norm2. */
static nb_status build_gptmodel_block(builder *b, int i, nb_gpt_block *blk) {
    nb_gpt *m = b->m;
    const nb_gpt_config *c = &m->cfg;
    int64_t C = c->n_embd;
    nb_pcg32 zero_rng;
    nb_pcg32_seed(&zero_rng, 0, 1);
    nb_status st = nb_nn_mha_init(b->pctx, &blk->att, C, C, c->block_size, c->dropout, c->n_head,
                                  c->qkv_bias, c->dtype, b->rng ? b->rng : &zero_rng);
    if (st) return st;
    blk->att.dropout.rng = m->rng; /* dropout masks come from the model's rng */
    for (int k = 0; k < blk->att.params.n; k++) {
        nb_tensor *t = nb_list_tensor(&blk->att.params, k);
        if (!b->rng) memset(t->data, 0, t->numel * nb_dtype_size(t->dtype));
        if (c->no_grad) {
            t->requires_grad = false;
            t->grad = NULL;
        }
        const char *nm = name_of(b, "trf_blocks.%d.att.%s", i,
                                 nb_list_name(&blk->att.params, k));
        if (!nm || nb_list_insert(&m->params, nm, t) || nb_list_insert(&m->state_dict, nm, t))
            return nb_ctx_fail(b->pctx, NB_ERR_VALUE, "%s: cannot list block %d", CLS, i);
        t->name = nm;
    }
    torch_linear(b, name_of(b, "trf_blocks.%d.ff.layers.0", i), C, 4 * C, true, &blk->fc_w,
                 &blk->fc_b);
    torch_linear(b, name_of(b, "trf_blocks.%d.ff.layers.2", i), 4 * C, C, true, &blk->proj_w,
                 &blk->proj_b);
    blk->ln1_w = param(b, name_of(b, "trf_blocks.%d.norm1.scale", i), C, 0, F_ONE, 0);
    blk->ln1_b = param(b, name_of(b, "trf_blocks.%d.norm1.shift", i), C, 0, F_ZERO, 0);
    blk->ln2_w = param(b, name_of(b, "trf_blocks.%d.norm2.scale", i), C, 0, F_ONE, 0);
    blk->ln2_b = param(b, name_of(b, "trf_blocks.%d.norm2.shift", i), C, 0, F_ZERO, 0);
    return nb_ctx_status(b->pctx);
}

static nb_status build_gptmodel(builder *b) {
    nb_gpt *m = b->m;
    const nb_gpt_config *c = &m->cfg;
    m->wte = param(b, "tok_emb.weight", c->vocab_size, c->n_embd, F_NORMAL, 1.0);
    m->wpe = param(b, "pos_emb.weight", c->block_size, c->n_embd, F_NORMAL, 1.0);
    for (int i = 0; i < c->n_layer && !nb_ctx_status(b->pctx); i++)
        build_gptmodel_block(b, i, &m->blocks[i]);
    m->lnf_w = param(b, "final_norm.scale", c->n_embd, 0, F_ONE, 0);
    m->lnf_b = param(b, "final_norm.shift", c->n_embd, 0, F_ZERO, 0);
    nb_tensor *none = NULL;
    torch_linear(b, "out_head", c->n_embd, c->vocab_size, false, &m->head, &none);
    return nb_ctx_status(b->pctx);
}

/* nanoGPT: a Linear's weight N(0, std) and a zero bias when cfg.bias. */
static void nano_linear(builder *b, int i, const char *what, int64_t in, int64_t out,
                        double std, nb_tensor **w, nb_tensor **bs) {
    *w = param(b, name_of(b, "transformer.h.%d.%s.weight", i, what), out, in, F_NORMAL, std);
    if (b->m->cfg.bias)
        *bs = param(b, name_of(b, "transformer.h.%d.%s.bias", i, what), out, 0, F_ZERO, 0);
}

static void nano_ln(builder *b, const char *prefix, int64_t C, nb_tensor **w, nb_tensor **bs) {
    *w = param(b, name_of(b, "%s.weight", prefix), C, 0, F_ONE, 0);
    if (b->m->cfg.bias) *bs = param(b, name_of(b, "%s.bias", prefix), C, 0, F_ZERO, 0);
}

static nb_status build_nanogpt(builder *b) {
    nb_gpt *m = b->m;
    const nb_gpt_config *c = &m->cfg;
    int64_t C = c->n_embd;
    double std_proj = 0.02 / sqrt(2.0 * c->n_layer);
    m->wte = param(b, "transformer.wte.weight", c->vocab_size, C, F_NORMAL, 0.02);
    m->wpe = param(b, "transformer.wpe.weight", c->block_size, C, F_NORMAL, 0.02);
    for (int i = 0; i < c->n_layer && !nb_ctx_status(b->pctx); i++) {
        nb_gpt_block *blk = &m->blocks[i];
        nano_ln(b, name_of(b, "transformer.h.%d.ln_1", i), C, &blk->ln1_w, &blk->ln1_b);
        nano_linear(b, i, "attn.c_attn", C, 3 * C, 0.02, &blk->c_attn_w, &blk->c_attn_b);
        nano_linear(b, i, "attn.c_proj", C, C, std_proj, &blk->c_proj_w, &blk->c_proj_b);
        nano_ln(b, name_of(b, "transformer.h.%d.ln_2", i), C, &blk->ln2_w, &blk->ln2_b);
        nano_linear(b, i, "mlp.c_fc", C, 4 * C, 0.02, &blk->fc_w, &blk->fc_b);
        nano_linear(b, i, "mlp.c_proj", 4 * C, C, std_proj, &blk->proj_w, &blk->proj_b);
    }
    nano_ln(b, "transformer.ln_f", C, &m->lnf_w, &m->lnf_b);
    if (nb_ctx_status(b->pctx)) return nb_ctx_status(b->pctx);
    /* lm_head.weight: the same tensor, in the state_dict only */
    m->head = m->wte;
    if (nb_list_insert(&m->state_dict, "lm_head.weight", m->wte))
        return nb_ctx_fail(b->pctx, NB_ERR_VALUE, "%s: cannot list lm_head.weight", CLS);
    return NB_OK;
}

/* init with separate draw and dropout generators. */
NB_HIDDEN nb_status nb_gpt_init_impl(nb_ctx *pctx, nb_gpt *m, const nb_gpt_config *cfg,
                                     nb_pcg32 *draw, nb_pcg32 *dropout_rng) {
    if (!pctx) return NB_ERR_NULL;
    if (nb_ctx_status(pctx)) return nb_ctx_status(pctx);
    if (!m) return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: model is NULL", CLS);
    memset(m, 0, sizeof *m);
    nb_status st = check_config(pctx, cfg, dropout_rng);
    if (st) return st;
    m->cfg = *cfg;
    m->rng = dropout_rng;
    m->blocks = nb_ctx_alloc(pctx, (size_t)cfg->n_layer * sizeof *m->blocks);
    if (!m->blocks) return nb_ctx_status(pctx);
    builder b = {m, pctx, draw};
    st = cfg->arch == NB_GPT_GPTMODEL ? build_gptmodel(&b) : build_nanogpt(&b);
    if (st) {
        nb_gpt_free(m);
        return st;
    }
    m->training = true;
    return NB_OK;
}

nb_status nb_gpt_init(nb_ctx *pctx, nb_gpt *m, const nb_gpt_config *cfg, nb_pcg32 *rng) {
    return nb_gpt_init_impl(pctx, m, cfg, rng, rng);
}

void nb_gpt_free(nb_gpt *m) {
    if (!m) return;
    nb_list_free(&m->params);
    nb_list_free(&m->state_dict);
}

void nb_gpt_train(nb_gpt *m, bool on) {
    if (!m) return;
    m->training = on;
    for (int i = 0; m->blocks && i < m->cfg.n_layer; i++)
        if (m->cfg.arch == NB_GPT_GPTMODEL) nb_nn_mha_train(&m->blocks[i].att, on);
}

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
    int64_t t = ids->shape[1];
    nb_tensor *pos = nb_empty(ctx, NB_I64, 1, &t);
    if (!pos) return NULL;
    for (int64_t i = 0; i < t; i++) ((int64_t *)pos->data)[i] = pos0 + i;
    bool nano = m->cfg.arch == NB_GPT_NANOGPT;
    nb_tensor *x = nb_add(ctx,
                          NB_NN_SCOPED(ctx, nano ? "transformer.wte" : "tok_emb",
                                       nb_embedding(ctx, m->wte, ids)),
                          NB_NN_SCOPED(ctx, nano ? "transformer.wpe" : "pos_emb",
                                       nb_embedding(ctx, m->wpe, pos)));
    return nb_gpt_dropout(ctx, m, x);
}

NB_HIDDEN nb_tensor *nb_gpt_dropout(nb_ctx *ctx, nb_gpt *m, nb_tensor *x) {
    if (m->cfg.dropout == 0 || !m->training) return x;
    return nb_dropout(ctx, x, m->cfg.dropout, true, m->rng);
}

/* ---- the linear layers ---------------------------------------------------------- */

/* y = x @ w^T + b for x (..., in), w (out, in), b (out) or NULL. Without
 * grad recording and with at most FEW_ROWS rows (sampling: one new token
 * per sequence), each output is a dot product along a contiguous row of w:
 * linear's gemm would first repack w^T, which for one row costs more than
 * the product. Otherwise nb_linear (recorded, with its backward). */
enum { FEW_ROWS = 8 };

typedef struct dot_job {
    const nb_tensor *x, *w, *b;
    nb_tensor *y;
    int64_t rows, in, out;
} dot_job;

/* Outputs [o0, o1) of every row: eight partial sums along k, then the tail.
 * Each output is computed the same way whatever the split, so the threads
 * do not change any bit. */
#define DOT_ROWS(T)                                                                 \
    {                                                                               \
        const T *xp = j->x->data, *wp = j->w->data, *bp = j->b ? j->b->data : NULL; \
        T *yp = j->y->data;                                                         \
        const int64_t in = j->in;                                                   \
        for (int64_t r = 0; r < j->rows; r++)                                       \
            for (int64_t o = o0; o < o1; o++) {                                     \
                const T *xr = xp + r * in, *wr = wp + o * in;                       \
                T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                \
                int64_t k = 0;                                                      \
                for (; k + 8 <= in; k += 8)                                         \
                    for (int l = 0; l < 8; l++) acc[l] += xr[k + l] * wr[k + l];    \
                T sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) +                   \
                        ((acc[2] + acc[6]) + (acc[3] + acc[7]));                    \
                for (; k < in; k++) sum += xr[k] * wr[k];                           \
                yp[r * j->out + o] = bp ? sum + bp[o] : sum;                        \
            }                                                                       \
    }

static void dot_range(void *arg, int64_t o0, int64_t o1) {
    const dot_job *j = arg;
    NB_DISPATCH(j->x->dtype, DOT_ROWS);
}
#undef DOT_ROWS

NB_HIDDEN nb_tensor *nb_gpt_linear(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b) {
    if (!nb_ctx_ok(ctx) || !x || !w || nb_is_grad_enabled(ctx) || x->dtype != w->dtype ||
        (b && b->dtype != w->dtype) || x->shape[x->ndim - 1] != w->shape[1] || w->ndim != 2)
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
    return NB_NN_SCOPED(ctx, "c_proj", nb_gpt_linear(ctx, y, blk->c_proj_w, blk->c_proj_b));
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

/* The attention of a block: the one place that picks the attention code. */
static nb_tensor *attention(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h) {
    if (m->cfg.arch == NB_GPT_GPTMODEL)
        return NB_NN_SCOPED(ctx, "att", nb_nn_mha_forward(ctx, &blk->att, h));
    return NB_NN_SCOPED(ctx, "attn", nano_attention(ctx, m, blk, h));
}

NB_HIDDEN nb_tensor *nb_gpt_mlp(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h) {
    bool nano = m->cfg.arch == NB_GPT_NANOGPT;
    nb_gelu_approx g = nano ? m->cfg.gelu : NB_GELU_TANH;
    NB_LIB_HERE(ctx);
    nb_tensor *f = NB_NN_SCOPED(ctx, nano ? "c_fc" : "layers.0",
                                nb_gpt_linear(ctx, h, blk->fc_w, blk->fc_b));
    f = NB_NN_SCOPED(ctx, nano ? NULL : "layers.1", nb_gelu(ctx, f, g));
    return NB_NN_SCOPED(ctx, nano ? "c_proj" : "layers.2",
                        nb_gpt_linear(ctx, f, blk->proj_w, blk->proj_b));
}

NB_HIDDEN nb_tensor *nb_gpt_block_norm1(nb_ctx *ctx, nb_gpt *m, int i, nb_tensor *x) {
    nb_gpt_block *blk = &m->blocks[i];
    return NB_NN_SCOPED(ctx, m->cfg.arch == NB_GPT_NANOGPT ? "ln_1" : "norm1",
                        nb_layer_norm(ctx, x, blk->ln1_w, blk->ln1_b, 1e-5));
}

NB_HIDDEN nb_tensor *nb_gpt_block_finish(nb_ctx *ctx, nb_gpt *m, int i, nb_tensor *x,
                                         nb_tensor *a) {
    nb_gpt_block *blk = &m->blocks[i];
    bool nano = m->cfg.arch == NB_GPT_NANOGPT;
    NB_LIB_HERE(ctx); x = nb_add(ctx, x, nb_gpt_dropout(ctx, m, a));
    nb_tensor *h = NB_NN_SCOPED(ctx, nano ? "ln_2" : "norm2",
                                nb_layer_norm(ctx, x, blk->ln2_w, blk->ln2_b, 1e-5));
    nb_tensor *f = NB_NN_SCOPED(ctx, nano ? "mlp" : "ff", nb_gpt_mlp(ctx, m, blk, h));
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
    snprintf(name, sizeof name, m->cfg.arch == NB_GPT_NANOGPT ? "transformer.h.%d"
                                                              : "trf_blocks.%d", i);
    return NB_NN_SCOPED(ctx, name, block_body(ctx, m, i, x));
}

NB_HIDDEN nb_tensor *nb_gpt_head(nb_ctx *ctx, nb_gpt *m, nb_tensor *x) {
    bool nano = m->cfg.arch == NB_GPT_NANOGPT;
    NB_LIB_HERE(ctx);
    x = NB_NN_SCOPED(ctx, nano ? "transformer.ln_f" : "final_norm",
                     nb_layer_norm(ctx, x, m->lnf_w, m->lnf_b, 1e-5));
    return NB_NN_SCOPED(ctx, nano ? "lm_head" : "out_head",
                        nb_gpt_linear(ctx, x, m->head, NULL)); /* (B, T, V) */
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

/* ---- state_dict --------------------------------------------------------------- */

static bool has(const nb_tensor_list *sd, const char *fmt, int i) {
    char buf[128];
    snprintf(buf, sizeof buf, fmt, i);
    return nb_list_get(sd, buf) != NULL;
}

nb_status nb_gpt_config_from_state_dict(nb_ctx *ctx, const nb_tensor_list *sd, int n_head,
                                        nb_gpt_config *out) {
    const char *fn = "gpt_config_from_state_dict";
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!sd || !out) return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", fn, sd ? "out" : "sd");
    if (n_head < 1) return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: n_head %d is not >= 1", fn, n_head);
    bool nano = nb_list_get(sd, "transformer.wte.weight") != NULL;
    const nb_tensor *wte = nb_list_get(sd, nano ? "transformer.wte.weight" : "tok_emb.weight");
    const nb_tensor *wpe = nb_list_get(sd, nano ? "transformer.wpe.weight" : "pos_emb.weight");
    if (!wte || !wpe)
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: neither tok_emb.weight/pos_emb.weight "
                           "(GPTModel) nor transformer.wte.weight/transformer.wpe.weight "
                           "(nanoGPT) is in the state_dict", fn);
    if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1] ||
        (wte->dtype != NB_F32 && wte->dtype != NB_F64)) {
        char a[64], b[64];
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: token embedding %s %s and position "
                           "embedding %s do not fit (V, C) and (block_size, C)", fn,
                           nb_dtype_name(wte->dtype), nb_shape_str(wte, a, sizeof a),
                           nb_shape_str(wpe, b, sizeof b));
    }
    nb_gpt_config c = nb_gpt_config_default(nano ? NB_GPT_NANOGPT : NB_GPT_GPTMODEL);
    c.vocab_size = wte->shape[0];
    c.n_embd = wte->shape[1];
    c.block_size = wpe->shape[0];
    c.n_head = n_head;
    c.dropout = 0.0;
    c.dtype = wte->dtype;
    const char *blk = nano ? "transformer.h.%d.ln_1.weight" : "trf_blocks.%d.norm1.scale";
    int L = 0;
    while (L < 100000 && has(sd, blk, L)) L++;
    if (L == 0)
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: no transformer block (%s)", fn,
                           nano ? "transformer.h.0.ln_1.weight" : "trf_blocks.0.norm1.scale");
    c.n_layer = L;
    c.bias = nano ? nb_list_get(sd, "transformer.ln_f.bias") != NULL : true;
    c.qkv_bias = !nano && has(sd, "trf_blocks.%d.att.W_query.bias", 0);
    *out = c;
    return NB_OK;
}

nb_status nb_gpt_load_state_dict(nb_gpt *m, const nb_tensor_list *sd) {
    if (!m || !m->wte) return NB_ERR_NULL;
    nb_ctx *ctx = m->wte->owner; /* the model's parameter context takes the errors */
    if (!sd) return nb_ctx_fail(ctx, NB_ERR_NULL, "gpt_load_state_dict: sd is NULL");
    /* the unique parameters: lm_head.weight may be absent when tied */
    nb_status st = nb_params_copy_from(&m->params, sd);
    if (st) return st;
    const nb_tensor *lm = nb_list_get(sd, "lm_head.weight");
    if (m->cfg.arch == NB_GPT_NANOGPT && lm && nb_same_shape(lm, m->wte))
        for (size_t k = 0; k < lm->numel; k++)
            if (nb_get(lm, k) != nb_get(m->wte, k))
                return nb_ctx_fail(ctx, NB_ERR_FORMAT, "gpt: lm_head.weight differs from "
                                   "transformer.wte.weight at %zu; nanoGPT ties them", k);
    return NB_OK;
}

nb_status nb_gpt_from_state_dict(nb_ctx *pctx, nb_gpt *m, const nb_tensor_list *sd, int n_head,
                                 double dropout, nb_dtype dt, nb_pcg32 *dropout_rng) {
    if (!pctx) return NB_ERR_NULL;
    nb_gpt_config c;
    nb_status st = nb_gpt_config_from_state_dict(pctx, sd, n_head, &c);
    if (st) return st;
    c.dropout = dropout;
    c.dtype = dt;
    st = nb_gpt_init_impl(pctx, m, &c, NULL, dropout_rng);
    if (!st) st = nb_gpt_load_state_dict(m, sd);
    return st;
}
