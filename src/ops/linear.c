/* ops/linear.c - linear: y = x @ w^T + b, forward then backward. One fused
 * node per layer, every product on the gemm engine. */
#include "ops/ops_internal.h"

/* ==========================================================================
 * linear: y (R, O) = x (R, K) @ w (O, K)^T + b (O), where R is the product
 * of x's leading dims, K = in_features, O = out_features.
 *
 * All three products run on the matmul kernel (nb_gemm_<T>, kernels/gemm.c),
 * with the transposed operands read through strides:
 *
 *   forward  y  = b + x @ w^T    w^T: w read with strides (1, K)
 *   backward dx += dy @ w
 *            dw += dy^T @ x      dy^T: dy read with strides (1, O)
 *            db += sum over rows of dy
 *
 * The worker pool splits rows for y and dx and outputs (rows of dw, entries
 * of db) for the weight gradients: every element is computed by one thread
 * in the same order as without threads, so results do not depend on the
 * thread count.
 * ========================================================================== */

/* One linear call, shared with the worker pool (see parallel.c). */
typedef struct lin_job {
    void *y, *dx, *dw, *db;     /* outputs (any may be NULL where unused) */
    const void *x, *w, *b, *dy; /* inputs; b may be NULL */
    int64_t R, K, O;            /* rows, in_features, out_features */
    bool add;                   /* forward, b NULL: y += x @ w^T (a tangent's second product) */
} lin_job;

/* The fewest rows (or outputs) worth a thread: about 512k multiply-adds,
 * some 10 us of the AVX2 kernel. Less work than that is done sooner on one
 * thread than by waking a worker (the demo's 512 x 32 x 32 layers stay on
 * one). */
static int64_t lin_grain(int64_t per_item) {
    int64_t g = per_item > 0 ? ((int64_t)1 << 19) / per_item : 1;
    return g > 0 ? g : 1;
}

/* A linear node's job: rows R, in_features K and out_features O from x and w. */
static lin_job linear_job(const nb_tensor *x, const nb_tensor *w) {
    int64_t K = w->shape[1];
    return (lin_job){.x = x->data, .w = w->data, .R = (int64_t)x->numel / K, .K = K,
                     .O = w->shape[0]};
}

/* float32 runs its products through nb_gemm_float_par_n (every thread, b
 * packed once, the backward's two as one job); float64 (gradcheck) through
 * these ranges of rows or outputs, each a plain nb_gemm_double call. */

/* y rows [lo, hi) (O each) = x @ w^T, or b then += x @ w^T with a bias. */
static void linear_forward_range_double(void *arg, int64_t lo, int64_t hi) {
    const lin_job *j = arg;
    int64_t K = j->K, O = j->O;
    double *y = (double *)j->y + lo * O;
    for (int64_t r = 0; j->b && r < hi - lo; r++) memcpy(y + r * O, j->b, (size_t)O * sizeof *y);
    nb_gemm_double(y, (const double *)j->x + lo * K, K, 1, j->w, 1, K, hi - lo, K, O,
                   j->b != NULL || j->add);
}

/* The checks of linear(x, w, b) and its output, or NULL (the error set). */
static nb_tensor *linear_out(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b) {
    const char *op = nb_op_name(NB_OP_LINEAR);
    nb_tensor *in[3] = {x, w, b};
    static const char *const names[3] = {"x", "weight", "bias"};
    static const bool optional[3] = {false, false, true};
    if (!nb_check_named_inputs(ctx, op, 3, in, names, optional)) return NULL;
    char sx[64], sw[64], sb[64];
    if (w->ndim != 2) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: weight %s has %d dims, expected 2 (out_features, in_features)", op,
                    nb_shape_str(w, sw, sizeof sw), w->ndim);
        return NULL;
    }
    if (x->ndim < 1) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x %s has 0 dims, expected 1 to 8 (..., in_features)",
                    op, nb_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    if (x->shape[x->ndim - 1] != w->shape[1]) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: x %s does not fit weight %s: x's last dim %lld, expected in_features "
                    "%lld",
                    op, nb_shape_str(x, sx, sizeof sx), nb_shape_str(w, sw, sizeof sw),
                    (long long)x->shape[x->ndim - 1], (long long)w->shape[1]);
        return NULL;
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: bias %s does not fit weight %s: expected shape (%lld) (out_features)",
                    op, nb_shape_str(b, sb, sizeof sb), nb_shape_str(w, sw, sizeof sw),
                    (long long)w->shape[0]);
        return NULL;
    }
    int64_t shape[NB_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = x->shape[d];
    shape[x->ndim - 1] = w->shape[0];
    return nb_empty(ctx, x->dtype, x->ndim, shape); /* the kernel writes all */
}

/* y = x @ w^T (+ b) as a float32 product for nb_gemm_float_par_n */
static nb_gemm_desc linear_desc(nb_tensor *y, const nb_tensor *x, const nb_tensor *w,
                                const nb_tensor *b) {
    lin_job j = linear_job(x, w);
    return (nb_gemm_desc){y->data, b ? b->data : NULL, j.x, j.K, 1, j.w, 1, j.K, j.R, j.K, j.O,
                          false};
}

static void linear_backward(nb_ctx *ctx, nb_node *n); /* below, after the forward */

static void linear_record(nb_ctx *ctx, nb_tensor *out, nb_tensor *x, nb_tensor *w,
                          nb_tensor *b) {
    nb_tensor *in[3] = {x, w, b};
    nb_record_op(ctx, NB_OP_LINEAR, out, b ? 3 : 2, in, linear_backward);
}

int nb_linear_n(nb_ctx *ctx, nb_tensor *x, int n, nb_tensor *const *w, nb_tensor *const *b,
                nb_tensor **out) {
    for (int k = 0; k < n; k++) out[k] = NULL;
    if (n < 1 || n > NB_MAX_TASKS || !w) {
        if (ctx) nb_ctx_fail(ctx, NB_ERR_VALUE, "linear: %d weights for one x, expected 1 to %d",
                             n, NB_MAX_TASKS);
        return -1;
    }
    bool empty = false;
    for (int k = 0; k < n; k++) {
        out[k] = linear_out(ctx, x, w[k], b ? b[k] : NULL);
        if (!out[k]) return -1;
        empty = empty || x->numel == 0 || w[k]->numel == 0;
    }
    if (empty) { /* zero-size dims: the composed ops, which know the empty cases */
        for (int k = 0; k < n; k++) {
            out[k] = nb_matmul(ctx, x, nb_transpose(ctx, w[k], 0, 1));
            if (b && b[k]) out[k] = nb_add(ctx, out[k], b[k]);
        }
        return nb_ctx_ok(ctx) ? 0 : -1;
    }
    if (x->dtype != NB_F32) {
        for (int k = 0; k < n; k++) {
            lin_job j = linear_job(x, w[k]);
            j.y = out[k]->data, j.b = b && b[k] ? b[k]->data : NULL;
            nb_parallel_for(j.R, lin_grain(j.K * j.O), linear_forward_range_double, &j);
        }
    } else {
        nb_gemm_desc d[NB_MAX_TASKS];
        for (int k = 0; k < n; k++) d[k] = linear_desc(out[k], x, w[k], b ? b[k] : NULL);
        nb_gemm_float_par_n(d, n, NULL, 0);
    }
    for (int k = 0; k < n; k++) linear_record(ctx, out[k], x, w[k], b ? b[k] : NULL);
    return nb_ctx_ok(ctx) ? 0 : -1;
}

/* One product: nb_linear_n with n = 1 (the output even when recording
 * failed, the error on the context, as every op). */
nb_tensor *nb_linear(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b) {
    nb_tensor *out;
    nb_linear_n(ctx, x, 1, &w, b ? &b : NULL, &out);
    return out;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* dx rows [lo, hi) (K each) += dy (rows, O) @ w (O, K). */
static void linear_backward_x_range_double(void *arg, int64_t lo, int64_t hi) {
    const lin_job *j = arg;
    int64_t K = j->K, O = j->O;
    nb_gemm_double((double *)j->dx + lo * K, (const double *)j->dy + lo * O, O, 1, j->w, K, 1,
                   hi - lo, O, K, true);
}

/* Outputs [lo, hi): dw rows (K each) += dy^T (outputs, R) @ x (R, K). */
static void linear_backward_w_range_double(void *arg, int64_t lo, int64_t hi) {
    const lin_job *j = arg;
    int64_t R = j->R, K = j->K, O = j->O;
    nb_gemm_double((double *)j->dw + lo * K, (const double *)j->dy + lo, 1, O, j->x, K, 1,
                   hi - lo, R, K, true);
}

/* db entries [lo, hi) += column sums of dy, each summed over the rows in
 * order from its old value, 64 columns at a time in a local array written
 * back once (db itself is not touched row after row, nor shared with the
 * other thread's neighbouring columns). */
enum { LIN_DB_COLS = 64 };
#define LIN_DB(T)                                                                         \
    NB_HOT static void linear_backward_b_range_##T(void *arg, int64_t lo, int64_t hi) {   \
        const lin_job *j = arg;                                                           \
        T acc[LIN_DB_COLS];                                                               \
        for (int64_t c0 = lo; c0 < hi; c0 += LIN_DB_COLS) {                               \
            int64_t nc = hi - c0 < LIN_DB_COLS ? hi - c0 : LIN_DB_COLS;                   \
            const T *dy = (const T *)j->dy + c0;                                          \
            T *db = (T *)j->db + c0;                                                      \
            for (int64_t o = 0; o < nc; o++) acc[o] = db[o];                              \
            for (int64_t r = 0; r < j->R; r++)                                            \
                for (int64_t o = 0; o < nc; o++) acc[o] += dy[r * j->O + o];              \
            for (int64_t o = 0; o < nc; o++) db[o] = acc[o];                              \
        }                                                                                 \
    }
LIN_DB(float)
LIN_DB(double)
#undef LIN_DB

/* float32 with x, w and b three tensors: dx (=|+=) dy @ w, dw (=|+=)
 * dy^T @ x and db as one job (equal multiply-adds in the two products, so
 * with two threads each starts on one). A fresh buffer is stored, not added
 * to. */
static void linear_backward_f32(nb_ctx *ctx, nb_node *n, lin_job *j) {
    bool fresh = false, fresh_w = false;
    j->dx = nb_grad_buffer_fresh(ctx, n->in[0], &fresh);
    j->dw = j->R ? nb_grad_buffer_fresh(ctx, n->in[1], &fresh_w)
                 : nb_grad_buffer(ctx, n->in[1]); /* no rows: no product writes dw's zeros */
    j->db = n->n_in > 2 ? nb_grad_buffer(ctx, n->in[2]) : NULL;
    nb_gemm_desc d[2];
    int nd = 0;
    if (j->dx)
        d[nd++] = (nb_gemm_desc){j->dx, NULL, j->dy, j->O, 1, j->w, j->K, 1, j->R, j->O, j->K,
                                 !fresh};
    if (j->dw)
        d[nd++] = (nb_gemm_desc){j->dw, NULL, j->dy, 1, j->O, j->x, j->K, 1, j->O, j->R, j->K,
                                 !fresh_w};
    nb_task db = {linear_backward_b_range_float, j, j->O, (double)j->R};
    nb_gemm_float_par_n(d, nd, j->db ? &db : NULL, j->db ? 1 : 0);
}

/* Reuses the inputs x and w (no saved values). Otherwise (float64, or x, w
 * and b not three tensors) the products run one after the other: dx is
 * written before w's buffer is asked for (x may be w); a fresh float32 dx is
 * stored, not added to. */
static void linear_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = n->in[0], *w = n->in[1], *out = n->out;
    lin_job j = linear_job(x, w);
    j.dy = out->grad;
    bool f32 = out->dtype == NB_F32, fresh = false;
    nb_tensor *b = n->n_in > 2 ? n->in[2] : NULL;
    if (f32 && x != w && b != x && b != w) {
        linear_backward_f32(ctx, n, &j);
        return;
    }
    j.dx = f32 ? nb_grad_buffer_fresh(ctx, x, &fresh) : nb_grad_buffer(ctx, x);
    if (j.dx && f32) /* dx (=|+=) dy @ w */
        nb_gemm_float_par(j.dx, NULL, j.dy, j.O, 1, j.w, j.K, 1, j.R, j.O, j.K, !fresh);
    else if (j.dx)
        nb_parallel_for(j.R, lin_grain(j.K * j.O), linear_backward_x_range_double, &j);
    j.dw = nb_grad_buffer(ctx, w);
    if (j.dw && f32) /* dw += dy^T @ x */
        nb_gemm_float_par(j.dw, NULL, j.dy, 1, j.O, j.x, j.K, 1, j.O, j.R, j.K, true);
    else if (j.dw)
        nb_parallel_for(j.O, lin_grain(j.R * j.K), linear_backward_w_range_double, &j);
    j.db = n->n_in > 2 ? nb_grad_buffer(ctx, n->in[2]) : NULL;
    if (j.db)
        nb_parallel_for(j.O, 1 + (1 << 14) / j.R, /* ~16k adds a thread */
                        f32 ? linear_backward_b_range_float : linear_backward_b_range_double, &j);
}

/* ---- graph backward: dx = dy @ w, dw = dy^T @ x, db = sum over rows of dy,
 * from recorded ops on the (R, O) and (R, K) views ------------------------- */
void nb_graph_backward_linear(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0], *w = n->in[1], *b = n->n_in > 2 ? n->in[2] : NULL;
    int64_t K = w->shape[1], O = w->shape[0], R = (int64_t)x->numel / K;
    nb_tensor *dy = nb_reshape(ctx, dout, NB_SHAPE(R, O));
    if (x->requires_grad)
        din[0] = nb_reshape(ctx, nb_matmul(ctx, dy, w), x->ndim, x->shape);
    if (w->requires_grad)
        din[1] = nb_matmul(ctx, nb_transpose(ctx, dy, 0, 1), nb_reshape(ctx, x, NB_SHAPE(R, K)));
    if (b && b->requires_grad) din[2] = nb_sum_dim(ctx, dy, 0, false);
}

/* forward mode: linear(tx, W) + linear(x, tW) + tb (broadcast over rows).
 * When nothing records the tangent: the first product with tb as its bias,
 * the second added into the same buffer (no separate sums). */
static nb_tensor *linear_tangent_fused(nb_ctx *ctx, nb_node *n, nb_tensor *tx, nb_tensor *tw,
                                       nb_tensor *tb) {
    nb_tensor *x = n->in[0], *w = n->in[1];
    nb_tensor *t = linear_out(ctx, x, w, NULL);
    if (!t) return NULL;
    const nb_tensor *xs[2] = {tx ? tx : x, x}, *ws[2] = {tx ? w : tw, tw};
    int k = tx && tw ? 2 : 1;
    for (int i = 0; i < k; i++) {
        const nb_tensor *b = i ? NULL : tb;
        if (x->dtype == NB_F32) {
            nb_gemm_desc d = linear_desc(t, xs[i], ws[i], b);
            d.add = i > 0;
            nb_gemm_float_par_n(&d, 1, NULL, 0);
        } else {
            lin_job j = linear_job(xs[i], ws[i]);
            j.y = t->data, j.b = b ? b->data : NULL, j.add = i > 0;
            nb_parallel_for(j.R, lin_grain(j.K * j.O), linear_forward_range_double, &j);
        }
    }
    return t;
}

nb_tensor *nb_forward_linear(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    nb_tensor *x = n->in[0], *w = n->in[1];
    nb_tensor *tb = n->n_in > 2 ? tin[2] : NULL;
    if ((tin[0] || tin[1]) && x->numel && w->numel && nb_fwd_unrecorded(ctx, n, tin))
        return linear_tangent_fused(ctx, n, tin[0], tin[1], tb);
    nb_tensor *a = tin[0] ? nb_linear(ctx, tin[0], w, NULL) : NULL;
    nb_tensor *b = tin[1] ? nb_linear(ctx, x, tin[1], NULL) : NULL;
    return nb_fwd_sum(ctx, n->out, nb_fwd_sum(ctx, n->out, a, b, 1), tb, 1);
}
