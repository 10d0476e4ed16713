/* moe_layer.h - a mixture-of-experts layer composed from nabla's ops
 * (moe_layer.c), for the MoE gradcheck test and nabla-bench-moe: its own
 * softmax routing and non-gated experts, the library's dispatch
 * (src/nn/moe.h, which the Qwen3-MoE blocks use too). */
#ifndef NB_MOE_LAYER_H
#define NB_MOE_LAYER_H

#include "nabla.h"

/* One expert: linear(act(linear(x, w1, b1)), w2, b2), biases optional. */
typedef struct moe_expert {
    nb_tensor *w1; /* (H, D) */
    nb_tensor *b1; /* (H) or NULL */
    nb_tensor *w2; /* (D, H) */
    nb_tensor *b2; /* (D) or NULL */
} moe_expert;

/* The expert MLP on the rows of x (M, D) -> (M, D), SiLU between. */
nb_tensor *moe_expert_mlp(nb_ctx *ctx, const moe_expert *e, nb_tensor *x);

/* x (T, D) -> (T, D): router logits linear(x, router) (router (E, D), no
 * bias), softmax over the E experts, the top k probabilities per token
 * renormalised to sum to 1 (Hugging Face's norm_topk_prob), then each
 * expert e runs only on its tokens (index_select), its rows scaled by their
 * gates and added back at their tokens (index_add). Experts no token chose
 * do not run; experts NULL makes each one the identity (the routing alone,
 * for timing it). NULL with the error on ctx. */
nb_tensor *moe_layer(nb_ctx *ctx, nb_tensor *x, nb_tensor *router, int n_expert,
                     const moe_expert *experts, int k);

#endif
