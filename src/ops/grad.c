/* ops/grad.c - nb_grad, PyTorch's torch.autograd.grad: gradients as new
 * tensors, and with create_graph, gradients that are themselves recorded
 * so they can be differentiated again, to any order.
 *
 * Both modes walk the same part of the tape: the nodes between the inputs
 * and the outputs (a node is walked when one of its inputs is an input of
 * the call or the output of a walked node), newest first, which is a
 * reverse topological order because creation order is a topological one.
 *
 * Without create_graph each node runs its ordinary local rule, as
 * nb_backward does, into gradient buffers taken from ctx's arena; the
 * .grad pointers it touches are set aside first and put back after, so the
 * caller's gradients are left as they were.
 *
 * With create_graph each node runs its graph backward: the same rule
 * written with nabla's ops (nb_graph_backward_<name>, beside each op's
 * backward in src/ops/, or a custom op's own), so the gradient tensors it
 * returns are outputs of recorded nodes. The walk keeps one gradient tensor
 * per node output and per leaf, and adds contributions with nb_add, which
 * is recorded too. Those new nodes are newer than the walk's start, so the
 * walk never visits them. The composed rules (layer_norm, sdpa) call
 * nb_grad again on their composed forward, so the walk is reentrant: its
 * state lives in the call. */
#include "ops/ops_internal.h"

#include <stdlib.h>

/* The graph backward of every built-in op, from the op list. */
static const nb_graph_backward_fn graph_backward[NB_OP_COUNT] = {
#define NB_OP(id, name, n_in, formula, ...) [NB_OP_##id] = nb_graph_backward_##name,
#include "nabla/ops.def"
#undef NB_OP
};

typedef struct walk {
    nb_ctx *ctx;
    int n_in;
    nb_tensor *const *inputs;
    int top;         /* newest node of the outputs */
    nb_node **nodes; /* (top + 1) by index */
    bool *needed;    /* (top + 1): the node leads from an input to an output */
    /* create_graph: gradient tensors of node outputs, and of other tensors
     * (leaves, tensors of other contexts) as a list */
    nb_tensor **node_grad;
    nb_tensor **other, **other_grad;
    int n_other, cap_other;
    /* first order: the .grad pointers set aside */
    nb_tensor **stash_t;
    void **stash_g;
    int n_stash, cap_stash;
} walk;

static bool is_input(const walk *w, const nb_tensor *t) {
    for (int j = 0; j < w->n_in; j++)
        if (w->inputs[j] == t) return true;
    return false;
}

/* The node of t on this walk's tape (index <= top), or NULL. */
static nb_node *walk_node(const walk *w, const nb_tensor *t) {
    if (!t->node || t->owner != w->ctx || t->node->index > w->top) return NULL;
    return w->nodes[t->node->index] == t->node ? t->node : NULL;
}

/* Does gradient flow from t to an input of the call? */
static bool leads_to_input(const walk *w, const nb_tensor *t) {
    if (is_input(w, t)) return true;
    nb_node *n = walk_node(w, t);
    return n && w->needed[n->index];
}

static nb_status walk_init(walk *w, nb_ctx *ctx, int n_out, nb_tensor *const *outputs,
                           int n_in, nb_tensor *const *inputs) {
    *w = (walk){.ctx = ctx, .n_in = n_in, .inputs = inputs, .top = -1};
    for (int i = 0; i < n_out; i++) {
        nb_node *n = outputs[i]->owner == ctx ? outputs[i]->node : NULL;
        if (n && n->index > w->top) w->top = n->index;
    }
    int len = w->top + 1;
    w->nodes = nb_ctx_alloc(ctx, (size_t)(len ? len : 1) * sizeof *w->nodes);
    w->needed = nb_ctx_alloc(ctx, (size_t)(len ? len : 1) * sizeof *w->needed);
    if (!w->nodes || !w->needed) return nb_ctx_status(ctx);
    for (nb_node *n = ctx->tape; n; n = n->prev)
        if (n->index <= w->top) w->nodes[n->index] = n;
    for (int i = 0; i < len; i++) {
        nb_node *n = w->nodes[i];
        for (int k = 0; n && k < n->n_in && !w->needed[i]; k++)
            w->needed[i] = n->in[k]->requires_grad && leads_to_input(w, n->in[k]);
    }
    return NB_OK;
}

/* ---- first order: the ordinary local rules, .grad set aside ------------- */
static bool stash(walk *w, nb_tensor *t) {
    if (w->n_stash == w->cap_stash) {
        int cap = w->cap_stash ? 2 * w->cap_stash : 64;
        nb_tensor **nt = realloc(w->stash_t, (size_t)cap * sizeof *nt);
        if (nt) w->stash_t = nt;
        void **ng = nt ? realloc(w->stash_g, (size_t)cap * sizeof *ng) : NULL;
        if (!ng) return false;
        w->stash_g = ng, w->cap_stash = cap;
    }
    if (t->grad_stale) nb_zero_grad(t); /* what it holds, as zeros: the walk must not see it stale */
    w->stash_t[w->n_stash] = t;
    w->stash_g[w->n_stash++] = t->grad;
    t->grad = NULL;
    return true;
}

static void unstash(walk *w) {
    for (int i = w->n_stash - 1; i >= 0; i--) w->stash_t[i]->grad = w->stash_g[i];
    free(w->stash_t), free(w->stash_g);
}

/* The gradient buffer of t as a new tensor of ctx (a copy: the buffer is
 * put back to t's owner's use when the walk ends). */
static nb_tensor *grad_copy(nb_ctx *ctx, const nb_tensor *t) {
    return nb_from_data(ctx, t->dtype, t->ndim, t->shape, t->grad);
}

static nb_status first_order(walk *w, int n_out, nb_tensor *const *outputs,
                             nb_tensor *const *grad_outputs, const nb_grad_opts *o,
                             nb_tensor **grads) {
    nb_ctx *ctx = w->ctx;
    bool ok = true;
    for (int i = 0; i <= w->top && ok; i++) {
        nb_node *n = w->nodes[i];
        if (!n || !w->needed[i]) continue;
        ok = stash(w, n->out);
        for (int k = 0; k < n->n_in && ok; k++) ok = stash(w, n->in[k]);
    }
    for (int i = 0; i < n_out && ok; i++) ok = stash(w, outputs[i]);
    for (int j = 0; j < w->n_in && ok; j++) ok = stash(w, (nb_tensor *)w->inputs[j]);
    bool local = ctx->grad_local, recycle = ctx->recycle_grads;
    ctx->grad_local = true, ctx->recycle_grads = false;
    for (int i = 0; i < n_out && ok; i++) {
        void *g = nb_grad_buffer(ctx, outputs[i]);
        if (!g) break;
        if (grad_outputs)
            nb_accumulate(outputs[i]->dtype, g, grad_outputs[i]->data, outputs[i]->numel);
        else if (outputs[i]->dtype == NB_F32)
            *(float *)g += 1.0f;
        else
            *(double *)g += 1.0;
    }
    for (int i = w->top; i >= 0 && ok && nb_ctx_ok(ctx); i--) {
        nb_node *n = w->nodes[i];
        if (!n || !w->needed[i] || !n->out->grad) continue;
        n->backward(ctx, n);
    }
    ctx->grad_local = local, ctx->recycle_grads = recycle;
    for (int j = 0; j < w->n_in && ok && nb_ctx_ok(ctx); j++) {
        if (w->inputs[j]->grad)
            grads[j] = grad_copy(ctx, w->inputs[j]);
        else if (!o->allow_unused)
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "grad: input %d is not reached by the outputs (set allow_unused to get "
                        "NULL for it)", j);
    }
    unstash(w);
    if (!ok) return nb_ctx_fail(ctx, NB_ERR_MEMORY, "grad: out of memory");
    return nb_ctx_status(ctx);
}

/* ---- create_graph: every rule recorded ------------------------------------ */
static nb_tensor **grad_slot(walk *w, nb_tensor *t) {
    nb_node *n = walk_node(w, t);
    if (n) return &w->node_grad[n->index];
    for (int i = 0; i < w->n_other; i++)
        if (w->other[i] == t) return &w->other_grad[i];
    if (w->n_other == w->cap_other) {
        int cap = w->cap_other ? 2 * w->cap_other : 16;
        nb_tensor **a = nb_ctx_alloc(w->ctx, (size_t)cap * 2 * sizeof *a);
        if (!a) return NULL;
        if (w->n_other) {
            memcpy(a, w->other, (size_t)w->n_other * sizeof *a);
            memcpy(a + cap, w->other_grad, (size_t)w->n_other * sizeof *a);
        }
        w->other = a, w->other_grad = a + cap, w->cap_other = cap;
    }
    w->other[w->n_other] = t;
    w->other_grad[w->n_other] = NULL;
    return &w->other_grad[w->n_other++];
}

/* Adds g into t's gradient (nb_add, recorded). */
static void add_grad(walk *w, nb_tensor *t, nb_tensor *g) {
    nb_tensor **slot = grad_slot(w, t);
    if (slot) *slot = *slot ? nb_add(w->ctx, *slot, g) : g;
}

void nb_graph_backward_node(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_graph_backward_fn fn = n->graph_backward;
    if (!fn && n->op != NB_OP_CUSTOM) fn = graph_backward[n->op];
    if (!fn) {
        char site[300];
        nb_site_str(n->file, n->line, site, sizeof site);
        nb_ctx_fail(ctx, NB_ERR_STATE,
                    "grad: custom op '%s' (#%d, %s) has no graph backward, so its "
                    "gradient cannot be differentiated again; declare one with "
                    "nb_node_set_graph_backward",
                    n->name, n->index, site);
        return;
    }
    bool enabled = ctx->grad_enabled;
    ctx->grad_enabled = true;
    fn(ctx, n, dout, din);
    ctx->grad_enabled = enabled;
}

/* Runs node n's graph backward on dout and adds what it gives its inputs. */
static void graph_step(walk *w, nb_node *n, nb_tensor *dout) {
    nb_ctx *ctx = w->ctx;
    nb_tensor *small[NB_NODE_MAX_INPUTS] = {0}, **din = small;
    if (n->n_in > NB_NODE_MAX_INPUTS) {
        din = nb_ctx_alloc(ctx, (size_t)n->n_in * sizeof *din);
        if (!din) return;
    }
    nb_graph_backward_node(ctx, n, dout, din);
    for (int k = 0; k < n->n_in && nb_ctx_ok(ctx); k++) {
        nb_tensor *in = n->in[k];
        if (!din[k] || !in->requires_grad) continue;
        if (!nb_same_shape(din[k], in) || din[k]->dtype != in->dtype) {
            char s1[64], s2[64];
            nb_ctx_fail(ctx, nb_same_shape(din[k], in) ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                        "grad: the graph backward of op #%d '%s' gave input %d a gradient %s %s, "
                        "expected %s %s",
                        n->index, n->name, k, nb_shape_str(din[k], s1, sizeof s1),
                        nb_dtype_name(din[k]->dtype), nb_shape_str(in, s2, sizeof s2),
                        nb_dtype_name(in->dtype));
            return;
        }
        add_grad(w, in, din[k]);
    }
}

static nb_status with_graph(walk *w, int n_out, nb_tensor *const *outputs,
                            nb_tensor *const *grad_outputs, const nb_grad_opts *o,
                            nb_tensor **grads) {
    nb_ctx *ctx = w->ctx;
    w->node_grad = nb_ctx_alloc(ctx, (size_t)(w->top + 2) * sizeof *w->node_grad);
    if (!w->node_grad) return nb_ctx_status(ctx);
    bool enabled = ctx->grad_enabled;
    ctx->grad_enabled = true;
    for (int i = 0; i < n_out && nb_ctx_ok(ctx); i++) {
        nb_tensor *seed = grad_outputs ? grad_outputs[i]
                                       : nb_ones(ctx, outputs[i]->dtype, outputs[i]->ndim,
                                                 outputs[i]->shape);
        if (seed) add_grad(w, outputs[i], seed);
    }
    for (int i = w->top; i >= 0 && nb_ctx_ok(ctx); i--) {
        nb_node *n = w->nodes[i];
        if (n && w->needed[i] && w->node_grad[i]) graph_step(w, n, w->node_grad[i]);
    }
    ctx->grad_enabled = enabled;
    for (int j = 0; j < w->n_in && nb_ctx_ok(ctx); j++) {
        nb_tensor **slot = grad_slot(w, (nb_tensor *)w->inputs[j]);
        grads[j] = slot ? *slot : NULL;
        if (!grads[j] && !o->allow_unused)
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "grad: input %d is not reached by the outputs (set allow_unused to get "
                        "NULL for it)", j);
    }
    return nb_ctx_status(ctx);
}

/* ---- the call ------------------------------------------------------------ */
static nb_status check_args(nb_ctx *ctx, int n_out, nb_tensor *const *outputs,
                            nb_tensor *const *grad_outputs, int n_in, nb_tensor *const *inputs,
                            nb_tensor **grads) {
    if (n_out < 1 || n_in < 1 || !outputs || !inputs || !grads)
        return nb_ctx_fail(ctx, NB_ERR_NULL,
                           "grad: needs at least one output and one input, and grads (n_out "
                           "%d, n_in %d)", n_out, n_in);
    char s1[64], s2[64];
    for (int j = 0; j < n_in; j++) {
        grads[j] = NULL;
        if (!inputs[j]) return nb_ctx_fail(ctx, NB_ERR_NULL, "grad: input %d is NULL", j);
        if (!inputs[j]->requires_grad)
            return nb_ctx_fail(ctx, NB_ERR_STATE,
                               "grad: input %d %s does not require grad", j,
                               nb_shape_str(inputs[j], s1, sizeof s1));
    }
    for (int i = 0; i < n_out; i++) {
        nb_tensor *y = outputs[i];
        if (!y) return nb_ctx_fail(ctx, NB_ERR_NULL, "grad: output %d is NULL", i);
        if (!nb_check_live(ctx, "grad", 1, (const nb_tensor *const *)&y)) return ctx->status;
        if (!y->requires_grad)
            return nb_ctx_fail(ctx, NB_ERR_STATE,
                               "grad: output %d %s does not require grad (no input of it was "
                               "marked with nb_requires_grad, or grad was disabled)",
                               i, nb_shape_str(y, s1, sizeof s1));
        if (y->node && y->owner != ctx)
            return nb_ctx_fail(ctx, NB_ERR_STATE,
                               "grad: output %d %s was recorded on another context", i,
                               nb_shape_str(y, s1, sizeof s1));
        const nb_tensor *g = grad_outputs ? grad_outputs[i] : NULL;
        if (!grad_outputs && y->numel != 1)
            return nb_ctx_fail(ctx, NB_ERR_SHAPE,
                               "grad: output %d %s is not a scalar, pass grad_outputs", i,
                               nb_shape_str(y, s1, sizeof s1));
        if (grad_outputs && (!g || !nb_same_shape(g, y) || g->dtype != y->dtype))
            return nb_ctx_fail(ctx, g && nb_same_shape(g, y) ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                               "grad: grad_outputs[%d] %s %s does not match output %s %s", i,
                               nb_shape_str(g, s2, sizeof s2), g ? nb_dtype_name(g->dtype) : "",
                               nb_shape_str(y, s1, sizeof s1), nb_dtype_name(y->dtype));
    }
    return NB_OK;
}

nb_status nb_grad(nb_ctx *ctx, int n_out, nb_tensor *const *outputs,
                  nb_tensor *const *grad_outputs, int n_in, nb_tensor *const *inputs,
                  const nb_grad_opts *opts, nb_tensor **grads) {
    if (!ctx) return NB_ERR_NULL;
    if (grads && n_in > 0)
        for (int j = 0; j < n_in; j++) grads[j] = NULL;
    if (ctx->status != NB_OK) return ctx->status;
    nb_status st = check_args(ctx, n_out, outputs, grad_outputs, n_in, inputs, grads);
    if (st) return st;
    nb_grad_opts o = opts ? *opts : (nb_grad_opts){0};
    walk w;
    if ((st = walk_init(&w, ctx, n_out, outputs, n_in, inputs))) return st;
    st = o.create_graph ? with_graph(&w, n_out, outputs, grad_outputs, &o, grads)
                        : first_order(&w, n_out, outputs, grad_outputs, &o, grads);
    if (st)
        for (int j = 0; j < n_in; j++) grads[j] = NULL;
    return st;
}

/* ---- helpers of the graph backwards ------------------------------------- */
nb_tensor *nb_sum_to(nb_ctx *ctx, nb_tensor *g, const nb_tensor *like) {
    if (!g || nb_same_shape(g, like)) return g;
    nb_tensor *r = g;
    for (int d = 0; r && d < g->ndim - like->ndim; d++) r = nb_sum_dim(ctx, r, 0, false);
    for (int d = 0; r && d < like->ndim; d++)
        if (like->shape[d] == 1 && r->shape[d] != 1) r = nb_sum_dim(ctx, r, d, true);
    return r;
}

nb_tensor *nb_expand_as(nb_ctx *ctx, nb_tensor *g, const nb_tensor *like) {
    if (!g || nb_same_shape(g, like)) return g;
    return nb_add(ctx, nb_zeros(ctx, g->dtype, like->ndim, like->shape), g);
}

void nb_graph_backward_composed(nb_ctx *ctx, nb_node *n, nb_tensor *y, nb_tensor *dout,
                                nb_tensor **din) {
    if (!y) return;
    nb_tensor *want[NB_NODE_MAX_INPUTS], *got[NB_NODE_MAX_INPUTS] = {0};
    int m = 0, at[NB_NODE_MAX_INPUTS];
    for (int k = 0; k < n->n_in && k < NB_NODE_MAX_INPUTS; k++) {
        bool again = false; /* an input given twice (q = k = v) gets its whole gradient once */
        for (int j = 0; j < k; j++) again = again || n->in[j] == n->in[k];
        if (n->in[k]->requires_grad && !again) at[m] = k, want[m++] = n->in[k];
    }
    nb_grad_opts o = {.create_graph = true, .allow_unused = true};
    if (m && nb_grad(ctx, 1, &y, &dout, m, want, &o, got) == NB_OK)
        for (int i = 0; i < m; i++) din[at[i]] = got[i];
}

/* ---- products built on it ------------------------------------------------ */
/* <a_j, b_j> summed over j, recorded; NULL when no a_j is there. */
static nb_tensor *dot_all(nb_ctx *ctx, int n, nb_tensor *const *a, nb_tensor *const *b) {
    nb_tensor *s = NULL;
    for (int j = 0; j < n; j++) {
        if (!a[j]) continue;
        nb_tensor *term = nb_sum(ctx, nb_mul(ctx, a[j], b[j]));
        s = s ? nb_add(ctx, s, term) : term;
    }
    return s;
}

/* grads of s with respect to wrt (zeros where s does not reach, or does not
 * require grad at all), recorded when o asks. */
static nb_status grad_or_zeros(nb_ctx *ctx, nb_tensor *s, int n, nb_tensor *const *wrt,
                               const nb_grad_opts *opts, nb_tensor **out) {
    nb_grad_opts o = {.create_graph = opts && opts->create_graph, .allow_unused = true};
    if (s && s->requires_grad && nb_grad(ctx, 1, &s, NULL, n, wrt, &o, out)) return ctx->status;
    for (int j = 0; j < n; j++) {
        if (!s || !s->requires_grad) out[j] = NULL;
        if (!out[j]) out[j] = nb_zeros(ctx, wrt[j]->dtype, wrt[j]->ndim, wrt[j]->shape);
    }
    return nb_ctx_status(ctx);
}

/* out[j], or zeros of like[j]'s shape and dtype where it is NULL. */
static nb_status zeros_where_null(nb_ctx *ctx, int n, nb_tensor *const *like, nb_tensor **out) {
    for (int j = 0; j < n && nb_ctx_ok(ctx); j++)
        if (!out[j]) out[j] = nb_zeros(ctx, like[j]->dtype, like[j]->ndim, like[j]->shape);
    return nb_ctx_status(ctx);
}

/* out[0..n_out) cleared; of[j] and v[j] of one shape and dtype, j < n. */
static bool check_vectors(nb_ctx *ctx, const char *op, int n, nb_tensor *const *of,
                          nb_tensor *const *v, nb_tensor **out, int n_out) {
    for (int j = 0; out && j < n_out; j++) out[j] = NULL;
    if (!of || !v || !out || n < 1 || n_out < 1) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: the tensors, the vectors and the results are required",
                    op);
        return false;
    }
    for (int j = 0; j < n; j++) {
        char s1[64], s2[64];
        if (!of[j] || !v[j]) {
            nb_ctx_fail(ctx, NB_ERR_NULL, "%s: entry %d is NULL", op, j);
            return false;
        }
        if (!nb_same_shape(of[j], v[j]) || of[j]->dtype != v[j]->dtype) {
            nb_ctx_fail(ctx, nb_same_shape(of[j], v[j]) ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                        "%s: vector %d %s %s does not match %s %s", op, j,
                        nb_shape_str(v[j], s1, sizeof s1), nb_dtype_name(v[j]->dtype),
                        nb_shape_str(of[j], s2, sizeof s2), nb_dtype_name(of[j]->dtype));
            return false;
        }
    }
    return true;
}

nb_status nb_hvp(nb_ctx *ctx, nb_tensor *y, int n_in, nb_tensor *const *inputs,
                 nb_tensor *const *v, const nb_grad_opts *opts, nb_tensor **hv) {
    if (!nb_ctx_ok(ctx)) return ctx ? ctx->status : NB_ERR_NULL;
    if (!check_vectors(ctx, "hvp", n_in, inputs, v, hv, n_in)) return ctx->status;
    nb_hvp_mode mode = opts ? opts->hvp_mode : NB_HVP_AUTO;
    if (mode != NB_HVP_AUTO && mode != NB_HVP_REV_REV && mode != NB_HVP_FWD_REV)
        return nb_ctx_fail(ctx, NB_ERR_VALUE,
                           "hvp: opts->hvp_mode %d is none of NB_HVP_AUTO, NB_HVP_REV_REV, "
                           "NB_HVP_FWD_REV", (int)mode);
    nb_tensor **g = nb_ctx_alloc(ctx, (size_t)n_in * sizeof *g);
    if (!g) return ctx->status;
    nb_grad_opts cg = {.create_graph = true, .allow_unused = true};
    if (nb_grad(ctx, 1, &y, NULL, n_in, inputs, &cg, g)) return ctx->status;
    /* forward-over-reverse unless reverse-over-reverse is asked for: v
     * pushed through the forward and the recorded backward by the forward-
     * mode rules, one pass, whose fused tangent kernels measured faster
     * than a second reverse pass (docs/gradcheck.md); reverse-over-reverse
     * (the gradient of <g, v>) when asked, or when a custom op on the tape
     * has no forward-mode rule (nb_fwd_push gives 0) */
    int fwd = mode != NB_HVP_REV_REV
                  ? nb_fwd_push(ctx, n_in, inputs, v, n_in, g, opts && opts->create_graph, hv)
                  : 0;
    ctx->hvp_last = fwd == 1 ? NB_HVP_FWD_REV : NB_HVP_REV_REV;
    if (fwd < 0) return ctx->status;
    if (fwd == 0) return grad_or_zeros(ctx, dot_all(ctx, n_in, g, v), n_in, inputs, opts, hv);
    return zeros_where_null(ctx, n_in, inputs, hv);
}

nb_hvp_mode nb_hvp_last_method(const nb_ctx *ctx) {
    return ctx ? ctx->hvp_last : NB_HVP_AUTO;
}

nb_status nb_jvp(nb_ctx *ctx, int n_out, nb_tensor *const *outputs, int n_in,
                 nb_tensor *const *inputs, nb_tensor *const *u, const nb_grad_opts *opts,
                 nb_tensor **ju) {
    if (!nb_ctx_ok(ctx)) return ctx ? ctx->status : NB_ERR_NULL;
    if (!check_vectors(ctx, "jvp", n_in, inputs, u, ju, n_out)) return ctx->status;
    if (!outputs) return nb_ctx_fail(ctx, NB_ERR_NULL, "jvp: outputs is NULL");
    nb_tensor **w = nb_ctx_alloc(ctx, (size_t)(n_out + n_in) * sizeof *w), **g = w + n_out;
    if (!w) return ctx->status;
    for (int i = 0; i < n_out; i++) {
        if (!outputs[i]) return nb_ctx_fail(ctx, NB_ERR_NULL, "jvp: output %d is NULL", i);
        w[i] = nb_requires_grad(nb_zeros(ctx, outputs[i]->dtype, outputs[i]->ndim,
                                         outputs[i]->shape));
    }
    if (!nb_ctx_ok(ctx) || check_args(ctx, n_out, outputs, w, n_in, inputs, g))
        return ctx->status; /* the errors nb_grad would give */
    /* forward mode along the tape when every op on it has a forward-mode
     * rule: one pass of the rules instead of two reverse passes */
    int fwd = nb_fwd_push(ctx, n_in, inputs, u, n_out, outputs, opts && opts->create_graph, ju);
    if (fwd < 0) return ctx->status;
    if (fwd == 1) return zeros_where_null(ctx, n_out, outputs, ju);
    nb_grad_opts cg = {.create_graph = true, .allow_unused = true};
    if (nb_grad(ctx, n_out, outputs, w, n_in, inputs, &cg, g)) return ctx->status;
    return grad_or_zeros(ctx, dot_all(ctx, n_in, g, u), n_out, w, opts, ju);
}
