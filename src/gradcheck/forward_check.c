/* gradcheck/forward_check.c - gradcheck's check of forward mode
 * (check_forward_ad): the JVP J u from one dual forward of f, each checked
 * input carrying its part of u as a tangent, against the central difference
 * (f(x + eps u) - f(x - eps u)) / 2 eps, element by element of the output.
 * Full mode takes u through every basis vector (one column of J each), fast
 * mode through its random directions.
 *
 * When a JVP disagrees, the op to blame is found along the worst u: the
 * tangent every op's rule gave its output is compared with the difference
 * of that output between f at x + eps u and at x - eps u. The first op in
 * f's order that disagrees is the one whose rule is wrong, since the
 * tangents reaching it were right. Ops are matched across the three calls
 * by their order, counting only f's own ops (not those the rules record). */
#include "gradcheck/gradcheck_internal.h"

#include <stdlib.h>

/* Watches f's own ops (not the rules'), keeping each node and, when `copy`,
 * its output's values. */
typedef struct fwd_watch {
    nb_probe probe;
    bool copy;
    int n, cap;
    nb_node **nodes; /* valid until the work context is reset */
    int *ops;        /* what stays: each op and its name and size */
    const char **names;
    size_t *numel;
    double **vals;
    bool failed; /* out of memory */
} fwd_watch;

static void watch_recorded(nb_probe *p, nb_node *n) {
    fwd_watch *w = (fwd_watch *)p;
    if (n->out->owner->fwd_in_rule > 0 || w->failed) return;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        nb_node **nn = realloc(w->nodes, (size_t)cap * sizeof *nn);
        if (nn) w->nodes = nn;
        int *no = nn ? realloc(w->ops, (size_t)cap * sizeof *no) : NULL;
        if (no) w->ops = no;
        const char **nm = no ? realloc(w->names, (size_t)cap * sizeof *nm) : NULL;
        if (nm) w->names = nm;
        size_t *ne = nm ? realloc(w->numel, (size_t)cap * sizeof *ne) : NULL;
        if (ne) w->numel = ne;
        double **nv = ne ? realloc(w->vals, (size_t)cap * sizeof *nv) : NULL;
        if (!nv) {
            w->failed = true;
            return;
        }
        w->vals = nv, w->cap = cap;
    }
    double *v = NULL;
    if (w->copy) {
        v = malloc((n->out->numel ? n->out->numel : 1) * sizeof *v);
        if (!v) {
            w->failed = true;
            return;
        }
        for (size_t k = 0; k < n->out->numel; k++) v[k] = nb_get(n->out, k);
    }
    w->nodes[w->n] = n;
    w->ops[w->n] = n->op;
    w->names[w->n] = n->name;
    w->numel[w->n] = n->out->numel;
    w->vals[w->n++] = v;
}

static void watch_backward(nb_probe *p, nb_node *n, bool done) {
    NB_UNUSED(p), NB_UNUSED(n), NB_UNUSED(done);
}

static void watch_free(fwd_watch *w) {
    for (int i = 0; i < w->n; i++) free(w->vals[i]);
    free(w->nodes), free(w->ops), free(w->names), free(w->numel), free(w->vals);
    *w = (fwd_watch){0};
}

/* f on the current x, the checked inputs carrying u as tangents (u NULL:
 * none); the output, its tangent into *tangent (NULL: zero), or NULL when
 * f failed. */
static nb_tensor *eval_dual(gc *g, nb_tensor *const *u, nb_tensor **tangent) {
    nb_ctx_reset(g->work);
    nb_set_grad_enabled(g->work, true);
    for (int i = 0; i < g->n_in; i++) g->x[i]->tangent = u ? u[i] : NULL;
    nb_tensor *y = g->f(g->work, g->x, g->user);
    nb_tensor *t = y ? nb_tangent(y) : NULL;
    for (int i = 0; i < g->n_in; i++) g->x[i]->tangent = NULL;
    if (!y || nb_ctx_error(g->work)) return NULL;
    if (y->dtype != NB_F64) {
        nb_ctx_fail(g->work, NB_ERR_DTYPE, "the function returned %s, expected f64",
                    nb_dtype_name(y->dtype));
        return NULL;
    }
    if (tangent) *tangent = t;
    return y;
}

/* x += s u over the checked inputs */
static void move(gc *g, nb_tensor *const *u, double s) {
    for (int i = 0; i < g->n_in; i++)
        if (u[i])
            for (size_t k = 0; k < u[i]->numel; k++)
                ((double *)g->x[i]->data)[k] += s * ((const double *)u[i]->data)[k];
}

/* Finds the op whose rule is wrong along u (see the top); NB_ERR_STATE
 * when f's three calls recorded different ops. */
static nb_status blame(gc *g, const nb_gradcheck_opts *o, nb_tensor *const *u) {
    fwd_watch w[3];
    for (int s = 0; s < 3; s++)
        w[s] = (fwd_watch){.probe = {watch_recorded, watch_backward}, .copy = s > 0};
    nb_status st = NB_OK;
    for (int s = 0; s < 3 && st == NB_OK; s++) {
        double step = s == 1 ? o->eps : s == 2 ? -o->eps : 0.0;
        if (s) move(g, u, step);
        g->work->probe = &w[s].probe;
        nb_tensor *y = eval_dual(g, s ? NULL : u, NULL);
        g->work->probe = NULL;
        if (s) move(g, u, -step);
        if (!y) st = nb_ctx_status(g->work) ? nb_ctx_status(g->work) : NB_ERR_NULL;
        if (w[s].failed) st = NB_ERR_MEMORY;
        if (s == 0 && st == NB_OK) { /* the tangents, before the next call resets */
            w[0].copy = true;
            for (int j = 0; j < w[0].n && st == NB_OK; j++) {
                nb_tensor *t = w[0].nodes[j]->out->tangent;
                size_t m = w[0].nodes[j]->out->numel;
                if (!(w[0].vals[j] = calloc(m ? m : 1, sizeof(double)))) st = NB_ERR_MEMORY;
                for (size_t k = 0; t && st == NB_OK && k < m; k++) w[0].vals[j][k] = nb_get(t, k);
            }
        }
    }
    if (st == NB_OK && (w[1].n != w[0].n || w[2].n != w[0].n)) st = NB_ERR_STATE;
    for (int j = 0; j < w[0].n && st == NB_OK; j++) {
        size_t m = w[0].numel[j];
        if (w[1].ops[j] != w[0].ops[j] || w[2].ops[j] != w[0].ops[j] || w[1].numel[j] != m ||
            w[2].numel[j] != m) {
            st = NB_ERR_STATE;
            break;
        }
        bool bad = false;
        for (size_t k = 0; k < m && !bad; k++) {
            double num = (w[1].vals[j][k] - w[2].vals[j][k]) / (2 * o->eps);
            bad = !(fabs(w[0].vals[j][k] - num) <= o->atol + o->rtol * fabs(num));
        }
        if (bad) {
            g->res->forward_blame_index = j;
            snprintf(g->res->forward_blame_op, sizeof g->res->forward_blame_op, "%s",
                     w[0].names[j]);
            break;
        }
    }
    for (int s = 0; s < 3; s++) watch_free(&w[s]);
    return st;
}

/* One direction u: J u by forward mode against differences, folded into
 * the forward fields of the result; *worse when it held the worst entry. */
static nb_status direction(gc *g, const nb_gradcheck_opts *o, nb_tensor *const *u,
                           double *worst, bool *worse) {
    *worse = false;
    nb_tensor *t = NULL;
    nb_tensor *y = eval_dual(g, u, &t);
    if (!y) return nb_ctx_status(g->work) ? nb_ctx_status(g->work) : NB_ERR_NULL;
    size_t m = y->numel;
    double *jv = calloc(m ? 3 * m : 1, sizeof *jv), *yp = jv + m, *ym = yp + m;
    if (!jv) return NB_ERR_MEMORY;
    for (size_t j = 0; t && j < m; j++) jv[j] = nb_get(t, j);
    /* each output copied before x moves again: it may be a view of x */
    move(g, u, o->eps);
    nb_tensor *y1 = eval_dual(g, NULL, NULL);
    if (y1 && y1->numel == m) memcpy(yp, y1->data, m * sizeof *yp);
    move(g, u, -2 * o->eps);
    nb_tensor *y2 = y1 ? eval_dual(g, NULL, NULL) : NULL;
    if (y2 && y2->numel == m) memcpy(ym, y2->data, m * sizeof *ym);
    move(g, u, o->eps);
    if (!y1 || !y2 || y1->numel != m || y2->numel != m) {
        free(jv);
        return y1 && y2 ? NB_ERR_STATE : nb_ctx_status(g->work) ? nb_ctx_status(g->work) : NB_ERR_NULL;
    }
    nb_gradcheck_result *r = g->res;
    for (size_t j = 0; j < m; j++) {
        double num = (yp[j] - ym[j]) / (2 * o->eps);
        double err = fabs(jv[j] - num), excess = err - (o->atol + o->rtol * fabs(num));
        if (isnan(err)) err = excess = INFINITY;
        if (err > r->forward_max_abs_err) r->forward_max_abs_err = err;
        if (excess > *worst) {
            *worst = excess, *worse = true;
            r->worst_output = j, r->analytic = jv[j], r->numeric = num;
        }
    }
    free(jv);
    return NB_OK;
}

nb_status nb_gc_forward(gc *g, const nb_gradcheck_opts *o) {
    nb_gradcheck_result *r = g->res;
    nb_gradcheck_result keep = *r; /* the reverse check's worst entry, put back after */
    double worst = -INFINITY;
    int n = g->n_in;
    nb_tensor **u = calloc((size_t)(n ? n : 1), sizeof *u);
    nb_tensor **wu = calloc((size_t)(n ? n : 1), sizeof *wu); /* the worst direction */
    if (!u || !wu) {
        free(u), free(wu);
        return NB_ERR_MEMORY;
    }
    nb_status st = NB_OK;
    int worst_input = -1;
    size_t worst_index = 0;
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, o->seed, 55);
    if (o->fast) {
        for (int d = 0; d < (o->n_dirs > 0 ? o->n_dirs : 4) && st == NB_OK; d++) {
            for (int i = 0; i < n; i++)
                u[i] = g->check[i] ? nb_normal(g->leaves, NB_F64, g->x[i]->ndim,
                                               g->x[i]->shape, 0.0, 1.0, &rng)
                                   : NULL;
            bool worse;
            if (nb_ctx_error(g->leaves)) st = NB_ERR_MEMORY;
            if (st == NB_OK) st = direction(g, o, u, &worst, &worse);
            if (st == NB_OK && worse) {
                memcpy(wu, u, (size_t)n * sizeof *wu);
                worst_input = -1, worst_index = (size_t)d;
            }
        }
    } else {
        for (int i = 0; i < n && st == NB_OK; i++) {
            if (!g->check[i]) continue;
            nb_tensor *e = nb_zeros(g->leaves, NB_F64, g->x[i]->ndim, g->x[i]->shape);
            if (!e) st = NB_ERR_MEMORY;
            for (size_t k = 0; st == NB_OK && k < g->x[i]->numel; k++) {
                for (int j = 0; j < n; j++) u[j] = j == i ? e : NULL;
                ((double *)e->data)[k] = 1.0;
                bool worse;
                st = direction(g, o, u, &worst, &worse);
                if (st == NB_OK && worse) {
                    for (int j = 0; j < n; j++) wu[j] = NULL;
                    wu[i] = nb_copy(g->leaves, e, NB_F64);
                    worst_input = i, worst_index = k;
                }
                ((double *)e->data)[k] = 0.0;
            }
        }
    }
    r->forward_passed = st == NB_OK && worst <= 0.0;
    r->forward_blame_index = -1;
    double a = r->analytic, num = r->numeric;
    size_t out = r->worst_output;
    if (st == NB_OK && !r->forward_passed) {
        nb_status bst = blame(g, o, wu);
        NB_UNUSED(bst); /* no op blamed: the message says so */
    }
    int bi = r->forward_blame_index;
    char bop[64];
    memcpy(bop, r->forward_blame_op, sizeof bop);
    double fmax = r->forward_max_abs_err;
    bool fpass = r->forward_passed;
    if (fpass || !keep.passed) {
        *r = keep; /* the reverse check's entry stays the one reported */
    } else {
        r->worst_input = worst_input, r->worst_index = worst_index;
        r->worst_output = out, r->analytic = a, r->numeric = num;
    }
    r->forward_passed = fpass, r->forward_max_abs_err = fmax;
    r->forward_blame_index = bi;
    memcpy(r->forward_blame_op, bop, sizeof bop);
    free(u), free(wu);
    return st;
}
