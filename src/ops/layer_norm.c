/* ops/layer_norm.c - the normalisations over the last dim: layer_norm, then
 * rms_norm, each forward, backward and graph backward (their forward-mode
 * rules are in norm_forward.c). They share the row sums and the split of
 * the threads (rows for x, columns for the weight). */
#include "ops/ops_internal.h"

/* ==========================================================================
 * layer_norm over the last dim D of x (R rows):
 *   xhat = (x - mean) * rstd,  rstd = 1 / sqrt(var + eps)  (biased var)
 *   y = xhat * w + b           (w, b (D) optional)
 * Saves per-row (mean, rstd) as 2R doubles; statistics accumulate in double
 * for both dtypes. The node's inputs are x, then w and b where present;
 * node->i[0], i[1] say whether w, b are.
 * ========================================================================== */

/* sum = the sum of EXPR over d in [0, D), in double, as four partial sums
 * (d = 0, 1, 2, 3 mod 4) added up at the end: the adds of a row do not wait
 * on each other, and the order is fixed. EXPR reads the index d. */
#define NN_SUM4(sum, D, EXPR)                                                             \
    do {                                                                                  \
        double p0_ = 0, p1_ = 0, p2_ = 0, p3_ = 0;                                        \
        size_t d = 0;                                                                     \
        while (d + 4 <= (D)) {                                                            \
            p0_ += (EXPR);                                                                \
            d++;                                                                          \
            p1_ += (EXPR);                                                                \
            d++;                                                                          \
            p2_ += (EXPR);                                                                \
            d++;                                                                          \
            p3_ += (EXPR);                                                                \
            d++;                                                                          \
        }                                                                                 \
        for (; d < (D); d++) p0_ += (EXPR);                                               \
        (sum) = (p0_ + p1_) + (p2_ + p3_);                                                \
    } while (0)

/* One layer_norm call for the threads: forward rows are independent; the
 * backward splits dx by rows and dw, db by columns (each column summing its
 * rows in order), so no bit depends on the split. */
typedef struct ln_job {
    const nb_tensor *x, *w, *b;
    void *y;        /* forward: out; backward: out's gradient */
    double *stats;  /* (mean, rstd) per row */
    double eps;
    void *gx, *gw, *gb;
    size_t D;
    bool gx_fresh; /* gx is new: stored, not added to (float rows) */
} ln_job;

enum { LN_ROW_MAX = 4096 }; /* float rows longer than this take the double path */

enum { LN_GRAIN = 4096 }; /* elements worth a thread */

/* ---- float32 rows: the statistics in float, as PyTorch's CPU kernel keeps
 * them, summed in 16 partial sums (element d in part d mod 16, combined by
 * nb_vec_sum16's fixed tree, inline): plain loops the compiler vectorises, the same
 * bits in every build and for any split of the rows. float64 (gradcheck)
 * keeps the double sums below. */
static inline float ln_sum16(const float *x, size_t n) {
    float part[16] = {0};
    size_t d = 0;
    for (; d + 16 <= n; d += 16)
        for (int l = 0; l < 16; l++) part[l] += x[d + l];
    for (int l = 0; d < n; d++, l++) part[l] += x[d];
    return nb_sum16_inline(part);
}

/* t[d] = (x[d] - m) * rs, the normalised row, into t; returns nothing */
static void ln_xhat(float *t, const float *x, float m, float rs, size_t n) {
    for (size_t d = 0; d < n; d++) t[d] = (x[d] - m) * rs;
}

NB_HOT static void ln_fwd_rows_f32(const ln_job *j, int64_t lo, int64_t hi) {
    const float *xs = j->x->data, *ws = j->w ? j->w->data : NULL;
    const float *bs = j->b ? j->b->data : NULL;
    float *ys = j->y, t[LN_ROW_MAX];
    const size_t n = j->D;
    for (size_t r = (size_t)lo; r < (size_t)hi; r++) {
        const float *xr = xs + r * n;
        float *yr = ys + r * n;
        float m = ln_sum16(xr, n) / (float)n;
        for (size_t d = 0; d < n; d++) t[d] = (xr[d] - m) * (xr[d] - m);
        float rs = 1.0f / sqrtf(ln_sum16(t, n) / (float)n + (float)j->eps);
        j->stats[2 * r] = m;
        j->stats[2 * r + 1] = rs;
        if (ws && bs)
            for (size_t d = 0; d < n; d++) yr[d] = ((xr[d] - m) * rs) * ws[d] + bs[d];
        else if (ws)
            for (size_t d = 0; d < n; d++) yr[d] = ((xr[d] - m) * rs) * ws[d];
        else if (bs)
            for (size_t d = 0; d < n; d++) yr[d] = ((xr[d] - m) * rs) + bs[d];
        else
            ln_xhat(yr, xr, m, rs, n);
    }
}

static void ln_fwd_rows(void *arg, int64_t lo, int64_t hi) {
    const ln_job *j = arg;
    if (j->x->dtype == NB_F32 && j->D <= LN_ROW_MAX) {
        ln_fwd_rows_f32(j, lo, hi);
        return;
    }
    double *stats = j->stats, eps = j->eps;
#define K_(T)                                                                             \
    {                                                                                     \
        const T *xs = j->x->data, *ws = j->w ? j->w->data : NULL;                         \
        const T *bs = j->b ? j->b->data : NULL;                                           \
        T *ys = j->y;                                                                     \
        size_t n_ = j->D;                                                                 \
        for (size_t r = (size_t)lo; r < (size_t)hi; r++) {                                \
            const T *xr = xs + r * n_;                                                    \
            T *yr = ys + r * n_;                                                          \
            double s, v;                                                                  \
            NN_SUM4(s, n_, xr[d]);                                                        \
            double mean = s / (double)n_;                                                 \
            NN_SUM4(v, n_, ((double)xr[d] - mean) * ((double)xr[d] - mean));              \
            double rstd = 1.0 / sqrt(v / (double)n_ + eps);                               \
            stats[2 * r] = mean;                                                          \
            stats[2 * r + 1] = rstd;                                                      \
            T m = (T)mean, rs = (T)rstd;                                                  \
            if (ws && bs) /* one pass, the same roundings as ((x - m) * rs) * w + b */    \
                for (size_t d = 0; d < n_; d++) yr[d] = ((xr[d] - m) * rs) * ws[d] + bs[d]; \
            else                                                                          \
                for (size_t d = 0; d < n_; d++) {                                         \
                    yr[d] = (xr[d] - m) * rs;                                             \
                    if (ws) yr[d] *= ws[d];                                               \
                    if (bs) yr[d] += bs[d];                                               \
                }                                                                         \
        }                                                                                 \
    }
    NB_DISPATCH(j->x->dtype, K_);
#undef K_
}

static void layer_norm_backward(nb_ctx *ctx, nb_node *n); /* below, after the forward */
static nb_tensor *layer_norm_composed(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b,
                                      double eps); /* at the end */

nb_tensor *nb_layer_norm(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b, double eps) {
    const char *op = nb_op_name(NB_OP_LAYER_NORM);
    nb_tensor *all[3] = {x, w, b};
    static const char *const names[3] = {"x", "weight", "bias"};
    static const bool optional[3] = {false, true, true};
    if (!nb_check_named_inputs(ctx, op, 3, all, names, optional)) return NULL;
    char sx[64], sp[64];
    if (x->ndim < 1) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x %s has 0 dims, expected at least 1 (..., dim)", op,
                    nb_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    int64_t D = x->shape[x->ndim - 1];
    for (int i = 1; i < 3; i++) {
        const nb_tensor *t = all[i];
        if (t && (t->ndim != 1 || t->shape[0] != D)) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: %s %s does not fit x %s: expected shape (%lld)",
                        op, names[i], nb_shape_str(t, sp, sizeof sp),
                        nb_shape_str(x, sx, sizeof sx), (long long)D);
            return NULL;
        }
    }
    if (!(eps > 0.0) || isinf(eps)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: eps = %g, expected a finite number > 0", op, eps);
        return NULL;
    }
    if (x->numel == 0) return layer_norm_composed(ctx, x, w, b, eps); /* zero-size dims */
    nb_tensor *out = nb_empty(ctx, x->dtype, x->ndim, x->shape); /* every row is written */
    size_t R = x->numel / (size_t)D;
    double *stats = out ? nb_ctx_alloc_raw(ctx, 2 * R * sizeof *stats) : NULL;
    if (!stats) return NULL;
    ln_job j = {x, w, b, out->data, stats, eps, NULL, NULL, NULL, (size_t)D, false};
    nb_parallel_for((int64_t)R, 1 + LN_GRAIN / D, ln_fwd_rows, &j);
    nb_tensor *in[3];
    int n_in = 0;
    in[n_in++] = x;
    if (w) in[n_in++] = w;
    if (b) in[n_in++] = b;
    nb_node *n = nb_record_op(ctx, NB_OP_LAYER_NORM, out, n_in, in, layer_norm_backward);
    if (n) {
        n->saved = stats;
        n->f[0] = eps;
        n->i[0] = w != NULL;
        n->i[1] = b != NULL;
    }
    return out;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* With dxhat = dy * w (dy without w):
 *   dx += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
 *   dw += sum over rows of dy * xhat,   db += sum over rows of dy.
 * Reuses the saved (mean, rstd) and x to rebuild xhat. */
NB_HOT static void ln_bwd_rows_f32(const ln_job *j, int64_t lo, int64_t hi);

static void ln_bwd_rows(void *arg, int64_t lo, int64_t hi) {
    const ln_job *j = arg;
    if (j->x->dtype == NB_F32 && j->D <= LN_ROW_MAX) {
        ln_bwd_rows_f32(j, lo, hi);
        return;
    }
    const double *stats = j->stats;
    size_t D = j->D;
#define K_(T)                                                                             \
    {                                                                                     \
        const T *xs = j->x->data, *g = j->y, *ws = j->w ? j->w->data : NULL;              \
        T *dx = j->gx;                                                                    \
        for (size_t r = (size_t)lo; r < (size_t)hi; r++) {                                \
            const T *xr = xs + r * D, *gr = g + r * D;                                    \
            T m = (T)stats[2 * r], rs = (T)stats[2 * r + 1];                              \
            double s1, s2; /* sum dxhat, sum dxhat * xhat */                              \
            NN_SUM4(s1, D, ws ? gr[d] * ws[d] : gr[d]);                                   \
            NN_SUM4(s2, D, (ws ? gr[d] * ws[d] : gr[d]) * ((xr[d] - m) * rs));            \
            T m1 = (T)(s1 / (double)D), m2 = (T)(s2 / (double)D);                         \
            T *dxr = dx + r * D;                                                          \
            for (size_t d = 0; d < D; d++) {                                              \
                T gh = ws ? gr[d] * ws[d] : gr[d];                                        \
                dxr[d] += rs * (gh - m1 - ((xr[d] - m) * rs) * m2);                       \
            }                                                                             \
        }                                                                                 \
    }
    NB_DISPATCH(j->x->dtype, K_);
#undef K_
}

/* dw, db for columns [lo, hi), 64 at a time: each column's sum runs over
 * the rows in order from its old value, in a local array that is written
 * back once, so two threads' neighbouring columns never share a cache line
 * row after row (as they would if every row's add went into dw itself). */
enum { LN_COLS = 64 };
/* The fewest columns worth a thread in the dw/db passes, whatever R: a
 * task reads every row's cache line of its columns, so k tasks of narrow
 * chunks read x and dy k times over (Qwen3's QK-norm, D = head_dim 32 and
 * R = 3072 rows, was cut into 32 one-column tasks: 32 passes). With this
 * floor a chunk (nb_parallel_for's quarter of it) is at least 16 columns,
 * a 64-byte line of floats, and rows narrower than 2 * LN_COLS_MIN take one
 * pass on one thread. Each column still sums its rows in order: the same
 * bits at any split. */
enum { LN_COLS_MIN = 64 };
static int64_t cols_grain(int64_t R) {
    int64_t g = 1 + LN_GRAIN / R;
    return g > LN_COLS_MIN ? g : LN_COLS_MIN;
}
NB_HOT static void ln_bwd_cols(void *arg, int64_t lo, int64_t hi) {
    const ln_job *j = arg;
    const double *stats = j->stats;
    size_t D = j->D, R = j->x->numel / D;
#define K_(T)                                                                             \
    {                                                                                     \
        const T *xs = j->x->data, *g = j->y;                                              \
        T *dw = j->gw, *db = j->gb, aw[LN_COLS], ab[LN_COLS];                             \
        for (size_t c0 = (size_t)lo; c0 < (size_t)hi; c0 += LN_COLS) {                    \
            size_t nc = (size_t)hi - c0 < LN_COLS ? (size_t)hi - c0 : LN_COLS;            \
            for (size_t c = 0; c < nc; c++) {                                             \
                aw[c] = dw ? dw[c0 + c] : 0;                                              \
                ab[c] = db ? db[c0 + c] : 0;                                              \
            }                                                                             \
            for (size_t r = 0; r < R; r++) {                                              \
                const T *xr = xs + r * D + c0, *gr = g + r * D + c0;                      \
                T m = (T)stats[2 * r], rs = (T)stats[2 * r + 1];                          \
                if (dw)                                                                   \
                    for (size_t c = 0; c < nc; c++) aw[c] += gr[c] * ((xr[c] - m) * rs);  \
                if (db)                                                                   \
                    for (size_t c = 0; c < nc; c++) ab[c] += gr[c];                       \
            }                                                                             \
            for (size_t c = 0; c < nc; c++) {                                             \
                if (dw) dw[c0 + c] = aw[c];                                               \
                if (db) db[c0 + c] = ab[c];                                               \
            }                                                                             \
        }                                                                                 \
    }
    NB_DISPATCH(j->x->dtype, K_);
#undef K_
}

static void layer_norm_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = n->in[0], *out = n->out;
    nb_tensor *w = n->i[0] ? n->in[1] : NULL;
    nb_tensor *b = n->i[1] ? n->in[1 + (n->i[0] ? 1 : 0)] : NULL;
    ln_job j = {x, w, b, out->grad, n->saved, 0, NULL, nb_grad_buffer(ctx, w),
                nb_grad_buffer(ctx, b), (size_t)x->shape[x->ndim - 1], false};
    int64_t D = (int64_t)j.D, R = (int64_t)(x->numel / j.D);
    if (j.gw || j.gb) nb_parallel_for(D, cols_grain(R), ln_bwd_cols, &j);
    /* x's buffer asked for after w's and b's: x may be one of them */
    bool f32 = x->dtype == NB_F32 && j.D <= LN_ROW_MAX;
    j.gx = f32 ? nb_grad_buffer_fresh(ctx, x, &j.gx_fresh) : nb_grad_buffer(ctx, x);
    if (j.gx) nb_parallel_for(R, 1 + LN_GRAIN / D, ln_bwd_rows, &j);
}

/* dx = rs (g - mean(g) - xhat mean(g xhat)), g = dy w, stored when the
 * buffer is fresh, else added */
NB_HOT static void ln_bwd_rows_f32(const ln_job *j, int64_t lo, int64_t hi) {
    const float *xs = j->x->data, *gs = j->y, *ws = j->w ? j->w->data : NULL;
    float *dx = j->gx, g[LN_ROW_MAX], xh[LN_ROW_MAX], gx[LN_ROW_MAX];
    const size_t n = j->D;
    for (size_t r = (size_t)lo; r < (size_t)hi; r++) {
        const float *xr = xs + r * n, *gr = gs + r * n;
        float m = (float)j->stats[2 * r], rs = (float)j->stats[2 * r + 1];
        if (ws)
            for (size_t d = 0; d < n; d++) g[d] = gr[d] * ws[d];
        else
            memcpy(g, gr, n * sizeof(float));
        ln_xhat(xh, xr, m, rs, n);
        for (size_t d = 0; d < n; d++) gx[d] = g[d] * xh[d];
        float m1 = ln_sum16(g, n) / (float)n, m2 = ln_sum16(gx, n) / (float)n;
        float *dxr = dx + r * n;
        if (j->gx_fresh)
            for (size_t d = 0; d < n; d++) dxr[d] = rs * ((g[d] - m1) - xh[d] * m2);
        else
            for (size_t d = 0; d < n; d++) dxr[d] += rs * ((g[d] - m1) - xh[d] * m2);
    }
}

/* ---- graph backward: through layer_norm's composed form (mean_dim, sub,
 * mul, pow, add), recorded and differentiated with nb_grad; the fused
 * kernels above stay the first-order path ------------------------------- */
/* layer_norm from elementary recorded ops: the graph backward's form, and
 * the forward of tensors with a zero-size dim, which the row kernels do not
 * take. */
static nb_tensor *layer_norm_composed(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b,
                                      double eps) {
    nb_tensor *xc = nb_sub(ctx, x, nb_mean_dim(ctx, x, -1, true));
    nb_tensor *var = nb_mean_dim(ctx, nb_mul(ctx, xc, xc), -1, true);
    nb_tensor *y = nb_mul(ctx, xc, nb_pow(ctx, nb_add_scalar(ctx, var, eps), -0.5));
    if (w) y = nb_mul(ctx, y, w);
    if (b) y = nb_add(ctx, y, b);
    return y;
}

void nb_graph_backward_layer_norm(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0];
    nb_tensor *w = n->i[0] ? n->in[1] : NULL;
    nb_tensor *b = n->i[1] ? n->in[1 + (n->i[0] ? 1 : 0)] : NULL;
    nb_graph_backward_composed(ctx, n, layer_norm_composed(ctx, x, w, b, n->f[0]), dout, din);
}

/* ==========================================================================
 * rms_norm over the last dim D of x (R rows), PyTorch 2.4's F.rms_norm:
 *   y = (x * rstd) * w,  rstd = 1 / sqrt(mean(x^2) + eps)   (w (D) optional)
 * Saves rstd per row (R doubles); float32 sums its squares in float (16
 * partial sums, as layer_norm), float64 in double. The node's inputs are x
 * and w where present; node->i[0] says whether w is.
 * ========================================================================== */

typedef struct rms_job {
    const nb_tensor *x, *w;
    void *y;       /* forward: out; backward: out's gradient */
    double *rstd;  /* per row */
    double eps;
    void *gx, *gw;
    size_t D;
    bool gx_fresh; /* gx is new: stored, not added to (float rows) */
} rms_job;

NB_HOT static void rms_fwd_rows_f32(const rms_job *j, int64_t lo, int64_t hi) {
    const float *xs = j->x->data, *ws = j->w ? j->w->data : NULL;
    float *ys = j->y, t[LN_ROW_MAX];
    const size_t n = j->D;
    for (size_t r = (size_t)lo; r < (size_t)hi; r++) {
        const float *xr = xs + r * n;
        float *yr = ys + r * n;
        for (size_t d = 0; d < n; d++) t[d] = xr[d] * xr[d];
        float rs = 1.0f / sqrtf(ln_sum16(t, n) / (float)n + (float)j->eps);
        j->rstd[r] = rs;
        if (ws)
            for (size_t d = 0; d < n; d++) yr[d] = (xr[d] * rs) * ws[d];
        else
            for (size_t d = 0; d < n; d++) yr[d] = xr[d] * rs;
    }
}

static void rms_fwd_rows(void *arg, int64_t lo, int64_t hi) {
    const rms_job *j = arg;
    if (j->x->dtype == NB_F32 && j->D <= LN_ROW_MAX) {
        rms_fwd_rows_f32(j, lo, hi);
        return;
    }
#define K_(T)                                                                             \
    {                                                                                     \
        const T *xs = j->x->data, *ws = j->w ? j->w->data : NULL;                         \
        T *ys = j->y;                                                                     \
        size_t n_ = j->D;                                                                 \
        for (size_t r = (size_t)lo; r < (size_t)hi; r++) {                                \
            const T *xr = xs + r * n_;                                                    \
            T *yr = ys + r * n_;                                                          \
            double s;                                                                     \
            NN_SUM4(s, n_, (double)xr[d] * (double)xr[d]);                                \
            double rstd = 1.0 / sqrt(s / (double)n_ + j->eps);                            \
            j->rstd[r] = rstd;                                                            \
            T rs = (T)rstd;                                                               \
            for (size_t d = 0; d < n_; d++) yr[d] = ws ? (xr[d] * rs) * ws[d] : xr[d] * rs; \
        }                                                                                 \
    }
    NB_DISPATCH(j->x->dtype, K_);
#undef K_
}

static void rms_norm_backward(nb_ctx *ctx, nb_node *n); /* below, after the forward */
static nb_tensor *rms_norm_composed(nb_ctx *ctx, nb_tensor *x, nb_tensor *w,
                                    double eps); /* at the end */

nb_tensor *nb_rms_norm(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, double eps) {
    const char *op = nb_op_name(NB_OP_RMS_NORM);
    nb_tensor *all[2] = {x, w};
    static const char *const names[2] = {"x", "weight"};
    static const bool optional[2] = {false, true};
    if (!nb_check_named_inputs(ctx, op, 2, all, names, optional)) return NULL;
    char sx[64], sp[64];
    if (x->ndim < 1) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x %s has 0 dims, expected at least 1 (..., dim)", op,
                    nb_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    int64_t D = x->shape[x->ndim - 1];
    if (w && (w->ndim != 1 || w->shape[0] != D)) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: weight %s does not fit x %s: expected shape (%lld)",
                    op, nb_shape_str(w, sp, sizeof sp), nb_shape_str(x, sx, sizeof sx),
                    (long long)D);
        return NULL;
    }
    if (!(eps > 0.0) || isinf(eps)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: eps = %g, expected a finite number > 0", op, eps);
        return NULL;
    }
    if (x->numel == 0) return rms_norm_composed(ctx, x, w, eps); /* zero-size dims */
    nb_tensor *out = nb_empty(ctx, x->dtype, x->ndim, x->shape); /* every row is written */
    size_t R = x->numel / (size_t)D;
    double *rstd = out ? nb_ctx_alloc_raw(ctx, R * sizeof *rstd) : NULL;
    if (!rstd) return NULL;
    rms_job j = {x, w, out->data, rstd, eps, NULL, NULL, (size_t)D, false};
    nb_parallel_for((int64_t)R, 1 + LN_GRAIN / D, rms_fwd_rows, &j);
    nb_tensor *in[2] = {x, w};
    nb_node *n = nb_record_op(ctx, NB_OP_RMS_NORM, out, w ? 2 : 1, in, rms_norm_backward);
    if (n) {
        n->saved = rstd;
        n->f[0] = eps;
        n->i[0] = w != NULL;
    }
    return out;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* With g = dy * w (dy without w) and xhat = x * rstd:
 *   dx += rstd * (g - xhat * mean(g * xhat)),   dw += sum over rows of dy * xhat.
 * Reuses the saved rstd and x to rebuild xhat. */
NB_HOT static void rms_bwd_rows_f32(const rms_job *j, int64_t lo, int64_t hi) {
    const float *xs = j->x->data, *gs = j->y, *ws = j->w ? j->w->data : NULL;
    float *dx = j->gx, g[LN_ROW_MAX], xh[LN_ROW_MAX], gx[LN_ROW_MAX];
    const size_t n = j->D;
    for (size_t r = (size_t)lo; r < (size_t)hi; r++) {
        const float *xr = xs + r * n, *gr = gs + r * n;
        float rs = (float)j->rstd[r];
        if (ws)
            for (size_t d = 0; d < n; d++) g[d] = gr[d] * ws[d];
        else
            memcpy(g, gr, n * sizeof(float));
        for (size_t d = 0; d < n; d++) xh[d] = xr[d] * rs;
        for (size_t d = 0; d < n; d++) gx[d] = g[d] * xh[d];
        float m2 = ln_sum16(gx, n) / (float)n;
        float *dxr = dx + r * n;
        if (j->gx_fresh)
            for (size_t d = 0; d < n; d++) dxr[d] = rs * (g[d] - xh[d] * m2);
        else
            for (size_t d = 0; d < n; d++) dxr[d] += rs * (g[d] - xh[d] * m2);
    }
}

static void rms_bwd_rows(void *arg, int64_t lo, int64_t hi) {
    const rms_job *j = arg;
    if (j->x->dtype == NB_F32 && j->D <= LN_ROW_MAX) {
        rms_bwd_rows_f32(j, lo, hi);
        return;
    }
    size_t D = j->D;
#define K_(T)                                                                             \
    {                                                                                     \
        const T *xs = j->x->data, *g = j->y, *ws = j->w ? j->w->data : NULL;              \
        T *dx = j->gx;                                                                    \
        for (size_t r = (size_t)lo; r < (size_t)hi; r++) {                                \
            const T *xr = xs + r * D, *gr = g + r * D;                                    \
            T rs = (T)j->rstd[r];                                                         \
            double s2; /* sum g * xhat */                                                 \
            NN_SUM4(s2, D, (ws ? gr[d] * ws[d] : gr[d]) * (xr[d] * rs));                  \
            T m2 = (T)(s2 / (double)D), *dxr = dx + r * D;                                \
            for (size_t d = 0; d < D; d++) {                                              \
                T gh = ws ? gr[d] * ws[d] : gr[d];                                        \
                dxr[d] += rs * (gh - (xr[d] * rs) * m2);                                  \
            }                                                                             \
        }                                                                                 \
    }
    NB_DISPATCH(j->x->dtype, K_);
#undef K_
}

/* dw for columns [lo, hi), LN_COLS at a time, each column summing its rows
 * in order in a local array written back once (as ln_bwd_cols). */
NB_HOT static void rms_bwd_cols(void *arg, int64_t lo, int64_t hi) {
    const rms_job *j = arg;
    size_t D = j->D, R = j->x->numel / D;
#define K_(T)                                                                             \
    {                                                                                     \
        const T *xs = j->x->data, *g = j->y;                                              \
        T *dw = j->gw, aw[LN_COLS];                                                       \
        for (size_t c0 = (size_t)lo; c0 < (size_t)hi; c0 += LN_COLS) {                    \
            size_t nc = (size_t)hi - c0 < LN_COLS ? (size_t)hi - c0 : LN_COLS;            \
            for (size_t c = 0; c < nc; c++) aw[c] = dw[c0 + c];                           \
            for (size_t r = 0; r < R; r++) {                                              \
                const T *xr = xs + r * D + c0, *gr = g + r * D + c0;                      \
                T rs = (T)j->rstd[r];                                                     \
                for (size_t c = 0; c < nc; c++) aw[c] += gr[c] * (xr[c] * rs);            \
            }                                                                             \
            for (size_t c = 0; c < nc; c++) dw[c0 + c] = aw[c];                           \
        }                                                                                 \
    }
    NB_DISPATCH(j->x->dtype, K_);
#undef K_
}

static void rms_norm_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = n->in[0], *out = n->out;
    nb_tensor *w = n->i[0] ? n->in[1] : NULL;
    rms_job j = {x, w, out->grad, n->saved, 0, NULL, nb_grad_buffer(ctx, w),
                 (size_t)x->shape[x->ndim - 1], false};
    int64_t D = (int64_t)j.D, R = (int64_t)(x->numel / j.D);
    if (j.gw) nb_parallel_for(D, cols_grain(R), rms_bwd_cols, &j);
    /* x's buffer asked for after w's: x may be w */
    bool f32 = x->dtype == NB_F32 && j.D <= LN_ROW_MAX;
    j.gx = f32 ? nb_grad_buffer_fresh(ctx, x, &j.gx_fresh) : nb_grad_buffer(ctx, x);
    if (j.gx) nb_parallel_for(R, 1 + LN_GRAIN / D, rms_bwd_rows, &j);
}

/* ---- graph backward: through rms_norm's composed form (mul, mean_dim,
 * add_scalar, pow), recorded and differentiated with nb_grad; the fused
 * kernels above stay the first-order path ----------------------------------- */
/* rms_norm from elementary recorded ops: the graph backward's form, and the
 * forward of tensors with a zero-size dim. */
static nb_tensor *rms_norm_composed(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, double eps) {
    nb_tensor *ms = nb_mean_dim(ctx, nb_mul(ctx, x, x), -1, true);
    nb_tensor *y = nb_mul(ctx, x, nb_pow(ctx, nb_add_scalar(ctx, ms, eps), -0.5));
    return w ? nb_mul(ctx, y, w) : y;
}

void nb_graph_backward_rms_norm(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0], *w = n->i[0] ? n->in[1] : NULL;
    nb_graph_backward_composed(ctx, n, rms_norm_composed(ctx, x, w, n->f[0]), dout, din);
}
