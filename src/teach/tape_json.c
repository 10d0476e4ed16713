/* teach/tape_json.c - the tape as JSON: every tensor of the graph with its
 * values, gradient and creation site, every node with its inputs and output
 * (tensor ids), and optionally what each node's local rule sent to each
 * input. nb_tape_json writes it for tools; nb_tape_html embeds it. */
#include "tape_json.h"

#include <stdlib.h>

#define JSON_SHOW 64    /* values written per tensor; past it, the first ones and stats */
#define PAGE_SHOW 2048 /* ... for the page, which draws them */

typedef struct tape_model {
    int n_nodes;
    const nb_node **order; /* oldest first, up to root */
    int n_t;
    const nb_tensor **t; /* distinct tensors, in order of first use */
} tape_model;

static int tensor_id(const tape_model *m, const nb_tensor *t) {
    for (int k = 0; k < m->n_t; k++)
        if (m->t[k] == t) return k;
    return -1;
}

static void add_tensor(tape_model *m, const nb_tensor *t) {
    if (tensor_id(m, t) < 0) m->t[m->n_t++] = t;
}

static nb_status model_build(const nb_ctx *ctx, const nb_tensor *root, tape_model *m) {
    int n = ctx->tape_len;
    size_t cap = 1;
    for (const nb_node *node = ctx->tape; node; node = node->prev) cap += (size_t)node->n_in + 1;
    const nb_node **all = malloc((size_t)(n ? n : 1) * sizeof *all);
    m->order = all;
    m->t = malloc(cap * sizeof *m->t);
    m->n_nodes = m->n_t = 0;
    if (!all || !m->t) return NB_ERR_MEMORY;
    for (const nb_node *node = ctx->tape; node; node = node->prev) all[node->index] = node;
    int last = root && root->node ? root->node->index : n - 1;
    if (root && !root->node) {
        add_tensor(m, root);
        last = -1; /* a leaf: nothing recorded it */
    }
    for (int k = 0; k <= last && k < n; k++) {
        for (int i = 0; i < all[k]->n_in; i++) add_tensor(m, all[k]->in[i]);
        add_tensor(m, all[k]->out);
        m->n_nodes = k + 1;
    }
    return NB_OK;
}

/* A JSON string; '<' escaped so "</script>" cannot end the page's block. */
void nb_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == '<')
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

double nb_buf_get(const nb_tensor *t, const void *buf, size_t i) {
    switch (t->dtype) {
    case NB_F32: return ((const float *)buf)[i];
    case NB_F64: return ((const double *)buf)[i];
    case NB_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}

void nb_json_num(FILE *f, double v, nb_dtype dt) {
    if (isnan(v))
        fputs("\"NaN\"", f);
    else if (isinf(v))
        fputs(v > 0 ? "\"Infinity\"" : "\"-Infinity\"", f);
    else
        fprintf(f, dt == NB_F32 ? "%.9g" : "%.17g", v);
}

/* The first `show` values of buf (numel of t's dtype), or null. */
static void json_values(FILE *f, const nb_tensor *t, const void *buf, size_t show) {
    if (!buf) {
        fputs("null", f);
        return;
    }
    size_t n = t->numel < show ? t->numel : show;
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        if (i) fputc(',', f);
        nb_json_num(f, nb_buf_get(t, buf, i), t->dtype);
    }
    fputc(']', f);
}

/* [min, max, mean] over all of buf, for tensors too big to write whole. */
static void json_stats(FILE *f, const nb_tensor *t, const void *buf) {
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    for (size_t i = 0; i < t->numel; i++) {
        double v = nb_buf_get(t, buf, i);
        lo = v < lo ? v : lo, hi = v > hi ? v : hi, sum += v;
    }
    fputc('[', f);
    nb_json_num(f, lo, NB_F64), fputc(',', f), nb_json_num(f, hi, NB_F64), fputc(',', f);
    nb_json_num(f, sum / (double)t->numel, NB_F64);
    fputc(']', f);
}

static void write_tensor(FILE *f, const tape_model *m, int k, size_t show) {
    const nb_tensor *t = m->t[k];
    fprintf(f, "{\"id\":%d,\"name\":", k);
    if (t->name)
        nb_json_str(f, t->name);
    else
        fputs("null", f);
    fputs(",\"shape\":[", f);
    for (int d = 0; d < t->ndim; d++) fprintf(f, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    fprintf(f, "],\"dtype\":\"%s\",\"numel\":%zu,\"requires_grad\":%s,\"node\":%d,\"site\":",
            nb_dtype_name(t->dtype), t->numel, t->requires_grad ? "true" : "false",
            t->node ? t->node->index : -1);
    if (t->node && t->node->file) {
        char site[512];
        snprintf(site, sizeof site, "%s:%d", t->node->file, t->node->line);
        nb_json_str(f, site);
    } else {
        fputs("null", f);
    }
    fputs(",\"data\":", f);
    json_values(f, t, t->data, show);
    fputs(",\"grad\":", f);
    json_values(f, t, t->requires_grad ? t->grad : NULL, show);
    if (t->numel > show) {
        fputs(",\"truncated\":true,\"data_stats\":", f);
        json_stats(f, t, t->data);
        if (t->requires_grad && t->grad) fputs(",\"grad_stats\":", f), json_stats(f, t, t->grad);
    }
    fputc('}', f);
}

/* The first position at which node's input i appears (i itself unless the
 * tensor is also an earlier input, as in mul(x, x)). */
static int first_use(const nb_node *node, int i) {
    for (int j = 0; j < i; j++)
        if (node->in[j] == node->in[i]) return j;
    return i;
}

static bool gets_scratch(const nb_node *node, int i) {
    return first_use(node, i) == i && node->in[i]->requires_grad;
}

/* Frees the scratch gradients of inputs [0, upto) and puts theirs back. */
static void restore_grads(const nb_node *node, void **saved, int upto) {
    for (int i = 0; i < upto; i++)
        if (gets_scratch(node, i)) {
            free(node->in[i]->grad);
            node->in[i]->grad = saved[i];
        }
}

/* Runs node's rule again with each input's gradient pointing at a zeroed
 * scratch buffer, writes what landed there, and puts the gradients back. An
 * input that appears twice (mul(x, x)) gets one buffer: the sum of both
 * rules, written at its first position and "same_as" it at the others. */
static nb_status write_sends(FILE *f, nb_ctx *ctx, const nb_node *node) {
    int n = node->n_in;
    void **saved = calloc((size_t)n, sizeof *saved);
    if (!saved) return NB_ERR_MEMORY;
    for (int i = 0; i < n; i++) {
        if (!gets_scratch(node, i)) continue;
        nb_tensor *t = node->in[i];
        saved[i] = t->grad;
        t->grad = calloc(t->numel, nb_dtype_size(t->dtype));
        if (!t->grad) {
            restore_grads(node, saved, i + 1);
            free(saved);
            return NB_ERR_MEMORY;
        }
    }
    node->backward(ctx, (nb_node *)node);
    fputs(",\"sends\":[", f);
    for (int i = 0; i < n; i++) {
        if (i) fputc(',', f);
        json_values(f, node->in[i], gets_scratch(node, i) ? node->in[i]->grad : NULL, PAGE_SHOW);
    }
    fputs("],\"same_as\":[", f);
    for (int i = 0; i < n; i++) {
        int j = first_use(node, i);
        fprintf(f, i ? ",%d" : "%d", j == i ? -1 : j);
    }
    fputc(']', f);
    restore_grads(node, saved, n);
    free(saved);
    return NB_OK;
}

static nb_status write_node(FILE *f, nb_ctx *ctx, const tape_model *m, const nb_node *node,
                            bool steps, const nb_tape_html_opts *check) {
    fprintf(f, "{\"index\":%d,\"op\":", node->index);
    nb_json_str(f, node->name);
    fputs(",\"formula\":", f);
    nb_json_str(f, nb_op_formula((nb_op)node->op));
    fputs(",\"site\":", f);
    if (node->file) {
        char site[512];
        snprintf(site, sizeof site, "%s:%d", node->file, node->line);
        nb_json_str(f, site);
    } else {
        fputs("null", f);
    }
    fputs(",\"label\":", f);
    char lab[96];
    if (node->op == NB_OP_SCALE)
        snprintf(lab, sizeof lab, "%s \xC3\x97%g", node->name, node->f[0]);
    else if (node->op == NB_OP_POW)
        snprintf(lab, sizeof lab, "%s ^%g", node->name, node->f[0]);
    else if (node->op == NB_OP_ADD_SCALAR)
        snprintf(lab, sizeof lab, "%s %+g", node->name, node->f[0]);
    else
        snprintf(lab, sizeof lab, "%s", node->name);
    nb_json_str(f, lab);
    fputs(",\"scope\":", f);
    if (node->scope)
        nb_json_str(f, node->scope);
    else
        fputs("null", f);
    fputs(",\"call_site\":", f);
    if (node->call_file) {
        char site[512];
        snprintf(site, sizeof site, "%s:%d", node->call_file, node->call_line);
        nb_json_str(f, site);
    } else {
        fputs("null", f);
    }
    fputs(",\"inputs\":[", f);
    for (int i = 0; i < node->n_in; i++) fprintf(f, i ? ",%d" : "%d", tensor_id(m, node->in[i]));
    fprintf(f, "],\"out\":%d", tensor_id(m, node->out));
    nb_status s = NB_OK;
    if (steps && node->out->grad) s = write_sends(f, ctx, node);
    if (!s && steps && node->out->grad && check && check->forward)
        s = nb_tape_write_check(f, ctx, node, check);
    fputc('}', f);
    return s;
}

nb_status nb_tape_json_write(nb_ctx *ctx, const nb_tensor *root, FILE *f, bool steps,
                             const nb_tape_html_opts *check) {
    if (!ctx || !f) return NB_ERR_NULL;
    tape_model m;
    nb_status s = model_build(ctx, root, &m);
    if (!s) {
        fputs("{\"tensors\":[", f);
        for (int k = 0; k < m.n_t; k++) {
            if (k) fputs(",\n", f);
            write_tensor(f, &m, k, steps ? PAGE_SHOW : JSON_SHOW);
        }
        fputs("],\n\"nodes\":[", f);
        for (int k = 0; k < m.n_nodes && !s; k++) {
            if (k) fputs(",\n", f);
            s = write_node(f, ctx, &m, m.order[k], steps, check);
        }
        fprintf(f, "],\n\"root\":%d}\n", root ? tensor_id(&m, root) : m.n_t - 1);
    }
    free(m.order), free(m.t);
    if (s) return s;
    return ferror(f) ? NB_ERR_IO : NB_OK;
}

nb_status nb_tape_json(nb_ctx *ctx, const nb_tensor *root, FILE *f) {
    return nb_tape_write_fail(ctx, "tape_json", nb_tape_json_write(ctx, root, f, false, NULL));
}
