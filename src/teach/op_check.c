/* teach/op_check.c - "check this op" for the tape explorer: one node's
 * analytic gradient beside float64 central differences, found by running
 * the user's forward again with one entry of the node's input moved (see
 * nb_tape_html_opts in nabla/teach.h). */
#include "tape_json.h"

#include <math.h>
#include <stdlib.h>

#define CHECK_EPS 1e-6
#define CHECK_ATOL 1e-5
#define CHECK_RTOL 1e-3

/* The probe of one run. Entry `entry` of the node's input x is moved by
 * `delta` only while the node itself runs: when node target - 1 is
 * recorded (every input of the node exists by then, and the node is the
 * next op computed) until the node is recorded, so other ops that read x
 * (a residual stream read twice) see it unmoved. x is the output of node
 * `made` in this run, or the leaf `leaf`. The node's output goes to `out`. */
typedef struct op_probe {
    nb_probe base;
    int made, target;
    size_t entry;
    double delta, keep;
    double *x;
    bool moved;
    const char *name;
    double *out;
    size_t numel;
    bool seen;
} op_probe;

static void move(op_probe *q) {
    if (!q->x || q->moved) return;
    q->keep = q->x[q->entry];
    q->x[q->entry] += q->delta;
    q->moved = true;
}

static void put_back(op_probe *q) {
    if (q->moved) q->x[q->entry] = q->keep;
    q->moved = false;
}

static void probe_recorded(nb_probe *p, nb_node *n) {
    op_probe *q = (op_probe *)p;
    if (n->index == q->made && n->out->dtype == NB_F64 && q->entry < n->out->numel)
        q->x = n->out->data;
    if (n->index == q->target - 1) move(q);
    if (n->index == q->target) { /* copied first: a view's output is x's data */
        if (n->out->dtype == NB_F64 && n->out->numel == q->numel && !strcmp(n->name, q->name)) {
            memcpy(q->out, n->out->data, q->numel * sizeof *q->out);
            q->seen = true;
        }
        put_back(q);
    }
}

static void probe_backward(nb_probe *p, nb_node *n, bool done) { (void)p, (void)n, (void)done; }

/* One run of forward on c (reset first), with x's entry moved by delta
 * while the node runs. */
static bool run(nb_ctx *c, const nb_tape_html_opts *o, const nb_node *node, const nb_tensor *x,
                size_t e, double delta, double *out) {
    nb_ctx_reset(c);
    op_probe q = {{probe_recorded, probe_backward}, x->node ? x->node->index : -1, node->index,
                  e, delta, 0, x->node ? NULL : (double *)x->data, false, node->name, out,
                  node->out->numel, false};
    if (node->index == 0) move(&q); /* a leaf, and no node before this one */
    c->probe = &q.base;
    nb_tensor *y = o->forward(c, o->in, o->user);
    c->probe = NULL;
    put_back(&q);
    return y && q.seen && nb_ctx_ok(c);
}

/* The entries of an input of n elements that are checked: all, or `max`
 * spread evenly. */
static size_t entry_at(size_t k, size_t n, size_t max) {
    return n <= max ? k : (k * n) / max + (n / max) / 2;
}

/* What node's rule sends to each float64 input that needs a gradient,
 * given out's gradient: sends[i] (calloc'd; NULL for the other inputs),
 * found by running the rule into scratch buffers, as write_sends does. */
static nb_status rule_sends(nb_ctx *ctx, const nb_node *node, double **sends) {
    int n = node->n_in;
    void **saved = calloc((size_t)n, sizeof *saved);
    if (!saved) return NB_ERR_MEMORY;
    nb_status s = NB_OK;
    for (int i = 0; i < n && !s; i++) {
        nb_tensor *t = node->in[i];
        bool first = true;
        for (int j = 0; j < i; j++) first = first && node->in[j] != t;
        if (!first || !t->requires_grad || t->dtype != NB_F64) continue;
        saved[i] = t->grad;
        t->grad = sends[i] = calloc(t->numel, sizeof(double));
        if (!sends[i]) t->grad = saved[i], s = NB_ERR_MEMORY;
    }
    if (!s) node->backward(ctx, (nb_node *)node);
    for (int i = 0; i < n; i++)
        if (sends[i]) node->in[i]->grad = saved[i];
    free(saved);
    return s;
}

/* One input's entries to m: {"input", "sampled", "entries", "analytic",
 * "numeric"}; *worst and *passed take them in. False when a run failed. */
static bool check_input(FILE *m, nb_ctx *c, const nb_tape_html_opts *o, const nb_node *node,
                        int i, const double *sends, size_t max, double *bufs, double *worst,
                        bool *passed) {
    const nb_tensor *x = node->in[i], *out = node->out;
    const double *g = out->grad;
    double *plus = bufs, *minus = bufs + out->numel;
    size_t cnt = x->numel < max ? x->numel : max;
    fprintf(m, "{\"input\":%d,\"sampled\":%s,\"entries\":[", i, cnt < x->numel ? "true" : "false");
    for (size_t k = 0; k < cnt; k++) fprintf(m, k ? ",%zu" : "%zu", entry_at(k, x->numel, max));
    double num[64];
    for (size_t k = 0; k < cnt; k++) {
        size_t e = entry_at(k, x->numel, max);
        if (!run(c, o, node, x, e, CHECK_EPS, plus) || !run(c, o, node, x, e, -CHECK_EPS, minus))
            return false;
        double d = 0;
        for (size_t j = 0; j < out->numel; j++) /* a -inf that stays one moved nothing */
            if (plus[j] != minus[j]) d += g[j] * (plus[j] - minus[j]);
        num[k] = d / (2 * CHECK_EPS);
        double err = fabs(sends[e] - num[k]);
        if (!(err <= CHECK_ATOL + CHECK_RTOL * fabs(num[k]))) *passed = false;
        if (err > *worst || isnan(err)) *worst = isnan(err) ? INFINITY : err;
    }
    fputs("],\"analytic\":[", m);
    for (size_t k = 0; k < cnt; k++)
        (k ? fputc(',', m) : 0), nb_json_num(m, sends[entry_at(k, x->numel, max)], NB_F64);
    fputs("],\"numeric\":[", m);
    for (size_t k = 0; k < cnt; k++) (k ? fputc(',', m) : 0), nb_json_num(m, num[k], NB_F64);
    fputs("]}", m);
    return true;
}

nb_status nb_tape_write_check(FILE *f, nb_ctx *ctx, const nb_node *node,
                              const nb_tape_html_opts *o) {
    const nb_tensor *out = node->out;
    if (out->dtype != NB_F64 || !out->grad) return NB_OK;
    size_t max = o->max_entries > 0 && o->max_entries < 64 ? (size_t)o->max_entries : 8;
    if (o->max_entries >= 64) max = 64;
    int n = node->n_in;
    double **sends = calloc((size_t)n, sizeof *sends);
    double *bufs = malloc(2 * out->numel * sizeof *bufs);
    nb_ctx *c = nb_ctx_new(0);
    /* the entries go to a buffer first, so a failed run leaves no half record */
    char *text = NULL;
    size_t text_len = 0;
    FILE *m = sends && bufs && c ? open_memstream(&text, &text_len) : NULL;
    nb_status s = m ? rule_sends(ctx, node, sends) : NB_ERR_MEMORY;
    double worst = 0;
    bool passed = true, ran = true;
    if (!s) {
        fputs("\"inputs\":[", m);
        for (int i = 0; i < n && ran; i++) {
            if (i) fputc(',', m);
            if (sends[i])
                ran = check_input(m, c, o, node, i, sends[i], max, bufs, &worst, &passed);
            else
                fputs("null", m);
        }
        fputc(']', m);
    }
    if (m) fclose(m);
    if (!s && ran) {
        fprintf(f, ",\"check\":{\"passed\":%s,\"eps\":%g,\"max_err\":", passed ? "true" : "false",
                CHECK_EPS);
        nb_json_num(f, worst, NB_F64);
        fprintf(f, ",%s}", text);
    }
    free(text);
    for (int i = 0; i < n && sends; i++) free(sends[i]);
    free(sends), free(bufs);
    nb_ctx_free(c);
    return s;
}
