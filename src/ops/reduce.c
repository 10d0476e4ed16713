/* ops/reduce.c - sum and mean over everything, sum_dim, mean_dim, max_dim.
 *
 * A reduction over dim d sees its input as (outer, n, inner): outer is the
 * product of the dims before d, n = shape[d], inner the product of the dims
 * after. Element (o, j, k) sits at (o*n + j)*inner + k and reduces into
 * out[o*inner + k]. A reduction over everything is the case outer = inner = 1,
 * n = numel, so all five ops share one geometry.
 *
 * Sums accumulate in double for f32 and f64 alike, then round once to the
 * output dtype. PyTorch sums f32 in float with cascade (pairwise) summation;
 * a double accumulator is at least as accurate for any size a context holds,
 * so results agree with PyTorch to within an ulp or so of the f32 output,
 * without the rounding drift a plain float accumulator would have. */
#include "ops/ops_internal.h"

#define RED_ALL (-1) /* node->i[0] of sum and mean: every element */

typedef struct geom {
    size_t outer, n, inner;
} geom;

static geom geom_of(const nb_tensor *a, int d) {
    geom g = {1, a->numel, 1};
    if (d == RED_ALL) return g;
    g.n = (size_t)a->shape[d]; /* a 0-dim a has shape[0] == 1 */
    for (int i = 0; i < d; i++) g.outer *= (size_t)a->shape[i];
    for (int i = d + 1; i < a->ndim; i++) g.inner *= (size_t)a->shape[i];
    return g;
}

/* The dim to reduce, negative counting from the end; -2 with an error when
 * out of range. A 0-dim tensor accepts 0 and -1, as in PyTorch. */
static int red_dim(nb_ctx *ctx, nb_op op, const nb_tensor *a, int dim) {
    if (a->ndim == 0 && (dim == 0 || dim == -1)) return 0;
    int d = nb_norm_dim(ctx, nb_op_name(op), a, dim);
    return d < 0 ? -2 : d;
}

/* The output: a's shape without dim d, or with it as 1 under keepdim;
 * 0-dim for RED_ALL (and for a 0-dim input). */
static nb_tensor *red_out(nb_ctx *ctx, nb_dtype dt, const nb_tensor *a, int d, bool keepdim) {
    int ndim = 0;
    int64_t shape[NB_MAX_DIMS] = {0};
    for (int i = 0; d != RED_ALL && i < a->ndim; i++) {
        if (i != d)
            shape[ndim++] = a->shape[i];
        else if (keepdim)
            shape[ndim++] = 1;
    }
    return nb_empty(ctx, dt, ndim, shape);
}

/* ---- sum, mean, sum_dim, mean_dim ---------------------------------------------
 * a (outer, n, inner) -> out (outer, inner):  out[o,k] = sum_j a[o,j,k] / div,
 * div = 1 for sums and n for means (node->f[0]).
 * Backward: da[o,j,k] += g[o,k] / div; it reuses only the geometry (dim in
 * node->i[0]), no forward values. */
#define SUM_BLOCK 64 /* inner positions summed at once, in double, on the stack */

static void sum_backward(nb_ctx *ctx, nb_node *nd) {
    nb_tensor *a = nd->in[0], *out = nd->out;
    void *ga = nb_grad_buffer(ctx, a);
    if (!ga) return;
    geom g = geom_of(a, (int)nd->i[0]);
#define K(T)                                                                   \
    {                                                                          \
        const T *go = out->grad;                                               \
        T *da = ga;                                                            \
        const T div = (T)nd->f[0];                                             \
        for (size_t o = 0; o < g.outer; o++)                                   \
            for (size_t j = 0; j < g.n; j++) {                                 \
                T *row = da + (o * g.n + j) * g.inner;                         \
                for (size_t k = 0; k < g.inner; k++)                           \
                    row[k] += go[o * g.inner + k] / div;                       \
            }                                                                  \
    }
    NB_DISPATCH(a->dtype, K);
#undef K
}

/* d is a resolved dim or RED_ALL; mean divides by the reduced count. */
static nb_tensor *sum_common(nb_ctx *ctx, nb_op op, nb_tensor *a, int d, bool keepdim,
                             bool mean) {
    nb_tensor *out = red_out(ctx, a->dtype, a, d, keepdim);
    if (!out) return NULL;
    geom g = geom_of(a, d);
    double div = mean ? (double)g.n : 1.0;
#define K(T)                                                                   \
    {                                                                          \
        const T *x = a->data;                                                  \
        T *y = out->data;                                                      \
        for (size_t o = 0; o < g.outer; o++)                                   \
            for (size_t k0 = 0; k0 < g.inner; k0 += SUM_BLOCK) {               \
                size_t kn = g.inner - k0 < SUM_BLOCK ? g.inner - k0 : SUM_BLOCK; \
                double acc[SUM_BLOCK] = {0};                                   \
                for (size_t j = 0; j < g.n; j++) {                             \
                    const T *row = x + (o * g.n + j) * g.inner + k0;           \
                    for (size_t k = 0; k < kn; k++) acc[k] += row[k];          \
                }                                                              \
                for (size_t k = 0; k < kn; k++)                                \
                    y[o * g.inner + k0 + k] = (T)(acc[k] / div);               \
            }                                                                  \
    }
    NB_DISPATCH(a->dtype, K);
#undef K
    nb_node *n = nb_record_op(ctx, op, out, 1, &a, sum_backward);
    if (n) {
        n->i[0] = d;
        n->i[1] = keepdim;
        n->f[0] = div;
    }
    return out;
}

nb_tensor *nb_sum(nb_ctx *ctx, nb_tensor *a) {
    if (!nb_check_float_inputs(ctx, "sum", 1, &a)) return NULL;
    return sum_common(ctx, NB_OP_SUM, a, RED_ALL, false, false);
}

/* sum, mean, sum_dim, mean_dim: dout, with the reduced dim put back as 1,
 * broadcast over it and divided by div. */
static void sum_graph_backward(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *a = n->in[0], *g = dout;
    int d = (int)n->i[0];
    if (d != RED_ALL && !n->i[1] && a->ndim > 0) {
        int64_t shape[NB_MAX_DIMS];
        for (int i = 0; i < a->ndim; i++) shape[i] = i == d ? 1 : a->shape[i];
        g = nb_reshape(ctx, g, a->ndim, shape);
    }
    if (n->f[0] != 1.0) g = nb_scale(ctx, g, 1.0 / n->f[0]);
    din[0] = nb_expand_as(ctx, g, a);
}

void nb_graph_backward_sum(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    sum_graph_backward(ctx, n, dout, din);
}

nb_tensor *nb_mean(nb_ctx *ctx, nb_tensor *a) {
    if (!nb_check_float_inputs(ctx, "mean", 1, &a)) return NULL;
    return sum_common(ctx, NB_OP_MEAN, a, RED_ALL, false, true);
}

void nb_graph_backward_mean(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    sum_graph_backward(ctx, n, dout, din);
}

nb_tensor *nb_sum_dim(nb_ctx *ctx, nb_tensor *a, int dim, bool keepdim) {
    if (!nb_check_float_inputs(ctx, "sum_dim", 1, &a)) return NULL;
    int d = red_dim(ctx, NB_OP_SUM_DIM, a, dim);
    return d < 0 ? NULL : sum_common(ctx, NB_OP_SUM_DIM, a, d, keepdim, false);
}

void nb_graph_backward_sum_dim(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    sum_graph_backward(ctx, n, dout, din);
}

nb_tensor *nb_mean_dim(nb_ctx *ctx, nb_tensor *a, int dim, bool keepdim) {
    if (!nb_check_float_inputs(ctx, "mean_dim", 1, &a)) return NULL;
    int d = red_dim(ctx, NB_OP_MEAN_DIM, a, dim);
    return d < 0 ? NULL : sum_common(ctx, NB_OP_MEAN_DIM, a, d, keepdim, true);
}

void nb_graph_backward_mean_dim(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    sum_graph_backward(ctx, n, dout, din);
}

/* ---- max_dim --------------------------------------------------------------------
 * a (outer, n, inner) -> out (outer, inner):  out[o,k] = max_j a[o,j,k], and
 * am[o,k] = the first j that reaches it. A NaN counts as the maximum (the
 * first NaN wins), as in PyTorch.
 * Backward: da[o, am[o,k], k] += g[o,k]; it reuses the saved arg-max
 * (node->saved, outer*inner int64 in the arena). */
static void max_dim_backward(nb_ctx *ctx, nb_node *nd) {
    nb_tensor *a = nd->in[0], *out = nd->out;
    void *ga = nb_grad_buffer(ctx, a);
    if (!ga) return;
    geom g = geom_of(a, (int)nd->i[0]);
    const int64_t *am = nd->saved;
#define K(T)                                                                   \
    {                                                                          \
        const T *go = out->grad;                                               \
        T *da = ga;                                                            \
        for (size_t o = 0; o < g.outer; o++)                                   \
            for (size_t k = 0; k < g.inner; k++) {                             \
                size_t ok = o * g.inner + k;                                   \
                da[(o * g.n + (size_t)am[ok]) * g.inner + k] += go[ok];        \
            }                                                                  \
    }
    NB_DISPATCH(a->dtype, K);
#undef K
}

nb_tensor *nb_max_dim(nb_ctx *ctx, nb_tensor *a, int dim, bool keepdim, nb_tensor **indices) {
    if (indices) *indices = NULL;
    if (!nb_check_float_inputs(ctx, "max_dim", 1, &a)) return NULL;
    int d = red_dim(ctx, NB_OP_MAX_DIM, a, dim);
    if (d < 0) return NULL;
    if (a->numel == 0 && (a->ndim == 0 || a->shape[d] == 0)) { /* as PyTorch: no maximum */
        char s[64];
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "max_dim: input %s has no elements along dim %d, expected "
                    "a non-zero size to take the maximum of", nb_shape_str(a, s, sizeof s), dim);
        return NULL;
    }
    nb_tensor *out = red_out(ctx, a->dtype, a, d, keepdim);
    if (!out) return NULL;
    geom g = geom_of(a, d);
    int64_t *am = nb_ctx_alloc(ctx, out->numel * sizeof *am); /* zeroed: j = 0 */
    if (!am) return NULL;
    /* Walks j outermost so rows are read contiguously; y holds the running max. */
#define K(T)                                                                   \
    {                                                                          \
        const T *x = a->data;                                                  \
        T *y = out->data;                                                      \
        for (size_t o = 0; o < g.outer; o++) {                                 \
            T *best = y + o * g.inner;                                         \
            int64_t *arg = am + o * g.inner;                                   \
            const T *row0 = x + o * g.n * g.inner;                             \
            for (size_t k = 0; k < g.inner; k++) best[k] = row0[k];            \
            for (size_t j = 1; j < g.n; j++) {                                 \
                const T *row = row0 + j * g.inner;                             \
                for (size_t k = 0; k < g.inner; k++) {                         \
                    T v = row[k];                                              \
                    if (v > best[k] || (v != v && best[k] == best[k])) {       \
                        best[k] = v;                                           \
                        arg[k] = (int64_t)j;                                   \
                    }                                                          \
                }                                                              \
            }                                                                  \
        }                                                                      \
    }
    NB_DISPATCH(a->dtype, K);
#undef K
    if (indices) {
        *indices = nb_from_data(ctx, NB_I64, out->ndim, out->shape, am);
        if (!*indices) return NULL;
    }
    nb_node *n = nb_record_op(ctx, NB_OP_MAX_DIM, out, 1, &a, max_dim_backward);
    if (n) {
        n->i[0] = d;
        n->i[1] = keepdim;
        n->saved = am;
    }
    return out;
}

/* max_dim: dout broadcast back, times the constant one-hot of the saved
 * arg-max (its derivative is 0 wherever the arg-max does not change). */
/* 1 at each arg-max of max_dim's node n, 0 elsewhere: a tensor of its
 * input's shape */
static nb_tensor *max_dim_hot(nb_ctx *ctx, const nb_node *n) {
    nb_tensor *a = n->in[0];
    nb_tensor *hot = nb_zeros(ctx, a->dtype, a->ndim, a->shape);
    if (!hot) return NULL;
    geom g = geom_of(a, (int)n->i[0]);
    const int64_t *am = n->saved;
    for (size_t o = 0; o < g.outer; o++)
        for (size_t k = 0; k < g.inner; k++)
            nb_set(hot, (o * g.n + (size_t)am[o * g.inner + k]) * g.inner + k, 1.0);
    return hot;
}

void nb_graph_backward_max_dim(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *a = n->in[0];
    nb_tensor *hot = max_dim_hot(ctx, n);
    if (!hot) return;
    nb_tensor *gk = dout;
    if (!n->i[1] && a->ndim > 0) {
        int64_t shape[NB_MAX_DIMS];
        for (int i = 0; i < a->ndim; i++) shape[i] = i == (int)n->i[0] ? 1 : a->shape[i];
        gk = nb_reshape(ctx, dout, a->ndim, shape);
    }
    din[0] = nb_mul(ctx, hot, gk);
}

/* ---- forward-mode rules: the reductions are linear, so each applies
 * itself to the tangent; max_dim takes the tangent at each arg-max. */
nb_tensor *nb_forward_sum(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    NB_UNUSED(n);
    return tin[0] ? nb_sum(ctx, tin[0]) : NULL;
}

nb_tensor *nb_forward_mean(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    NB_UNUSED(n);
    return tin[0] ? nb_mean(ctx, tin[0]) : NULL;
}

nb_tensor *nb_forward_sum_dim(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return tin[0] ? nb_sum_dim(ctx, tin[0], (int)n->i[0], n->i[1] != 0) : NULL;
}

nb_tensor *nb_forward_mean_dim(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return tin[0] ? nb_mean_dim(ctx, tin[0], (int)n->i[0], n->i[1] != 0) : NULL;
}

nb_tensor *nb_forward_max_dim(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (!tin[0]) return NULL;
    nb_tensor *picked = nb_mul(ctx, max_dim_hot(ctx, n), tin[0]);
    if (n->in[0]->ndim == 0) return picked;
    return nb_sum_dim(ctx, picked, (int)n->i[0], n->i[1] != 0);
}
