/* ops/mask.c - masked_fill and causal_fill: set chosen elements to a constant
 * (usually -inf before a softmax). The gradient passes through the elements
 * that were kept and is zero at the filled ones, which do not depend on
 * the input. */
#include "ops/ops_internal.h"

/* ---- masked_fill: out = mask ? value : a -------------------------------------
 * a is any shape, mask (BOOL) broadcasts to it: right-aligned,
 * each mask dim equal to a's or 1, never more dims than a. */

/* Mask strides (elements, 0 where broadcast) and a's shape, padded to
 * NB_MAX_DIMS dims. */
static void mask_strides(const nb_tensor *a, const nb_tensor *mask, int64_t *shape,
                         int64_t *ms) {
    nb_shape_pad(a->ndim, a->shape, shape);
    nb_broadcast_strides(mask, a->ndim, a->shape, ms);
}

/* Runs BODY with o (index into a and out) and im (index into the mask). */
#define MASK_FOR(shape, ms, ...) NB_BCAST_FOR(shape, ms, ms, { size_t im = i1; __VA_ARGS__ })

/* Backward: da += mask ? 0 : g. Reuses the copy of the mask the forward saved
 * in saved_t (so the caller may change or free its mask after the forward). */
static void masked_fill_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    const nb_tensor *mask = n->saved_t;
    void *ga = nb_grad_buffer(ctx, a);
    if (!ga) return;
    int64_t shape4[NB_MAX_DIMS], ms4[NB_MAX_DIMS];
    mask_strides(a, mask, shape4, ms4);
    const uint8_t *m = mask->data;
#define K(T)                                                                  \
    {                                                                         \
        const T *g = out->grad;                                               \
        T *da = ga;                                                           \
        MASK_FOR(shape4, ms4, if (!m[im]) da[o] += g[o];);                    \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
}

nb_tensor *nb_masked_fill(nb_ctx *ctx, nb_tensor *a, const nb_tensor *mask, double value) {
    const char *name = nb_op_name(NB_OP_MASKED_FILL);
    if (!nb_check_float_inputs(ctx, name, 1, &a)) return NULL;
    char sa[64], sm[64];
    if (!mask) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: mask is NULL", name);
        return NULL;
    }
    if (mask->dtype != NB_BOOL) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: mask %s is %s, expected bool", name,
                    nb_shape_str(mask, sm, sizeof sm), nb_dtype_name(mask->dtype));
        return NULL;
    }
    if (mask->ndim > a->ndim) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: mask %s has %d dims but input %s has %d; expected a mask that "
                    "broadcasts to the input's shape",
                    name, nb_shape_str(mask, sm, sizeof sm), mask->ndim,
                    nb_shape_str(a, sa, sizeof sa), a->ndim);
        return NULL;
    }
    for (int k = 0; k < mask->ndim; k++) {
        int64_t dm = mask->shape[mask->ndim - 1 - k], da = a->shape[a->ndim - 1 - k];
        if (dm != da && dm != 1) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "%s: mask %s does not broadcast to input %s: dim %d (from the right) "
                        "is %lld vs %lld, expected equal or 1",
                        name, nb_shape_str(mask, sm, sizeof sm), nb_shape_str(a, sa, sizeof sa),
                        -1 - k, (long long)dm, (long long)da);
            return NULL;
        }
    }
    nb_tensor *out = nb_empty(ctx, a->dtype, a->ndim, a->shape); /* every element is written */
    if (!out) return NULL;
    int64_t shape4[NB_MAX_DIMS], ms4[NB_MAX_DIMS];
    mask_strides(a, mask, shape4, ms4);
    const uint8_t *m = mask->data;
#define K(T)                                                                  \
    {                                                                         \
        const T *x = a->data;                                                 \
        T *y = out->data;                                                     \
        const T v = (T)value;                                                 \
        MASK_FOR(shape4, ms4, y[o] = m[im] ? v : x[o];);                      \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
    nb_node *n = nb_record_op(ctx, NB_OP_MASKED_FILL, out, 1, &a, masked_fill_backward);
    if (n) {
        n->f[0] = value;
        n->saved_t = nb_copy(ctx, mask, NB_BOOL);
        if (!n->saved_t) return NULL;
    }
    return out;
}

void nb_graph_backward_masked_fill(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_masked_fill(ctx, dout, n->saved_t, 0.0); /* 0 where the mask filled */
}

/* ---- causal_fill: out[..., i, j] = j > i ? value : a[..., i, j] ----------------
 * a is (..., T1, T2); the strict upper triangle of each matrix is filled. */

/* Rows [lo, hi) of all the (T1, T2) matrices, row r being row r % T1 of
 * matrix r / T1; split over threads (rows are independent). */
typedef struct cf_job {
    const nb_tensor *a;
    nb_tensor *out;
    void *ga; /* backward */
    double value;
    int64_t t1, t2;
} cf_job;

static int64_t cf_grain(int64_t t2) { return t2 > 0 && t2 < 16384 ? 16384 / t2 : 1; }

static void causal_fill_backward_rows(void *arg, int64_t lo, int64_t hi) {
    const cf_job *c = arg;
    int64_t t1 = c->t1, t2 = c->t2;
#define K(T)                                                                  \
    {                                                                         \
        const T *g = c->out->grad;                                            \
        T *da = c->ga;                                                        \
        for (int64_t r = lo; r < hi; r++) {                                   \
            size_t row = (size_t)r * (size_t)t2;                              \
            int64_t i = r % t1, keep = i + 1 < t2 ? i + 1 : t2; /* j <= i */  \
            for (int64_t j = 0; j < keep; j++) da[row + j] += g[row + j];     \
        }                                                                     \
    }
    NB_DISPATCH(c->out->dtype, K);
#undef K
}

/* Backward: da += g below and on the diagonal, nothing above. Reuses no
 * forward values, only the shape. */
static void causal_fill_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    void *ga = nb_grad_buffer(ctx, a);
    if (!ga) return;
    int64_t t1 = a->shape[a->ndim - 2], t2 = a->shape[a->ndim - 1];
    cf_job c = {a, out, ga, 0, t1, t2};
    nb_parallel_for(t2 ? (int64_t)(a->numel / (size_t)t2) : 0, cf_grain(t2),
                    causal_fill_backward_rows, &c);
}

static void causal_fill_rows(void *arg, int64_t lo, int64_t hi) {
    const cf_job *c = arg;
    int64_t t1 = c->t1, t2 = c->t2;
#define K(T)                                                                  \
    {                                                                         \
        const T *x = c->a->data;                                              \
        T *y = c->out->data;                                                  \
        const T v = (T)c->value;                                              \
        for (int64_t r = lo; r < hi; r++) {                                   \
            size_t row = (size_t)r * (size_t)t2;                              \
            int64_t i = r % t1;                                               \
            for (int64_t j = 0; j < t2; j++) y[row + j] = j > i ? v : x[row + j]; \
        }                                                                     \
    }
    NB_DISPATCH(c->out->dtype, K);
#undef K
}

nb_tensor *nb_causal_fill(nb_ctx *ctx, nb_tensor *a, double value) {
    const char *name = nb_op_name(NB_OP_CAUSAL_FILL);
    if (!nb_check_float_inputs(ctx, name, 1, &a)) return NULL;
    if (a->ndim < 2) {
        char sa[64];
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: input %s has %d dim%s, expected at least 2 (..., T1, T2)", name,
                    nb_shape_str(a, sa, sizeof sa), a->ndim, a->ndim == 1 ? "" : "s");
        return NULL;
    }
    nb_tensor *out = nb_empty(ctx, a->dtype, a->ndim, a->shape); /* every element is written */
    if (!out) return NULL;
    int64_t t1 = a->shape[a->ndim - 2], t2 = a->shape[a->ndim - 1];
    cf_job c = {a, out, NULL, value, t1, t2};
    nb_parallel_for(t2 ? (int64_t)(a->numel / (size_t)t2) : 0, cf_grain(t2), causal_fill_rows, &c);
    nb_node *n = nb_record_op(ctx, NB_OP_CAUSAL_FILL, out, 1, &a, causal_fill_backward);
    if (n) n->f[0] = value;
    return out;
}

void nb_graph_backward_causal_fill(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    NB_UNUSED(n);
    din[0] = nb_causal_fill(ctx, dout, 0.0); /* 0 above the diagonal */
}

/* forward mode: both fills are diagonal (1 where kept, 0 where filled), so
 * their tangents are their graph backwards on t: t filled with 0 */
nb_tensor *nb_forward_masked_fill(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return nb_forward_symmetric(ctx, n, tin, nb_graph_backward_masked_fill);
}

nb_tensor *nb_forward_causal_fill(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return nb_forward_symmetric(ctx, n, tin, nb_graph_backward_causal_fill);
}
