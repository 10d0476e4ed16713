/* moe_layer.c - a top-k mixture-of-experts layer from topk, index_select
 * and index_add (see moe_layer.h). */
#include "moe_layer.h"

#include <stdlib.h>

nb_tensor *moe_expert_mlp(nb_ctx *ctx, const moe_expert *e, nb_tensor *x) {
    return nb_linear(ctx, nb_silu(ctx, nb_linear(ctx, x, e->w1, e->b1)), e->w2, e->b2);
}

nb_tensor *moe_layer(nb_ctx *ctx, nb_tensor *x, nb_tensor *router, int n_expert,
                     const moe_expert *experts, int k) {
    nb_tensor *idx = NULL;
    nb_tensor *probs = nb_softmax(ctx, nb_linear(ctx, x, router, NULL));    /* (T, E) */
    nb_tensor *top = nb_topk(ctx, probs, k, -1, &idx);                     /* (T, k) */
    nb_tensor *gates = nb_div(ctx, top, nb_sum_dim(ctx, top, -1, true));   /* rows sum to 1 */
    if (!gates) return NULL;
    int64_t T = x->shape[0], Q = T * k;
    nb_tensor *gflat = nb_reshape(ctx, gates, NB_SHAPE(Q, 1)); /* slot q = t k + j */
    /* Per expert, its tokens and their slots, in token order (the routing
     * is data, not differentiated; the gates carry the gradient). The
     * experts' scaled rows are stacked and added back by one index_add:
     * one pass over the output, not one per expert. */
    int64_t *tok = malloc((size_t)(Q ? Q : 1) * sizeof *tok);
    int64_t *slot = malloc((size_t)(Q ? Q : 1) * sizeof *slot);
    nb_tensor **rows = malloc((size_t)(n_expert > 0 ? n_expert : 1) * sizeof *rows);
    nb_tensor *out = NULL;
    if (!tok || !slot || !rows || !gflat) goto done;
    const int64_t *id = idx->data;
    int used = 0;
    int64_t m = 0; /* slots stacked so far: tok[0, m) */
    for (int e = 0; e < n_expert; e++) {
        int64_t m0 = m;
        for (int64_t q = 0; q < Q; q++)
            if (id[q] == e) tok[m] = q / k, slot[m++] = q;
        if (m == m0) continue; /* no token chose it: it does not run */
        nb_tensor *te = nb_from_data(ctx, NB_I64, 1, (const int64_t[]){m - m0}, tok + m0);
        nb_tensor *se = nb_from_data(ctx, NB_I64, 1, (const int64_t[]){m - m0}, slot + m0);
        nb_tensor *xe = nb_index_select(ctx, x, te);
        nb_tensor *y = experts ? moe_expert_mlp(ctx, &experts[e], xe) : xe;
        rows[used++] = nb_mul(ctx, y, nb_index_select(ctx, gflat, se));
    }
    nb_tensor *all = used == 1 ? rows[0] : nb_concat(ctx, used, rows, 0); /* (Q, D) */
    out = nb_index_add(ctx, nb_zeros(ctx, x->dtype, x->ndim, x->shape),
                       nb_from_data(ctx, NB_I64, 1, (const int64_t[]){m}, tok), all);
done:
    free(tok), free(slot), free(rows);
    return out;
}
