/* tape/tape_internal.h - the tape's records and what ops need to put
 * themselves on it: recording a node, gradient buffers, accumulation and the
 * observer hook gradcheck uses. */
#ifndef NB_TAPE_INTERNAL_H
#define NB_TAPE_INTERNAL_H

#include "core/core_internal.h"

/* ---- tape -------------------------------------------------------------- */
#define NB_NODE_MAX_INPUTS 4 /* more (concat) spill into `in` from the arena */

struct nb_node {
    int op;                  /* nb_op; NB_OP_CUSTOM for user ops */
    const char *name;        /* op name shown in dumps and errors */
    nb_backward_fn backward; /* the op's local rule */
    nb_graph_backward_fn graph_backward; /* a custom op's rule from ops (nb_grad's
                                            create_graph); built-in ops use their
                                            nb_graph_backward_<name> */
    nb_forward_fn forward_rule; /* a custom op's forward-mode rule; built-in ops use
                                   their nb_forward_<name> */
    nb_tensor *out;
    int n_in;
    nb_tensor **in;          /* n_in inputs (points at in_small when they fit) */
    nb_tensor *in_small[NB_NODE_MAX_INPUTS];
    /* Op parameters and what the forward saved for backward. */
    double f[4];
    int64_t i[NB_MAX_DIMS]; /* permute keeps its perm here */
    void *saved;             /* e.g. dropout's mask, max's arg-max, softmax's output */
    nb_tensor *saved_t;
    void *userdata;          /* custom ops */
    const char *file;        /* creation site (may be NULL) */
    int line;
    int index;               /* position on the tape, from 0 */
    nb_node *prev;           /* the node recorded before this one */
    /* The module path it was recorded in (nb_ctx_push_scope; NULL outside
     * every scope) and the user's call site into the outermost module. */
    const char *scope;
    const char *call_file;
    int call_line;
};

/* "created at FILE:LINE" into buf, or, for a node made without NB_HERE
 * (file NULL), "no creation site recorded: use NB_HERE". */
NB_HIDDEN void nb_site_str(const char *file, int line, char *buf, size_t size);

/* Forward mode (ops/forward_ad.c). Runs the pending node's forward-mode
 * rule (ctx->fwd_pending), setting its output's tangent. */
NB_HIDDEN void nb_fwd_flush(nb_ctx *ctx);
/* Does an input carry a tangent that ops should carry on? Runs the pending
 * rule first: an input made by the previous op has its tangent only then. */
NB_HIDDEN bool nb_fwd_active(nb_ctx *ctx, int n_in, nb_tensor *const *in);

/* Records a built-in op. Same contract as nb_record. */
NB_HIDDEN nb_node *nb_record_op(nb_ctx *ctx, nb_op op, nb_tensor *out, int n_in,
                                nb_tensor *const *in, nb_backward_fn backward);

/* A tape observer, installed by setting ctx->probe (nb_gradcheck uses one
 * to find the op whose backward is wrong). `recorded` runs when a node joins
 * the tape: its output is computed and may be changed, and ops recorded
 * later read the change. `backward` runs before (done false) and after
 * (done true) each local rule in nb_backward. */
typedef struct nb_probe {
    void (*recorded)(struct nb_probe *p, nb_node *n);
    void (*backward)(struct nb_probe *p, nb_node *n, bool done);
} nb_probe;

/* ---- gradient buffers ------------------------------------------------------- */
/* Hands t's gradient buffer back to ctx's free list (t->grad becomes NULL)
 * when ctx->recycle_grads is on and t lives in ctx; a no-op otherwise. */
NB_HIDDEN void nb_grad_release(nb_ctx *ctx, nb_tensor *t);
/* nb_grad_buffer for a backward that writes every element of the gradient:
 * when t has no buffer yet, one is made without zeroing it and *fresh is
 * set, and the caller must then store (=) every element rather than add.
 * Otherwise as nb_grad_buffer, *fresh false. Saves clearing a buffer that
 * is overwritten at once (the activations' gradients of a training step).
 * A caller that takes two inputs' buffers must write the first before it
 * asks for the second: they may be the same tensor. */
NB_HIDDEN void *nb_grad_buffer_fresh(nb_ctx *ctx, nb_tensor *t, bool *fresh);
/* In a recycling backward (ctx->recycle_grads: the output's gradient is
 * handed back right after its node), a node whose input t has no gradient
 * yet and would get an exact copy of the output's takes the output's
 * buffer instead (same size and type): t->grad = out->grad, out->grad =
 * NULL. Returns whether it did; the caller copies or adds otherwise. */
NB_HIDDEN bool nb_grad_take(nb_ctx *ctx, nb_tensor *t, nb_tensor *out);

/* Adds src (numel elements of dt) into dst. */
NB_HIDDEN void nb_accumulate(nb_dtype dt, void *dst, const void *src, size_t numel);

/* Records a tape writer's failure s on ctx, naming `op` ("tape_html: a
 * write failed"), and returns s; NB_OK and a NULL ctx record nothing. The
 * writers work on a context that already holds an error (to show how it
 * came about), so this is their only use of the error: the first is kept. */
NB_HIDDEN nb_status nb_tape_write_fail(nb_ctx *ctx, const char *op, nb_status s);

#endif
