/* ops/loss.c - cross_entropy and mse_loss, each returning a 0-dim mean.
 *
 * cross_entropy is fused: it never builds the log-softmax tensor. Per row it
 * keeps only the log-sum-exp and the target, which is all its backward needs
 * to rebuild the softmax. Sums are accumulated in double for both dtypes. */
#include "ops/ops_internal.h"

#include <inttypes.h>

/* What cross_entropy's forward saves per row (n->saved, N entries). */
typedef struct ce_row {
    double lse;     /* log(sum_c exp(logits[c])), max-subtracted */
    int64_t target; /* the class index, copied so targets may change later */
} ce_row;

/* Writes the leading dims of logits, "(B, T)", into buf: the shape the
 * targets must have. */
static char *lead_shape_str(const nb_tensor *logits, char *buf, size_t n) {
    nb_tensor lead = *logits;
    lead.ndim = logits->ndim - 1;
    return nb_shape_str(&lead, buf, n);
}

static bool ce_check(nb_ctx *ctx, const char *name, nb_tensor *logits, const nb_tensor *targets) {
    if (!nb_check_float_inputs(ctx, name, 1, &logits)) return false;
    char sl[64], st[64], se[64];
    if (!targets) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: targets is NULL", name);
        return false;
    }
    if (targets->dtype != NB_I64) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: targets %s are %s, expected i64 class indices",
                    name, nb_shape_str(targets, st, sizeof st), nb_dtype_name(targets->dtype));
        return false;
    }
    if (logits->ndim >= 1 && logits->shape[logits->ndim - 1] == 0) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: logits %s have no classes, expected >= 1", name,
                    nb_shape_str(logits, sl, sizeof sl));
        return false;
    }
    bool fits = logits->ndim >= 1 && targets->ndim == logits->ndim - 1;
    for (int d = 0; fits && d < targets->ndim; d++) fits = targets->shape[d] == logits->shape[d];
    if (!fits) {
        if (logits->ndim < 1)
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "%s: logits %s have no class dim, expected (..., C) with targets (...)",
                        name, nb_shape_str(logits, sl, sizeof sl));
        else
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "%s: logits %s and targets %s do not match, expected targets of shape %s",
                        name, nb_shape_str(logits, sl, sizeof sl),
                        nb_shape_str(targets, st, sizeof st),
                        lead_shape_str(logits, se, sizeof se));
        return false;
    }
    int64_t classes = logits->shape[logits->ndim - 1];
    const int64_t *t = targets->data;
    for (size_t i = 0; i < targets->numel; i++) {
        if (t[i] < 0 || t[i] >= classes) {
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "%s: target %" PRId64 " at index %zu is out of range for logits %s, "
                        "expected 0..%" PRId64,
                        name, t[i], i, nb_shape_str(logits, sl, sizeof sl), classes - 1);
            return false;
        }
    }
    return true;
}

/* float32 rows through the SIMD kernels (exp within 2 ulp, float sums of
 * 16 partial sums per CE_CHUNK columns), split over threads by rows; each row's loss goes to
 * `loss` and the mean is summed in row order, so no bit depends on the
 * split. The log and the mean are in double. */
typedef struct ce_f32 {
    const float *x;
    float *dx; /* backward */
    ce_row *rows;        /* forward: written */
    const ce_row *saved; /* backward: read */
    double *loss;        /* forward: per row */
    size_t cols;
    float scale; /* backward: g / N */
    const nb_vec_kernels *vk;
} ce_f32;

static int64_t ce_grain(size_t cols) { return 1 + (int64_t)(8192 / cols); }

enum { CE_CHUNK = 1024 }; /* columns per stack buffer */

static void ce_fwd_range(void *arg, int64_t lo, int64_t hi) {
    const ce_f32 *j = arg;
    float tmp[CE_CHUNK];
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + (size_t)r * j->cols;
        float m = j->vk->max(x, j->cols);
        double s = 0;
        for (size_t c = 0; c < j->cols; c += CE_CHUNK) {
            size_t len = j->cols - c < CE_CHUNK ? j->cols - c : CE_CHUNK;
            s += j->vk->exp_sub_sum(tmp, x + c, m, len);
        }
        double lse = (double)m + log(s);
        j->loss[r] = lse - (double)x[j->rows[r].target];
        j->rows[r].lse = lse;
    }
}

static void ce_bwd_range(void *arg, int64_t lo, int64_t hi) {
    const ce_f32 *j = arg;
    float tmp[CE_CHUNK];
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + (size_t)r * j->cols;
        float *dx = j->dx + (size_t)r * j->cols;
        /* exp(x - lse) = exp(x - m) exp(m - lse): x - m is exact enough in
         * float even for large logits, lse - m is taken in double */
        float m = j->vk->max(x, j->cols);
        float k = (float)((double)j->scale * exp((double)m - j->saved[r].lse));
        for (size_t c = 0; c < j->cols; c += CE_CHUNK) {
            size_t len = j->cols - c < CE_CHUNK ? j->cols - c : CE_CHUNK;
            j->vk->exp_sub_sum(tmp, x + c, m, len);
            j->vk->scale(tmp, k, len);
            j->vk->add(dx + c, tmp, len);
        }
        dx[j->saved[r].target] -= j->scale;
    }
}

/* ---- cross_entropy: loss = mean_n (lse(x_n) - x_n[t_n]) ------------------------
 * logits x (..., C) seen as (N, C), targets t (...) seen as (N), loss ().
 * Backward: dx_n[c] += g / N * (exp(x_n[c] - lse_n) - [c == t_n]). Reuses the
 * input logits and the per-row lse and target saved by the forward. */
static void cross_entropy_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *logits = n->in[0], *out = n->out;
    void *gx = nb_grad_buffer(ctx, logits);
    if (!gx) return;
    const ce_row *rows = n->saved;
    size_t cols = (size_t)logits->shape[logits->ndim - 1];
    size_t nrows = logits->numel / cols;
    if (out->dtype == NB_F32) {
        ce_f32 j = {logits->data, gx, NULL, rows, NULL, cols,
                    (float)(*(const float *)out->grad / (double)nrows), nb_vec()};
        nb_parallel_for((int64_t)nrows, ce_grain(cols), ce_bwd_range, &j);
        return;
    }
#define K(T)                                                                  \
    {                                                                         \
        const double scale = (double)*(const T *)out->grad / (double)nrows;   \
        for (size_t r = 0; r < nrows; r++) {                                  \
            const T *x = (const T *)logits->data + r * cols;                  \
            T *dx = (T *)gx + r * cols;                                       \
            const double lse = rows[r].lse;                                   \
            for (size_t c = 0; c < cols; c++)                                 \
                dx[c] += (T)(scale * exp((double)x[c] - lse));                \
            dx[rows[r].target] -= (T)scale;                                   \
        }                                                                     \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
}

nb_tensor *nb_cross_entropy(nb_ctx *ctx, nb_tensor *logits, const nb_tensor *targets) {
    const char *name = nb_op_name(NB_OP_CROSS_ENTROPY);
    if (!ce_check(ctx, name, logits, targets)) return NULL;
    size_t cols = (size_t)logits->shape[logits->ndim - 1];
    size_t nrows = logits->numel / cols;
    nb_tensor *out = nb_empty(ctx, logits->dtype, 0, NULL);
    if (!out) return NULL;
    /* The per-row record is only needed when a backward or a forward-mode
     * rule can follow. */
    ce_row *rows = NULL;
    if ((ctx->grad_enabled && logits->requires_grad) || nb_fwd_active(ctx, 1, &logits)) {
        rows = nb_ctx_alloc(ctx, nrows * sizeof *rows);
        if (!rows) return NULL;
    }
    const int64_t *t = targets->data;
    double total = 0.0;
    if (logits->dtype == NB_F32) {
        ce_row *rr = rows ? rows : nb_ctx_alloc_raw(ctx, nrows * sizeof *rr);
        double *loss = nb_ctx_alloc_raw(ctx, nrows * sizeof *loss);
        if (!rr || !loss) return NULL;
        for (size_t r = 0; r < nrows; r++) rr[r].target = t[r];
        ce_f32 j = {logits->data, NULL, rr, NULL, loss, cols, 0.0f, nb_vec()};
        nb_parallel_for((int64_t)nrows, ce_grain(cols), ce_fwd_range, &j);
        for (size_t r = 0; r < nrows; r++) total += loss[r];
        *(float *)out->data = (float)(total / (double)nrows);
    } else {
#define K(T)                                                                  \
    {                                                                         \
        for (size_t r = 0; r < nrows; r++) {                                  \
            const T *x = (const T *)logits->data + r * cols;                  \
            double m = x[0], s = 0.0;                                         \
            for (size_t c = 1; c < cols; c++)                                 \
                if (x[c] > m) m = x[c];                                       \
            for (size_t c = 0; c < cols; c++) s += exp((double)x[c] - m);     \
            double lse = m + log(s);                                          \
            total += lse - (double)x[t[r]];                                   \
            if (rows) rows[r] = (ce_row){lse, t[r]};                          \
        }                                                                     \
        *(T *)out->data = (T)(total / (double)nrows);                         \
    }
        NB_DISPATCH(out->dtype, K);
#undef K
    }
    nb_node *n = nb_record_op(ctx, NB_OP_CROSS_ENTROPY, out, 1, &logits, cross_entropy_backward);
    if (n) n->saved = rows;
    return out;
}

/* cross_entropy: dlogits = dout (softmax(logits) - onehot(target)) / N, the
 * one-hot a constant built from the saved targets. */
void nb_graph_backward_cross_entropy(nb_ctx *ctx, nb_node *n, nb_tensor *dout,
                                     nb_tensor **din) {
    nb_tensor *logits = n->in[0];
    const ce_row *rows = n->saved;
    size_t cols = (size_t)logits->shape[logits->ndim - 1], nrows = logits->numel / cols;
    nb_tensor *hot = nb_zeros(ctx, logits->dtype, logits->ndim, logits->shape);
    if (!hot || !rows) return;
    for (size_t r = 0; r < nrows; r++) nb_set(hot, r * cols + (size_t)rows[r].target, 1.0);
    nb_tensor *p = nb_sub(ctx, nb_softmax(ctx, logits), hot);
    din[0] = nb_mul(ctx, p, nb_scale(ctx, dout, 1.0 / (double)nrows));
}

/* ---- mse_loss: loss = mean((a - b)^2); a, b same shape, loss () ----------------
 * Backward: da += 2 g (a - b) / N, db -= the same. Reuses both inputs. */
static void mse_loss_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *b = n->in[1], *out = n->out;
    void *ga = nb_grad_buffer(ctx, a), *gb = nb_grad_buffer(ctx, b);
#define K(T)                                                                  \
    {                                                                         \
        const T k = (T)(2.0 * (double)*(const T *)out->grad / (double)a->numel); \
        const T *x = a->data, *y = b->data;                                   \
        T *da = ga, *db = gb;                                                 \
        if (da)                                                               \
            for (size_t i = 0; i < a->numel; i++) da[i] += k * (x[i] - y[i]); \
        if (db)                                                               \
            for (size_t i = 0; i < a->numel; i++) db[i] -= k * (x[i] - y[i]); \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
}

nb_tensor *nb_mse_loss(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    const char *name = nb_op_name(NB_OP_MSE_LOSS);
    nb_tensor *in[2] = {a, b};
    if (!nb_check_float_inputs(ctx, name, 2, in)) return NULL;
    if (!nb_same_shape(a, b)) {
        char sa[64], sb[64];
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: shapes %s and %s differ, expected equal shapes",
                    name, nb_shape_str(a, sa, sizeof sa), nb_shape_str(b, sb, sizeof sb));
        return NULL;
    }
    nb_tensor *out = nb_empty(ctx, a->dtype, 0, NULL);
    if (!out) return NULL;
    double total = 0.0;
#define K(T)                                                                  \
    {                                                                         \
        const T *x = a->data, *y = b->data;                                   \
        for (size_t i = 0; i < a->numel; i++) {                               \
            double d = (double)x[i] - (double)y[i];                           \
            total += d * d;                                                   \
        }                                                                     \
        *(T *)out->data = (T)(total / (double)a->numel);                      \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
    nb_record_op(ctx, NB_OP_MSE_LOSS, out, 2, in, mse_loss_backward);
    return out;
}

void nb_graph_backward_mse_loss(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *a = n->in[0], *b = n->in[1]; /* 2 dout (a - b) / N, and minus that */
    nb_tensor *d = nb_mul(ctx, nb_sub(ctx, a, b), nb_scale(ctx, dout, 2.0 / (double)a->numel));
    din[0] = d;
    if (b->requires_grad) din[1] = nb_neg(ctx, d);
}

/* ---- forward-mode rules: scalar losses, J t = <dloss/dx, t> ------------------ */
/* cross_entropy: <(softmax(logits) - onehot(target)) / N, t>, the gradient
 * from the graph backward at dout = 1 */
nb_tensor *nb_forward_cross_entropy(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (!tin[0]) return NULL;
    nb_tensor *din[1] = {NULL};
    nb_tensor *one = nb_ones(ctx, n->out->dtype, 0, NULL);
    if (!one) return NULL;
    nb_graph_backward_cross_entropy(ctx, n, one, din);
    return din[0] ? nb_sum(ctx, nb_mul(ctx, din[0], tin[0])) : NULL;
}

/* mse_loss: 2 Σ (a - b)(ta - tb) / numel */
nb_tensor *nb_forward_mse_loss(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    nb_tensor *a = n->in[0], *b = n->in[1];
    nb_tensor *t = nb_fwd_sum(ctx, a, tin[0], tin[1], -1);
    if (!t) return NULL;
    return nb_scale(ctx, nb_sum(ctx, nb_mul(ctx, nb_sub(ctx, a, b), t)), 2.0 / (double)a->numel);
}
