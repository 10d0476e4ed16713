/* nn/moe.c - a mixture-of-experts dispatch from index_select and
 * index_add (moe.h). */
#include "ops/ops_internal.h"
#include "moe.h"

#include <stdlib.h>

nb_tensor *nb_moe_dispatch(nb_ctx *ctx, nb_tensor *x, nb_tensor *gates, const nb_tensor *idx,
                           int n_expert, nb_moe_expert_fn f, void *user) {
    if (!nb_ctx_ok(ctx) || !x || !gates || !idx) return NULL;
    if (x->ndim != 2 || gates->ndim != 2 || idx->dtype != NB_I64 ||
        !nb_same_shape(gates, idx) || gates->shape[0] != x->shape[0] || n_expert < 1) {
        char a[64], b[64], c[64];
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "moe: x %s, gates %s and idx %s %s with %d experts; "
                    "expected (N, D), (N, k) and i64 (N, k), experts >= 1",
                    nb_shape_str(x, a, sizeof a), nb_shape_str(gates, b, sizeof b),
                    nb_dtype_name(idx->dtype), nb_shape_str(idx, c, sizeof c), n_expert);
        return NULL;
    }
    const int64_t k = gates->shape[1], Q = gates->shape[0] * k;
    const int64_t *id = idx->data;
    for (int64_t q = 0; q < Q; q++)
        if (id[q] < 0 || id[q] >= n_expert) {
            nb_ctx_fail(ctx, NB_ERR_VALUE, "moe: idx[%lld] = %lld is outside [0, %d)",
                        (long long)q, (long long)id[q], n_expert);
            return NULL;
        }
    nb_tensor *gflat = nb_reshape(ctx, gates, NB_SHAPE(Q, 1)); /* slot q = t k + j */
    int64_t *tok = malloc((size_t)(Q ? Q : 1) * sizeof *tok);
    int64_t *slot = malloc((size_t)(Q ? Q : 1) * sizeof *slot);
    nb_tensor **rows = malloc((size_t)n_expert * sizeof *rows);
    nb_tensor *out = NULL;
    if (!tok || !slot || !rows) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "moe: out of memory for %lld slots", (long long)Q);
        goto done;
    }
    if (!gflat) goto done;
    int used = 0;
    int64_t m = 0; /* slots stacked so far: tok[0, m) */
    for (int e = 0; e < n_expert; e++) {
        int64_t m0 = m;
        for (int64_t q = 0; q < Q; q++)
            if (id[q] == e) tok[m] = q / k, slot[m++] = q;
        if (m == m0) continue; /* no token chose it: it does not run */
        nb_tensor *te = nb_from_data(ctx, NB_I64, 1, (const int64_t[]){m - m0}, tok + m0);
        nb_tensor *xe = nb_index_select(ctx, x, te);
        rows[used++] = f ? f(ctx, e, xe, user) : xe;
    }
    if (!nb_ctx_ok(ctx)) goto done;
    if (!used) { /* no slots at all (N or k is 0) */
        out = nb_zeros(ctx, x->dtype, x->ndim, x->shape);
        goto done;
    }
    /* every expert's rows stacked (Q, D), each scaled by its slot's gate in
     * one multiply (a gather of the gates in the same order), and added back
     * to their tokens by one index_add */
    nb_tensor *all = used == 1 ? rows[0] : nb_concat(ctx, used, rows, 0);
    nb_tensor *g = nb_index_select(ctx, gflat, nb_from_data(ctx, NB_I64, 1, (const int64_t[]){m},
                                                            slot));
    out = nb_index_add(ctx, nb_zeros(ctx, x->dtype, x->ndim, x->shape),
                       nb_from_data(ctx, NB_I64, 1, (const int64_t[]){m}, tok),
                       nb_mul(ctx, all, g));
done:
    free(tok), free(slot), free(rows);
    return out;
}
