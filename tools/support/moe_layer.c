/* moe_layer.c - a top-k mixture-of-experts layer: softmax routing here,
 * the dispatch (index_select, index_add) shared with the Qwen3-MoE model
 * (src/nn/moe.c). See moe_layer.h. */
#include "moe_layer.h"

#include "nn/moe.h"

nb_tensor *moe_expert_mlp(nb_ctx *ctx, const moe_expert *e, nb_tensor *x) {
    return nb_linear(ctx, nb_silu(ctx, nb_linear(ctx, x, e->w1, e->b1)), e->w2, e->b2);
}

static nb_tensor *expert(nb_ctx *ctx, int e, nb_tensor *xe, void *user) {
    return moe_expert_mlp(ctx, &((const moe_expert *)user)[e], xe);
}

nb_tensor *moe_layer(nb_ctx *ctx, nb_tensor *x, nb_tensor *router, int n_expert,
                     const moe_expert *experts, int k) {
    nb_tensor *idx = NULL;
    nb_tensor *probs = nb_softmax(ctx, nb_linear(ctx, x, router, NULL));    /* (T, E) */
    nb_tensor *top = nb_topk(ctx, probs, k, -1, &idx);                     /* (T, k) */
    nb_tensor *gates = nb_div(ctx, top, nb_sum_dim(ctx, top, -1, true));   /* rows sum to 1 */
    return nb_moe_dispatch(ctx, x, gates, idx, n_expert, experts ? expert : NULL,
                           (void *)experts);
}
