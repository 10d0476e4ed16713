/* nn/gpt.c - the model's config (defaults, checks), its init (one walk
 * over the family's table of parameters, gpt_family.c) and loading a
 * state_dict. The forward is in gpt_forward.c, the KV-cached forward and
 * generation in gpt_sample.c, the summary in gpt_summary.c. */
#include "gpt_family.h"
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
    } else if (arch == NB_GPT_LLAMA3) { /* Llama 3.2 1B (config.json, the course's LLAMA32_CONFIG) */
        c = (nb_gpt_config){.arch = arch, .vocab_size = 128256, .block_size = 131072,
                            .n_layer = 16, .n_head = 32, .n_embd = 2048, .n_kv_head = 8,
                            .head_dim = 64, .hidden_dim = 8192, .norm_eps = 1e-5,
                            .rope_theta = 500000.0, .rope_scaled = true,
                            .rope_scaling = {32.0, 1.0, 4.0, 8192}, .tie_head = true,
                            .dtype = NB_F32};
    } else if (arch == NB_GPT_QWEN3) { /* Qwen3 0.6B (config.json, the course's QWEN_CONFIG_06_B) */
        c = (nb_gpt_config){.arch = arch, .vocab_size = 151936, .block_size = 40960,
                            .n_layer = 28, .n_head = 16, .n_embd = 1024, .n_kv_head = 8,
                            .head_dim = 128, .hidden_dim = 3072, .norm_eps = 1e-6,
                            .rope_theta = 1000000.0, .qk_norm = true, .tie_head = true,
                            .dtype = NB_F32};
    }
    return c;
}

/* ---- config checks ----------------------------------------------------------- */

#define FAIL(...) nb_ctx_fail(pctx, NB_ERR_VALUE, __VA_ARGS__)

/* The Llama 3 / Qwen3 fields: each error names the key and its values. */
static nb_status check_rope_family(nb_ctx *pctx, const nb_gpt_config *c) {
    const char *fam = c->arch == NB_GPT_LLAMA3 ? "llama3" : "qwen3";
    const int64_t big = INT64_C(1) << 24;
    if (c->n_kv_head < 0 || c->n_kv_head > c->n_head)
        return FAIL("%s: n_kv_head %d is outside [1, n_head %d] (0 means n_head)", CLS,
                    c->n_kv_head, c->n_head);
    int kv = nb_gpt_kv_heads(c);
    if (c->n_head % kv)
        return FAIL("%s: n_head %d is not a multiple of n_kv_head %d", CLS, c->n_head, kv);
    if (c->head_dim < 0 || c->head_dim > big)
        return FAIL("%s: head_dim %lld is outside [1, 2^24] (0 means n_embd / n_head)", CLS,
                    (long long)c->head_dim);
    int64_t hd = nb_gpt_head_dim(c);
    if (hd % 2)
        return FAIL("%s: head_dim %lld is odd; RoPE turns pairs of dims", CLS, (long long)hd);
    if ((double)c->n_head * (double)hd > (double)big)
        return nb_ctx_fail(pctx, NB_ERR_SIZE, "%s: n_head %d x head_dim %lld is too large", CLS,
                           c->n_head, (long long)hd);
    if (!(c->norm_eps > 0 && isfinite(c->norm_eps)))
        return FAIL("%s: norm_eps %g must be finite and > 0 (RMSNorm's eps)", CLS, c->norm_eps);
    if (!(c->rope_theta >= 1 && isfinite(c->rope_theta)))
        return FAIL("%s: rope_theta %g must be finite and >= 1", CLS, c->rope_theta);
    const nb_rope_scaling *r = &c->rope_scaling;
    if (c->rope_scaled &&
        !(r->factor >= 1 && isfinite(r->factor) && r->low_freq_factor > 0 &&
          r->high_freq_factor > r->low_freq_factor && isfinite(r->high_freq_factor) &&
          r->original_max_position_embeddings > 0))
        return FAIL("%s: rope_scaling (factor %g, low_freq_factor %g, high_freq_factor %g, "
                    "original_max_position_embeddings %lld) needs factor >= 1, "
                    "0 < low_freq_factor < high_freq_factor, original length > 0", CLS,
                    r->factor, r->low_freq_factor, r->high_freq_factor,
                    (long long)r->original_max_position_embeddings);
    if (c->window < 0)
        return FAIL("%s: window %lld is negative (0: no sliding window)", CLS,
                    (long long)c->window);
    if (c->arch == NB_GPT_LLAMA3 && (c->qk_norm || c->n_expert))
        return FAIL("%s: %s %d: Llama 3 has no %s (Qwen3 has)", CLS,
                    c->qk_norm ? "qk_norm" : "n_expert", c->qk_norm ? 1 : c->n_expert,
                    c->qk_norm ? "q_norm/k_norm" : "experts");
    if (c->n_expert < 0 || c->n_expert > 4096)
        return FAIL("%s: n_expert %d is outside [0, 4096]", CLS, c->n_expert);
    if (c->n_expert == 0 && (c->hidden_dim < 1 || c->hidden_dim > big))
        return FAIL("%s: hidden_dim %lld: %s's gated MLP needs a width in [1, 2^24] (course "
                    "hidden_dim, Hugging Face intermediate_size)", CLS,
                    (long long)c->hidden_dim, fam);
    if (c->n_expert > 0) {
        if (c->n_expert_per_tok < 1 || c->n_expert_per_tok > c->n_expert)
            return FAIL("%s: n_expert_per_tok %d is outside [1, n_expert %d]", CLS,
                        c->n_expert_per_tok, c->n_expert);
        if (c->moe_hidden_dim < 1 || c->moe_hidden_dim > big)
            return FAIL("%s: moe_hidden_dim %lld: each of the %d experts needs a width in "
                        "[1, 2^24] (moe_intermediate_size)", CLS, (long long)c->moe_hidden_dim,
                        c->n_expert);
    }
    return NB_OK;
}
#undef FAIL


static nb_status check_config(nb_ctx *pctx, const nb_gpt_config *c, const nb_pcg32 *rng) {
    if (!c) return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: config is NULL", CLS);
    if (!nb_gpt_layout(c))
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: unknown arch %d", CLS, (int)c->arch);
    const char *what[] = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd"};
    int64_t v[] = {c->vocab_size, c->block_size, c->n_layer, c->n_head, c->n_embd};
    for (int i = 0; i < 5; i++)
        if (v[i] < 1)
            return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: %s %lld must be positive", CLS, what[i],
                               (long long)v[i]);
    bool rope = nb_gpt_layout(c)->pos == POS_ROPE;
    if (c->n_embd % c->n_head && !(rope && c->head_dim))
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
    return rope ? check_rope_family(pctx, c) : NB_OK;
}

/* ---- building: one walk over the family's table -------------------------------- */

/* The state of one init: where names and tensors go, how values are drawn. */
typedef struct builder {
    nb_gpt *m;
    nb_ctx *pctx;
    nb_pcg32 *rng; /* draws; NULL leaves zeros */
    const gpt_layout *lay;
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

/* Lists t under `name` in params (unless tied: state_dict only) and state_dict. */
static nb_status list(builder *b, const char *name, nb_tensor *t, bool tied) {
    if (!name || !t) return nb_ctx_status(b->pctx);
    if (!tied) t->name = name;
    if ((!tied && nb_list_insert(&b->m->params, name, t)) ||
        nb_list_insert(&b->m->state_dict, name, t))
        return nb_ctx_fail(b->pctx, NB_ERR_VALUE, "%s: cannot list '%s'", CLS, name);
    return NB_OK;
}

/* A size of the table in cfg's terms. */
static int64_t dim_of(const nb_gpt_config *c, gpt_dim d) {
    switch (d) {
    case D_V: return c->vocab_size;
    case D_C: return c->n_embd;
    case D_BS: return c->block_size;
    case D_3C: return 3 * c->n_embd;
    case D_4C: return 4 * c->n_embd;
    case D_QH: return c->n_head * nb_gpt_head_dim(c);
    case D_KVH: return nb_gpt_kv_heads(c) * nb_gpt_head_dim(c);
    case D_HD: return nb_gpt_head_dim(c);
    case D_HID: return c->hidden_dim;
    case D_MOE: return c->moe_hidden_dim;
    case D_E: return c->n_expert;
    default: return 0;
    }
}

static bool exists(const nb_gpt_config *c, gpt_when w) {
    switch (w) {
    case W_BIAS: return c->bias;
    case W_QK_NORM: return c->qk_norm;
    case W_DENSE: return c->n_expert == 0;
    case W_MOE: return c->n_expert > 0;
    case W_UNTIED: return !c->tie_head;
    case W_TIED: return c->tie_head;
    default: return true;
    }
}

/* A new parameter for row p, drawn as the row says (zeros without rng). */
static nb_tensor *draw(builder *b, const gpt_part *p) {
    const nb_gpt_config *c = &b->m->cfg;
    int64_t shape[2] = {dim_of(c, p->d0), dim_of(c, p->d1)};
    int nd = p->d1 == D_NONE ? 1 : 2;
    nb_tensor *t;
    if (p->init == I_ONE)
        t = nb_ones(b->pctx, c->dtype, nd, shape);
    else if (!b->rng || p->init == I_ZERO)
        t = nb_zeros(b->pctx, c->dtype, nd, shape);
    else if (p->init == I_UNIFORM) {
        double a = 1.0 / sqrt((double)dim_of(c, p->fan));
        t = nb_uniform(b->pctx, c->dtype, nd, shape, -a, a, b->rng);
    } else {
        double std = p->init == I_N1 ? 1.0 : 0.02;
        if (p->init == I_N02_PROJ) std = 0.02 / sqrt(2.0 * c->n_layer);
        t = nb_normal(b->pctx, c->dtype, nd, shape, 0.0, std, b->rng);
    }
    if (t && !c->no_grad && !nb_requires_grad(t)) return NULL;
    return t;
}

/* The course's MultiHeadAttention module as block i's `prefix` rows: its
 * own init draws W_query, W_key, W_value, out_proj (weights, biases). */
static nb_status build_mha(builder *b, const char *prefix, nb_gpt_block *blk) {
    nb_gpt *m = b->m;
    const nb_gpt_config *c = &m->cfg;
    nb_pcg32 zero_rng;
    nb_pcg32_seed(&zero_rng, 0, 1);
    nb_status st = nb_nn_mha_init(b->pctx, &blk->att, c->n_embd, c->n_embd, c->block_size,
                                  c->dropout, c->n_head, c->qkv_bias, c->dtype,
                                  b->rng ? b->rng : &zero_rng);
    if (st) return st;
    blk->att.dropout.rng = m->rng; /* dropout masks come from the model's rng */
    for (int k = 0; k < blk->att.params.n && !st; k++) {
        nb_tensor *t = nb_list_tensor(&blk->att.params, k);
        if (!b->rng) memset(t->data, 0, t->numel * nb_dtype_size(t->dtype));
        if (c->no_grad) {
            t->requires_grad = false;
            t->grad = NULL;
        }
        st = list(b, name_of(b, "%s.%s", prefix, nb_list_name(&blk->att.params, k)), t, false);
    }
    return st;
}

/* Row p at `base` (nb_gpt or a block) under `name`; expert e for AT_EXPERT. */
static nb_status build_row(builder *b, const gpt_part *p, char *base, const char *name, int e) {
    if (p->init == I_MHA) return build_mha(b, name, (nb_gpt_block *)base);
    nb_tensor **slot = (nb_tensor **)(base + p->field);
    if (p->at == AT_EXPERT) slot = &(*(nb_tensor ***)(base + p->field))[e];
    if (p->init == I_TIED) { /* the same tensor as the token embedding */
        *slot = b->m->wte;
        return list(b, name, b->m->wte, true);
    }
    *slot = draw(b, p);
    if (!*slot) return nb_ctx_status(b->pctx) ? nb_ctx_status(b->pctx) : NB_ERR_MEMORY;
    return list(b, name, *slot, false);
}

/* The rows of AT_EXPERT parts p[0..n): the arrays, then each (row, expert)
 * in the layout's order. */
static nb_status build_experts(builder *b, const gpt_part *p, int n, const char *prefix,
                               nb_gpt_block *blk) {
    int E = b->m->cfg.n_expert;
    for (int r = 0; r < n; r++) {
        nb_tensor ***arr = (nb_tensor ***)((char *)blk + p[r].field);
        *arr = nb_ctx_alloc(b->pctx, (size_t)E * sizeof **arr);
        if (!*arr) return nb_ctx_status(b->pctx);
    }
    bool by_expert = b->lay->experts_by_expert;
    nb_status st = NB_OK;
    for (int o = 0; o < n * E && !st; o++) {
        int r = by_expert ? o % n : o / E, e = by_expert ? o / n : o % E;
        char fmt[128];
        snprintf(fmt, sizeof fmt, "%s.%s", prefix, p[r].name);
        st = build_row(b, &p[r], (char *)blk, name_of(b, fmt, e), e);
    }
    return st;
}

/* Rows p[0..n) at base; block rows are named "<prefix>.<name>". */
static nb_status build_rows(builder *b, const gpt_part *p, int n, char *base, const char *prefix) {
    nb_status st = NB_OK;
    for (int r = 0; r < n && !st; r++) {
        if (!exists(&b->m->cfg, p[r].when)) continue;
        if (p[r].at == AT_EXPERT) { /* a run of expert rows */
            int k = r;
            while (k < n && p[k].at == AT_EXPERT) k++;
            st = build_experts(b, p + r, k - r, prefix, (nb_gpt_block *)base);
            r = k - 1;
        } else if (p[r].at == AT_MODEL) {
            st = build_row(b, &p[r], base, p[r].name, 0);
        } else {
            st = build_row(b, &p[r], base, name_of(b, "%s.%s", prefix, p[r].name), 0);
        }
    }
    return st;
}

static nb_status build(builder *b) {
    nb_gpt *m = b->m;
    const gpt_layout *l = b->lay;
    nb_status st = build_rows(b, l->model_pre, l->n_model_pre, (char *)m, NULL);
    for (int i = 0; i < m->cfg.n_layer && !st; i++) {
        const char *prefix = name_of(b, l->block_fmt, i);
        st = prefix ? build_rows(b, l->block, l->n_block, (char *)&m->blocks[i], prefix)
                    : nb_ctx_status(b->pctx);
    }
    if (!st) st = build_rows(b, l->model_post, l->n_model_post, (char *)m, NULL);
    return st;
}

/* init with separate draw and dropout generators. */
NB_HIDDEN nb_status nb_gpt_init_impl(nb_ctx *pctx, nb_gpt *m, const nb_gpt_config *cfg,
                                     nb_pcg32 *draw_rng, nb_pcg32 *dropout_rng) {
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
    builder b = {m, pctx, draw_rng, nb_gpt_layout(cfg)};
    st = build(&b);
    if (!st && b.lay->pos == POS_ROPE) /* once per model, block_size positions */
        st = nb_rope_tables(pctx, nb_gpt_head_dim(cfg), cfg->block_size, cfg->rope_theta,
                            cfg->rope_scaled ? &cfg->rope_scaling : NULL, cfg->dtype,
                            &m->rope_cos, &m->rope_sin);
    if (st) {
        nb_gpt_free(m);
        return st;
    }
    m->training = true;
    m->use_fused = true;
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
        if (nb_gpt_layout(&m->cfg)->att == ATT_MHA_MODULE) nb_nn_mha_train(&m->blocks[i].att, on);
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
                           "(nanoGPT) is in the state_dict (Llama 3 and Qwen3 need their config: nb_gpt_load)", fn);
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
    const gpt_layout *l = nb_gpt_layout(&m->cfg);
    const nb_tensor *lm = nb_list_get(sd, l->head_name);
    if (m->head == m->wte && lm && nb_same_shape(lm, m->wte))
        for (size_t k = 0; k < lm->numel; k++)
            if (nb_get(lm, k) != nb_get(m->wte, k))
                return nb_ctx_fail(ctx, NB_ERR_FORMAT, "gpt: %s differs from %s at %zu; the "
                                   "%s model ties them", l->head_name, l->tok_name, k, l->label);
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
