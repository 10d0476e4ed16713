/* core/checks.c - input validation and broadcasting rules shared by the ops.
 * Every message names the op, the shapes and what was expected. */
#include "core/core_internal.h"

bool nb_check_float_inputs(nb_ctx *ctx, const char *name, int n, nb_tensor *const *in) {
    if (!nb_ctx_ok(ctx)) return false;
    for (int i = 0; i < n; i++) {
        if (!in[i]) {
            nb_ctx_fail(ctx, NB_ERR_NULL, "%s: input %d is NULL", name, i + 1);
            return false;
        }
    }
    if (!nb_check_live(ctx, name, n, (const nb_tensor *const *)in)) return false;
    for (int i = 0; i < n; i++) {
        char s[64];
        if (in[i]->dtype != NB_F32 && in[i]->dtype != NB_F64) {
            nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: input %d %s is %s, expected f32 or f64", name,
                        i + 1, nb_shape_str(in[i], s, sizeof s), nb_dtype_name(in[i]->dtype));
            return false;
        }
        if (in[i]->dtype != in[0]->dtype) {
            char s0[64];
            nb_ctx_fail(ctx, NB_ERR_DTYPE,
                        "%s: mixed dtypes: input 1 %s is %s but input %d %s is %s; convert "
                        "with nb_copy first",
                        name, nb_shape_str(in[0], s0, sizeof s0), nb_dtype_name(in[0]->dtype),
                        i + 1, nb_shape_str(in[i], s, sizeof s), nb_dtype_name(in[i]->dtype));
            return false;
        }
    }
    return true;
}

int nb_norm_dim(nb_ctx *ctx, const char *name, const nb_tensor *t, int dim) {
    int d = dim < 0 ? dim + t->ndim : dim;
    if (d < 0 || d >= t->ndim) {
        char s[64];
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: dim %d is out of range for shape %s (%d dims)",
                    name, dim, nb_shape_str(t, s, sizeof s), t->ndim);
        return -1;
    }
    return d;
}

bool nb_broadcast_shape(nb_ctx *ctx, const char *name, const nb_tensor *a, const nb_tensor *b,
                        int *ndim, int64_t *shape) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int k = 0; k < n; k++) {
        /* k counts from the right */
        int64_t da = k < a->ndim ? a->shape[a->ndim - 1 - k] : 1;
        int64_t db = k < b->ndim ? b->shape[b->ndim - 1 - k] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[64], sb[64];
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "%s: shapes %s and %s do not broadcast: dim %d (from the right) is %lld "
                        "vs %lld, expected equal or 1",
                        name, nb_shape_str(a, sa, sizeof sa), nb_shape_str(b, sb, sizeof sb),
                        -1 - k, (long long)da, (long long)db);
            return false;
        }
        shape[n - 1 - k] = da == 1 ? db : da; /* a 0 against a 1 stays 0 */
    }
    *ndim = n;
    return true;
}

void nb_shape_pad(int ndim, const int64_t *shape, int64_t *padded) {
    for (int d = 0; d < NB_MAX_DIMS; d++) padded[d] = 1;
    for (int d = 0; d < ndim; d++) padded[NB_MAX_DIMS - ndim + d] = shape[d];
}

void nb_broadcast_strides(const nb_tensor *t, int ndim, const int64_t *oshape,
                          int64_t *stride) {
    int64_t tshape[NB_MAX_DIMS], oshape_p[NB_MAX_DIMS];
    nb_shape_pad(t->ndim, t->shape, tshape);
    nb_shape_pad(ndim, oshape, oshape_p);
    int64_t s = 1;
    for (int d = NB_MAX_DIMS - 1; d >= 0; d--) {
        stride[d] = (tshape[d] == 1 && oshape_p[d] != 1) ? 0 : s;
        s *= tshape[d];
    }
}

/* Checks that the present (non-NULL where optional) inputs are floating and
 * share one dtype, naming them as the op's documentation does ("x",
 * "weight", ...). in[i] may be NULL only when optional[i]. */
bool nb_check_named_inputs(nb_ctx *ctx, const char *op, int n, nb_tensor *const *in,
                               const char *const *names, const bool *optional) {
    if (!nb_ctx_ok(ctx)) return false;
    for (int i = 0; i < n; i++) {
        if (!in[i] && !optional[i]) {
            nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", op, names[i]);
            return false;
        }
    }
    if (!nb_check_live(ctx, op, n, (const nb_tensor *const *)in)) return false;
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        char s[64], s0[64];
        if (in[i]->dtype != NB_F32 && in[i]->dtype != NB_F64) {
            nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: %s %s is %s, expected f32 or f64", op, names[i],
                        nb_shape_str(in[i], s, sizeof s), nb_dtype_name(in[i]->dtype));
            return false;
        }
        if (in[i]->dtype != in[0]->dtype) {
            nb_ctx_fail(ctx, NB_ERR_DTYPE,
                        "%s: mixed dtypes: %s %s is %s but %s %s is %s; convert with nb_copy "
                        "first",
                        op, names[0], nb_shape_str(in[0], s0, sizeof s0),
                        nb_dtype_name(in[0]->dtype), names[i], nb_shape_str(in[i], s, sizeof s),
                        nb_dtype_name(in[i]->dtype));
            return false;
        }
    }
    return true;
}
