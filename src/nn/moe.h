/* moe.h - the dispatch of a top-k mixture-of-experts layer: each expert
 * runs only on the tokens routed to it, and the gated results are added
 * back. Shared by the Qwen3-MoE blocks (gpt_forward.c) and the tools'
 * moe_layer (nabla-bench-moe, the MoE gradcheck), which differ only in how
 * they route and what an expert is. Internal to the library and its tools. */
#ifndef NB_MOE_H
#define NB_MOE_H

#include "nabla.h"

#ifndef NB_HIDDEN
#define NB_HIDDEN
/* The same layer with each expert a gated MLP, silu(x Wg^T) * (x Wu^T)
 * then Wd (w_gate[e], w_up[e] (H, D), w_down[e] (D, H)), all experts at
 * once: one gather of every slot's token sorted by expert, then each
 * product as one grouped_linear over the experts some token chose, one
 * silu and one multiply over all rows, and the down product under scope
 * down_scope. The per-expert form with f = that MLP gives the same values
 * to rounding, with an op (and a module) per expert. */
NB_HIDDEN nb_tensor *nb_moe_gated_grouped(nb_ctx *ctx, nb_tensor *x, nb_tensor *gates,
                                          const nb_tensor *idx, int n_expert,
                                          nb_tensor *const *w_gate, nb_tensor *const *w_up,
                                          nb_tensor *const *w_down, const char *down_scope);

#endif

/* Expert e on its rows xe (M_e, D) -> (M_e, D). */
typedef nb_tensor *(*nb_moe_expert_fn)(nb_ctx *ctx, int e, nb_tensor *xe, void *user);

/* x (N, D), gates (N, k) (differentiable), idx I64 (N, k) with values in
 * [0, n_expert) -> (N, D): out[t] = sum_j gates[t, j] expert_{idx[t, j]}(x[t]).
 * Per expert, its tokens are gathered in token order (index_select) and
 * run through f once; all experts' rows are then stacked, scaled by their
 * gates in one multiply and added back by one index_add (one pass over
 * the output, not one per expert);
 * an expert no token chose does not run. f NULL makes every expert the
 * identity (the routing alone, for timing it). The routing itself is data
 * (not differentiated); the gates carry the gradient. NULL with the error
 * on ctx (an idx value outside [0, n_expert) names moe). */
NB_HIDDEN nb_tensor *nb_moe_dispatch(nb_ctx *ctx, nb_tensor *x, nb_tensor *gates,
                                     const nb_tensor *idx, int n_expert, nb_moe_expert_fn f,
                                     void *user);

/* The same layer with each expert a gated MLP, silu(x Wg^T) * (x Wu^T)
 * then Wd (w_gate[e], w_up[e] (H, D), w_down[e] (D, H)), all experts at
 * once: one gather of every slot's token sorted by expert, then each
 * product as one grouped_linear over the experts some token chose, one
 * silu and one multiply over all rows, and the down product under scope
 * down_scope. The per-expert form with f = that MLP gives the same values
 * to rounding, with an op (and a module) per expert. */
NB_HIDDEN nb_tensor *nb_moe_gated_grouped(nb_ctx *ctx, nb_tensor *x, nb_tensor *gates,
                                          const nb_tensor *idx, int n_expert,
                                          nb_tensor *const *w_gate, nb_tensor *const *w_up,
                                          nb_tensor *const *w_down, const char *down_scope);

#endif
