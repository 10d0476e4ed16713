/* ops/forward_ad.c - forward mode: dual tensors (nb_make_dual, nb_tangent),
 * running each op's forward-mode rule, nb_jvp_fwd, and pushing tangents
 * along a recorded tape (nb_hvp's forward-over-reverse).
 *
 * A tensor may carry a tangent (t->tangent). When an op's input carries one,
 * the node the op makes (on the tape, or off it when nothing is recorded)
 * becomes ctx->fwd_pending, and its rule nb_forward_<name> runs once the op
 * has set the node's parameters: when the next node is made, or when
 * nb_tangent reads the output. So no op's code changes for forward mode
 * beyond its rule.
 *
 * The rules are written with recorded ops, as the graph backwards are, not
 * as fused kernels: with grad on, a tangent is then an ordinary recorded
 * result, and differentiating it in reverse (forward-over-reverse Hessian-
 * vector products) or pushing a tangent through a recorded reverse pass
 * needs nothing more. The price is some speed on sdpa, whose rule goes
 * through its composed form. While a rule
 * runs, ctx->fwd_depth is raised and its own ops carry no tangents: one
 * level of forward mode. */
#include "ops/ops_internal.h"

#include "nabla/gradcheck.h"

/* The forward-mode rule of every built-in op, from the op list. */
static const nb_forward_fn forward_rule[NB_OP_COUNT] = {
#define NB_OP(id, name, n_in, formula, ...) [NB_OP_##id] = nb_forward_##name,
#include "nabla/ops.def"
#undef NB_OP
};

bool nb_fwd_active(nb_ctx *ctx, int n_in, nb_tensor *const *in) {
    if (ctx->fwd_depth > 0) return false;
    if (ctx->fwd_pending) nb_fwd_flush(ctx); /* an op asking before it records */
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->tangent) return true;
    return false;
}

/* Node n's rule on its inputs' tangents: the output's tangent, or NULL
 * (zero, or an error on ctx naming the op). */
static nb_tensor *run_rule(nb_ctx *ctx, nb_node *n) {
    nb_forward_fn fn = n->forward_rule;
    if (!fn && n->op != NB_OP_CUSTOM) fn = forward_rule[n->op];
    char site[300], s1[64], s2[64];
    if (!fn) {
        nb_site_str(n->file, n->line, site, sizeof site);
        nb_ctx_fail(ctx, NB_ERR_STATE,
                    "forward: custom op '%s' (%s) has no forward-mode rule, so a tangent "
                    "(nb_make_dual) cannot pass through it; declare one with "
                    "nb_node_set_forward_rule",
                    n->name, site);
        return NULL;
    }
    nb_tensor *small[NB_NODE_MAX_INPUTS] = {0}, **tin = small;
    if (n->n_in > NB_NODE_MAX_INPUTS) {
        tin = nb_ctx_alloc(ctx, (size_t)n->n_in * sizeof *tin);
        if (!tin) return NULL;
    }
    for (int i = 0; i < n->n_in; i++) tin[i] = n->in[i]->tangent;
    ctx->fwd_depth++, ctx->fwd_in_rule++;
    nb_tensor *t = fn(ctx, n, tin);
    ctx->fwd_depth--, ctx->fwd_in_rule--;
    if (!nb_ctx_ok(ctx) || !t) return NULL;
    if (!nb_same_shape(t, n->out) || t->dtype != n->out->dtype) {
        nb_site_str(n->file, n->line, site, sizeof site);
        nb_ctx_fail(ctx, nb_same_shape(t, n->out) ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                    "forward: the forward-mode rule of op '%s' (%s) gave a tangent %s %s, "
                    "expected its output's %s %s",
                    n->name, site, nb_shape_str(t, s1, sizeof s1), nb_dtype_name(t->dtype),
                    nb_shape_str(n->out, s2, sizeof s2), nb_dtype_name(n->out->dtype));
        return NULL;
    }
    return t;
}

void nb_fwd_flush(nb_ctx *ctx) {
    nb_node *n = ctx->fwd_pending;
    ctx->fwd_pending = NULL;
    if (n && nb_ctx_ok(ctx)) n->out->tangent = run_rule(ctx, n);
}

/* ---- dual tensors ---------------------------------------------------------- */
/* primal's value carrying tangent: a reshape of primal to its own shape (a
 * view, recorded when primal requires grad), made with forward mode off so
 * that a tangent primal carries itself is not passed on. */
static nb_tensor *dual_of(nb_ctx *ctx, nb_tensor *primal, nb_tensor *tangent) {
    ctx->fwd_depth++, ctx->fwd_in_rule++;
    nb_tensor *d = nb_reshape(ctx, primal, primal->ndim, primal->shape);
    ctx->fwd_depth--, ctx->fwd_in_rule--;
    if (d) d->tangent = tangent;
    return d;
}

/* primal and tangent present, live, float, of one shape and dtype; `op`
 * and `which` name the call and the pair in the error. */
static bool dual_ok(nb_ctx *ctx, const char *op, const char *which, nb_tensor *primal,
                    nb_tensor *tangent) {
    char s1[64], s2[64];
    if (!primal || !tangent) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s%s is NULL", op, which, !primal ? "primal" : "tangent");
        return false;
    }
    const nb_tensor *both[2] = {primal, tangent};
    if (!nb_check_live(ctx, op, 2, both)) return false;
    if ((primal->dtype != NB_F32 && primal->dtype != NB_F64) || tangent->dtype != primal->dtype ||
        !nb_same_shape(primal, tangent)) {
        nb_ctx_fail(ctx, nb_same_shape(primal, tangent) ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                    "%s: %stangent %s %s does not match primal %s %s (same shape and dtype, "
                    "f32 or f64)",
                    op, which, nb_shape_str(tangent, s1, sizeof s1),
                    nb_dtype_name(tangent->dtype), nb_shape_str(primal, s2, sizeof s2),
                    nb_dtype_name(primal->dtype));
        return false;
    }
    return true;
}

nb_tensor *nb_make_dual(nb_ctx *ctx, nb_tensor *primal, nb_tensor *tangent) {
    if (!nb_ctx_ok(ctx)) return NULL;
    if (ctx->fwd_pending) nb_fwd_flush(ctx);
    if (!dual_ok(ctx, "make_dual", "", primal, tangent)) return NULL;
    return dual_of(ctx, primal, tangent);
}

nb_tensor *nb_tangent(const nb_tensor *t) {
    if (!t) return NULL;
    if (t->owner && t->owner->fwd_pending) nb_fwd_flush(t->owner);
    return t->tangent;
}

nb_status nb_jvp_fwd(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                     nb_tensor *const *inputs, nb_tensor *const *tangents, nb_tensor **out,
                     nb_tensor **out_tangent) {
    if (out) *out = NULL;
    if (out_tangent) *out_tangent = NULL;
    if (!ctx) return NB_ERR_NULL;
    if (ctx->status) return ctx->status;
    if (!f || n_in < 1 || !inputs || !tangents || !out || !out_tangent)
        return nb_ctx_fail(ctx, NB_ERR_NULL,
                           "jvp_fwd: f, at least one input (n_in %d), inputs, tangents, out and "
                           "out_tangent are required", n_in);
    if (ctx->fwd_pending) nb_fwd_flush(ctx);
    nb_tensor *small[8], **x = small;
    if (n_in > 8 && !(x = nb_ctx_alloc(ctx, (size_t)n_in * sizeof *x))) return ctx->status;
    for (int j = 0; j < n_in; j++) {
        char which[32];
        snprintf(which, sizeof which, "input %d's ", j);
        if (!inputs[j]) return nb_ctx_fail(ctx, NB_ERR_NULL, "jvp_fwd: input %d is NULL", j);
        x[j] = inputs[j];
        if (tangents[j] && !dual_ok(ctx, "jvp_fwd", which, inputs[j], tangents[j]))
            return ctx->status;
        if (tangents[j] && !(x[j] = dual_of(ctx, inputs[j], tangents[j]))) return ctx->status;
    }
    nb_tensor *y = f(ctx, x, user);
    if (!y) return nb_ctx_ok(ctx) ? nb_ctx_fail(ctx, NB_ERR_NULL, "jvp_fwd: f returned NULL")
                                  : ctx->status;
    nb_tensor *t = nb_tangent(y);
    if (!nb_ctx_ok(ctx)) return ctx->status;
    if (!t) t = nb_zeros(ctx, y->dtype, y->ndim, y->shape);
    if (!t) return ctx->status;
    *out = y;
    *out_tangent = t;
    return NB_OK;
}

/* ---- helpers of the rules ------------------------------------------------------ */
/* J t for a node whose Jacobian is symmetric, by its own backward kernel
 * (Jᵀ t, one fused pass) run on t as the output's gradient, into a new
 * tensor: the node's tensors get their .grad and requires_grad back. */
static nb_tensor *by_backward_kernel(nb_ctx *ctx, nb_node *n, nb_tensor *t) {
    nb_tensor *x = n->in[0], *out = n->out;
    nb_tensor *r = nb_zeros(ctx, x->dtype, x->ndim, x->shape);
    if (!r) return NULL;
    void *out_grad = out->grad, *x_grad = x->grad;
    bool x_rg = x->requires_grad;
    out->grad = t->data, x->grad = r->data, x->requires_grad = true;
    n->backward(ctx, n);
    out->grad = out_grad, x->grad = x_grad, x->requires_grad = x_rg;
    return r;
}

nb_tensor *nb_forward_symmetric(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin,
                                nb_graph_backward_fn gb) {
    if (!tin[0]) return NULL;
    /* The fused kernel when nothing needs recording (grad off, or neither
     * x nor its tangent requires grad: a plain JVP, nb_hvp's push); the
     * graph backward's recorded ops when the tangent is to be
     * differentiated. */
    if (!ctx->grad_enabled || (!tin[0]->requires_grad && !n->in[0]->requires_grad))
        return by_backward_kernel(ctx, n, tin[0]);
    nb_tensor *din[1] = {NULL};
    gb(ctx, n, tin[0], din);
    return din[0];
}

nb_tensor *nb_forward_composed(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin,
                               nb_composed_fn build) {
    nb_tensor *x[NB_NODE_MAX_INPUTS];
    for (int i = 0; i < n->n_in && i < NB_NODE_MAX_INPUTS; i++) {
        x[i] = tin[i] ? dual_of(ctx, n->in[i], tin[i]) : n->in[i];
        if (!x[i]) return NULL;
    }
    int depth = ctx->fwd_depth; /* the composed ops carry the tangents */
    ctx->fwd_depth = 0;
    nb_tensor *y = build(ctx, n, x);
    nb_tensor *t = nb_tangent(y);
    ctx->fwd_depth = depth;
    return t;
}

nb_tensor *nb_fwd_sum(nb_ctx *ctx, const nb_tensor *out, nb_tensor *a, nb_tensor *b, int sign) {
    if (a && b) return sign < 0 ? nb_sub(ctx, a, b) : nb_add(ctx, a, b);
    if (b && sign < 0) b = nb_neg(ctx, b);
    nb_tensor *t = a ? a : b;
    return t ? nb_expand_as(ctx, t, out) : NULL;
}

bool nb_fwd_unrecorded(const nb_ctx *ctx, const nb_node *n, nb_tensor *const *tin) {
    if (!ctx->grad_enabled) return true;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->requires_grad || (tin[i] && tin[i]->requires_grad)) return false;
    return true;
}

nb_tensor *nb_fwd_or_zeros(nb_ctx *ctx, nb_tensor *t, const nb_tensor *like) {
    return t ? t : nb_zeros(ctx, like->dtype, like->ndim, like->shape);
}

/* ---- tangents pushed along a recorded tape -------------------------------------- */
/* A tensor whose tangent the push changed, and what it carried before. */
typedef struct kept_tangent {
    nb_tensor *t, *old;
} kept_tangent;

typedef struct push {
    kept_tangent *kept;
    int n, cap;
} push;

static bool keep_tangent(nb_ctx *ctx, push *p, nb_tensor *t) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        kept_tangent *k = nb_ctx_alloc(ctx, (size_t)cap * sizeof *k);
        if (!k) return false;
        if (p->n) memcpy(k, p->kept, (size_t)p->n * sizeof *k);
        p->kept = k, p->cap = cap;
    }
    p->kept[p->n++] = (kept_tangent){t, t->tangent};
    t->tangent = NULL;
    return true;
}

int nb_fwd_push(nb_ctx *ctx, int n_in, nb_tensor *const *inputs, nb_tensor *const *v, int n_out,
                nb_tensor *const *outputs, bool record, nb_tensor **tout) {
    if (ctx->fwd_pending) nb_fwd_flush(ctx);
    int top = -1;
    for (int i = 0; i < n_out; i++) {
        nb_node *n = outputs[i]->owner == ctx ? outputs[i]->node : NULL;
        if (n && n->index > top) top = n->index;
    }
    nb_node **nodes = nb_ctx_alloc(ctx, (size_t)(top + 2) * sizeof *nodes);
    if (!nodes) return -1;
    for (nb_node *n = ctx->tape; n; n = n->prev)
        if (n->index <= top) nodes[n->index] = n;
    for (int i = 0; i <= top; i++)
        if (nodes[i]->op == NB_OP_CUSTOM && !nodes[i]->forward_rule) return 0;
    /* Only the nodes the outputs read, directly or not, need a tangent: a
     * recorded backward also holds values no gradient depends on (the
     * loss, a re-run forward's output), whose rules would be work for
     * nothing. live[i]: node i is read. */
    bool *live = nb_ctx_alloc(ctx, (size_t)(top + 1) * sizeof *live);
    if (!live && top >= 0) return -1;
    for (int i = 0; i < n_out; i++) {
        nb_node *n = outputs[i]->owner == ctx ? outputs[i]->node : NULL;
        if (n && n->index >= 0 && n->index <= top && nodes[n->index] == n) live[n->index] = true;
    }
    for (int i = top; i >= 0; i--)
        for (int k = 0; live[i] && k < nodes[i]->n_in; k++) {
            const nb_tensor *in = nodes[i]->in[k];
            int at = in->owner == ctx && in->node ? in->node->index : -1;
            if (at >= 0 && at <= top && nodes[at] == in->node) live[at] = true;
        }
    /* Only the tangents of this push count: every tensor the walk reads
     * starts without one, and gets back what it carried. */
    push p = {0};
    for (int i = 0; i <= top; i++) {
        for (int k = 0; k < nodes[i]->n_in; k++)
            if (nodes[i]->in[k]->tangent && !keep_tangent(ctx, &p, nodes[i]->in[k])) return -1;
        if (nodes[i]->out->tangent && !keep_tangent(ctx, &p, nodes[i]->out)) return -1;
    }
    for (int j = 0; j < n_in; j++)
        if (inputs[j]->tangent && !keep_tangent(ctx, &p, inputs[j])) return -1;
    for (int j = 0; j < n_in; j++) inputs[j]->tangent = v[j];
    bool enabled = ctx->grad_enabled;
    ctx->grad_enabled = record;
    for (int i = 0; i <= top && nb_ctx_ok(ctx); i++) {
        nb_node *n = nodes[i];
        if (live[i] && nb_fwd_active(ctx, n->n_in, n->in)) n->out->tangent = run_rule(ctx, n);
    }
    ctx->grad_enabled = enabled;
    for (int i = 0; i < n_out; i++) tout[i] = outputs[i]->tangent;
    for (int i = 0; i <= top; i++) nodes[i]->out->tangent = NULL;
    for (int j = 0; j < n_in; j++) inputs[j]->tangent = NULL;
    for (int k = p.n - 1; k >= 0; k--) p.kept[k].t->tangent = p.kept[k].old;
    return nb_ctx_ok(ctx) ? 1 : -1;
}
