/* gradcheck.c - float64 finite-difference gradient checks, with the
 * semantics of torch.autograd.gradcheck: central differences, eps 1e-6,
 * pass when |analytic - numeric| <= atol + rtol * |numeric| everywhere.
 *
 * Inputs are copied to float64 leaves in a context of their own; every
 * evaluation of f runs on a second context that is reset each time, so a
 * check of any size allocates only while the arenas grow. */
#include "nb_internal.h"

#include <stdlib.h>

nb_gradcheck_opts nb_gradcheck_defaults(void) {
    nb_gradcheck_opts o = {1e-6, 1e-5, 1e-3, false, 4, 0x5eed};
    return o;
}

typedef struct gc {
    nb_gradcheck_fn f;
    void *user;
    int n_in;
    nb_tensor **x;   /* float64 copies (leaves) of the inputs */
    bool *check;     /* which inputs are differentiated */
    nb_ctx *leaves;  /* owns x */
    nb_ctx *work;    /* reset for every evaluation */
    nb_gradcheck_result *res;
} gc;

static nb_status fail(gc *g, nb_status s, const char *what) {
    snprintf(g->res->message, sizeof g->res->message, "gradcheck: %.490s", what);
    g->res->passed = false;
    return s;
}

/* Evaluates f on the current x; returns the output (on g->work) or NULL. */
static nb_tensor *eval(gc *g, bool with_grad) {
    nb_ctx_reset(g->work);
    nb_set_grad_enabled(g->work, with_grad);
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

static void compare(gc *g, double a, double n, int input, size_t index, size_t output,
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
    }
}

/* Full Jacobian: one backward per output element, two evaluations per
 * input element. */
static nb_status check_full(gc *g, const nb_gradcheck_opts *o, double *worst) {
    nb_tensor *y = eval(g, true);
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
        y = eval(g, true);
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
            nb_tensor *y1 = eval(g, false);
            if (y1) memcpy(yp, y1->data, m * sizeof *yp);
            xd[k] = keep - o->eps;
            nb_tensor *y2 = y1 ? eval(g, false) : NULL;
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

/* Fast mode: v^T J u for random unit-scale u (inputs) and v (output). */
static nb_status check_fast(gc *g, const nb_gradcheck_opts *o, double *worst) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, o->seed, 54);
    int dirs = o->n_dirs > 0 ? o->n_dirs : 4;
    for (int d = 0; d < dirs; d++) {
        /* directions live on the leaves context, beside the inputs */
        nb_tensor *u[64];
        int n = g->n_in < 64 ? g->n_in : 64;
        for (int i = 0; i < n; i++)
            u[i] = g->check[i] ? nb_normal(g->leaves, NB_F64, g->x[i]->ndim, g->x[i]->shape,
                                           0.0, 1.0, &rng)
                               : NULL;
        if (nb_ctx_error(g->leaves)) return fail(g, NB_ERR_MEMORY, nb_ctx_error(g->leaves));
        nb_tensor *y = eval(g, true);
        if (!y) return eval_failed(g);
        nb_tensor *v = nb_normal(g->work, NB_F64, y->ndim, y->shape, 0.0, 1.0, &rng);
        if (!v) return eval_failed(g);
        double *vd = malloc(y->numel * sizeof *vd);
        if (!vd) return fail(g, NB_ERR_MEMORY, "out of memory");
        memcpy(vd, v->data, y->numel * sizeof *vd);
        for (int i = 0; i < g->n_in; i++) nb_zero_grad(g->x[i]);
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
            nb_tensor *yy = eval(g, false);
            f[s] = 0.0;
            if (yy)
                for (size_t j = 0; j < yy->numel; j++) f[s] += ((double *)yy->data)[j] * vd[j];
            for (int i = 0; i < n; i++)
                if (u[i])
                    for (size_t k = 0; k < u[i]->numel; k++)
                        ((double *)g->x[i]->data)[k] -= sign * o->eps * ((double *)u[i]->data)[k];
            if (!yy) {
                free(vd);
                return eval_failed(g);
            }
        }
        free(vd);
        compare(g, analytic, (f[0] - f[1]) / (2 * o->eps), -1, (size_t)d, 0, o, worst);
    }
    return NB_OK;
}

nb_status nb_gradcheck(nb_gradcheck_fn f, void *user, int n_in, nb_tensor *const *in,
                       const nb_gradcheck_opts *opts, nb_gradcheck_result *res) {
    nb_gradcheck_result local;
    if (!res) res = &local;
    memset(res, 0, sizeof *res);
    res->worst_input = -1;
    gc g = {f, user, n_in, NULL, NULL, NULL, NULL, res};
    if (!f || n_in < 0 || (n_in > 0 && !in)) return fail(&g, NB_ERR_NULL, "f and inputs are required");
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return fail(&g, NB_ERR_NULL, "an input is NULL");
    nb_gradcheck_opts o = opts ? *opts : nb_gradcheck_defaults();

    g.leaves = nb_ctx_new(0);
    g.work = nb_ctx_new(0);
    g.x = calloc((size_t)(n_in ? n_in : 1), sizeof *g.x);
    g.check = calloc((size_t)(n_in ? n_in : 1), sizeof *g.check);
    nb_status st = NB_OK;
    if (!g.leaves || !g.work || !g.x || !g.check) st = fail(&g, NB_ERR_MEMORY, "out of memory");

    /* Check the inputs marked requires_grad; if none is, every float input. */
    bool any_marked = false;
    for (int i = 0; i < n_in; i++) any_marked |= in[i]->requires_grad;
    for (int i = 0; i < n_in && st == NB_OK; i++) {
        bool flt = in[i]->dtype == NB_F32 || in[i]->dtype == NB_F64;
        g.x[i] = nb_copy(g.leaves, in[i], flt ? NB_F64 : in[i]->dtype);
        g.check[i] = flt && (any_marked ? in[i]->requires_grad : true);
        if (g.check[i]) nb_requires_grad(g.x[i]);
        if (nb_ctx_error(g.leaves)) st = fail(&g, NB_ERR_MEMORY, nb_ctx_error(g.leaves));
    }
    double worst = -INFINITY;
    if (st == NB_OK) st = o.fast ? check_fast(&g, &o, &worst) : check_full(&g, &o, &worst);
    if (st == NB_OK) {
        res->passed = worst <= 0.0;
        if (res->passed)
            snprintf(res->message, sizeof res->message, "gradcheck: passed, max |error| %.3g",
                     res->max_abs_err);
        else if (o.fast)
            snprintf(res->message, sizeof res->message,
                     "gradcheck: v^T J u along direction %zu: analytic %.10g vs numeric %.10g "
                     "(|error| %.3g > atol %g + rtol %g * |numeric|)",
                     res->worst_index, res->analytic, res->numeric,
                     fabs(res->analytic - res->numeric), o.atol, o.rtol);
        else
            snprintf(res->message, sizeof res->message,
                     "gradcheck: d out[%zu] / d input %d [%zu]: analytic %.10g vs numeric %.10g "
                     "(|error| %.3g > atol %g + rtol %g * |numeric|)",
                     res->worst_output, res->worst_input + 1, res->worst_index, res->analytic,
                     res->numeric, fabs(res->analytic - res->numeric), o.atol, o.rtol);
        st = res->passed ? NB_OK : NB_ERR_VALUE;
    }
    nb_ctx_free(g.leaves);
    nb_ctx_free(g.work);
    free(g.x);
    free(g.check);
    return st;
}
