/* gradcheck/gradgradcheck.c - PyTorch's gradgradcheck: the gradient of the
 * gradient, checked in float64 by finite differences.
 *
 * With random grad_outputs v (PCG32, opts.seed), the function
 *
 *   G(x, v) = nb_grad(f(x), x, v, create_graph)     (flattened, concatenated)
 *
 * is gradient-checked against x and v (nb_gradcheck, the same options and
 * result): its analytic Jacobian comes from the recorded backward, its
 * numeric one from evaluating G at moved points, so a second-order rule
 * that drops or mangles a term shows as a mismatch.
 *
 * Blame comes first: the recorded backward must give the same first
 * gradients as the ordinary one. Each node of f's tape runs both its local
 * rule and its graph backward on one random dout; the latest node whose two
 * answers differ (beyond atol + rtol |first order|) is named with its index
 * and creation site. A graph backward with wrong values (the usual mistake
 * in a hand-written second-order rule) is found there, by name, while
 * first-order gradcheck, which never runs it, still passes. */
#include "gradcheck/gradcheck_internal.h"
#include "ops/ops_internal.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct gg {
    nb_gradcheck_fn f;
    void *user;
    int n_x;   /* f's inputs; v follows them in G's inputs, then parameters */
    int n_par; /* listed parameters (nb_gradgradcheck_params) */
} gg;

/* G(x, v): the gradients of <f(x), v> with respect to every x (and
 * parameter) that requires grad, recorded, as one 1-D tensor. */
static nb_tensor *G(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    const gg *c = user;
    int n = c->n_x + c->n_par;
    nb_tensor *small[16], **xs = n <= 16 ? small : nb_ctx_alloc(ctx, (size_t)n * sizeof *xs);
    nb_tensor **wrt = xs ? nb_ctx_alloc(ctx, (size_t)n * sizeof *wrt) : NULL;
    nb_tensor **g = wrt ? nb_ctx_alloc(ctx, (size_t)n * sizeof *g) : NULL;
    if (!g) return NULL;
    for (int i = 0; i < c->n_x; i++) xs[i] = in[i];
    for (int k = 0; k < c->n_par; k++) xs[c->n_x + k] = in[c->n_x + 1 + k];
    nb_tensor *v = in[c->n_x];
    bool was = nb_set_grad_enabled(ctx, true); /* numeric points run without recording */
    nb_tensor *y = c->f(ctx, xs, c->user);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (xs[i]->requires_grad && (xs[i]->dtype == NB_F64 || xs[i]->dtype == NB_F32))
            wrt[m++] = xs[i];
    nb_grad_opts o = {.create_graph = true, .allow_unused = true};
    nb_tensor *out = NULL;
    if (y && m && nb_grad(ctx, 1, &y, &v, m, wrt, &o, g) == NB_OK) {
        int k = 0;
        for (int i = 0; i < m; i++)
            if (g[i]) g[k++] = nb_reshape(ctx, g[i], 1, (const int64_t[]){(int64_t)g[i]->numel});
        out = k == 0 ? NULL : k == 1 ? g[0] : nb_concat(ctx, k, g, 0);
        if (!out && nb_ctx_ok(ctx))
            nb_ctx_fail(ctx, NB_ERR_VALUE, "gradgradcheck: no input reaches the output");
    }
    nb_set_grad_enabled(ctx, was);
    return out;
}

/* ---- blame: the recorded backward against the ordinary one, node by node -- */
typedef struct agree {
    nb_ctx *ctx;
    nb_pcg32 rng;
    double atol, rtol;
} agree;

/* dout for node n: uniform in [-1, 1), in n's output dtype. */
static nb_tensor *random_like(agree *a, const nb_tensor *t) {
    return nb_uniform(a->ctx, t->dtype, t->ndim, t->shape, -1.0, 1.0, &a->rng);
}

/* Runs n's local rule on dout with every input's .grad set aside; din[k]
 * gets a copy of what it added to input k (NULL when it added nothing). */
static void first_order_rule(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *out = n->out;
    void *out_grad = out->grad;
    void **saved = nb_ctx_alloc(ctx, (size_t)n->n_in * sizeof *saved);
    if (!saved) return;
    for (int k = 0; k < n->n_in; k++) saved[k] = n->in[k]->grad, n->in[k]->grad = NULL;
    bool local = ctx->grad_local, recycle = ctx->recycle_grads;
    ctx->grad_local = true, ctx->recycle_grads = false;
    out->grad = nb_copy(ctx, dout, dout->dtype)->data;
    n->backward(ctx, n);
    ctx->grad_local = local, ctx->recycle_grads = recycle;
    for (int k = 0; k < n->n_in; k++) {
        nb_tensor *t = n->in[k];
        bool first = true; /* an input given twice: its whole gradient, once */
        for (int j = 0; j < k; j++) first = first && n->in[j] != t;
        din[k] = t->grad && first ? nb_from_data(ctx, t->dtype, t->ndim, t->shape, t->grad) : NULL;
    }
    for (int k = n->n_in - 1; k >= 0; k--) n->in[k]->grad = saved[k];
    out->grad = out_grad;
}

/* The largest |graph - first| beyond tolerance over n's inputs, or 0; *which
 * gets that input. */
static double node_disagrees(agree *a, nb_node *n, int *which) {
    nb_ctx *ctx = a->ctx;
    nb_tensor *dout = random_like(a, n->out);
    nb_tensor *d1[8] = {0}, *d2[8] = {0};
    if (!dout || n->n_in > 8) return 0;
    first_order_rule(ctx, n, dout, d1);
    nb_tensor *in[8];
    for (int k = 0; k < n->n_in; k++) in[k] = n->in[k];
    nb_graph_backward_node(ctx, n, dout, d2); /* the node alone: dout at its output */
    double worst = 0;
    for (int k = 0; k < n->n_in && nb_ctx_ok(ctx); k++) {
        if (!in[k]->requires_grad || (!d1[k] && !d2[k])) continue;
        int first = k; /* an input given twice: the shares of its slots add up */
        for (int j = k - 1; j >= 0; j--) first = in[j] == in[k] ? j : first;
        if (first != k) continue;
        for (size_t i = 0; i < in[k]->numel; i++) {
            double x1 = d1[k] ? nb_get(d1[k], i) : 0, x2 = 0;
            for (int j = k; j < n->n_in; j++)
                if (in[j] == in[k] && d2[j]) x2 += nb_get(d2[j], i);
            double err = fabs(x1 - x2), tol = a->atol + a->rtol * fabs(x1);
            if (err > tol && err > worst) worst = err, *which = k;
        }
    }
    return worst;
}

/* Names the latest node of f's tape at x whose graph backward disagrees
 * with its local rule; fills res's blame fields and message. NB_OK when
 * every rule agrees, NB_ERR_VALUE when one does not, and the error's own
 * status when a rule could not run (NB_ERR_STATE for a custom op without a
 * graph backward, as nb_grad gives). */
static nb_status blame_graph(const gg *c, nb_tensor *const *x, const nb_tensor_list *params,
                        const nb_gradcheck_opts *o, nb_gradcheck_result *res) {
    agree a = {.ctx = nb_ctx_new(0), .atol = o->atol, .rtol = o->rtol};
    if (!a.ctx) return NB_OK; /* blame is extra: the check itself still runs */
    nb_pcg32_seed(&a.rng, o->seed, 77);
    int n_all = c->n_x + c->n_par;
    nb_tensor **xs = nb_ctx_alloc(a.ctx, (size_t)(n_all ? n_all : 1) * sizeof *xs);
    bool found = false;
    for (int i = 0; xs && i < c->n_x; i++) {
        xs[i] = nb_copy(a.ctx, x[i], x[i]->dtype);
        if (xs[i] && x[i]->requires_grad) nb_requires_grad(xs[i]);
    }
    for (int k = 0; xs && k < c->n_par; k++) /* f reads them in place */
        xs[c->n_x + k] = nb_list_tensor(params, k);
    nb_tensor *y = xs && nb_ctx_ok(a.ctx) ? c->f(a.ctx, xs, c->user) : NULL;
    int top = y && y->node ? y->node->index : -1;
    for (nb_node *n = a.ctx->tape; n && !found && nb_ctx_ok(a.ctx); n = n->prev) {
        if (n->index > top) continue;
        int which = -1;
        double err = node_disagrees(&a, n, &which);
        if (err <= 0) continue;
        found = true;
        res->passed = false;
        res->blame_index = n->index;
        snprintf(res->blame_op, sizeof res->blame_op, "%s", n->name);
        res->blame_file = n->file;
        res->blame_line = n->line;
        res->blame_input = which;
        snprintf(res->message, sizeof res->message,
                 "gradgradcheck: the graph backward of op #%d '%s' (created at %s:%d) gives "
                 "its input %d another gradient than its backward (max |difference| %.3g): "
                 "its second-order rule is wrong",
                 n->index, n->name, n->file ? n->file : "?", n->line, which, err);
    }
    nb_status st = found ? NB_ERR_VALUE : NB_OK;
    if (!nb_ctx_ok(a.ctx) && !found) {
        res->passed = false;
        snprintf(res->message, sizeof res->message, "gradgradcheck: %.480s",
                 nb_ctx_error(a.ctx));
        st = nb_ctx_status(a.ctx);
    }
    nb_ctx_free(a.ctx);
    return st;
}

/* ---- the check ------------------------------------------------------------ */
static nb_status gradgradcheck_all(nb_gradcheck_fn f, void *user, const nb_tensor_list *params,
                                   int n_in, nb_tensor *const *in,
                                   const nb_gradcheck_opts *opts, nb_gradcheck_result *res) {
    memset(res, 0, sizeof *res);
    res->blame_index = -1, res->worst_input = -1;
    nb_gradcheck_opts o = opts ? *opts : nb_gradcheck_defaults();
    if (!f || n_in < 0 || (n_in > 0 && !in)) {
        snprintf(res->message, sizeof res->message, "gradgradcheck: f and the inputs are required");
        return NB_ERR_NULL;
    }
    /* a corrupt list or a NULL entry is refused before anything walks it */
    int n_par = params ? params->n : 0;
    if (params && !nb_list_valid(params)) {
        snprintf(res->message, sizeof res->message,
                 "gradgradcheck: the parameter list is corrupt (n = %d)", params->n);
        return NB_ERR_SIZE;
    }
    for (int k = 0; k < n_par; k++)
        if (!nb_list_tensor(params, k)) {
            const char *name = nb_list_name(params, k);
            snprintf(res->message, sizeof res->message,
                     "gradgradcheck: parameter %d ('%.64s') is NULL", k, name ? name : "");
            return NB_ERR_NULL;
        }
    gg c = {f, user, n_in, n_par};
    nb_ctx *ctx = nb_ctx_new(0);
    if (!ctx) return NB_ERR_MEMORY;
    /* the inputs as f64 copies, marked as nb_gradcheck would check them */
    nb_tensor **x = nb_ctx_alloc(ctx, (size_t)(n_in + n_par + 1) * sizeof *x);
    bool any_marked = false;
    for (int i = 0; i < n_in; i++) any_marked |= in[i] && in[i]->requires_grad;
    for (int k = 0; k < n_par; k++) any_marked |= nb_list_tensor(params, k)->requires_grad;
    for (int i = 0; x && i < n_in; i++) {
        if (!in[i]) break;
        bool flt = in[i]->dtype == NB_F32 || in[i]->dtype == NB_F64;
        x[i] = nb_copy(ctx, in[i], flt ? NB_F64 : in[i]->dtype);
        if (x[i] && flt && (!any_marked || in[i]->requires_grad)) nb_requires_grad(x[i]);
    }
    nb_status st = NB_OK;
    if (!x || nb_ctx_error(ctx)) {
        snprintf(res->message, sizeof res->message, "gradgradcheck: %.480s",
                 nb_ctx_error(ctx) ? nb_ctx_error(ctx) : "a NULL input");
        nb_ctx_free(ctx);
        return NB_ERR_NULL;
    }
    /* f's output, for v's shape; then the blame of the graph backwards */
    nb_tensor **xp = nb_ctx_alloc(ctx, (size_t)(n_in + n_par + 1) * sizeof *xp);
    for (int i = 0; xp && i < n_in; i++) xp[i] = x[i];
    for (int k = 0; xp && k < n_par; k++) xp[n_in + k] = nb_list_tensor(params, k);
    nb_tensor *y = xp ? f(ctx, xp, user) : NULL;
    if (!y || nb_ctx_error(ctx)) {
        snprintf(res->message, sizeof res->message, "gradgradcheck: the function failed: %.440s",
                 nb_ctx_error(ctx) ? nb_ctx_error(ctx) : "it returned NULL");
        nb_ctx_free(ctx);
        return NB_ERR_VALUE;
    }
    nb_status blamed = blame_graph(&c, x, params, &o, res);
    if (blamed) {
        nb_ctx_free(ctx);
        return blamed;
    }
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, o.seed, 5);
    x[n_in] = nb_requires_grad(nb_uniform(ctx, NB_F64, y->ndim, y->shape, -1.0, 1.0, &rng));
    if (!x[n_in]) st = NB_ERR_MEMORY;
    nb_ctx *inner = st ? NULL : nb_ctx_new(0); /* the inner check's outcome is ours to report */
    if (!st) st = inner ? nb_gradcheck_params(inner, G, &c, params, n_in + 1, x, &o, res)
                        : NB_ERR_MEMORY;
    nb_ctx_free(inner);
    if (res->message[0] && !strncmp(res->message, "gradcheck:", 10)) {
        char m[sizeof res->message];
        snprintf(m, sizeof m, "gradgradcheck:%.490s", res->message + 10);
        memcpy(res->message, m, sizeof m);
    }
    nb_ctx_free(ctx);
    return st;
}

nb_status nb_gradgradcheck_params(nb_ctx *ctx, nb_gradcheck_fn f, void *user,
                                  const nb_tensor_list *params, int n_in, nb_tensor *const *in,
                                  const nb_gradcheck_opts *opts, nb_gradcheck_result *res) {
    return nb_gc_on_ctx(ctx, "gradgradcheck", gradgradcheck_all, f, user, params, n_in, in, opts,
                        res);
}

nb_status nb_gradgradcheck(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                           nb_tensor *const *in, const nb_gradcheck_opts *opts,
                           nb_gradcheck_result *res) {
    return nb_gradgradcheck_params(ctx, f, user, NULL, n_in, in, opts, res);
}
