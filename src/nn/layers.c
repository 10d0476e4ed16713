/* nn/layers.c - the basic modules (Linear, Dropout, Embedding, LayerNorm,
 * RMSNorm, GELU) and the parameter-list helpers every module uses. Each
 * module is a thin layer over one op of ops/ (linear.c, dropout.c,
 * embedding.c, layer_norm.c): init creates and draws its parameters
 * in PyTorch's order, forward checks its input against the module and calls
 * the op. The math and the gradients live in the ops. */
#include "nn_internal.h"

/* ---- parameter lists -------------------------------------------------------- */

void nb_params_zero_grad(const nb_tensor_list *params) {
    if (!nb_list_valid(params)) return;
    for (int i = 0; i < params->n; i++) nb_zero_grad(nb_list_tensor(params, i));
}

nb_status nb_params_copy_from(const nb_tensor_list *dst, const nb_tensor_list *src) {
    const char *name = "params_copy_from";
    const nb_tensor *first = nb_list_tensor(dst, 0);
    nb_ctx *ctx = first ? first->owner : NULL;
    if (!dst || !src) return ctx ? nb_ctx_fail(ctx, NB_ERR_NULL, "%s: source list is NULL", name)
                                 : NB_ERR_NULL;
    if (!nb_list_valid(dst) || !nb_list_valid(src))
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: the %s list is corrupt (n = %d)", name,
                           nb_list_valid(dst) ? "source" : "destination",
                           nb_list_valid(dst) ? src->n : dst->n);
    if (dst->n == 0) return NB_OK;
    /* Validate everything before copying anything. */
    for (int i = 0; i < dst->n; i++) {
        nb_tensor *d = nb_list_tensor(dst, i);
        if (!d || !nb_list_name(dst, i))
            return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: destination entry %d is NULL", name, i);
        nb_tensor *s = nb_list_get(src, nb_list_name(dst, i));
        if (!s)
            return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: no tensor named '%s' in the source "
                               "(it has %d tensors)", name, nb_list_name(dst, i), src->n);
        char sd[64], ss[64];
        if (!nb_same_shape(d, s))
            return nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: '%s' has shape %s here but %s in the "
                               "source", name, nb_list_name(dst, i), nb_shape_str(d, sd, sizeof sd),
                               nb_shape_str(s, ss, sizeof ss));
        bool df = d->dtype == NB_F32 || d->dtype == NB_F64;
        bool sf = s->dtype == NB_F32 || s->dtype == NB_F64;
        if (df != sf || (!df && d->dtype != s->dtype))
            return nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: '%s' is %s here but %s in the source",
                               name, nb_list_name(dst, i), nb_dtype_name(d->dtype),
                               nb_dtype_name(s->dtype));
    }
    for (int i = 0; i < dst->n; i++) {
        nb_tensor *d = nb_list_tensor(dst, i);
        const nb_tensor *s = nb_list_get(src, nb_list_name(dst, i));
        if (d == s) continue;
        if (d->dtype == s->dtype)
            memmove(d->data, s->data, d->numel * nb_dtype_size(d->dtype));
        else
            for (size_t k = 0; k < d->numel; k++) nb_set(d, k, nb_get(s, k));
    }
    return NB_OK;
}

nb_status nb_params_add_prefixed(nb_ctx *pctx, nb_tensor_list *dst, const char *prefix,
                                 const nb_tensor_list *src) {
    if (!nb_ctx_ok(pctx)) return nb_ctx_status(pctx);
    if (!dst || !prefix || !src)
        return nb_ctx_fail(pctx, NB_ERR_NULL, "params_add_prefixed: %s is NULL",
                           !dst ? "dst" : !prefix ? "prefix" : "src");
    if (!nb_list_valid(dst) || !nb_list_valid(src))
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "params_add_prefixed: %s is corrupt (n = %d)",
                           nb_list_valid(dst) ? "src" : "dst", nb_list_valid(dst) ? src->n : dst->n);
    for (int i = 0; i < src->n; i++) {
        if (!nb_list_name(src, i))
            return nb_ctx_fail(pctx, NB_ERR_NULL, "params_add_prefixed: entry %d of src has a "
                               "NULL name", i);
        size_t len = strlen(prefix) + 1 + strlen(nb_list_name(src, i)) + 1;
        char *s = nb_ctx_alloc(pctx, len);
        if (!s) return nb_ctx_status(pctx);
        snprintf(s, len, "%s.%s", prefix, nb_list_name(src, i));
        nb_status st = nb_list_insert(dst, s, nb_list_tensor(src, i));
        /* The tensor takes its module path, as state_dict names it, so tape
         * pictures show "out_proj.bias" rather than a bare "bias"; nested
         * modules prefix again on the way out, giving the full path. */
        if (!st) nb_list_tensor(src, i)->name = s;
        if (st == NB_ERR_SIZE)
            return nb_ctx_fail(pctx, st, "params_add_prefixed: the list is full (%d tensors)",
                               dst->n);
        if (st == NB_ERR_MEMORY)
            return nb_ctx_fail(pctx, st, "params_add_prefixed: out of memory at '%s'", s);
        if (st == NB_ERR_VALUE)
            return nb_ctx_fail(pctx, st, "params_add_prefixed: '%s' is already in the list", s);
        if (st) return nb_ctx_fail(pctx, st, "params_add_prefixed: entry %d of src is NULL", i);
    }
    return NB_OK;
}

/* ---- shared by the modules (declared in nn_internal.h) ------------------------ */

/* The start of every init: a usable pctx, a module to fill. Clears *m. */
nb_status nb_nn_init_begin(nb_ctx *pctx, void *m, size_t size, const char *cls) {
    if (!pctx) return NB_ERR_NULL;
    if (nb_ctx_status(pctx)) return nb_ctx_status(pctx);
    if (!m) return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: module is NULL", cls);
    memset(m, 0, size);
    return NB_OK;
}

nb_status nb_nn_check_positive(nb_ctx *pctx, const char *cls, const char *what, int64_t v) {
    if (v > 0) return NB_OK;
    return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: %s %lld must be positive", cls, what,
                       (long long)v);
}

nb_status nb_nn_check_param_dtype(nb_ctx *pctx, const char *cls, nb_dtype dt) {
    if (dt == NB_F32 || dt == NB_F64) return NB_OK;
    return nb_ctx_fail(pctx, NB_ERR_DTYPE, "%s: dtype %s, parameters must be f32 or f64", cls,
                       nb_dtype_name(dt));
}

nb_status nb_nn_check_rng(nb_ctx *pctx, const char *cls, const nb_pcg32 *rng) {
    if (rng) return NB_OK;
    return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: rng is NULL (the parameters are drawn from it)",
                       cls);
}

/* A new parameter leaf: name it, mark it, list it. */
nb_tensor *nb_nn_add_param(nb_ctx *pctx, nb_tensor_list *params, const char *name,
                           nb_tensor *t) {
    if (!nb_requires_grad(t)) return NULL;
    t->name = name;
    if (nb_list_insert(params, name, t)) {
        nb_ctx_fail(pctx, NB_ERR_VALUE, "add_param: cannot list '%s'", name);
        return NULL;
    }
    return t;
}

/* The start of every forward: a usable ctx and an initialised module. */
bool nb_nn_forward_begin(nb_ctx *ctx, const void *m, bool initialised, const char *cls,
                         const char *init_fn) {
    if (!nb_ctx_ok(ctx)) return false;
    if (!m) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: module is NULL", cls);
        return false;
    }
    if (!initialised) {
        nb_ctx_fail(ctx, NB_ERR_STATE, "%s: module is not initialised (call %s)", cls, init_fn);
        return false;
    }
    return true;
}

/* x is non-NULL and has the parameters' dtype. */
bool nb_nn_check_x(nb_ctx *ctx, const char *cls, const nb_tensor *x, nb_dtype dt) {
    if (!x) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: x is NULL", cls);
        return false;
    }
    if (x->dtype != dt) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: x is %s but the parameters are %s", cls,
                    nb_dtype_name(x->dtype), nb_dtype_name(dt));
        return false;
    }
    return true;
}

/* x's last dim is `want`. */
bool nb_nn_check_last_dim(nb_ctx *ctx, const char *cls, const nb_tensor *x, int64_t want,
                          const char *what) {
    if (x->ndim >= 1 && x->shape[x->ndim - 1] == want) return true;
    char s[64];
    nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x has shape %s, expected (..., %lld) (%s %lld)", cls,
                nb_shape_str(x, s, sizeof s), (long long)want, what, (long long)want);
    return false;
}

/* ---- Linear ------------------------------------------------------------------ */

nb_status nb_nn_linear_init(nb_ctx *pctx, nb_nn_linear *m, int64_t in_features,
                            int64_t out_features, bool bias, nb_dtype dt, nb_pcg32 *rng) {
    const char *cls = "Linear";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (!st) st = nb_nn_check_positive(pctx, cls, "in_features", in_features);
    if (!st) st = nb_nn_check_positive(pctx, cls, "out_features", out_features);
    if (!st) st = nb_nn_check_param_dtype(pctx, cls, dt);
    if (!st) st = nb_nn_check_rng(pctx, cls, rng);
    if (st) return st;
    m->in_features = in_features;
    m->out_features = out_features;
    double bound = 1.0 / sqrt((double)in_features);
    m->weight = nb_nn_add_param(pctx, &m->params, "weight",
                          nb_uniform(pctx, dt, NB_SHAPE(out_features, in_features), -bound,
                                     bound, rng));
    if (!m->weight) return nb_ctx_status(pctx);
    if (bias) {
        m->bias = nb_nn_add_param(pctx, &m->params, "bias",
                            nb_uniform(pctx, dt, NB_SHAPE(out_features), -bound, bound, rng));
        if (!m->bias) return nb_ctx_status(pctx);
    }
    m->training = true;
    return NB_OK;
}

nb_tensor *nb_nn_linear_forward(nb_ctx *ctx, nb_nn_linear *m, nb_tensor *x) {
    const char *cls = "Linear";
    if (!nb_nn_forward_begin(ctx, m, m && m->weight, cls, "nb_nn_linear_init")) return NULL;
    if (!nb_nn_check_x(ctx, cls, x, m->weight->dtype)) return NULL;
    if (!nb_nn_check_last_dim(ctx, cls, x, m->in_features, "in_features")) return NULL;
    return NB_NN_SCOPED(ctx, NULL, nb_linear(ctx, x, m->weight, m->bias));
}

void nb_nn_linear_train(nb_nn_linear *m, bool on) {
    if (m) m->training = on;
}

/* ---- Dropout ----------------------------------------------------------------- */

nb_status nb_nn_dropout_init(nb_ctx *pctx, nb_nn_dropout *m, double p, nb_pcg32 *rng) {
    const char *cls = "Dropout";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (st) return st;
    if (!(p >= 0.0 && p <= 1.0))
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: p %g is outside [0, 1]", cls, p);
    if (p > 0.0 && !rng)
        return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: rng is NULL (p %g > 0 draws masks from it)",
                           cls, p);
    m->p = p;
    m->rng = rng;
    m->training = true;
    return NB_OK;
}

nb_tensor *nb_nn_dropout_forward(nb_ctx *ctx, nb_nn_dropout *m, nb_tensor *x) {
    const char *cls = "Dropout";
    if (!nb_nn_forward_begin(ctx, m, m && (m->rng || m->p == 0.0), cls, "nb_nn_dropout_init"))
        return NULL;
    if (!x) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: x is NULL", cls);
        return NULL;
    }
    return nb_dropout(ctx, x, m->p, m->training, m->rng);
}

void nb_nn_dropout_train(nb_nn_dropout *m, bool on) {
    if (m) m->training = on;
}

/* ---- Embedding --------------------------------------------------------------- */

nb_status nb_nn_embedding_init(nb_ctx *pctx, nb_nn_embedding *m, int64_t num_embeddings,
                               int64_t embedding_dim, nb_dtype dt, nb_pcg32 *rng) {
    const char *cls = "Embedding";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (!st) st = nb_nn_check_positive(pctx, cls, "num_embeddings", num_embeddings);
    if (!st) st = nb_nn_check_positive(pctx, cls, "embedding_dim", embedding_dim);
    if (!st) st = nb_nn_check_param_dtype(pctx, cls, dt);
    if (!st) st = nb_nn_check_rng(pctx, cls, rng);
    if (st) return st;
    m->num_embeddings = num_embeddings;
    m->embedding_dim = embedding_dim;
    m->weight = nb_nn_add_param(pctx, &m->params, "weight",
                          nb_normal(pctx, dt, NB_SHAPE(num_embeddings, embedding_dim), 0.0, 1.0,
                                    rng));
    if (!m->weight) return nb_ctx_status(pctx);
    m->training = true;
    return NB_OK;
}

nb_tensor *nb_nn_embedding_forward(nb_ctx *ctx, nb_nn_embedding *m, const nb_tensor *ids) {
    const char *cls = "Embedding";
    if (!nb_nn_forward_begin(ctx, m, m && m->weight, cls, "nb_nn_embedding_init")) return NULL;
    if (!ids) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: ids is NULL", cls);
        return NULL;
    }
    return nb_embedding(ctx, m->weight, ids);
}

void nb_nn_embedding_train(nb_nn_embedding *m, bool on) {
    if (m) m->training = on;
}

/* ---- LayerNorm --------------------------------------------------------------- */

nb_status nb_nn_layer_norm_init(nb_ctx *pctx, nb_nn_layer_norm *m, int64_t dim, double eps,
                                bool elementwise_affine, nb_dtype dt) {
    const char *cls = "LayerNorm";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (!st) st = nb_nn_check_positive(pctx, cls, "dim", dim);
    if (!st) st = nb_nn_check_param_dtype(pctx, cls, dt);
    if (st) return st;
    if (!(eps >= 0.0) || isinf(eps))
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: eps %g must be finite and >= 0", cls, eps);
    m->dim = dim;
    m->eps = eps;
    m->training = true;
    if (!elementwise_affine) return NB_OK;
    m->weight = nb_nn_add_param(pctx, &m->params, "weight", nb_ones(pctx, dt, NB_SHAPE(dim)));
    if (!m->weight) return nb_ctx_status(pctx);
    m->bias = nb_nn_add_param(pctx, &m->params, "bias", nb_zeros(pctx, dt, NB_SHAPE(dim)));
    if (!m->bias) return nb_ctx_status(pctx);
    return NB_OK;
}

nb_tensor *nb_nn_layer_norm_forward(nb_ctx *ctx, nb_nn_layer_norm *m, nb_tensor *x) {
    const char *cls = "LayerNorm";
    if (!nb_nn_forward_begin(ctx, m, m && m->dim > 0, cls, "nb_nn_layer_norm_init")) return NULL;
    if (!x) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: x is NULL", cls);
        return NULL;
    }
    if (m->weight && !nb_nn_check_x(ctx, cls, x, m->weight->dtype)) return NULL;
    if (!nb_nn_check_last_dim(ctx, cls, x, m->dim, "normalized_shape")) return NULL;
    return NB_NN_SCOPED(ctx, NULL, nb_layer_norm(ctx, x, m->weight, m->bias, m->eps));
}

void nb_nn_layer_norm_train(nb_nn_layer_norm *m, bool on) {
    if (m) m->training = on;
}

/* ---- RMSNorm ----------------------------------------------------------------- */

nb_status nb_nn_rms_norm_init(nb_ctx *pctx, nb_nn_rms_norm *m, int64_t dim, double eps,
                              bool elementwise_affine, nb_dtype dt) {
    const char *cls = "RMSNorm";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (!st) st = nb_nn_check_positive(pctx, cls, "dim", dim);
    if (!st) st = nb_nn_check_param_dtype(pctx, cls, dt);
    if (st) return st;
    if (!(eps > 0.0) || isinf(eps))
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: eps %g must be finite and > 0", cls, eps);
    m->dim = dim;
    m->eps = eps;
    m->training = true;
    if (!elementwise_affine) return NB_OK;
    m->weight = nb_nn_add_param(pctx, &m->params, "weight", nb_ones(pctx, dt, NB_SHAPE(dim)));
    return m->weight ? NB_OK : nb_ctx_status(pctx);
}

nb_tensor *nb_nn_rms_norm_forward(nb_ctx *ctx, nb_nn_rms_norm *m, nb_tensor *x) {
    const char *cls = "RMSNorm";
    if (!nb_nn_forward_begin(ctx, m, m && m->dim > 0, cls, "nb_nn_rms_norm_init")) return NULL;
    if (!x) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: x is NULL", cls);
        return NULL;
    }
    if (m->weight && !nb_nn_check_x(ctx, cls, x, m->weight->dtype)) return NULL;
    if (!nb_nn_check_last_dim(ctx, cls, x, m->dim, "normalized_shape")) return NULL;
    return NB_NN_SCOPED(ctx, NULL, nb_rms_norm(ctx, x, m->weight, m->eps));
}

void nb_nn_rms_norm_train(nb_nn_rms_norm *m, bool on) {
    if (m) m->training = on;
}

/* ---- GELU -------------------------------------------------------------------- */

nb_status nb_nn_gelu_init(nb_ctx *pctx, nb_nn_gelu *m, nb_gelu_approx approximate) {
    const char *cls = "GELU";
    nb_status st = nb_nn_init_begin(pctx, m, sizeof *m, cls);
    if (st) return st;
    if (approximate != NB_GELU_NONE && approximate != NB_GELU_TANH)
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: approximate %d is neither NB_GELU_NONE nor "
                           "NB_GELU_TANH", cls, (int)approximate);
    m->approximate = approximate;
    m->training = true;
    return NB_OK;
}

nb_tensor *nb_nn_gelu_forward(nb_ctx *ctx, nb_nn_gelu *m, nb_tensor *x) {
    const char *cls = "GELU";
    if (!nb_nn_forward_begin(ctx, m, true, cls, "nb_nn_gelu_init")) return NULL;
    if (!x) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: x is NULL", cls);
        return NULL;
    }
    return NB_NN_SCOPED(ctx, NULL, nb_gelu(ctx, x, m->approximate));
}

void nb_nn_gelu_train(nb_nn_gelu *m, bool on) {
    if (m) m->training = on;
}
