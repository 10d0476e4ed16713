/* check/gradcheck.c - float64 finite-difference gradient checks, with the
 * semantics of torch.autograd.gradcheck: central differences, eps 1e-6,
 * pass when |analytic - numeric| <= atol + rtol * |numeric| everywhere;
 * and blame, which names the op whose backward is wrong (the method is in
 * nabla/gradcheck.h).
 *
 * Inputs are copied to float64 leaves in a context of their own; every
 * evaluation of f runs on a second context that is reset each time, so a
 * check of any size allocates only while the arenas grow. */
#include "tape/tape_internal.h"

#include <limits.h>
#include <stdlib.h>

nb_gradcheck_opts nb_gradcheck_defaults(void) {
    nb_gradcheck_opts o = {1e-6, 1e-5, 1e-3, false, 4, 0x5eed, false};
    return o;
}

typedef struct gc {
    nb_gradcheck_fn f;
    void *user;
    int n_in;        /* inputs, then listed parameters */
    int n_user;      /* how many of them are f's inputs (in[]) */
    const nb_tensor_list *params; /* the listed parameters, or NULL */
    nb_tensor *saved; /* each parameter's own struct while it is rebound */
    int n_bound;      /* how many parameters are rebound */
    nb_tensor **x;   /* float64 copies (leaves) of the inputs; rebound parameters */
    bool *check;     /* which inputs are differentiated */
    nb_ctx *leaves;  /* owns x */
    nb_ctx *work;    /* reset for every evaluation */
    nb_gradcheck_result *res;
    double **worst_u; /* fast mode: the worst direction's u per input (NULL: not moved) */
    double *worst_v;  /* ... and its v, one per output element */
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
    nb_tensor *y = eval(g, true);
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
        nb_tensor *yy = eval(g, false);
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

/* ---- blame: which op's backward is wrong ----------------------------------- */
/* Where an input's value comes from: a node (by tape index, views resolved
 * to what they view), a checked input, or neither. */
#define ROOT_NONE (-1)
#define ROOT_LEAF(j) (-2 - (j))
#define LEAF_OF_ROOT(r) (-2 - (r))

typedef struct pslot {  /* one input of a node, as the node read it */
    int root;
    bool f64;
    bool dup;           /* the same tensor (or gradient) as an earlier input */
    size_t numel;
    double *tan;        /* its tangent (f64 inputs) */
    double *delta;      /* what the node's rule added to its gradient */
} pslot;

typedef struct pnode {  /* one node of the tape */
    const char *name, *file;
    int line, n_in;
    size_t numel;
    bool f64;           /* the output is f64 */
    bool odd;           /* an input that needs grad is not f64: not judged */
    bool view;          /* the output shares an input's data: never moved */
    bool ran;           /* its rule ran in the last backward */
    int root;           /* its own index, or for a view the root of what it views */
    double *tan;        /* output tangent, before any move of its own */
    double *g;          /* output gradient when its rule ran */
    pslot *in;
} pnode;

enum { RUN_PLUS, RUN_MINUS, RUN_GRAD };

typedef struct probe {
    nb_probe hooks;      /* first member: the tape calls back through it */
    gc *g;
    const nb_gradcheck_opts *o;
    nb_ctx *mem;         /* holds every buffer below except nodes */
    pnode *nodes;        /* by tape index */
    int n, cap;
    bool known;          /* nodes describe the tape (after the first run) */
    nb_status broken;    /* NB_ERR_STATE: the tape changed between runs;
                          * NB_ERR_MEMORY: memory ran out */
    int phase;
    int watch;           /* measure this node only (-1: all) */
    bool move_all;       /* move every movable node by eps * N(0, 1) ... */
    nb_pcg32 move_rng, move_rng0; /* ... drawn alike in both runs */
    int move_node;       /* or only this node (-1: none) ... */
    const double *move_dir; /* ... by eps * move_dir */
    nb_pcg32 rng;        /* directions and cotangents */
    double **dir;        /* per input: its direction (NULL: not moved) */
    double **keep;       /* per input: its values, restored after each move */
    double *ytan;        /* the output's tangent */
    size_t ynumel;
    bool y_untracked;    /* the output does not require grad */
} probe;

/* f failed under the probe; the check's own result stays as it is. */
static nb_status run_failed(const gc *g) {
    nb_status st = nb_ctx_status(g->work);
    return st != NB_OK ? st : NB_ERR_NULL;
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static bool overlaps(const nb_tensor *a, const nb_tensor *b) {
    uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
    uintptr_t a1 = a0 + a->numel * nb_dtype_size(a->dtype);
    uintptr_t b1 = b0 + b->numel * nb_dtype_size(b->dtype);
    return a0 < b1 && b0 < a1;
}

/* Where t's value comes from. Checked inputs are found by their data, so a
 * tensor header copied from one (a module's parameter bound to it) counts. */
static int root_of(const probe *p, const nb_tensor *t) {
    if (t->node && t->owner == p->g->work && t->node->index < p->n)
        return p->nodes[t->node->index].root;
    for (int j = 0; j < p->g->n_in; j++)
        if (p->g->check[j] && p->g->x[j]->data == t->data && p->g->x[j]->numel == t->numel)
            return ROOT_LEAF(j);
    return ROOT_NONE;
}

/* Adds node n to the description (first run). */
static bool describe(probe *p, const nb_node *n) {
    if (n->index != p->n) return false;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        pnode *grown = realloc(p->nodes, (size_t)cap * sizeof *grown);
        if (!grown) {
            p->broken = NB_ERR_MEMORY;
            return false;
        }
        p->nodes = grown;
        p->cap = cap;
    }
    pnode *pn = &p->nodes[p->n];
    memset(pn, 0, sizeof *pn);
    pn->name = n->name;
    pn->file = n->file;
    pn->line = n->line;
    pn->n_in = n->n_in;
    pn->numel = n->out->numel;
    pn->f64 = n->out->dtype == NB_F64;
    pn->root = n->index;
    pn->in = nb_ctx_alloc(p->mem, (size_t)(n->n_in ? n->n_in : 1) * sizeof *pn->in);
    if (!pn->in) {
        p->broken = NB_ERR_MEMORY;
        return false;
    }
    for (int i = 0; i < n->n_in; i++) {
        const nb_tensor *t = n->in[i];
        pslot *sl = &pn->in[i];
        sl->root = root_of(p, t);
        sl->f64 = t->dtype == NB_F64;
        sl->numel = t->numel;
        for (int j = 0; j < i; j++)
            if (n->in[j] == t || (t->grad && n->in[j]->grad == t->grad)) sl->dup = true;
        if (t->requires_grad && !sl->f64) pn->odd = true;
        if (overlaps(n->out, t)) {
            pn->view = true;
            pn->root = sl->root;
        }
    }
    p->n++;
    return true;
}

static bool same_node(const pnode *pn, const nb_node *n) {
    return pn->n_in == n->n_in && pn->numel == n->out->numel &&
           (pn->name == n->name || (pn->name && n->name && !strcmp(pn->name, n->name)));
}

/* Run +: keeps t's values; run -: turns them into the tangent. */
static double *measure(probe *p, double *buf, const nb_tensor *t) {
    const double *d = t->data;
    if (p->phase == RUN_PLUS) {
        buf = nb_ctx_alloc(p->mem, t->numel * sizeof *buf);
        if (!buf) {
            p->broken = NB_ERR_MEMORY;
            return NULL;
        }
        memcpy(buf, d, t->numel * sizeof *buf);
    } else if (buf) {
        /* equal values (masked -inf ones too) have no tangent */
        for (size_t e = 0; e < t->numel; e++)
            buf[e] = buf[e] == d[e] ? 0.0 : (buf[e] - d[e]) / (2 * p->o->eps);
    }
    return buf;
}

/* The tape's hook, in the runs at x +- eps*dir: measures what the node read
 * and made, then moves its output as asked. */
static void on_record(nb_probe *hooks, nb_node *n) {
    probe *p = (probe *)hooks;
    if (p->broken || p->phase == RUN_GRAD) return;
    if (!p->known ? !describe(p, n)
                  : (n->index >= p->n || !same_node(&p->nodes[n->index], n))) {
        if (!p->broken) p->broken = NB_ERR_STATE;
        return;
    }
    pnode *pn = &p->nodes[n->index];
    if (p->watch < 0 || p->watch == n->index) {
        for (int i = 0; i < n->n_in; i++)
            if (pn->in[i].f64) pn->in[i].tan = measure(p, pn->in[i].tan, n->in[i]);
        if (pn->f64) pn->tan = measure(p, pn->tan, n->out);
    }
    if (!pn->f64 || pn->view) return;
    double *o = n->out->data, step = p->phase == RUN_PLUS ? p->o->eps : -p->o->eps;
    if (p->move_all)
        for (size_t e = 0; e < pn->numel; e++) o[e] += step * nb_pcg32_normal(&p->move_rng);
    else if (n->index == p->move_node)
        for (size_t e = 0; e < pn->numel; e++) o[e] += step * p->move_dir[e];
}

/* The tape's hook in the backward: keeps each rule's output gradient and
 * what it adds to each input's gradient. */
static void on_backward(nb_probe *hooks, nb_node *n, bool done) {
    probe *p = (probe *)hooks;
    if (p->broken || p->phase != RUN_GRAD) return;
    if (n->index >= p->n || !same_node(&p->nodes[n->index], n)) {
        p->broken = NB_ERR_STATE;
        return;
    }
    pnode *pn = &p->nodes[n->index];
    if (!done) {
        pn->ran = true;
        if (pn->f64) {
            pn->g = nb_ctx_alloc(p->mem, pn->numel * sizeof *pn->g);
            if (!pn->g) p->broken = NB_ERR_MEMORY;
            else memcpy(pn->g, n->out->grad, pn->numel * sizeof *pn->g);
        }
    }
    for (int i = 0; i < n->n_in && !p->broken; i++) {
        pslot *sl = &pn->in[i];
        const double *gr = n->in[i]->grad;
        if (!done) {
            sl->delta = NULL;
            if (sl->dup || !sl->f64 || !n->in[i]->requires_grad) continue;
            sl->delta = nb_ctx_alloc(p->mem, sl->numel * sizeof *sl->delta);
            if (!sl->delta) p->broken = NB_ERR_MEMORY;
            else if (gr) memcpy(sl->delta, gr, sl->numel * sizeof *sl->delta);
        } else if (sl->delta) {
            for (size_t e = 0; e < sl->numel; e++)
                sl->delta[e] = (gr ? gr[e] : 0.0) - sl->delta[e];
        }
    }
}

/* One evaluation of f under the probe. */
static nb_tensor *probe_eval(probe *p, int phase) {
    p->phase = phase;
    p->move_rng = p->move_rng0;
    nb_tensor *y = eval(p->g, true);
    if (y && !p->broken) {
        p->known = true;
        if (nb_tape_len(p->g->work) != p->n) p->broken = NB_ERR_STATE;
    }
    return y;
}

/* Runs f at x + eps*dir and at x - eps*dir (moving nodes as p says) and
 * measures the tangents, the output's included. */
static nb_status tangent_runs(probe *p) {
    gc *g = p->g;
    for (int r = 0; r < 2; r++) {
        double step = r ? -p->o->eps : p->o->eps;
        for (int j = 0; j < g->n_in; j++)
            if (p->dir[j])
                for (size_t e = 0; e < g->x[j]->numel; e++)
                    ((double *)g->x[j]->data)[e] += step * p->dir[j][e];
        nb_tensor *y = probe_eval(p, r ? RUN_MINUS : RUN_PLUS);
        for (int j = 0; j < g->n_in; j++)
            if (p->dir[j]) memcpy(g->x[j]->data, p->keep[j], g->x[j]->numel * sizeof(double));
        if (!y) return run_failed(g);
        if (!r) p->ynumel = y->numel;
        if (p->watch < 0) p->ytan = measure(p, p->ytan, y);
    }
    return p->broken;
}

/* One backward from the cotangent v (NULL: drawn, N(0, 1)), keeping what
 * each rule did. */
static nb_status grad_run(probe *p, const double *v_in, double **v_out) {
    gc *g = p->g;
    for (int k = 0; k < p->n; k++) p->nodes[k].ran = false;
    nb_tensor *y = probe_eval(p, RUN_GRAD);
    if (!y) return run_failed(g);
    double *v = nb_ctx_alloc(p->mem, y->numel * sizeof *v);
    nb_tensor *vt = nb_empty(g->work, NB_F64, y->ndim, y->shape);
    if (!v || !vt) return NB_ERR_MEMORY;
    if (p->broken || y->numel != p->ynumel) return p->broken ? p->broken : NB_ERR_STATE;
    for (size_t e = 0; e < y->numel; e++) v[e] = v_in ? v_in[e] : nb_pcg32_normal(&p->rng);
    memcpy(vt->data, v, y->numel * sizeof *v);
    *v_out = v;
    for (int j = 0; j < g->n_in; j++) nb_zero_grad(g->x[j]);
    p->y_untracked = !y->requires_grad;
    if (p->y_untracked) return NB_OK;
    if (nb_backward(g->work, y, vt) != NB_OK) return run_failed(g);
    return p->broken;
}

/* Is a local difference d (analytic - numeric n) out of tolerance? A replay
 * also counts a node carrying half of the check's own error D. */
static bool disagrees(const probe *p, double d, double n, double big) {
    return !(fabs(d) <= p->o->atol + p->o->rtol * fabs(n)) || (big > 0 && fabs(d) > big);
}

typedef struct verdict {
    int node, count; /* the latest disagreeing node (-1: none), how many disagree */
    double a, n;     /* its <delta, t> and <g, t_out> */
} verdict;

/* Judges every node whose rule ran: its vector-Jacobian product against
 * the finite-difference Jacobian-vector product. */
static verdict judge(const probe *p, double big) {
    verdict vd = {-1, 0, 0.0, 0.0};
    for (int k = p->n - 1; k >= 0; k--) {
        const pnode *pn = &p->nodes[k];
        if (!pn->ran || !pn->f64 || pn->odd || !pn->g || !pn->tan) continue;
        double a = 0.0, nn = dot(pn->g, pn->tan, pn->numel);
        bool measured = true;
        for (int i = 0; i < pn->n_in; i++) {
            const pslot *sl = &pn->in[i];
            if (!sl->delta) continue;
            if (!sl->tan) measured = false;
            else a += dot(sl->delta, sl->tan, sl->numel);
        }
        if (!measured || !disagrees(p, a - nn, nn, big)) continue;
        if (vd.node < 0) vd = (verdict){k, 0, a, nn};
        vd.count++;
    }
    return vd;
}

/* One direction: tangents (with dir on the inputs and, if move_all, every
 * node moved), then one backward from v. Returns the verdict; *err is the
 * status (NB_ERR_STATE when the tape changed between runs). */
static verdict run_pass(probe *p, const double *v_in, bool move_all, bool replay,
                        nb_status *err) {
    verdict none = {-1, 0, 0.0, 0.0};
    p->move_all = move_all;
    p->move_node = -1;
    p->watch = -1;
    double *v = NULL;
    *err = tangent_runs(p);
    if (*err == NB_OK) *err = grad_run(p, v_in, &v);
    if (*err != NB_OK || p->y_untracked) return none;
    /* The check's own error along this direction, which a replay splits. */
    double big = 0.0;
    if (replay && p->ytan) {
        double analytic = 0.0, numeric = dot(v, p->ytan, p->ynumel);
        for (int j = 0; j < p->g->n_in; j++)
            if (p->dir[j]) analytic += dot(p->g->x[j]->grad, p->dir[j], p->g->x[j]->numel);
        if (disagrees(p, analytic - numeric, numeric, 0.0)) big = 0.5 * fabs(analytic - numeric);
    }
    return judge(p, big);
}

/* Which input of node m gets the wrong gradient: moves one input's source
 * at a time by the tangent it had, latest-made first (an earlier input may
 * feed a later one, not the reverse), and judges m alone. -1 if none
 * stands out. */
static int isolate(probe *p, int m, double d_m, nb_status *err) {
    pnode *pm = &p->nodes[m];
    int n_in = pm->n_in;
    double **w = nb_ctx_alloc(p->mem, (size_t)(n_in ? n_in : 1) * sizeof *w);
    if (!w) return -1;
    for (int i = 0; i < n_in; i++) w[i] = pm->in[i].tan;
    for (int j = 0; j < p->g->n_in; j++) p->dir[j] = NULL;
    p->move_all = false;
    p->watch = m;
    int blamed = -1, last = INT_MAX;
    while (blamed < 0 && *err == NB_OK) {
        /* the next root, below `last` */
        int r = INT_MIN, first = -1;
        for (int i = 0; i < n_in; i++) {
            const pslot *sl = &pm->in[i];
            if (!sl->delta || sl->root == ROOT_NONE || sl->root >= last || !w[i]) continue;
            if (sl->root > r) r = sl->root, first = i;
        }
        if (first < 0) break;
        last = r;
        p->move_node = -1;
        if (r >= 0) {
            if (p->nodes[r].numel != pm->in[first].numel) continue;
            p->move_node = r;
            p->move_dir = w[first];
        } else {
            p->dir[LEAF_OF_ROOT(r)] = w[first];
        }
        *err = tangent_runs(p);
        if (r < 0) p->dir[LEAF_OF_ROOT(r)] = NULL;
        if (*err != NB_OK || !pm->tan) break;
        double a = 0.0, nn = dot(pm->g, pm->tan, pm->numel);
        for (int i = 0; i < n_in; i++)
            if (pm->in[i].delta && pm->in[i].tan)
                a += dot(pm->in[i].delta, pm->in[i].tan, pm->in[i].numel);
        if (disagrees(p, a - nn, nn, 0.5 * fabs(d_m))) blamed = first;
    }
    p->move_node = -1;
    return blamed;
}

/* An f64 input of node m that changes with x but is not on the tape. */
static int untracked_input(const probe *p, int m) {
    const pnode *pm = &p->nodes[m];
    for (int i = 0; i < pm->n_in; i++) {
        const pslot *sl = &pm->in[i];
        if (sl->root != ROOT_NONE || !sl->f64 || !sl->tan) continue;
        for (size_t e = 0; e < sl->numel; e++)
            if (sl->tan[e] != 0.0) return i;
    }
    return -1;
}

/* Fills res->blame_* (and *y_untracked); the check failed when `failed`. */
static nb_status blame(gc *g, const nb_gradcheck_opts *o, bool failed, bool *y_untracked) {
    nb_gradcheck_result *res = g->res;
    probe p;
    memset(&p, 0, sizeof p);
    p.hooks.recorded = on_record;
    p.hooks.backward = on_backward;
    p.g = g;
    p.o = o;
    p.move_node = -1;
    p.mem = nb_ctx_new(0);
    nb_pcg32_seed(&p.rng, o->seed, 0xb1a3);
    nb_pcg32_seed(&p.move_rng0, o->seed, 0xb1a4);
    size_t n = (size_t)(g->n_in ? g->n_in : 1);
    p.dir = calloc(n, sizeof *p.dir);
    p.keep = calloc(n, sizeof *p.keep);
    nb_status st = p.mem && p.dir && p.keep ? NB_OK : NB_ERR_MEMORY;
    for (int j = 0; j < g->n_in && st == NB_OK; j++) {
        if (!g->check[j]) continue;
        p.keep[j] = nb_ctx_alloc(p.mem, g->x[j]->numel * sizeof(double));
        if (!p.keep[j]) st = NB_ERR_MEMORY;
        else memcpy(p.keep[j], g->x[j]->data, g->x[j]->numel * sizeof(double));
    }
    g->work->probe = &p.hooks;
    verdict vd = {-1, 0, 0.0, 0.0};
    /* First, replay the failure: its directions, nodes left alone. */
    if (failed && st == NB_OK) {
        double *v = NULL;
        if (o->fast) {
            for (int j = 0; j < g->n_in; j++) p.dir[j] = g->worst_u ? g->worst_u[j] : NULL;
            v = g->worst_v;
        } else {
            int j = res->worst_input;
            if (j >= 0) p.dir[j] = nb_ctx_alloc(p.mem, g->x[j]->numel * sizeof(double));
            nb_tensor *y = j >= 0 && p.dir[j] ? eval(g, false) : NULL;
            v = y ? nb_ctx_alloc(p.mem, y->numel * sizeof *v) : NULL;
            if (v) {
                p.dir[j][res->worst_index] = 1.0;
                v[res->worst_output] = 1.0;
            }
        }
        if (v) vd = run_pass(&p, v, false, true, &st);
        *y_untracked = p.y_untracked;
    }
    /* Then a random direction, every node moved too. */
    if (vd.node < 0 && st == NB_OK && !*y_untracked) {
        for (int j = 0; j < g->n_in && st == NB_OK; j++) {
            p.dir[j] = NULL;
            if (!g->check[j]) continue;
            p.dir[j] = nb_ctx_alloc(p.mem, g->x[j]->numel * sizeof(double));
            if (!p.dir[j]) st = NB_ERR_MEMORY;
            else
                for (size_t e = 0; e < g->x[j]->numel; e++) p.dir[j][e] = nb_pcg32_normal(&p.rng);
        }
        if (st == NB_OK) vd = run_pass(&p, NULL, true, false, &st);
    }
    if (vd.node >= 0 && st == NB_OK) {
        const pnode *pn = &p.nodes[vd.node];
        res->blame_index = vd.node;
        snprintf(res->blame_op, sizeof res->blame_op, "%s", pn->name ? pn->name : "?");
        res->blame_file = pn->file;
        res->blame_line = pn->line;
        res->blame_count = vd.count;
        res->blame_analytic = vd.a;
        res->blame_numeric = vd.n;
        res->blame_input = untracked_input(&p, vd.node);
        res->blame_untracked = res->blame_input >= 0;
        if (!res->blame_untracked) res->blame_input = isolate(&p, vd.node, vd.a - vd.n, &st);
    }
    g->work->probe = NULL;
    /* leave the inputs as they were */
    for (int j = 0; j < g->n_in; j++)
        if (p.keep && p.keep[j]) memcpy(g->x[j]->data, p.keep[j], g->x[j]->numel * sizeof(double));
    nb_ctx_free(p.mem);
    free(p.nodes);
    free(p.dir);
    free(p.keep);
    return st;
}

/* The sentence naming the blamed op (empty when there is none). */
static void describe_blame(const nb_gradcheck_result *r, bool y_untracked, char *buf, size_t n) {
    char more[48] = "";
    if (r->blame_count > 1)
        snprintf(more, sizeof more, "; %d more op%s", r->blame_count - 1,
                 r->blame_count > 2 ? "s disagree" : " disagrees");
    char site[128];
    if (r->blame_file)
        snprintf(site, sizeof site, "created at %.96s:%d", r->blame_file, r->blame_line);
    else
        snprintf(site, sizeof site, "no creation site: set one with NB_HERE");
    if (y_untracked)
        snprintf(buf, n, "the output is not on the tape (made with grad disabled, or by a custom "
                         "op that was not recorded), so its gradient is zero");
    else if (r->blame_index < 0)
        buf[0] = '\0';
    else if (r->blame_untracked)
        snprintf(buf, n, "input %d of op #%d '%s' (%s) changes with the checked inputs but is "
                         "not on the tape (made with grad disabled, or by a custom op that was not "
                         "recorded)",
                 r->blame_input, r->blame_index, r->blame_op, site);
    else {
        char input[32] = "";
        if (r->blame_input >= 0)
            snprintf(input, sizeof input, " for its input %d", r->blame_input);
        snprintf(buf, n, "backward of op #%d '%s' (%s) disagrees with finite differences%s "
                         "(along one direction, %.6g by its rule vs %.6g by differences%s)",
                 r->blame_index, r->blame_op, site, input, r->blame_analytic, r->blame_numeric,
                 more);
    }
}

/* "input 2" for an input, "input 3 (parameter 'out_proj.weight')" for a
 * listed parameter: one 0-based numbering, inputs first, as PyTorch's
 * gradcheck(f, params + inputs) numbers its tuple. */
static void input_label(const gc *g, int i, char *buf, size_t n) {
    int k = i - g->n_user;
    if (k >= 0 && g->params && g->params->names[k])
        snprintf(buf, n, "input %d (parameter '%.64s')", i, g->params->names[k]);
    else
        snprintf(buf, n, "input %d", i);
}

/* res->message from the finished check and blame. */
static void write_message(const gc *g, const nb_gradcheck_opts *o, bool y_untracked,
                          nb_status bst) {
    nb_gradcheck_result *res = g->res;
    char check[320], who[448] = "", label[96];
    if (res->passed)
        snprintf(check, sizeof check, "passed, max |error| %.3g", res->max_abs_err);
    else if (o->fast)
        snprintf(check, sizeof check,
                 "v^T J u along direction %zu: analytic %.10g vs numeric %.10g "
                 "(|error| %.3g > atol %g + rtol %g * |numeric|)",
                 res->worst_index, res->analytic, res->numeric,
                 fabs(res->analytic - res->numeric), o->atol, o->rtol);
    else {
        input_label(g, res->worst_input, label, sizeof label);
        snprintf(check, sizeof check,
                 "d out[%zu] / d %s [%zu]: analytic %.10g vs numeric %.10g "
                 "(|error| %.3g > atol %g + rtol %g * |numeric|)",
                 res->worst_output, label, res->worst_index, res->analytic, res->numeric,
                 fabs(res->analytic - res->numeric), o->atol, o->rtol);
    }
    describe_blame(res, y_untracked, who, sizeof who);
    if (who[0] && res->passed)
        snprintf(res->message, sizeof res->message, "gradcheck: %.160s, but %.330s", check, who);
    else if (who[0])
        snprintf(res->message, sizeof res->message, "gradcheck: %.310s; worst element %.170s",
                 who, check);
    else
        snprintf(res->message, sizeof res->message, "gradcheck: %.300s%s", check,
                 res->passed           ? ""
                 : bst == NB_ERR_STATE ? " (no op blamed: f recorded a different tape on "
                                         "each call)"
                 : bst != NB_OK        ? " (no op blamed: the search failed)"
                                       : " (no op blamed: every recorded op's backward "
                                         "agrees with finite differences)");
}

/* Makes g->x[i] a float64 leaf for every input and listed parameter. Inputs
 * are copied; a parameter is rebound in place (its struct saved in
 * g->saved and restored by unbind) so that f, reading it where the module
 * keeps it, sees the float64 copy and backward fills that copy's grad. */
static nb_status bind(gc *g, nb_tensor *const *in) {
    int n_par = g->n_in - g->n_user;
    bool any_marked = false;
    for (int i = 0; i < g->n_user; i++) any_marked |= in[i]->requires_grad;
    for (int k = 0; k < n_par; k++) any_marked |= g->params->t[k]->requires_grad;
    for (int i = 0; i < g->n_in; i++) {
        nb_tensor *src = i < g->n_user ? in[i] : g->params->t[i - g->n_user];
        bool flt = src->dtype == NB_F32 || src->dtype == NB_F64;
        nb_tensor *c = nb_copy(g->leaves, src, flt ? NB_F64 : src->dtype);
        g->check[i] = flt && (any_marked ? src->requires_grad : true);
        if (c && g->check[i]) nb_requires_grad(c);
        if (nb_ctx_error(g->leaves)) return fail(g, NB_ERR_MEMORY, nb_ctx_error(g->leaves));
        g->x[i] = c;
        if (i < g->n_user) continue;
        nb_tensor *p = g->params->t[i - g->n_user];
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
    for (int k = g->n_bound - 1; k >= 0; k--) *g->params->t[k] = g->saved[k];
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
    if (n_par < 0 || n_par > NB_LIST_MAX) return fail(&g, NB_ERR_SIZE, "the parameter list is corrupt");
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return fail(&g, NB_ERR_NULL, "an input is NULL");
    for (int k = 0; k < n_par; k++) {
        char msg[128];
        snprintf(msg, sizeof msg, "parameter %d ('%.64s') is NULL", k,
                 params->names[k] ? params->names[k] : "");
        if (!params->t[k]) return fail(&g, NB_ERR_NULL, msg);
    }
    nb_gradcheck_opts o = opts ? *opts : nb_gradcheck_defaults();

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
        res->passed = worst <= 0.0;
        bool y_untracked = false;
        nb_status bst = NB_OK;
        if (!res->passed || o.blame) bst = blame(&g, &o, !res->passed, &y_untracked);
        write_message(&g, &o, y_untracked, bst);
        st = res->passed ? NB_OK : NB_ERR_VALUE;
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

/* ctx takes the outcome's message (the check runs on private contexts). */
nb_status nb_gradcheck_params(nb_ctx *ctx, nb_gradcheck_fn f, void *user,
                              const nb_tensor_list *params, int n_in, nb_tensor *const *in,
                              const nb_gradcheck_opts *opts, nb_gradcheck_result *res) {
    nb_gradcheck_result local;
    if (!res) res = &local;
    if (!nb_ctx_ok(ctx)) {
        memset(res, 0, sizeof *res);
        res->worst_input = res->blame_index = res->blame_input = -1;
        snprintf(res->message, sizeof res->message, "gradcheck: %s",
                 ctx ? "the context already holds an error" : "NULL context");
        return nb_ctx_status(ctx);
    }
    nb_status st = gradcheck_all(f, user, params, n_in, in, opts, res);
    if (st) nb_ctx_fail(ctx, st, "%s", res->message);
    return st;
}
