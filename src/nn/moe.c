/* nn/moe.c - a mixture-of-experts dispatch from index_select, index_add
 * and, for gated experts, grouped_linear (moe.h). */
#include "ops/ops_internal.h"
#include "moe.h"

#include <stdlib.h>

/* The routing: slot q = t k + j (token t's j-th expert) of every token,
 * grouped by expert and in token order within each. */
typedef struct moe_route {
    int64_t Q, k;
    int64_t *tok, *slot; /* Q each: slot order's tokens and slots */
    int64_t *rows;       /* n_expert: how many slots chose each */
} moe_route;

static void route_free(moe_route *r) { free(r->tok), free(r->slot), free(r->rows); }

/* Checks x, gates and idx and fills r; false with the error on ctx. */
static bool route(nb_ctx *ctx, const nb_tensor *x, const nb_tensor *gates, const nb_tensor *idx,
                  int n_expert, moe_route *r) {
    *r = (moe_route){0};
    if (!nb_ctx_ok(ctx) || !x || !gates || !idx) return false;
    if (x->ndim != 2 || gates->ndim != 2 || idx->dtype != NB_I64 ||
        !nb_same_shape(gates, idx) || gates->shape[0] != x->shape[0] || n_expert < 1) {
        char a[64], b[64], c[64];
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "moe: x %s, gates %s and idx %s %s with %d experts; "
                    "expected (N, D), (N, k) and i64 (N, k), experts >= 1",
                    nb_shape_str(x, a, sizeof a), nb_shape_str(gates, b, sizeof b),
                    nb_dtype_name(idx->dtype), nb_shape_str(idx, c, sizeof c), n_expert);
        return false;
    }
    r->k = gates->shape[1], r->Q = gates->shape[0] * r->k;
    const int64_t *id = idx->data;
    for (int64_t q = 0; q < r->Q; q++)
        if (id[q] < 0 || id[q] >= n_expert) {
            nb_ctx_fail(ctx, NB_ERR_VALUE, "moe: idx[%lld] = %lld is outside [0, %d)",
                        (long long)q, (long long)id[q], n_expert);
            return false;
        }
    r->tok = malloc((size_t)(r->Q ? r->Q : 1) * sizeof *r->tok);
    r->slot = malloc((size_t)(r->Q ? r->Q : 1) * sizeof *r->slot);
    r->rows = calloc((size_t)n_expert, sizeof *r->rows);
    if (!r->tok || !r->slot || !r->rows) {
        route_free(r);
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "moe: out of memory for %lld slots", (long long)r->Q);
        return false;
    }
    /* a counting sort by expert: starts, then each slot at its place */
    int64_t *at = malloc((size_t)n_expert * sizeof *at);
    if (!at) {
        route_free(r);
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "moe: out of memory for %d experts", n_expert);
        return false;
    }
    for (int64_t q = 0; q < r->Q; q++) r->rows[id[q]]++;
    int64_t s = 0;
    for (int e = 0; e < n_expert; e++) at[e] = s, s += r->rows[e];
    for (int64_t q = 0; q < r->Q; q++) {
        int64_t m = at[id[q]]++;
        r->tok[m] = q / r->k, r->slot[m] = q;
    }
    free(at);
    return true;
}

/* The experts' rows ys (Q, D), in slot order, each scaled by its slot's
 * gate in one multiply (a gather of the gates in the same order) and added
 * back to its token by one index_add: out (N, D). */
static nb_tensor *combine(nb_ctx *ctx, const nb_tensor *x, nb_tensor *gates, nb_tensor *ys,
                          const moe_route *r) {
    nb_tensor *gflat = nb_reshape(ctx, gates, NB_SHAPE(r->Q, 1));
    nb_tensor *g = nb_index_select(ctx, gflat, nb_from_data(ctx, NB_I64, 1,
                                                            (const int64_t[]){r->Q}, r->slot));
    return nb_index_add(ctx, nb_zeros(ctx, x->dtype, x->ndim, x->shape),
                        nb_from_data(ctx, NB_I64, 1, (const int64_t[]){r->Q}, r->tok),
                        nb_mul(ctx, ys, g));
}

nb_tensor *nb_moe_dispatch(nb_ctx *ctx, nb_tensor *x, nb_tensor *gates, const nb_tensor *idx,
                           int n_expert, nb_moe_expert_fn f, void *user) {
    moe_route r;
    if (!route(ctx, x, gates, idx, n_expert, &r)) return NULL;
    nb_tensor **rows = malloc((size_t)n_expert * sizeof *rows), *out = NULL;
    if (!rows) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "moe: out of memory for %d experts", n_expert);
        goto done;
    }
    int used = 0;
    int64_t m = 0; /* expert e's slots start at m */
    for (int e = 0; e < n_expert; m += r.rows[e++]) {
        if (!r.rows[e]) continue; /* no token chose it: it does not run */
        nb_tensor *te = nb_from_data(ctx, NB_I64, 1, (const int64_t[]){r.rows[e]}, r.tok + m);
        nb_tensor *xe = nb_index_select(ctx, x, te);
        rows[used++] = f ? f(ctx, e, xe, user) : xe;
    }
    if (!nb_ctx_ok(ctx)) goto done;
    if (!used) /* no slots at all (N or k is 0) */
        out = nb_zeros(ctx, x->dtype, x->ndim, x->shape);
    else
        out = combine(ctx, x, gates, used == 1 ? rows[0] : nb_concat(ctx, used, rows, 0), &r);
done:
    free(rows), route_free(&r);
    return out;
}

nb_tensor *nb_moe_gated_grouped(nb_ctx *ctx, nb_tensor *x, nb_tensor *gates,
                                const nb_tensor *idx, int n_expert, nb_tensor *const *w_gate,
                                nb_tensor *const *w_up, nb_tensor *const *w_down,
                                const char *down_scope) {
    moe_route r;
    if (!route(ctx, x, gates, idx, n_expert, &r)) return NULL;
    nb_tensor **w = malloc((size_t)3 * (size_t)n_expert * sizeof *w), *out = NULL;
    int64_t *rows = malloc((size_t)n_expert * sizeof *rows);
    if (!w || !rows) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "moe: out of memory for %d experts", n_expert);
        goto done;
    }
    int used = 0; /* the experts some token chose, in order: the groups */
    for (int e = 0; e < n_expert; e++)
        if (r.rows[e]) {
            w[used] = w_gate[e], w[n_expert + used] = w_up[e], w[2 * n_expert + used] = w_down[e];
            rows[used++] = r.rows[e];
        }
    if (!used) { /* no slots at all (N or k is 0) */
        out = nb_zeros(ctx, x->dtype, x->ndim, x->shape);
        goto done;
    }
    nb_tensor *xs = nb_index_select(ctx, x, nb_from_data(ctx, NB_I64, 1,
                                                         (const int64_t[]){r.Q}, r.tok));
    nb_tensor *h = nb_grouped_linear(ctx, xs, used, w, rows);
    nb_tensor *u = nb_grouped_linear(ctx, xs, used, w + n_expert, rows);
    nb_tensor *f = nb_mul(ctx, nb_silu(ctx, h), u);
    nb_tensor *ys = NB_NN_SCOPED(ctx, down_scope,
                                 nb_grouped_linear(ctx, f, used, w + 2 * n_expert, rows));
    out = combine(ctx, x, gates, ys, &r);
done:
    free(w), free(rows), route_free(&r);
    return out;
}
