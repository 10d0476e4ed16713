/* tape/tape.c - recording ops and running backward.
 *
 * Nodes are appended in creation order and linked newest-first. Creation
 * order is a topological order (an op's inputs exist before it), so walking
 * the list from the newest node runs each local rule after every consumer of
 * its output has added its share: reused tensors need no extra bookkeeping. */
#include "kernels/kernels_internal.h"
#include "tape/tape_internal.h"

#include <stdlib.h>

static bool any_requires_grad(int n_in, nb_tensor *const *in) {
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->requires_grad) return true;
    return false;
}

/* The first non-finite element of t, or -1. */
static ptrdiff_t first_non_finite(const nb_tensor *t) {
    for (size_t i = 0; i < t->numel; i++)
        if (!isfinite(nb_get(t, i))) return (ptrdiff_t)i;
    return -1;
}

/* Anomaly mode, forward: an op whose inputs are all finite must not produce
 * a NaN or inf (the fills are exempt: their value is the caller's, as -inf
 * for a causal mask). Reports the op, its creation site and input shapes. */
static bool forward_ok(nb_ctx *ctx, int op, const char *name, const nb_tensor *out, int n_in,
                       nb_tensor *const *in) {
    if (op == NB_OP_MASKED_FILL || op == NB_OP_CAUSAL_FILL) return true;
    ptrdiff_t bad = first_non_finite(out);
    if (bad < 0) return true;
    char shapes[256] = "", s[64];
    for (int i = 0; i < n_in; i++) {
        if (in[i] && first_non_finite(in[i]) >= 0) return true; /* passed on, not made */
        size_t len = strlen(shapes);
        snprintf(shapes + len, sizeof shapes - len, "%s%s", i ? ", " : "",
                 in[i] ? nb_shape_str(in[i], s, sizeof s) : "None");
    }
    double v = nb_get(out, (size_t)bad);
    char site[300];
    nb_site_str(ctx->site.file, ctx->site.line, site, sizeof site);
    nb_ctx_fail(ctx, NB_ERR_VALUE,
                "anomaly: forward of op #%d '%s' (%s) produced %s at element %td "
                "of its output %s from finite inputs %s",
                ctx->tape_len, name, site,
                isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", bad, nb_shape_str(out, s, sizeof s),
                shapes);
    return false;
}

/* A node goes on the tape when grad is on and an input requires grad; a
 * node whose input carries a tangent (forward mode) is made either way,
 * off the tape when it is not recorded, and its forward-mode rule runs
 * once the op that made it has set its parameters: when the next node is
 * made, or when nb_tangent asks (ctx->fwd_pending). */
static nb_node *record(nb_ctx *ctx, int op, const char *name, nb_tensor *out, int n_in,
                       nb_tensor *const *in, nb_backward_fn backward) {
    if (ctx && ctx->fwd_pending) nb_fwd_flush(ctx);
    if (!nb_ctx_ok(ctx) || !out) return NULL;
    bool taped = ctx->grad_enabled && any_requires_grad(n_in, in);
    bool dual = nb_fwd_active(ctx, n_in, in);
    if (!taped && !dual) return NULL;
    const nb_tensor *o = out;
    if (!nb_check_live(ctx, name, 1, &o) ||
        !nb_check_live(ctx, name, n_in, (const nb_tensor *const *)in))
        return NULL;
    if (out->node) {
        nb_ctx_fail(ctx, NB_ERR_STATE, "%s: its output was already recorded by op #%d '%s'; "
                    "an output belongs to one node", name, out->node->index, out->node->name);
        return NULL;
    }
    for (int i = 0; i < n_in; i++)
        if (in[i] == out) {
            nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: input %d is the output itself (a cycle)", name,
                        i + 1);
            return NULL;
        }
    if (taped && ctx->detect_anomaly && !forward_ok(ctx, op, name, out, n_in, in)) return NULL;
    nb_node *n = nb_ctx_alloc(ctx, sizeof *n);
    if (!n) return NULL;
    n->in = n->in_small;
    if (n_in > NB_NODE_MAX_INPUTS) {
        n->in = nb_ctx_alloc(ctx, (size_t)n_in * sizeof *n->in);
        if (!n->in) return NULL;
    }
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    n->op = op;
    n->name = name;
    n->backward = backward;
    n->out = out;
    n->n_in = n_in;
    n->file = ctx->site.file;
    n->line = ctx->site.line;
    /* called from: the user's site when the outermost scope was pushed, or,
     * outside every scope, the user's site a library line was reached from
     * (none when the op's own site is the user's) */
    if (ctx->scope_depth > 0) {
        int top = ctx->scope_depth < NB_SCOPE_MAX ? ctx->scope_depth : NB_SCOPE_MAX;
        n->scope = ctx->scopes[top - 1].path;
        n->call_file = ctx->scopes[0].user_site.file;
        n->call_line = ctx->scopes[0].user_site.line;
    } else if (ctx->site.lib) {
        n->call_file = ctx->user_site.file;
        n->call_line = ctx->user_site.line;
    }
    if (dual) ctx->fwd_pending = n;
    if (!taped) {
        n->index = -1; /* off the tape: only its forward-mode rule reads it */
        return n;
    }
    n->index = ctx->tape_len++;
    n->prev = ctx->tape;
    ctx->tape = n;
    out->node = n;
    out->requires_grad = true;
    if (ctx->probe) ctx->probe->recorded(ctx->probe, n);
    return n;
}

nb_node *nb_record_op(nb_ctx *ctx, nb_op op, nb_tensor *out, int n_in, nb_tensor *const *in,
                      nb_backward_fn backward) {
    return record(ctx, op, nb_op_name(op), out, n_in, in, backward);
}

/* A custom op computes in its inputs' dtype: a float output beside float
 * inputs of another dtype means the op lacks that dtype (often float64,
 * which gradcheck runs in), and the next op would only see "mixed dtypes". */
static bool same_float_dtype(nb_ctx *ctx, const char *name, const nb_tensor *out, int n_in,
                             nb_tensor *const *in) {
    if (out->dtype != NB_F32 && out->dtype != NB_F64) return true;
    for (int i = 0; i < n_in; i++) {
        if ((in[i]->dtype != NB_F32 && in[i]->dtype != NB_F64) || in[i]->dtype == out->dtype)
            continue;
        nb_ctx_fail(ctx, NB_ERR_DTYPE,
                    "%s: custom op does not implement %s: given %s inputs it returned %s "
                    "(gradcheck runs every function in f64; see nabla/gradcheck.h)",
                    name, nb_dtype_name(in[i]->dtype), nb_dtype_name(in[i]->dtype),
                    nb_dtype_name(out->dtype));
        return false;
    }
    return true;
}

nb_node *nb_record(nb_ctx *ctx, const char *name, nb_tensor *out, int n_in,
                   nb_tensor *const *in, nb_backward_fn backward, void *userdata) {
    if (!nb_ctx_ok(ctx)) return NULL;
    if (!name || !out || !backward || n_in < 0 || (n_in > 0 && !in)) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "record: name, out, backward and inputs are required");
        return NULL;
    }
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) {
            nb_ctx_fail(ctx, NB_ERR_NULL, "%s: input %d is NULL", name, i + 1);
            return NULL;
        }
    }
    if (out->owner != ctx) {
        nb_ctx_fail(ctx, NB_ERR_STATE, "%s: the output must be made on the recording context",
                    name);
        return NULL;
    }
    if (!same_float_dtype(ctx, name, out, n_in, in)) return NULL;
    nb_node *n = record(ctx, NB_OP_CUSTOM, name, out, n_in, in, backward);
    if (n) n->userdata = userdata;
    return n;
}

nb_tensor *nb_node_input(const nb_node *n, int i) {
    return (n && i >= 0 && i < n->n_in) ? n->in[i] : NULL;
}
int nb_node_num_inputs(const nb_node *n) { return n ? n->n_in : 0; }
nb_tensor *nb_node_output(const nb_node *n) { return n ? n->out : NULL; }
void *nb_node_userdata(const nb_node *n) { return n ? n->userdata : NULL; }
const char *nb_node_name(const nb_node *n) { return n ? n->name : NULL; }
void nb_node_set_graph_backward(nb_node *n, nb_graph_backward_fn fn) {
    if (n) n->graph_backward = fn;
}
void nb_node_set_forward_rule(nb_node *n, nb_forward_fn fn) {
    if (n) n->forward_rule = fn;
}

/* The zeroed buffer is the fresh one cleared: one place decides where a
 * gradient's memory comes from (a handed-back buffer, else the arena). */
void *nb_grad_buffer(nb_ctx *ctx, nb_tensor *t) {
    bool fresh;
    void *g = nb_grad_buffer_fresh(ctx, t, &fresh);
    if (g && fresh) memset(g, 0, t->numel * nb_dtype_size(t->dtype));
    return g;
}

void *nb_grad_buffer_fresh(nb_ctx *ctx, nb_tensor *t, bool *fresh) {
    *fresh = false;
    if (!t || !t->requires_grad) return NULL;
    if (t->grad && t->grad_stale) { /* zeros not yet written: the caller stores them */
        t->grad_stale = false;
        *fresh = true;
    }
    if (t->grad) return t->grad;
    size_t bytes = t->numel * nb_dtype_size(t->dtype);
    nb_ctx *home = ctx && ctx->grad_local ? ctx : t->owner;
    void *g = home && home->free_grads ? nb_ctx_reuse(home, bytes) : NULL;
    if (!g) g = nb_ctx_alloc_raw(home, bytes);
    if (!g) return NULL;
    t->grad = g;
    *fresh = true;
    return g;
}

bool nb_grad_take(nb_ctx *ctx, nb_tensor *t, nb_tensor *out) {
    if (!ctx->recycle_grads || !t || !t->requires_grad || t->grad || !out->grad ||
        t->owner != ctx || out->owner != ctx || t->dtype != out->dtype || t->numel != out->numel)
        return false;
    t->grad = out->grad;
    out->grad = NULL;
    return true;
}

void nb_grad_release(nb_ctx *ctx, nb_tensor *t) {
    if (!ctx->recycle_grads || t->owner != ctx || !t->grad) return;
    nb_ctx_give_back(ctx, t->grad, t->numel * nb_dtype_size(t->dtype));
    t->grad = NULL;
}

int nb_tape_len(const nb_ctx *ctx) { return ctx ? ctx->tape_len : 0; }

static bool all_finite(const nb_tensor *t, const void *buf) {
    for (size_t i = 0; i < t->numel; i++) {
        double v = t->dtype == NB_F32 ? ((const float *)buf)[i] : ((const double *)buf)[i];
        if (!isfinite(v)) return false;
    }
    return true;
}

void nb_site_str(const char *file, int line, char *buf, size_t size) {
    if (file)
        snprintf(buf, size, "created at %s:%d", file, line);
    else
        snprintf(buf, size, "no creation site recorded: use NB_HERE");
}

/* Anomaly mode: after each local rule, every input gradient must be finite;
 * the first that is not is reported with the op and where it was created. */
static bool check_anomaly(nb_ctx *ctx, const nb_node *n) {
    for (int i = 0; i < n->n_in; i++) {
        const nb_tensor *t = n->in[i];
        if (!t->requires_grad || !t->grad || t->grad_stale || all_finite(t, t->grad)) continue;
        char s[64], site[300];
        nb_site_str(n->file, n->line, site, sizeof site);
        nb_ctx_fail(ctx, NB_ERR_VALUE,
                    "anomaly: backward of op #%d '%s' (%s) produced a non-finite "
                    "gradient for its input %d %s",
                    n->index, n->name, site, i, /* 0-based, as gradcheck */
                    nb_shape_str(t, s, sizeof s));
        return false;
    }
    return true;
}

nb_status nb_backward(nb_ctx *ctx, nb_tensor *out, const nb_tensor *grad_out) {
    if (!ctx) return NB_ERR_NULL;
    if (ctx->status != NB_OK) return ctx->status;
    char s[64], s2[64];
    if (!out) return nb_ctx_fail(ctx, NB_ERR_NULL, "backward: output is NULL");
    const nb_tensor *both[2] = {out, grad_out};
    if (!nb_check_live(ctx, "backward", 2, both)) return ctx->status;
    if (!out->requires_grad)
        return nb_ctx_fail(ctx, NB_ERR_STATE,
                           "backward: output %s does not require grad (no input was marked "
                           "with nb_requires_grad, or grad was disabled)",
                           nb_shape_str(out, s, sizeof s));
    if (out->node && out->owner != ctx)
        return nb_ctx_fail(ctx, NB_ERR_STATE,
                           "backward: output %s was recorded on another context",
                           nb_shape_str(out, s, sizeof s));
    if (!grad_out && out->numel != 1)
        return nb_ctx_fail(ctx, NB_ERR_SHAPE,
                           "backward: output %s is not a scalar, pass grad_out of that shape",
                           nb_shape_str(out, s, sizeof s));
    if (grad_out && (!nb_same_shape(out, grad_out) || grad_out->dtype != out->dtype))
        return nb_ctx_fail(ctx, nb_same_shape(out, grad_out) ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                           "backward: grad_out %s %s does not match output %s %s",
                           nb_shape_str(grad_out, s2, sizeof s2),
                           nb_dtype_name(grad_out->dtype), nb_shape_str(out, s, sizeof s),
                           nb_dtype_name(out->dtype));

    /* Intermediate gradients restart from zero, so a second backward over
     * the same tape adds to the leaves exactly once more. */
    for (nb_node *n = ctx->tape; n; n = n->prev) nb_zero_grad(n->out);

    void *g = nb_grad_buffer(ctx, out);
    if (!g) return ctx->status ? ctx->status : NB_ERR_MEMORY;
    if (grad_out)
        nb_accumulate(out->dtype, g, grad_out->data, out->numel);
    else if (out->dtype == NB_F32)
        *(float *)g += 1.0f;
    else
        *(double *)g += 1.0;

    for (nb_node *n = ctx->tape; n; n = n->prev) {
        if (!n->out->grad) continue; /* not on a path to `out` */
        if (n->index > (out->node ? out->node->index : -1)) continue;
        if (ctx->probe) ctx->probe->backward(ctx->probe, n, false);
        n->backward(ctx, n);
        if (ctx->probe) ctx->probe->backward(ctx->probe, n, true);
        if (ctx->status != NB_OK) return ctx->status;
        if (ctx->detect_anomaly && !check_anomaly(ctx, n)) return ctx->status;
        nb_grad_release(ctx, n->out); /* every use of it was earlier on the way back */
    }
    ctx->backward_done = true;
    return NB_OK;
}

bool nb_set_detect_anomaly(nb_ctx *ctx, bool on) {
    if (!ctx) return false;
    bool prev = ctx->detect_anomaly;
    ctx->detect_anomaly = on;
    return prev;
}

nb_status nb_tape_write_fail(nb_ctx *ctx, const char *op, nb_status s) {
    if (!s || !ctx) return s;
    return nb_ctx_fail(ctx, s, "%s: %s", op,
                       s == NB_ERR_NULL     ? "the file is NULL"
                       : s == NB_ERR_MEMORY ? "out of memory"
                       : s == NB_ERR_IO     ? "a write failed"
                                            : nb_status_str(s));
}

static nb_status write_tape(const nb_ctx *ctx, FILE *f) {
    if (!ctx || !f) return NB_ERR_NULL;
    /* The list runs newest-first; print oldest-first. */
    int n = ctx->tape_len;
    fprintf(f, "tape: %d node%s\n", n, n == 1 ? "" : "s");
    const nb_node **order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) return NB_ERR_MEMORY;
    for (const nb_node *node = ctx->tape; node; node = node->prev) order[node->index] = node;
    for (int k = 0; k < n; k++) {
        const nb_node *node = order[k];
        char s[64];
        fprintf(f, "  #%-3d %-14s", node->index, node->name);
        /* named tensors (parameters by module path) show their name */
        for (int i = 0; i < node->n_in; i++) {
            const nb_tensor *t = node->in[i];
            fprintf(f, "%s%s%s%s%s", i ? ", " : "", t->name ? t->name : "", t->name ? " " : "",
                    nb_shape_str(t, s, sizeof s), t->requires_grad ? "*" : "");
        }
        fprintf(f, " -> %s%s%s", node->out->name ? node->out->name : "",
                node->out->name ? " " : "", nb_shape_str(node->out, s, sizeof s));
        if (node->file) fprintf(f, "  at %s:%d", node->file, node->line);
        fputc('\n', f);
    }
    free(order);
    return fflush(f) != 0 || ferror(f) ? NB_ERR_IO : NB_OK;
}

nb_status nb_tape_print(nb_ctx *ctx, FILE *f) {
    return nb_tape_write_fail(ctx, "tape_print", write_tape(ctx, f));
}

/* dst += src over [lo, hi), on any thread; float through the SIMD add. */
typedef struct acc_job {
    nb_dtype dt;
    void *dst;
    const void *src;
    const nb_vec_kernels *vk;
} acc_job;

static void accumulate_range(void *arg, int64_t lo, int64_t hi) {
    const acc_job *j = arg;
    if (j->dt == NB_F32) {
        j->vk->add((float *)j->dst + lo, (const float *)j->src + lo, (size_t)(hi - lo));
        return;
    }
    double *d = (double *)j->dst + lo;
    const double *s = (const double *)j->src + lo;
    for (int64_t i = 0; i < hi - lo; i++) d[i] += s[i];
}

void nb_accumulate(nb_dtype dt, void *dst, const void *src, size_t numel) {
    acc_job j = {dt, dst, src, nb_vec()};
    nb_parallel_for((int64_t)numel, 16384, accumulate_range, &j);
}

/* Marks a leaf as one whose gradient backward computes. */
nb_tensor *nb_requires_grad(nb_tensor *t) {
    if (!t) return NULL;
    nb_ctx *ctx = t->owner;
    if (!nb_ctx_ok(ctx)) return NULL;
    if (t->dtype != NB_F32 && t->dtype != NB_F64) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "requires_grad: dtype %s, only f32/f64 have gradients",
                    nb_dtype_name(t->dtype));
        return NULL;
    }
    if (t->node) {
        nb_ctx_fail(ctx, NB_ERR_STATE, "requires_grad: the tensor is the result of op '%s', "
                    "only leaves can be marked", t->node->name);
        return NULL;
    }
    t->requires_grad = true;
    if (!t->grad) {
        t->grad = nb_ctx_alloc(ctx, t->numel * nb_dtype_size(t->dtype));
        if (!t->grad) return NULL;
    }
    return t;
}
