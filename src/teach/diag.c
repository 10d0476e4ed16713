/* teach/diag.c - training diagnostics (nb_diag, nabla/teach.h): every N
 * steps, per-layer activation statistics and histograms read off the step's
 * tape, per-parameter gradient histograms and norms, the update-to-data
 * ratio, and every step's loss; kept as JSONL lines and written as JSONL or
 * as one self-contained page of plots (teach/diag_page.inc). */
#include "tape_json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diag_page.inc"

struct nb_diag {
    int every, bins;
    FILE *log; /* the JSONL lines so far (open_memstream on text) */
    char *text;
    size_t len;
    FILE *evals; /* the evaluations' lines (nb_diag_eval), written after them */
    char *eval_text;
    size_t eval_len;
    /* the parameters' values at the last recorded step, for the update */
    bool pending;       /* a record waits for its update ratios */
    int n_snap;
    double **snap;
    size_t *snap_n;
};

nb_diag *nb_diag_new(nb_ctx *ctx, int every, int bins) {
    if (!ctx) return NULL;
    if (nb_ctx_status(ctx)) return NULL;
    if (every < 1 || bins < 0 || bins > 1000) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "diag_new: every %d must be >= 1 and bins %d in [0, 1000]",
                    every, bins);
        return NULL;
    }
    nb_diag *d = calloc(1, sizeof *d);
    if (d) d->log = open_memstream(&d->text, &d->len);
    if (d && d->log) d->evals = open_memstream(&d->eval_text, &d->eval_len);
    if (!d || !d->log || !d->evals) {
        if (d && d->log) fclose(d->log), free(d->text);
        free(d);
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "diag_new: out of memory");
        return NULL;
    }
    d->every = every;
    d->bins = bins ? bins : 40;
    return d;
}

static void drop_snap(nb_diag *d) {
    for (int i = 0; i < d->n_snap; i++) free(d->snap[i]);
    free(d->snap), free(d->snap_n);
    d->snap = NULL, d->snap_n = NULL, d->n_snap = 0;
}

void nb_diag_free(nb_diag *d) {
    if (!d) return;
    fclose(d->log);
    free(d->text);
    fclose(d->evals);
    free(d->eval_text);
    drop_snap(d);
    free(d);
}

typedef struct stats {
    double lo, hi, mean, std, sq;
    size_t n;
} stats;

static stats stats_of(const nb_tensor *t, const void *buf) {
    stats s = {INFINITY, -INFINITY, 0, 0, 0, 0};
    double sum = 0;
    for (size_t i = 0; i < t->numel; i++) {
        double v = nb_buf_get(t, buf, i);
        if (!isfinite(v)) continue;
        s.lo = v < s.lo ? v : s.lo, s.hi = v > s.hi ? v : s.hi;
        sum += v, s.sq += v * v, s.n++;
    }
    if (!s.n) return (stats){0, 0, 0, 0, 0, 0};
    s.mean = sum / (double)s.n;
    double var = s.sq / (double)s.n - s.mean * s.mean;
    s.std = sqrt(var > 0 ? var : 0);
    return s;
}

static void num(FILE *f, double v) { nb_json_num(f, v, NB_F64); }

/* "mean":..,"std":..,"lo":..,"hi":..,"hist":[bins counts over [lo, hi]] */
static void write_hist(FILE *f, const nb_diag *d, const nb_tensor *t, const void *buf) {
    stats s = stats_of(t, buf);
    fputs("\"mean\":", f), num(f, s.mean);
    fputs(",\"std\":", f), num(f, s.std);
    fputs(",\"lo\":", f), num(f, s.lo);
    fputs(",\"hi\":", f), num(f, s.hi);
    fputs(",\"hist\":[", f);
    size_t *c = calloc((size_t)d->bins, sizeof *c);
    double w = (s.hi - s.lo) / d->bins;
    for (size_t i = 0; c && i < t->numel; i++) {
        double v = nb_buf_get(t, buf, i);
        if (!isfinite(v)) continue;
        int b = w > 0 ? (int)((v - s.lo) / w) : 0;
        c[b >= d->bins ? d->bins - 1 : b < 0 ? 0 : b]++;
    }
    for (int b = 0; c && b < d->bins; b++) fprintf(f, b ? ",%zu" : "%zu", c[b]);
    fputc(']', f);
    free(c);
}

/* What a tape node's output is to the page, or NULL when it is not a line
 * of it: an activation (tanh, GELU, sigmoid, ReLU, SiLU), a norm's output
 * (RMSNorm) or a gated MLP's product silu(x W1^T) * (x W2^T) (a mul whose
 * first factor a SiLU made). */
static const char *line_kind(const nb_node *n) {
    switch (n->op) {
    case NB_OP_TANH: case NB_OP_GELU: case NB_OP_SIGMOID: case NB_OP_RELU: case NB_OP_SILU:
        return "activation";
    case NB_OP_RMS_NORM: return "norm";
    case NB_OP_MUL:
        return n->n_in == 2 && n->in[0]->node && n->in[0]->node->op == NB_OP_SILU ? "gated"
                                                                                : NULL;
    default: return NULL;
    }
}

/* The share of an activation in its flat region: |tanh| > 0.97, sigmoid
 * within 0.03 of 0 or 1, GELU's and SiLU's input below -3 (both about 0
 * there, with a gradient under 0.1), ReLU's output 0. */
static double saturated(const nb_node *n) {
    const nb_tensor *y = n->out, *x = n->in[0];
    size_t hit = 0;
    for (size_t i = 0; i < y->numel; i++) {
        double v = nb_buf_get(y, y->data, i);
        switch (n->op) {
        case NB_OP_TANH: hit += fabs(v) > 0.97; break;
        case NB_OP_SIGMOID: hit += v < 0.03 || v > 0.97; break;
        case NB_OP_GELU: case NB_OP_SILU: hit += nb_buf_get(x, x->data, i) < -3.0; break;
        default: hit += v == 0.0; break; /* relu: dead */
        }
    }
    return y->numel ? 100.0 * (double)hit / (double)y->numel : 0;
}

static void write_activations(FILE *f, const nb_diag *d, const nb_ctx *ctx) {
    int n = ctx->tape_len, first = 1;
    const nb_node **order = calloc((size_t)(n ? n : 1), sizeof *order);
    if (!order) return;
    for (const nb_node *node = ctx->tape; node; node = node->prev) order[node->index] = node;
    fputs(",\"activations\":[", f);
    for (int k = 0; k < n; k++) {
        const nb_node *node = order[k];
        const char *kind = line_kind(node);
        if (!kind || !node->out->data || !node->out->numel) continue;
        fputs(first ? "{" : ",{", f);
        first = 0;
        char name[256];
        snprintf(name, sizeof name, "%s%s%s #%d", node->scope ? node->scope : "",
                 node->scope ? " " : "", node->name, node->index);
        fputs("\"name\":", f), nb_json_str(f, name);
        fputs(",\"op\":", f), nb_json_str(f, node->name);
        fputs(",\"saturated\":", f); /* only an activation has a flat region */
        if (strcmp(kind, "activation")) fputs("null", f);
        else num(f, saturated(node));
        fputs(",\"kind\":", f), nb_json_str(f, kind);
        fputc(',', f);
        write_hist(f, d, node->out, node->out->data);
        fputc('}', f);
    }
    fputc(']', f);
    free(order);
}

/* Gradients, and a copy of every parameter's values for the update ratio. */
static nb_status write_params(FILE *f, nb_diag *d, const nb_tensor_list *params) {
    drop_snap(d);
    int n = params ? params->n : 0;
    d->snap = calloc((size_t)(n ? n : 1), sizeof *d->snap);
    d->snap_n = calloc((size_t)(n ? n : 1), sizeof *d->snap_n);
    if (!d->snap || !d->snap_n) return NB_ERR_MEMORY;
    d->n_snap = n;
    fputs(",\"params\":[", f);
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = nb_list_tensor(params, i);
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        nb_json_str(f, nb_list_name(params, i));
        fprintf(f, ",\"ndim\":%d,\"numel\":%zu,\"data_std\":", t->ndim, t->numel);
        num(f, stats_of(t, t->data).std);
        if (t->grad) {
            stats g = stats_of(t, t->grad);
            fputs(",\"grad_norm\":", f), num(f, sqrt(g.sq));
            fputs(",\"grad\":{", f);
            write_hist(f, d, t, t->grad);
            fputc('}', f);
        }
        fputc('}', f);
        d->snap[i] = malloc(t->numel * sizeof(double));
        if (!d->snap[i]) return NB_ERR_MEMORY;
        d->snap_n[i] = t->numel;
        for (size_t j = 0; j < t->numel; j++) d->snap[i][j] = nb_buf_get(t, t->data, j);
    }
    fputc(']', f);
    return NB_OK;
}

/* Ends the pending record: log10(std(w - w_then) / std(w)) per parameter. */
static void write_ratios(nb_diag *d, const nb_tensor_list *params) {
    fputs(",\"update_ratio\":{", d->log);
    int n = params && params->n == d->n_snap ? d->n_snap : 0;
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = nb_list_tensor(params, i);
        if (i) fputc(',', d->log);
        nb_json_str(d->log, nb_list_name(params, i));
        fputc(':', d->log);
        if (t->numel != d->snap_n[i]) {
            fputs("null", d->log);
            continue;
        }
        double su = 0, su2 = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double u = nb_buf_get(t, t->data, j) - d->snap[i][j];
            su += u, su2 += u * u;
        }
        double m = su / (double)t->numel, var = su2 / (double)t->numel - m * m;
        double wstd = stats_of(t, t->data).std, ustd = sqrt(var > 0 ? var : 0);
        if (wstd > 0 && ustd > 0)
            num(d->log, log10(ustd / wstd));
        else
            fputs("null", d->log);
    }
    fputs("}}\n", d->log);
    d->pending = false;
}

static void close_pending(nb_diag *d) {
    if (d->pending) fputs(",\"update_ratio\":null}\n", d->log), d->pending = false;
}

nb_status nb_diag_step(nb_ctx *ctx, nb_diag *d, long step, double loss,
                       const nb_tensor_list *params) {
    if (!ctx) return NB_ERR_NULL;
    if (nb_ctx_status(ctx)) return nb_ctx_status(ctx);
    if (!d) return nb_ctx_fail(ctx, NB_ERR_NULL, "diag_step: d is NULL");
    /* the list is checked whole before any of it is read or written */
    if (params && !nb_list_valid(params))
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "diag_step: the params list is corrupt (n = %d)",
                           params->n);
    for (int i = 0; params && i < params->n; i++)
        if (!nb_list_tensor(params, i))
            return nb_ctx_fail(ctx, NB_ERR_NULL, "diag_step: parameter %d ('%.64s') is NULL", i,
                               nb_list_name(params, i) ? nb_list_name(params, i) : "");
    if (d->pending) write_ratios(d, params); /* the update this step made */
    bool record = step % d->every == 0;
    fprintf(d->log, "{\"step\":%ld,\"loss\":", step);
    num(d->log, loss);
    if (!record) {
        fputs("}\n", d->log);
        return ferror(d->log) ? nb_ctx_fail(ctx, NB_ERR_IO, "diag_step: a write failed") : NB_OK;
    }
    write_activations(d->log, d, ctx);
    nb_status s = write_params(d->log, d, params);
    if (s) return nb_ctx_fail(ctx, s, "diag_step: out of memory");
    d->pending = true;
    return ferror(d->log) ? nb_ctx_fail(ctx, NB_ERR_IO, "diag_step: a write failed") : NB_OK;
}

nb_status nb_diag_eval(nb_ctx *ctx, nb_diag *d, long step, double train_loss,
                       double val_loss) {
    if (!ctx) return NB_ERR_NULL;
    if (nb_ctx_status(ctx)) return nb_ctx_status(ctx);
    if (!d) return nb_ctx_fail(ctx, NB_ERR_NULL, "diag_eval: d is NULL");
    fprintf(d->evals, "{\"eval\":%ld,\"train_loss\":", step);
    num(d->evals, train_loss);
    fputs(",\"val_loss\":", d->evals);
    num(d->evals, val_loss);
    fputs("}\n", d->evals);
    return ferror(d->evals) ? nb_ctx_fail(ctx, NB_ERR_IO, "diag_eval: a write failed") : NB_OK;
}

/* text's lines (each ending in a newline) into the page's array, each
 * followed by a comma but the last when `last` */
static void array_lines(FILE *f, const char *text, size_t len, bool last) {
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '\n') fputc(text[i], f);
        else fputs(last && i + 1 == len ? "\n" : ",\n", f);
    }
}

static nb_status write_jsonl(nb_diag *d, FILE *f, bool page) {
    close_pending(d);
    fflush(d->log);
    fflush(d->evals);
    if (!page) {
        fwrite(d->text, 1, d->len, f);
        fwrite(d->eval_text, 1, d->eval_len, f);
        return ferror(f) ? NB_ERR_IO : NB_OK;
    }
    /* the lines as one JSON array: the steps, then the evaluations */
    fputc('[', f);
    array_lines(f, d->text, d->len, d->eval_len == 0);
    array_lines(f, d->eval_text, d->eval_len, true);
    fputs("]\n", f);
    return ferror(f) ? NB_ERR_IO : NB_OK;
}

nb_status nb_diag_write_jsonl(nb_ctx *ctx, nb_diag *d, FILE *f) {
    if (!ctx) return NB_ERR_NULL;
    if (!d || !f) return nb_ctx_fail(ctx, NB_ERR_NULL, "diag_write_jsonl: %s is NULL", d ? "f" : "d");
    nb_status s = write_jsonl(d, f, false);
    return s ? nb_ctx_fail(ctx, s, "diag_write_jsonl: a write failed") : NB_OK;
}

nb_status nb_diag_write_html(nb_ctx *ctx, nb_diag *d, FILE *f) {
    if (!ctx) return NB_ERR_NULL;
    if (!d || !f) return nb_ctx_fail(ctx, NB_ERR_NULL, "diag_write_html: %s is NULL", d ? "f" : "d");
    for (size_t i = 0; i < sizeof diag_head / sizeof diag_head[0]; i++) fputs(diag_head[i], f);
    nb_status s = write_jsonl(d, f, true);
    fputs("</script>\n<script>\n", f);
    for (size_t i = 0; i < sizeof diag_script / sizeof diag_script[0]; i++) fputs(diag_script[i], f);
    fputs("</script>\n</body></html>\n", f);
    if (!s && (fflush(f) || ferror(f))) s = NB_ERR_IO;
    return s ? nb_ctx_fail(ctx, s, "diag_write_html: a write failed") : NB_OK;
}
