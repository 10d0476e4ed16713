/* teach/tape_dot.c - the tape as a Graphviz picture, for teaching (micrograd's
 * draw_dot, for a whole tensor graph): one box per tensor with its shape,
 * values and gradient, one ellipse per op, arrows in the forward direction.
 *
 *   nb_tape_dot(ctx, loss, f);      then:  dot -Tsvg tape.dot -o tape.svg */
#include "tape_json.h"

#include <stdlib.h>

#define DOT_SHOW 4 /* values shown per tensor before "..." */

static void dot_values(FILE *f, const nb_tensor *t, const void *buf) {
    if (!buf) {
        fputs("None", f);
        return;
    }
    size_t n = t->numel < DOT_SHOW ? t->numel : DOT_SHOW;
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, i ? ", %.4f" : "%.4f", nb_buf_get(t, buf, i));
    fputs(t->numel > n ? ", ...]" : "]", f);
}

static void dot_tensor(FILE *f, const nb_tensor *t, size_t id, const nb_tensor *root) {
    char s[64];
    fprintf(f, "  t%zu [shape=record%s, label=\"{", id,
            t == root ? ", style=bold" : t->node ? "" : ", style=filled, fillcolor=\"#eef5ff\"");
    if (t->name) fprintf(f, "%s | ", t->name);
    fprintf(f, "%s %s | data ", nb_shape_str(t, s, sizeof s), nb_dtype_name(t->dtype));
    dot_values(f, t, t->data);
    if (t->requires_grad) {
        fputs(" | grad ", f);
        dot_values(f, t, t->grad);
    }
    fputs("}\"];\n", f);
}

/* The position of p in seen[0..n), or n when it is not there. Tensors are
 * named by it (t0, t1, ...), so the same tape gives the same file. */
static size_t seen_at(const void **seen, size_t n, const void *p) {
    for (size_t i = 0; i < n; i++)
        if (seen[i] == p) return i;
    return n;
}

static nb_status write_dot(const nb_ctx *ctx, const nb_tensor *root, FILE *f) {
    if (!ctx || !f) return NB_ERR_NULL;
    int n = ctx->tape_len;
    /* the nodes oldest-first, and the tensors already drawn */
    const nb_node **order = malloc((size_t)(n ? n : 1) * sizeof *order);
    size_t cap = 1, count = 0;
    for (const nb_node *node = ctx->tape; node; node = node->prev) cap += (size_t)node->n_in + 1;
    const void **seen = malloc(cap * sizeof *seen);
    if (!order || !seen) {
        free(order), free(seen);
        return NB_ERR_MEMORY;
    }
    for (const nb_node *node = ctx->tape; node; node = node->prev) order[node->index] = node;
    fputs("digraph tape {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n", f);
    for (int k = 0; k < n; k++) {
        const nb_node *node = order[k];
        if (root && root->node && node->index > root->node->index) continue;
        for (int i = 0; i < node->n_in; i++)
            if (seen_at(seen, count, node->in[i]) == count) {
                seen[count++] = node->in[i];
                dot_tensor(f, node->in[i], count - 1, root);
            }
        if (seen_at(seen, count, node->out) == count) {
            seen[count++] = node->out;
            dot_tensor(f, node->out, count - 1, root);
        }
        fprintf(f, "  op%d [shape=ellipse, label=\"#%d %s", node->index, node->index, node->name);
        if (node->file) {
            const char *base = strrchr(node->file, '/');
            fprintf(f, "\\n%s:%d", base ? base + 1 : node->file, node->line);
        }
        fputs("\"];\n", f);
        for (int i = 0; i < node->n_in; i++)
            fprintf(f, "  t%zu -> op%d;\n", seen_at(seen, count, node->in[i]), node->index);
        fprintf(f, "  op%d -> t%zu;\n", node->index, seen_at(seen, count, node->out));
    }
    fputs("}\n", f);
    free(order), free(seen);
    /* A write error may only show when the buffer is flushed. */
    return fflush(f) != 0 || ferror(f) ? NB_ERR_IO : NB_OK;
}

nb_status nb_tape_dot(nb_ctx *ctx, const nb_tensor *root, FILE *f) {
    return nb_tape_write_fail(ctx, "tape_dot", write_dot(ctx, root, f));
}
