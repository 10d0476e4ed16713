/* gradcheck/blame.c - which op's backward is wrong, for a gradient check
 * (the method is in nabla/gradcheck.h): a tape observer (nb_probe) measures
 * each recorded op's tangents in runs at x +- eps*dir and what each rule
 * added in one backward, and judges every op's vector-Jacobian product
 * against the finite-difference Jacobian-vector product. */
#include "gradcheck/gradcheck_internal.h"

#include <limits.h>
#include <stdlib.h>

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
    nb_tensor *y = nb_gc_eval(p->g, true);
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
nb_status nb_gc_blame(gc *g, const nb_gradcheck_opts *o, bool failed, bool *y_untracked) {
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
            nb_tensor *y = j >= 0 && p.dir[j] ? nb_gc_eval(g, false) : NULL;
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

