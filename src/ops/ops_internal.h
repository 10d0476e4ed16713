/* ops/ops_internal.h - what the op files share with each other and with
 * the modules above them. */
#ifndef NB_OPS_INTERNAL_H
#define NB_OPS_INTERNAL_H

#include "kernels/kernels_internal.h"
#include "tape/tape_internal.h"

/* out[k] = nb_linear(x, w[k], b[k]) for k < n (b NULL: no biases), the
 * float32 products as one job (q, k and v from one x): the same values and
 * the same n recorded nodes as n calls. 0, or -1 with the context's error. */
NB_HIDDEN int nb_linear_n(nb_ctx *ctx, nb_tensor *x, int n, nb_tensor *const *w,
                          nb_tensor *const *b, nb_tensor **out);

/* ---- graph backwards (ops/grad.c's create_graph walk) ----------------------
 * nb_graph_backward_<name>: op <name>'s backward written with recorded ops,
 * beside its ordinary backward in the op's file. Given dout (a tensor of the
 * output's shape) it sets din[i] to input i's gradient, or leaves it NULL
 * (no gradient, or the input needs none). One for every row of ops.def: a
 * missing one stops the link, naming it. */
#define NB_OP(id, name, n_in, formula, ...)                                                \
    NB_HIDDEN void nb_graph_backward_##name(nb_ctx *ctx, nb_node *n, nb_tensor *dout, \
                                            nb_tensor **din);
#include "nabla/ops.def"
#undef NB_OP
/* Runs node n's graph backward (a custom op's own, else its op's) on dout,
 * recording, into din (n->n_in entries, NULL-initialised); an error on ctx
 * naming a custom op that has none. */
NB_HIDDEN void nb_graph_backward_node(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din);
/* ---- forward-mode rules (ops/forward_ad.c runs them) -----------------------
 * nb_forward_<name>: op <name>'s forward-mode rule, beside its graph
 * backward in the op's file. Given tin[i], input i's tangent (its shape) or
 * NULL for a zero tangent, it returns the output's tangent J tin (the
 * output's shape and dtype), or NULL for zero, computed with recorded ops
 * so that the tangent can be differentiated in reverse (forward-over-
 * reverse). One for every row of ops.def: a missing one stops the link,
 * naming it. */
#define NB_OP(id, name, n_in, formula, ...)                                                \
    NB_HIDDEN nb_tensor *nb_forward_##name(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin);
#include "nabla/ops.def"
#undef NB_OP
/* The rule of an op of one input whose Jacobian is symmetric (elementwise
 * ops, softmax, the fills, dropout): J t = J^T t, its graph backward gb
 * applied to t as the output's gradient. */
NB_HIDDEN nb_tensor *nb_forward_symmetric(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin,
                                          nb_graph_backward_fn gb);
/* The rule of a fused op through its composed form: build computes the
 * op's output again from x (n's inputs, those with a tangent as dual
 * tensors) with elementary ops, whose rules give the tangent. */
typedef nb_tensor *(*nb_composed_fn)(nb_ctx *ctx, const nb_node *n, nb_tensor *const *x);
NB_HIDDEN nb_tensor *nb_forward_composed(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin,
                                         nb_composed_fn build);
/* a + sign b for tangents of out's shape or broadcast to it, a NULL one
 * being zero: NULL when both are. */
NB_HIDDEN nb_tensor *nb_fwd_sum(nb_ctx *ctx, const nb_tensor *out, nb_tensor *a, nb_tensor *b,
                                int sign);
/* Does nothing need n's tangent recorded (grad off, or neither an input
 * nor its tangent requires grad)? Then a rule may use a fused kernel. */
NB_HIDDEN bool nb_fwd_unrecorded(const nb_ctx *ctx, const nb_node *n, nb_tensor *const *tin);
/* sdpa's tangent in one pass per head (no key padding mask, no dropout),
 * unrecorded: ops/sdpa_forward.c */
NB_HIDDEN nb_tensor *nb_sdpa_tangent_fused(nb_ctx *ctx, const nb_node *n, nb_tensor *const *tin);
/* t, or zeros of like's shape and dtype when t is NULL. */
NB_HIDDEN nb_tensor *nb_fwd_or_zeros(nb_ctx *ctx, nb_tensor *t, const nb_tensor *like);

/* Forward mode along the tape: the tangents v of inputs (v[j] NULL: zero)
 * pushed through the recorded nodes up to the outputs', in creation order,
 * by their rules (recorded when `record`); tout[i] gets output i's tangent
 * (NULL: zero). The tangents tensors carried before are put back. 1 when
 * done, 0 when a custom op on the way has no forward-mode rule (nothing
 * ran: the caller goes another way), -1 with an error on ctx. */
NB_HIDDEN int nb_fwd_push(nb_ctx *ctx, int n_in, nb_tensor *const *inputs, nb_tensor *const *v,
                          int n_out, nb_tensor *const *outputs, bool record, nb_tensor **tout);

/* g (a gradient of a broadcast result) summed back to like's shape. */
NB_HIDDEN nb_tensor *nb_sum_to(nb_ctx *ctx, nb_tensor *g, const nb_tensor *like);
/* g broadcast to like's shape (g + zeros). */
NB_HIDDEN nb_tensor *nb_expand_as(nb_ctx *ctx, nb_tensor *g, const nb_tensor *like);
/* The graph backward of a fused op through its composed form: y is the
 * op's output computed again from n's inputs with elementary recorded ops;
 * din gets nb_grad(y, n's inputs, dout) with create_graph. */
NB_HIDDEN void nb_graph_backward_composed(nb_ctx *ctx, nb_node *n, nb_tensor *y,
                                          nb_tensor *dout, nb_tensor **din);

#endif
