/* gradcheck/gradcheck.c - float64 finite-difference gradient checks, with the
 * semantics of torch.autograd.gradcheck: central differences, eps 1e-6,
 * pass when |analytic - numeric| <= atol + rtol * |numeric| everywhere.
 * Here: the options, the full and fast checks, the binding of listed
 * parameters and the entry points; blame.c names the op whose backward is
 * wrong (the method is in nabla/gradcheck.h), message.c writes the result's
 * message.
 *
 * Inputs are copied to float64 leaves in a context of their own; every
 * evaluation of f runs on a second context that is reset each time, so a
 * check of any size allocates only while the arenas grow. */
#include "gradcheck/gradcheck_internal.h"

#include <stdlib.h>

nb_gradcheck_opts nb_gradcheck_defaults(void) {
    nb_gradcheck_opts o = {1e-6, 1e-5, 1e-3, false, 4, 0x5eed, false, false};
    return o;
}

static nb_status fail(gc *g, nb_status s, const char *what) {
    snprintf(g->res->message, sizeof g->res->message, "gradcheck: %.490s", what);
    g->res->passed = false;
    return s;
}

/* Shared with blame.c (gradcheck_internal.h). */
nb_tensor *nb_gc_eval(gc *g, bool with_grad) {
    nb_ctx_reset(g->work);
    /* The numeric points record too, as PyTorch's gradcheck does, so that f
     * may take gradients itself (nb_grad: a gradient penalty, a MAML inner
     * step); only blame's evaluations, which count the nodes they see, run
     * unrecorded when they ask. */
    nb_set_grad_enabled(g->work, with_grad || !g->work->probe);
    nb_tensor *y = g->f(g->work, g->x, g->user);
    if (!y || nb_ctx_error(g->work)) return NULL;
    if (y->dtype != NB_F64) {
        nb_ctx_fail(g->work, NB_ERR_DTYPE, "the function returned %s, expected f64 (build it "
                    "from the inputs it is given)", nb_dtype_name(y->dtype));
        return NULL;
    }
    return y;
}

static nb_status eval_failed(gc *g) {
    char msg[NB_ERRMSG + 64];
    const char *e = nb_ctx_error(g->work);
    snprintf(msg, sizeof msg, "the function failed: %.440s", e ? e : "it returned NULL");
    return fail(g, e ? nb_ctx_status(g->work) : NB_ERR_NULL, msg);
}

/* Folds one entry into the result; true when it became the worst. */
static bool compare(gc *g, double a, double n, int input, size_t index, size_t output,
                    const nb_gradcheck_opts *o, double *worst_excess) {
    double err = fabs(a - n);
    double excess = err - (o->atol + o->rtol * fabs(n));
    if (!(err <= o->atol + o->rtol * fabs(n))) excess = isnan(excess) ? INFINITY : excess;
    if (err > g->res->max_abs_err || isnan(err)) g->res->max_abs_err = isnan(err) ? INFINITY : err;
    if (excess > *worst_excess) {
        *worst_excess = excess;
        g->res->worst_input = input;
        g->res->worst_index = index;
        g->res->worst_output = output;
        g->res->analytic = a;
        g->res->numeric = n;
        return true;
    }
    return false;
}

/* Full Jacobian: one backward per output element, two evaluations per
 * input element. */
static nb_status check_full(gc *g, const nb_gradcheck_opts *o, double *worst) {
    nb_tensor *y = nb_gc_eval(g, true);
    if (!y) return eval_failed(g);
    size_t m = y->numel;
    /* analytic[j][k] for each checked input, gathered per output element */
    size_t total = 0;
    for (int i = 0; i < g->n_in; i++)
        if (g->check[i]) total += g->x[i]->numel;
    double *ana = calloc(m * (total ? total : 1), sizeof *ana);
    double *ym = malloc(m * sizeof *ym), *yp = malloc(m * sizeof *yp);
    if (!ana || !ym || !yp) {
        free(ana), free(ym), free(yp);
        return fail(g, NB_ERR_MEMORY, "out of memory");
    }
    nb_status st = NB_OK;
    for (size_t j = 0; j < m && st == NB_OK; j++) {
        y = nb_gc_eval(g, true);
        nb_tensor *seed = y ? nb_zeros(g->work, NB_F64, y->ndim, y->shape) : NULL;
        if (!seed) {
            st = eval_failed(g);
            break;
        }
        ((double *)seed->data)[j] = 1.0;
        for (int i = 0; i < g->n_in; i++) nb_zero_grad(g->x[i]);
        if (!y->requires_grad) {
            /* f does not depend on any checked input: the analytic gradient
             * is zero, which the numeric side must confirm. */
        } else if (nb_backward(g->work, y, seed) != NB_OK) {
            st = eval_failed(g);
            break;
        }
        size_t col = 0;
        for (int i = 0; i < g->n_in; i++) {
            if (!g->check[i]) continue;
            for (size_t k = 0; k < g->x[i]->numel; k++)
                ana[j * total + col + k] = nb_grad_get(g->x[i], k);
            col += g->x[i]->numel;
        }
    }
    size_t col = 0;
    for (int i = 0; i < g->n_in && st == NB_OK; i++) {
        if (!g->check[i]) continue;
        double *xd = g->x[i]->data;
        for (size_t k = 0; k < g->x[i]->numel && st == NB_OK; k++) {
            double keep = xd[k];
            xd[k] = keep + o->eps;
            nb_tensor *y1 = nb_gc_eval(g, false);
            if (y1) memcpy(yp, y1->data, m * sizeof *yp);
            xd[k] = keep - o->eps;
            nb_tensor *y2 = y1 ? nb_gc_eval(g, false) : NULL;
            if (y2) memcpy(ym, y2->data, m * sizeof *ym);
            xd[k] = keep;
            if (!y1 || !y2) {
                st = eval_failed(g);
                break;
            }
            for (size_t j = 0; j < m; j++)
                compare(g, ana[j * total + col + k], (yp[j] - ym[j]) / (2 * o->eps), i, k, j,
                        o, worst);
        }
        col += g->x[i]->numel;
    }
    free(ana), free(ym), free(yp);
    return st;
}

/* Copies fast mode's worst direction (u per input, v) for blame. */
static bool keep_direction(gc *g, nb_tensor *const *u, int n, const double *v, size_t m) {
    if (!g->worst_u) g->worst_u = calloc((size_t)(g->n_in ? g->n_in : 1), sizeof *g->worst_u);
    free(g->worst_v);
    g->worst_v = malloc(m * sizeof *g->worst_v);
    if (!g->worst_u || !g->worst_v) return false;
    memcpy(g->worst_v, v, m * sizeof *g->worst_v);
    for (int i = 0; i < n; i++) {
        if (!u[i]) continue;
        if (!g->worst_u[i]) g->worst_u[i] = malloc(u[i]->numel * sizeof(double));
        if (!g->worst_u[i]) return false;
        memcpy(g->worst_u[i], u[i]->data, u[i]->numel * sizeof(double));
    }
    return true;
}

/* Fast mode, one direction: v^T J u against its central difference. Every
 * evaluation resets g->work, so the output's size is kept in m, never read
 * from a tensor of an earlier evaluation. */
static nb_status fast_direction(gc *g, const nb_gradcheck_opts *o, nb_tensor *const *u, int d,
                                nb_pcg32 *rng, double *worst) {
    int n = g->n_in;
    nb_tensor *y = nb_gc_eval(g, true);
    if (!y) return eval_failed(g);
    size_t m = y->numel;
    nb_tensor *v = nb_normal(g->work, NB_F64, y->ndim, y->shape, 0.0, 1.0, rng);
    if (!v) return eval_failed(g);
    double *vd = malloc(m * sizeof *vd);
    if (!vd) return fail(g, NB_ERR_MEMORY, "out of memory");
    memcpy(vd, v->data, m * sizeof *vd);
    for (int i = 0; i < n; i++) nb_zero_grad(g->x[i]);
    if (y->requires_grad && nb_backward(g->work, y, v) != NB_OK) {
        free(vd);
        return eval_failed(g);
    }
    double analytic = 0.0;
    for (int i = 0; i < n; i++)
        if (u[i])
            for (size_t k = 0; k < u[i]->numel; k++)
                analytic += nb_grad_get(g->x[i], k) * ((double *)u[i]->data)[k];
    double f[2];
    for (int s = 0; s < 2; s++) {
        double sign = s ? -1.0 : 1.0;
        for (int i = 0; i < n; i++)
            if (u[i])
                for (size_t k = 0; k < u[i]->numel; k++)
                    ((double *)g->x[i]->data)[k] += sign * o->eps * ((double *)u[i]->data)[k];
        nb_tensor *yy = nb_gc_eval(g, false);
        f[s] = 0.0;
        if (yy && yy->numel == m)
            for (size_t j = 0; j < m; j++) f[s] += ((double *)yy->data)[j] * vd[j];
        for (int i = 0; i < n; i++)
            if (u[i])
                for (size_t k = 0; k < u[i]->numel; k++)
                    ((double *)g->x[i]->data)[k] -= sign * o->eps * ((double *)u[i]->data)[k];
        if (!yy || yy->numel != m) {
            free(vd);
            return yy ? fail(g, NB_ERR_STATE, "the function's output changed size between "
                                              "evaluations")
                      : eval_failed(g);
        }
    }
    bool became_worst =
        compare(g, analytic, (f[0] - f[1]) / (2 * o->eps), -1, (size_t)d, 0, o, worst);
    bool kept = !became_worst || keep_direction(g, u, n, vd, m);
    free(vd);
    return kept ? NB_OK : fail(g, NB_ERR_MEMORY, "out of memory");
}

/* Fast mode: v^T J u for random unit-scale u (inputs) and v (output). */
static nb_status check_fast(gc *g, const nb_gradcheck_opts *o, double *worst) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, o->seed, 54);
    int dirs = o->n_dirs > 0 ? o->n_dirs : 4;
    int n = g->n_in;
    nb_tensor **u = calloc((size_t)(n ? n : 1), sizeof *u);
    if (!u) return fail(g, NB_ERR_MEMORY, "out of memory");
    nb_status st = NB_OK;
    for (int d = 0; d < dirs && st == NB_OK; d++) {
        /* directions live on the leaves context, beside the inputs */
        for (int i = 0; i < n; i++)
            u[i] = g->check[i] ? nb_normal(g->leaves, NB_F64, g->x[i]->ndim, g->x[i]->shape,
                                           0.0, 1.0, &rng)
                               : NULL;
        if (nb_ctx_error(g->leaves)) {
            st = fail(g, NB_ERR_MEMORY, nb_ctx_error(g->leaves));
            break;
        }
        st = fast_direction(g, o, u, d, &rng, worst);
    }
    free(u);
    return st;
}

/* Makes g->x[i] a float64 leaf for every input and listed parameter. Inputs
 * are copied; a parameter is rebound in place (its struct saved in
 * g->saved and restored by unbind) so that f, reading it where the module
 * keeps it, sees the float64 copy and backward fills that copy's grad. */
static nb_status bind(gc *g, nb_tensor *const *in) {
    int n_par = g->n_in - g->n_user;
    bool any_marked = false;
    for (int i = 0; i < g->n_user; i++) any_marked |= in[i]->requires_grad;
    for (int k = 0; k < n_par; k++) any_marked |= nb_list_tensor(g->params, k)->requires_grad;
    for (int i = 0; i < g->n_in; i++) {
        nb_tensor *src = i < g->n_user ? in[i] : nb_list_tensor(g->params, i - g->n_user);
        bool flt = src->dtype == NB_F32 || src->dtype == NB_F64;
        nb_tensor *c = nb_copy(g->leaves, src, flt ? NB_F64 : src->dtype);
        g->check[i] = flt && (any_marked ? src->requires_grad : true);
        if (c && g->check[i]) nb_requires_grad(c);
        if (nb_ctx_error(g->leaves)) return fail(g, NB_ERR_MEMORY, nb_ctx_error(g->leaves));
        g->x[i] = c;
        if (i < g->n_user) continue;
        nb_tensor *p = nb_list_tensor(g->params, i - g->n_user);
        g->saved[i - g->n_user] = *p;
        c->name = p->name;
        *p = *c;
        g->x[i] = p;
        g->n_bound++;
    }
    return NB_OK;
}

/* Gives the parameters back their own dtype, values, grad and flags. */
static void unbind(gc *g) {
    for (int k = g->n_bound - 1; k >= 0; k--) *nb_list_tensor(g->params, k) = g->saved[k];
    g->n_bound = 0;
}

static nb_status gradcheck_all(nb_gradcheck_fn f, void *user, const nb_tensor_list *params,
                               int n_in, nb_tensor *const *in, const nb_gradcheck_opts *opts,
                               nb_gradcheck_result *res) {
    nb_gradcheck_result local;
    if (!res) res = &local;
    memset(res, 0, sizeof *res);
    res->worst_input = -1;
    res->blame_index = -1;
    res->blame_input = -1;
    int n_par = params ? params->n : 0;
    gc g = {.f = f, .user = user, .n_in = n_in, .n_user = n_in, .params = params, .res = res};
    if (!f || n_in < 0 || (n_in > 0 && !in)) return fail(&g, NB_ERR_NULL, "f and inputs are required");
    if (params && !nb_list_valid(params))
        return fail(&g, NB_ERR_SIZE, "the parameter list is corrupt");
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return fail(&g, NB_ERR_NULL, "an input is NULL");
    for (int k = 0; k < n_par; k++) {
        char msg[128];
        snprintf(msg, sizeof msg, "parameter %d ('%.64s') is NULL", k,
                 nb_list_name(params, k) ? nb_list_name(params, k) : "");
        if (!nb_list_tensor(params, k)) return fail(&g, NB_ERR_NULL, msg);
    }
    nb_gradcheck_opts o = opts ? *opts : nb_gradcheck_defaults();
    char why[160];
    if (!(o.eps > 0) || !isfinite(o.eps) || !(o.atol >= 0) || !(o.rtol >= 0)) {
        snprintf(why, sizeof why, "options eps %g, atol %g, rtol %g: eps must be finite and > 0, "
                 "the tolerances >= 0 (none NaN)", o.eps, o.atol, o.rtol);
        return fail(&g, NB_ERR_VALUE, why);
    }

    g.n_in = n_in + n_par;
    size_t slots = (size_t)(g.n_in ? g.n_in : 1);
    g.leaves = nb_ctx_new(0);
    g.work = nb_ctx_new(0);
    g.x = calloc(slots, sizeof *g.x);
    g.check = calloc(slots, sizeof *g.check);
    g.saved = calloc(slots, sizeof *g.saved);
    nb_status st = NB_OK;
    if (!g.leaves || !g.work || !g.x || !g.check || !g.saved)
        st = fail(&g, NB_ERR_MEMORY, "out of memory");
    if (st == NB_OK) st = bind(&g, in);
    double worst = -INFINITY;
    if (st == NB_OK) st = o.fast ? check_fast(&g, &o, &worst) : check_full(&g, &o, &worst);
    if (st == NB_OK) {
        res->passed = res->backward_passed = worst <= 0.0;
        res->forward_passed = true;
        res->forward_blame_index = -1;
        bool y_untracked = false;
        nb_status bst = NB_OK;
        if (!res->passed || o.blame) bst = nb_gc_blame(&g, &o, !res->passed, &y_untracked);
        nb_status fst = o.check_forward_ad ? nb_gc_forward(&g, &o) : NB_OK;
        if (fst == NB_ERR_MEMORY) {
            st = fail(&g, fst, "out of memory");
        } else if (fst == NB_ERR_STATE) {
            st = fail(&g, fst, "forward mode: the function's output changed size between "
                               "evaluations");
        } else if (fst) {
            st = eval_failed(&g);
        } else {
            res->passed = res->backward_passed && res->forward_passed;
            nb_gc_write_message(&g, &o, y_untracked, bst);
            st = res->passed ? NB_OK : NB_ERR_VALUE;
        }
    }
    unbind(&g);
    nb_ctx_free(g.leaves);
    nb_ctx_free(g.work);
    for (int i = 0; g.worst_u && i < g.n_in; i++) free(g.worst_u[i]);
    free(g.worst_u);
    free(g.worst_v);
    free(g.x);
    free(g.check);
    free(g.saved);
    return st;
}

nb_status nb_gradcheck(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                       nb_tensor *const *in, const nb_gradcheck_opts *opts,
                       nb_gradcheck_result *res) {
    return nb_gradcheck_params(ctx, f, user, NULL, n_in, in, opts, res);
}

nb_status nb_gc_on_ctx(nb_ctx *ctx, const char *who, nb_gc_all_fn all, nb_gradcheck_fn f,
                       void *user, const nb_tensor_list *params, int n_in, nb_tensor *const *in,
                       const nb_gradcheck_opts *opts, nb_gradcheck_result *res) {
    nb_gradcheck_result local;
    if (!res) res = &local;
    if (!nb_ctx_ok(ctx)) {
        memset(res, 0, sizeof *res);
        res->worst_input = res->blame_index = res->blame_input = -1;
        snprintf(res->message, sizeof res->message, "%s: %s", who,
                 ctx ? "the context already holds an error" : "NULL context");
        return nb_ctx_status(ctx);
    }
    nb_status st = all(f, user, params, n_in, in, opts, res);
    if (st) nb_ctx_fail(ctx, st, "%s", res->message);
    return st;
}

nb_status nb_gradcheck_params(nb_ctx *ctx, nb_gradcheck_fn f, void *user,
                              const nb_tensor_list *params, int n_in, nb_tensor *const *in,
                              const nb_gradcheck_opts *opts, nb_gradcheck_result *res) {
    return nb_gc_on_ctx(ctx, "gradcheck", gradcheck_all, f, user, params, n_in, in, opts, res);
}
