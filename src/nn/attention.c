/* nn/attention.c - the attention modules of seed notebook 004, op for op:
 * SelfAttention_v1 and _v2 on one sequence (T, d_in), CausalAttention, the
 * MultiHeadAttentionWrapper of CausalAttention heads, and the
 * weight-split MultiHeadAttention on batches (B, T, d_in).
 *
 * Every forward is a chain of recorded ops (matmul, transpose, causal_fill,
 * scale, softmax, dropout, ...), so the gradients come from the ops'
 * backward rules; nothing here has a backward of its own. CausalAttention
 * and MultiHeadAttention run that core as one fused op (nb_sdpa) unless
 * their use_fused is false. Ops return NULL
 * at once once the context holds an error, so the chains need no checks
 * between steps. */
#include "nn_internal.h"

/* ---- shared pieces ------------------------------------------------------------ */

/* softmax(scores / sqrt(d_k)) along the last dim, as the seeds'
 * torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1). */
static nb_tensor *scaled_softmax(nb_ctx *ctx, nb_tensor *scores, int64_t d_k) {
    return nb_softmax(ctx, nb_scale(ctx, scores, 1.0 / sqrt((double)d_k)));
}

/* The core CausalAttention and MultiHeadAttention share, as the seed writes
 * it: scores (.., T, T) with the future (key j > query i) and the padded
 * keys (pad, broadcasting; NULL for none) set to -inf, softmax(scores /
 * sqrt(d_k)), dropout, then @ values (.., T, d_v) -> (.., T, d_v). The
 * weights before dropout (.., T, T) go to *attn_weights when asked. */
static nb_tensor *causal_attend(nb_ctx *ctx, nb_tensor *scores, const nb_tensor *pad,
                                int64_t d_k, nb_nn_dropout *dropout, nb_tensor *values,
                                nb_tensor **attn_weights) {
    /* the seed's mask.bool()[:T, :T]: j > i is the future */
    NB_LIB_HERE(ctx); scores = nb_causal_fill(ctx, scores, -INFINITY);
    NB_LIB_HERE(ctx); if (pad) scores = nb_masked_fill(ctx, scores, pad, -INFINITY);
    NB_LIB_HERE(ctx); nb_tensor *weights = scaled_softmax(ctx, scores, d_k);
    if (attn_weights) *attn_weights = weights;
    NB_LIB_HERE(ctx); weights = nb_nn_dropout_forward(ctx, dropout, weights);
    NB_LIB_HERE(ctx); return nb_matmul(ctx, weights, values);
}

/* The same core in one fused op (nb_sdpa): queries, keys, values (B, T,
 * H * hd) are read as (B, T, H, hd) views, causal, the key-padding mask as
 * given (BOOL (B, T) or NULL), scaled by 1/sqrt(hd) -> (B, T, H * hd), heads
 * merged. In train mode with 0 < p < 1 the dropout seed is two draws from
 * the Dropout's rng, high word first. */
static nb_tensor *fused_attend(nb_ctx *ctx, nb_tensor *queries, nb_tensor *keys,
                               nb_tensor *values, int64_t heads, const nb_tensor *kpm,
                               nb_nn_dropout *dropout) {
    if (!queries || !keys || !values) return NULL;
    int64_t b = queries->shape[0], t = queries->shape[1], hd = queries->shape[2] / heads;
    double p = dropout->training ? dropout->p : 0.0;
    uint64_t seed = 0;
    if (p > 0.0 && p < 1.0) {
        seed = (uint64_t)nb_pcg32_next(dropout->rng) << 32;
        seed |= nb_pcg32_next(dropout->rng);
    }
    return nb_sdpa(ctx, nb_view(ctx, queries, NB_SHAPE(b, t, heads, hd)),
                   nb_view(ctx, keys, NB_SHAPE(b, t, heads, hd)),
                   nb_view(ctx, values, NB_SHAPE(b, t, heads, hd)), kpm, true,
                   1.0 / sqrt((double)hd), p, seed);
}

/* Argument checks shared by the attention inits, reported under `cls`. */
static nb_status check_attention_args(nb_ctx *pctx, const char *cls, int64_t d_in,
                                      int64_t d_out, nb_dtype dt, nb_pcg32 *rng) {
    nb_status st = nb_nn_check_positive(pctx, cls, "d_in", d_in);
    if (!st) st = nb_nn_check_positive(pctx, cls, "d_out", d_out);
    if (!st) st = nb_nn_check_param_dtype(pctx, cls, dt);
    if (!st) st = nb_nn_check_rng(pctx, cls, rng);
    return st;
}

/* The above, then context_length, num_heads and dropout, for the batched
 * classes (CausalAttention is one head: it passes num_heads 1). */
static nb_status check_batched_args(nb_ctx *pctx, const char *cls, int64_t d_in, int64_t d_out,
                                    int64_t context_length, int num_heads, double dropout,
                                    nb_dtype dt, nb_pcg32 *rng) {
    nb_status st = check_attention_args(pctx, cls, d_in, d_out, dt, rng);
    if (!st) st = nb_nn_check_positive(pctx, cls, "context_length", context_length);
    if (!st) st = nb_nn_check_positive(pctx, cls, "num_heads", num_heads);
    if (!st && !(dropout >= 0.0 && dropout <= 1.0))
        st = nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: dropout %g is outside [0, 1]", cls, dropout);
    return st;
}

/* W_query, W_key, W_value = Linear(d_in, d_out, bias=qkv_bias), built (and
 * drawn) in that order, listed under their names. */
static nb_status init_qkv(nb_ctx *pctx, nb_tensor_list *params, nb_nn_linear *q,
                          nb_nn_linear *k, nb_nn_linear *v, int64_t d_in, int64_t d_out,
                          bool qkv_bias, nb_dtype dt, nb_pcg32 *rng) {
    nb_nn_linear *lin[3] = {q, k, v};
    static const char *const names[3] = {"W_query", "W_key", "W_value"};
    for (int i = 0; i < 3; i++) {
        nb_status st = nb_nn_linear_init(pctx, lin[i], d_in, d_out, qkv_bias, dt, rng);
        if (!st) st = nb_params_add_prefixed(pctx, params, names[i], &lin[i]->params);
        if (st) return st;
    }
    return NB_OK;
}

/* Train or eval mode for the three projections. */
static void train_qkv(nb_nn_linear *q, nb_nn_linear *k, nb_nn_linear *v, bool on) {
    nb_nn_linear_train(q, on);
    nb_nn_linear_train(k, on);
    nb_nn_linear_train(v, on);
}

/* x is (T, d_in), for the single-sequence classes. */
static bool check_x_2d(nb_ctx *ctx, const char *cls, const nb_tensor *x, nb_dtype dt,
                       int64_t d_in) {
    if (!nb_nn_check_x(ctx, cls, x, dt)) return false;
    if (x->ndim == 2 && x->shape[1] == d_in) return true;
    char s[64];
    nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x has shape %s, expected (T, %lld) (tokens, d_in)", cls,
                nb_shape_str(x, s, sizeof s), (long long)d_in);
    return false;
}

/* x is (B, T, d_in) with T <= context_length, for the batched classes. */
static bool check_x_3d(nb_ctx *ctx, const char *cls, const nb_tensor *x, nb_dtype dt,
                       int64_t d_in, int64_t context_length) {
    if (!nb_nn_check_x(ctx, cls, x, dt)) return false;
    char s[64];
    if (x->ndim != 3 || x->shape[2] != d_in) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x has shape %s, expected (B, T, %lld) (batch, "
                    "tokens, d_in)", cls, nb_shape_str(x, s, sizeof s), (long long)d_in);
        return false;
    }
    if (x->shape[1] > context_length) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x has shape %s: %lld tokens exceed context_length "
                    "%lld", cls, nb_shape_str(x, s, sizeof s), (long long)x->shape[1],
                    (long long)context_length);
        return false;
    }
    return true;
}

/* The key-padding mask (B, T) of x (B, T, .) as a BOOL tensor of `ndim`
 * dims (B, 1, .., 1, T) that broadcasts over the scores (B, [H,] T, T):
 * every head and query of batch b sees the same masked keys. NULL without
 * an error when there is no mask; NULL with an error when it does not fit. */
static nb_tensor *padding_mask(nb_ctx *ctx, const char *cls, const nb_tensor *kpm,
                               const nb_tensor *x, int ndim, bool *failed) {
    *failed = false;
    if (!kpm) return NULL;
    char s[64], sx[64];
    *failed = true;
    if (kpm->dtype != NB_BOOL) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: key_padding_mask is %s, expected bool", cls,
                    nb_dtype_name(kpm->dtype));
        return NULL;
    }
    int64_t b = x->shape[0], t = x->shape[1];
    if (kpm->ndim != 2 || kpm->shape[0] != b || kpm->shape[1] != t) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: key_padding_mask has shape %s, expected (%lld, %lld) "
                    "(batch, tokens) for x %s", cls, nb_shape_str(kpm, s, sizeof s),
                    (long long)b, (long long)t, nb_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    int64_t shape[NB_MAX_DIMS] = {1, 1, 1, 1};
    shape[0] = b;
    shape[ndim - 1] = t;
    nb_tensor *m = nb_from_data(ctx, NB_BOOL, ndim, shape, kpm->data);
    *failed = m == NULL;
    return m;
}

/* ---- SelfAttention_v1 --------------------------------------------------------- */

nb_status nb_nn_self_attention_v1_init(nb_ctx *pctx, nb_nn_self_attention_v1 *m, int64_t d_in,
                                       int64_t d_out, nb_dtype dt, nb_pcg32 *rng) {
    const char *cls = "SelfAttention_v1";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (!st) st = check_attention_args(pctx, cls, d_in, d_out, dt, rng);
    if (st) return st;
    m->d_in = d_in;
    m->d_out = d_out;
    /* nn.Parameter(torch.rand(d_in, d_out)), three times */
    nb_tensor **w[3] = {&m->W_query, &m->W_key, &m->W_value};
    static const char *const names[3] = {"W_query", "W_key", "W_value"};
    for (int i = 0; i < 3; i++) {
        *w[i] = nb_nn_add_param(pctx, &m->params, names[i],
                                nb_uniform(pctx, dt, NB_SHAPE(d_in, d_out), 0.0, 1.0, rng));
        if (!*w[i]) return nb_ctx_status(pctx);
    }
    m->training = true;
    return NB_OK;
}

nb_tensor *nb_nn_self_attention_v1_forward(nb_ctx *ctx, nb_nn_self_attention_v1 *m,
                                           nb_tensor *x) {
    const char *cls = "SelfAttention_v1";
    if (!nb_nn_forward_begin(ctx, m, m && m->W_query, cls, "nb_nn_self_attention_v1_init"))
        return NULL;
    if (!check_x_2d(ctx, cls, x, m->W_query->dtype, m->d_in)) return NULL;
    nb_tensor *keys = nb_matmul(ctx, x, m->W_key);      /* (T, d_out) */
    nb_tensor *values = nb_matmul(ctx, x, m->W_value);  /* (T, d_out) */
    nb_tensor *queries = nb_matmul(ctx, x, m->W_query); /* (T, d_out) */
    nb_tensor *scores = nb_matmul(ctx, queries, nb_transpose(ctx, keys, 0, 1)); /* (T, T) */
    nb_tensor *weights = scaled_softmax(ctx, scores, m->d_out);
    return nb_matmul(ctx, weights, values); /* (T, d_out) */
}

void nb_nn_self_attention_v1_train(nb_nn_self_attention_v1 *m, bool on) {
    if (m) m->training = on;
}

/* ---- SelfAttention_v2 --------------------------------------------------------- */

nb_status nb_nn_self_attention_v2_init(nb_ctx *pctx, nb_nn_self_attention_v2 *m, int64_t d_in,
                                       int64_t d_out, bool qkv_bias, nb_dtype dt,
                                       nb_pcg32 *rng) {
    const char *cls = "SelfAttention_v2";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (!st) st = check_attention_args(pctx, cls, d_in, d_out, dt, rng);
    if (!st) st = init_qkv(pctx, &m->params, &m->W_query, &m->W_key, &m->W_value, d_in, d_out,
                           qkv_bias, dt, rng);
    if (st) return st;
    m->d_in = d_in;
    m->d_out = d_out;
    m->training = true;
    return NB_OK;
}

nb_tensor *nb_nn_self_attention_v2_forward(nb_ctx *ctx, nb_nn_self_attention_v2 *m,
                                           nb_tensor *x) {
    const char *cls = "SelfAttention_v2";
    if (!nb_nn_forward_begin(ctx, m, m && m->W_query.weight, cls,
                             "nb_nn_self_attention_v2_init"))
        return NULL;
    if (!check_x_2d(ctx, cls, x, m->W_query.weight->dtype, m->d_in)) return NULL;
    nb_tensor *keys = nb_nn_linear_forward(ctx, &m->W_key, x);      /* (T, d_out) */
    nb_tensor *values = nb_nn_linear_forward(ctx, &m->W_value, x);  /* (T, d_out) */
    nb_tensor *queries = nb_nn_linear_forward(ctx, &m->W_query, x); /* (T, d_out) */
    nb_tensor *scores = nb_matmul(ctx, queries, nb_transpose(ctx, keys, 0, 1)); /* (T, T) */
    nb_tensor *weights = scaled_softmax(ctx, scores, m->d_out);
    return nb_matmul(ctx, weights, values); /* (T, d_out) */
}

void nb_nn_self_attention_v2_train(nb_nn_self_attention_v2 *m, bool on) {
    if (!m) return;
    m->training = on;
    train_qkv(&m->W_query, &m->W_key, &m->W_value, on);
}

/* ---- CausalAttention ---------------------------------------------------------- */

nb_status nb_nn_causal_attention_init(nb_ctx *pctx, nb_nn_causal_attention *m, int64_t d_in,
                                      int64_t d_out, int64_t context_length, double dropout,
                                      bool qkv_bias, nb_dtype dt, nb_pcg32 *rng) {
    const char *cls = "CausalAttention";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (!st) st = check_batched_args(pctx, cls, d_in, d_out, context_length, 1, dropout, dt, rng);
    if (!st) st = init_qkv(pctx, &m->params, &m->W_query, &m->W_key, &m->W_value, d_in, d_out,
                           qkv_bias, dt, rng);
    if (!st) st = nb_nn_dropout_init(pctx, &m->dropout, dropout, rng);
    if (st) return st;
    m->d_in = d_in;
    m->d_out = d_out;
    m->context_length = context_length;
    m->training = true;
    m->use_fused = true;
    return NB_OK;
}

static nb_tensor *causal_attention_body(nb_ctx *ctx, nb_nn_causal_attention *m, nb_tensor *x,
                                        const nb_tensor *key_padding_mask,
                                        nb_tensor **attn_weights);

nb_tensor *nb_nn_causal_attention_forward_masked(nb_ctx *ctx, nb_nn_causal_attention *m,
                                                 nb_tensor *x, const nb_tensor *key_padding_mask,
                                                 nb_tensor **attn_weights) {
    return NB_NN_SCOPED(ctx, NULL,
                        causal_attention_body(ctx, m, x, key_padding_mask, attn_weights));
}

static nb_tensor *causal_attention_body(nb_ctx *ctx, nb_nn_causal_attention *m, nb_tensor *x,
                                        const nb_tensor *key_padding_mask,
                                        nb_tensor **attn_weights) {
    const char *cls = "CausalAttention";
    if (attn_weights) *attn_weights = NULL;
    if (!nb_nn_forward_begin(ctx, m, m && m->W_query.weight, cls,
                             "nb_nn_causal_attention_init"))
        return NULL;
    if (!check_x_3d(ctx, cls, x, m->W_query.weight->dtype, m->d_in, m->context_length))
        return NULL;
    bool failed;
    nb_tensor *pad = padding_mask(ctx, cls, key_padding_mask, x, 3, &failed); /* (B, 1, T) */
    if (failed) return NULL;
    nb_tensor *keys = NB_NN_SCOPED(ctx, "W_key", nb_nn_linear_forward(ctx, &m->W_key, x));
    nb_tensor *values = NB_NN_SCOPED(ctx, "W_value", nb_nn_linear_forward(ctx, &m->W_value, x));
    nb_tensor *queries = NB_NN_SCOPED(ctx, "W_query", nb_nn_linear_forward(ctx, &m->W_query, x));
    if (m->use_fused && !attn_weights) /* one head: (B, T, 1, d_out) */
        return fused_attend(ctx, queries, keys, values, 1, key_padding_mask, &m->dropout);
    NB_LIB_HERE(ctx); nb_tensor *scores = nb_matmul(ctx, queries, nb_transpose(ctx, keys, 1, 2));
    /* masked, scaled softmax, dropout, @ values: (B, T, d_out) */
    return causal_attend(ctx, scores, pad, m->d_out, &m->dropout, values, attn_weights);
}

nb_tensor *nb_nn_causal_attention_forward(nb_ctx *ctx, nb_nn_causal_attention *m,
                                          nb_tensor *x) {
    return nb_nn_causal_attention_forward_masked(ctx, m, x, NULL, NULL);
}

void nb_nn_causal_attention_train(nb_nn_causal_attention *m, bool on) {
    if (!m) return;
    m->training = on;
    train_qkv(&m->W_query, &m->W_key, &m->W_value, on);
    nb_nn_dropout_train(&m->dropout, on);
}

/* ---- MultiHeadAttentionWrapper ------------------------------------------------ */

nb_status nb_nn_mha_wrapper_init(nb_ctx *pctx, nb_nn_mha_wrapper *m, int64_t d_in, int64_t d_out,
                                 int64_t context_length, double dropout, int num_heads,
                                 bool qkv_bias, nb_dtype dt, nb_pcg32 *rng) {
    const char *cls = "MultiHeadAttentionWrapper";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (!st)
        st = check_batched_args(pctx, cls, d_in, d_out, context_length, num_heads, dropout, dt,
                                rng);
    if (st) return st;
    m->heads = nb_ctx_alloc(pctx, (size_t)num_heads * sizeof *m->heads);
    if (!m->heads) return nb_ctx_status(pctx);
    /* nn.ModuleList([CausalAttention(...) for _ in range(num_heads)]) */
    for (int h = 0; h < num_heads; h++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "heads.%d", h);
        st = nb_nn_causal_attention_init(pctx, &m->heads[h], d_in, d_out, context_length,
                                         dropout, qkv_bias, dt, rng);
        if (!st) st = nb_params_add_prefixed(pctx, &m->params, prefix, &m->heads[h].params);
        if (st) return st;
    }
    m->d_in = d_in;
    m->d_out = d_out;
    m->context_length = context_length;
    m->num_heads = num_heads;
    m->training = true;
    return NB_OK;
}

nb_tensor *nb_nn_mha_wrapper_forward(nb_ctx *ctx, nb_nn_mha_wrapper *m, nb_tensor *x) {
    const char *cls = "MultiHeadAttentionWrapper";
    if (!nb_nn_forward_begin(ctx, m, m && m->heads && m->num_heads > 0, cls,
                             "nb_nn_mha_wrapper_init"))
        return NULL;
    if (!check_x_3d(ctx, cls, x, m->heads[0].W_query.weight->dtype, m->d_in,
                    m->context_length))
        return NULL;
    nb_tensor **outs = nb_ctx_alloc(ctx, (size_t)m->num_heads * sizeof *outs);
    if (!outs) return NULL;
    for (int h = 0; h < m->num_heads; h++) /* each (B, T, d_out) */
        outs[h] = nb_nn_causal_attention_forward(ctx, &m->heads[h], x);
    if (!nb_ctx_ok(ctx)) return NULL;
    return nb_concat(ctx, m->num_heads, outs, -1); /* (B, T, num_heads * d_out) */
}

void nb_nn_mha_wrapper_train(nb_nn_mha_wrapper *m, bool on) {
    if (!m) return;
    m->training = on;
    for (int h = 0; m->heads && h < m->num_heads; h++)
        nb_nn_causal_attention_train(&m->heads[h], on);
}

/* ---- MultiHeadAttention ------------------------------------------------------- */

nb_status nb_nn_mha_init(nb_ctx *pctx, nb_nn_mha *m, int64_t d_in, int64_t d_out,
                         int64_t context_length, double dropout, int num_heads, bool qkv_bias,
                         nb_dtype dt, nb_pcg32 *rng) {
    const char *cls = "MultiHeadAttention";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (!st)
        st = check_batched_args(pctx, cls, d_in, d_out, context_length, num_heads, dropout, dt,
                                rng);
    if (st) return st;
    if (d_out % num_heads != 0)
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: d_out %lld is not divisible by num_heads %d",
                           cls, (long long)d_out, num_heads);
    st = init_qkv(pctx, &m->params, &m->W_query, &m->W_key, &m->W_value, d_in, d_out, qkv_bias,
                  dt, rng);
    if (!st) st = nb_nn_dropout_init(pctx, &m->dropout, dropout, rng);
    if (!st) st = nb_nn_linear_init(pctx, &m->out_proj, d_out, d_out, true, dt, rng);
    if (!st) st = nb_params_add_prefixed(pctx, &m->params, "out_proj", &m->out_proj.params);
    if (st) return st;
    m->d_in = d_in;
    m->d_out = d_out;
    m->context_length = context_length;
    m->num_heads = num_heads;
    m->head_dim = d_out / num_heads;
    m->training = true;
    m->use_fused = true;
    return NB_OK;
}

static nb_tensor *mha_body(nb_ctx *ctx, nb_nn_mha *m, nb_tensor *x,
                           const nb_tensor *key_padding_mask, nb_tensor **attn_weights);

nb_tensor *nb_nn_mha_forward_masked(nb_ctx *ctx, nb_nn_mha *m, nb_tensor *x,
                                    const nb_tensor *key_padding_mask, nb_tensor **attn_weights) {
    return NB_NN_SCOPED(ctx, NULL, mha_body(ctx, m, x, key_padding_mask, attn_weights));
}

static nb_tensor *mha_body(nb_ctx *ctx, nb_nn_mha *m, nb_tensor *x,
                           const nb_tensor *key_padding_mask, nb_tensor **attn_weights) {
    const char *cls = "MultiHeadAttention";
    if (attn_weights) *attn_weights = NULL;
    if (!nb_nn_forward_begin(ctx, m, m && m->W_query.weight && m->out_proj.weight, cls,
                             "nb_nn_mha_init"))
        return NULL;
    if (!check_x_3d(ctx, cls, x, m->W_query.weight->dtype, m->d_in, m->context_length))
        return NULL;
    bool failed;
    nb_tensor *pad = padding_mask(ctx, cls, key_padding_mask, x, 4, &failed); /* (B,1,1,T) */
    if (failed) return NULL;
    int64_t b = x->shape[0], t = x->shape[1], h = m->num_heads, hd = m->head_dim;
    nb_tensor *keys = NB_NN_SCOPED(ctx, "W_key", nb_nn_linear_forward(ctx, &m->W_key, x));
    nb_tensor *values = NB_NN_SCOPED(ctx, "W_value", nb_nn_linear_forward(ctx, &m->W_value, x));
    nb_tensor *queries = NB_NN_SCOPED(ctx, "W_query", nb_nn_linear_forward(ctx, &m->W_query, x));
    if (m->use_fused && !attn_weights) {
        nb_tensor *context = fused_attend(ctx, queries, keys, values, h, key_padding_mask,
                                          &m->dropout); /* (B, T, d_out), heads merged */
        return NB_NN_SCOPED(ctx, "out_proj", nb_nn_linear_forward(ctx, &m->out_proj, context));
    }
    /* split d_out into heads: (B, T, H, hd), then heads first: (B, H, T, hd) */
    NB_LIB_HERE(ctx); keys = nb_transpose(ctx, nb_view(ctx, keys, NB_SHAPE(b, t, h, hd)), 1, 2);
    values = nb_transpose(ctx, nb_view(ctx, values, NB_SHAPE(b, t, h, hd)), 1, 2);
    queries = nb_transpose(ctx, nb_view(ctx, queries, NB_SHAPE(b, t, h, hd)), 1, 2);
    NB_LIB_HERE(ctx); nb_tensor *scores = nb_matmul(ctx, queries, nb_transpose(ctx, keys, 2, 3));
    /* masked, scaled softmax, dropout, @ values, per head: (B, H, T, hd) */
    nb_tensor *context = causal_attend(ctx, scores, pad, hd, &m->dropout, values, attn_weights);
    /* back to (B, T, H, hd) and merge the heads. The seed's .contiguous() is
     * not needed: nabla's transpose already returns a contiguous copy. */
    NB_LIB_HERE(ctx); context = nb_view(ctx, nb_transpose(ctx, context, 1, 2), NB_SHAPE(b, t, m->d_out));
    return NB_NN_SCOPED(ctx, "out_proj", nb_nn_linear_forward(ctx, &m->out_proj, context));
}

nb_tensor *nb_nn_mha_forward(nb_ctx *ctx, nb_nn_mha *m, nb_tensor *x) {
    return nb_nn_mha_forward_masked(ctx, m, x, NULL, NULL);
}

void nb_nn_mha_train(nb_nn_mha *m, bool on) {
    if (!m) return;
    m->training = on;
    train_qkv(&m->W_query, &m->W_key, &m->W_value, on);
    nb_nn_dropout_train(&m->dropout, on);
    nb_nn_linear_train(&m->out_proj, on);
}
