/* ops/nn.c - the neural-network ops: linear, dropout, embedding, layer_norm.
 *
 * Each op is fused: one forward kernel and one backward rule instead of a
 * chain of elementwise ops, so a training step records one node per layer
 * and allocates nothing but the output (and a small saved buffer). */
#include "ops/ops_internal.h"

/* Checks that the present (non-NULL where optional) inputs are floating and
 * share one dtype, naming them as the op's documentation does ("x",
 * "weight", ...). in[i] may be NULL only when optional[i]. */
static bool check_named_inputs(nb_ctx *ctx, const char *op, int n, nb_tensor *const *in,
                               const char *const *names, const bool *optional) {
    if (!nb_ctx_ok(ctx)) return false;
    for (int i = 0; i < n; i++) {
        if (!in[i] && !optional[i]) {
            nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", op, names[i]);
            return false;
        }
    }
    if (!nb_check_live(ctx, op, n, (const nb_tensor *const *)in)) return false;
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        char s[64], s0[64];
        if (in[i]->dtype != NB_F32 && in[i]->dtype != NB_F64) {
            nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: %s %s is %s, expected f32 or f64", op, names[i],
                        nb_shape_str(in[i], s, sizeof s), nb_dtype_name(in[i]->dtype));
            return false;
        }
        if (in[i]->dtype != in[0]->dtype) {
            nb_ctx_fail(ctx, NB_ERR_DTYPE,
                        "%s: mixed dtypes: %s %s is %s but %s %s is %s; convert with nb_copy "
                        "first",
                        op, names[0], nb_shape_str(in[0], s0, sizeof s0),
                        nb_dtype_name(in[0]->dtype), names[i], nb_shape_str(in[i], s, sizeof s),
                        nb_dtype_name(in[i]->dtype));
            return false;
        }
    }
    return true;
}

/* ==========================================================================
 * linear: y (R, O) = x (R, K) @ w (O, K)^T + b (O), where R is the product
 * of x's leading dims, K = in_features, O = out_features.
 *
 * All three products run on the matmul kernel (nb_gemm_<T>, ops/matmul.c),
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
} lin_job;

/* The fewest rows (or outputs) worth a thread: about 512k multiply-adds,
 * some 10 us of the AVX2 kernel. Less work than that is done sooner on one
 * thread than by waking a worker (the demo's 512 x 32 x 32 layers stay on
 * one). */
static int64_t lin_grain(int64_t per_item) {
    int64_t g = per_item > 0 ? ((int64_t)1 << 19) / per_item : 1;
    return g > 0 ? g : 1;
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
                   j->b != NULL);
}

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

/* A linear node's job: rows R, in_features K and out_features O from x and w. */
static lin_job linear_job(const nb_tensor *x, const nb_tensor *w) {
    int64_t K = w->shape[1];
    return (lin_job){.x = x->data, .w = w->data, .R = (int64_t)x->numel / K, .K = K,
                     .O = w->shape[0]};
}

/* float32 with x, w and b three tensors: dx (=|+=) dy @ w, dw += dy^T @ x
 * and db as one job (equal multiply-adds in the two products, so with two
 * threads each starts on one). */
static void linear_backward_f32(nb_ctx *ctx, nb_node *n, lin_job *j) {
    bool fresh = false;
    j->dx = nb_grad_buffer_fresh(ctx, n->in[0], &fresh);
    j->dw = nb_grad_buffer(ctx, n->in[1]);
    j->db = n->n_in > 2 ? nb_grad_buffer(ctx, n->in[2]) : NULL;
    nb_gemm_desc d[2];
    int nd = 0;
    if (j->dx)
        d[nd++] = (nb_gemm_desc){j->dx, NULL, j->dy, j->O, 1, j->w, j->K, 1, j->R, j->O, j->K,
                                 !fresh};
    if (j->dw)
        d[nd++] = (nb_gemm_desc){j->dw, NULL, j->dy, 1, j->O, j->x, j->K, 1, j->O, j->R, j->K,
                                 true};
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

/* The checks of linear(x, w, b) and its output, or NULL (the error set). */
static nb_tensor *linear_out(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b) {
    const char *op = nb_op_name(NB_OP_LINEAR);
    nb_tensor *in[3] = {x, w, b};
    static const char *const names[3] = {"x", "weight", "bias"};
    static const bool optional[3] = {false, false, true};
    if (!check_named_inputs(ctx, op, 3, in, names, optional)) return NULL;
    char sx[64], sw[64], sb[64];
    if (w->ndim != 2) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: weight %s has %d dims, expected 2 (out_features, in_features)", op,
                    nb_shape_str(w, sw, sizeof sw), w->ndim);
        return NULL;
    }
    if (x->ndim < 1) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x %s has 0 dims, expected 1 to 4 (..., in_features)",
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
    for (int k = 0; k < n; k++) {
        out[k] = linear_out(ctx, x, w[k], b ? b[k] : NULL);
        if (!out[k]) return -1;
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

/* ==========================================================================
 * dropout: y = x * mask / (1 - p), mask (numel bytes, 0 or 1) drawn from rng.
 *
 * The mask rule, which fixes the bits a seed gives: for each element in
 * row-major order, u = nb_pcg32_float(rng) (one 32-bit draw, 24 bits used)
 * and the element is kept when (double)u >= p. So exactly numel draws are
 * made for 0 < p < 1; p == 1 (everything dropped) and the identity cases
 * draw nothing.
 * ========================================================================== */

/* keep ? a : b (keep is 0 or 1) as bit operations: compilers turn the
 * plain select into a branch, which a random mask mispredicts often. */
#define NN_PICK(T, U)                                                         \
    static inline T nn_pick_##T(unsigned char keep, T a, T b) {               \
        U ua, ub, m = (U)0 - (U)keep;                                         \
        memcpy(&ua, &a, sizeof a);                                            \
        memcpy(&ub, &b, sizeof b);                                            \
        ua = (ua & m) | (ub & ~m);                                            \
        memcpy(&a, &ua, sizeof a);                                            \
        return a;                                                             \
    }
NN_PICK(double, uint64_t)
#undef NN_PICK

/* A dropout pass over elements [lo, hi), on any thread: the forward draws
 * its bits from `rng` moved lo steps on, so the mask is the one a single
 * pass would draw. float goes through the SIMD kernels. */
typedef struct drop_job {
    const void *x, *dy;
    void *y, *dx;
    unsigned char *mask;
    nb_pcg32 rng;         /* forward: the state before the first draw */
    uint32_t threshold;
    double scale;
    nb_dtype dt;
    const nb_vec_kernels *vk;
} drop_job;

/* The fewest elements worth a thread. */
#define DROP_GRAIN 16384

/* dx += dy * mask * scale over [lo, hi). */
static void dropout_backward_range(void *arg, int64_t lo, int64_t hi) {
    const drop_job *j = arg;
    const unsigned char *mask = j->mask + lo;
    size_t n = (size_t)(hi - lo);
    if (j->dt == NB_F32) {
        j->vk->dropout_bwd((float *)j->dx + lo, mask, (const float *)j->dy + lo,
                           (float)j->scale, n);
        return;
    }
    double *dx = (double *)j->dx + lo, sc = j->scale;
    const double *g = (const double *)j->dy + lo;
    for (size_t i = 0; i < n; i++) dx[i] = nn_pick_double(mask[i], dx[i] + g[i] * sc, dx[i]);
}

/* dx += dy * mask * scale; reuses the saved mask and scale = 1/(1-p) (0 for p == 1). */
static void dropout_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = n->in[0], *out = n->out;
    void *gx = nb_grad_buffer(ctx, x);
    if (!gx) return;
    drop_job j = {.dy = out->grad, .dx = gx, .mask = n->saved, .scale = n->f[0],
                  .dt = out->dtype, .vk = nb_vec()};
    nb_parallel_for((int64_t)out->numel, DROP_GRAIN, dropout_backward_range, &j);
}

/* y = x * mask * scale and the mask over [lo, hi), 256 draws at a time. */
static void dropout_forward_range(void *arg, int64_t lo, int64_t hi) {
    const drop_job *j = arg;
    nb_pcg32 rng = j->rng;
    nb_pcg32_advance(&rng, (uint64_t)lo);
    uint32_t bits[256];
    for (int64_t i0 = lo; i0 < hi; i0 += 256) {
        size_t n = hi - i0 < 256 ? (size_t)(hi - i0) : 256;
        j->vk->pcg32_fill(&rng, bits, n);
        if (j->dt == NB_F32) {
            j->vk->dropout((float *)j->y + i0, j->mask + i0, (const float *)j->x + i0, bits,
                           j->threshold, (float)j->scale, n);
            continue;
        }
        const double *xs = (const double *)j->x + i0;
        double *ys = (double *)j->y + i0;
        for (size_t i = 0; i < n; i++) {
            unsigned char keep = (bits[i] >> 8) >= j->threshold;
            j->mask[i0 + (int64_t)i] = keep;
            ys[i] = nn_pick_double(keep, xs[i] * j->scale, 0.0);
        }
    }
}

nb_tensor *nb_dropout(nb_ctx *ctx, nb_tensor *x, double p, bool train, struct nb_pcg32 *rng) {
    const char *op = nb_op_name(NB_OP_DROPOUT);
    static const char *const names[1] = {"x"};
    static const bool optional[1] = {false};
    if (!check_named_inputs(ctx, op, 1, &x, names, optional)) return NULL;
    if (!(p >= 0.0 && p <= 1.0)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: p = %g is outside [0, 1]", op, p);
        return NULL;
    }
    if (!train || p == 0.0) return x;
    if (!rng && p < 1.0) {
        nb_ctx_fail(ctx, NB_ERR_NULL,
                    "%s: rng is NULL, but training with p = %g needs it to draw the mask", op, p);
        return NULL;
    }
    /* p < 1 writes every element of out and mask; p == 1 leaves both zero. */
    nb_tensor *out = p < 1.0 ? nb_empty(ctx, x->dtype, x->ndim, x->shape)
                             : nb_zeros(ctx, x->dtype, x->ndim, x->shape);
    unsigned char *mask = !out ? NULL
                          : p < 1.0 ? nb_ctx_alloc_raw(ctx, x->numel)
                                    : nb_ctx_alloc(ctx, x->numel);
    if (!mask) return NULL;
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    if (p < 1.0) {
        /* u = k * 2^-24 with k = the draw >> 8, so u >= p exactly when
         * k >= ceil(p * 2^24) (the scaling by 2^24 is exact) */
        drop_job j = {.x = x->data, .y = out->data, .mask = mask, .rng = *rng,
                      .threshold = (uint32_t)ceil(p * 0x1p24), .scale = scale,
                      .dt = x->dtype, .vk = nb_vec()};
        nb_parallel_for((int64_t)x->numel, DROP_GRAIN, dropout_forward_range, &j);
        nb_pcg32_advance(rng, x->numel); /* where numel draws leave it */
    }
    nb_node *n = nb_record_op(ctx, NB_OP_DROPOUT, out, 1, &x, dropout_backward);
    if (n) {
        n->saved = mask;
        n->f[0] = scale;
        n->f[1] = p;
    }
    return out;
}

/* ==========================================================================
 * embedding: y (ids.shape..., D) = weight (N, D) rows picked by ids (I64).
 * ids is not differentiable: the node's only input is weight. The forward
 * copies ids (P = ids.numel values) into the arena (node->saved, P in
 * node->i[0]), so the caller may change or free its ids before backward.
 * ========================================================================== */

/* dweight[ids[p]] += dy[p] for every position p (repeated ids add up);
 * reuses the saved copy of ids, checked again against weight's rows. */
static void embedding_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *w = n->in[0], *out = n->out;
    const int64_t *ids = n->saved;
    size_t P = (size_t)n->i[0], D = (size_t)w->shape[1];
    for (size_t p = 0; p < P; p++)
        if (ids[p] < 0 || ids[p] >= w->shape[0]) {
            nb_ctx_fail(ctx, NB_ERR_VALUE, "%s backward: saved id %lld at position %zu is out "
                        "of range for %lld rows (corrupted saved state)", n->name,
                        (long long)ids[p], p, (long long)w->shape[0]);
            return;
        }
    void *gw = nb_grad_buffer(ctx, w);
    if (!gw) return;
#define K_(T)                                                                             \
    {                                                                                     \
        T *dw = gw;                                                                       \
        const T *g = out->grad;                                                           \
        for (size_t p = 0; p < P; p++) {                                                  \
            T *d = dw + (size_t)ids[p] * D;                                               \
            const T *gp = g + p * D;                                                      \
            for (size_t k = 0; k < D; k++) d[k] += gp[k];                                 \
        }                                                                                 \
    }
    NB_DISPATCH(out->dtype, K_);
#undef K_
}

/* Writes "[i, j, k]" (the multi-index of flat position p in t) into buf. */
static void index_str(const nb_tensor *t, size_t p, char *buf, size_t n) {
    int64_t idx[NB_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = (int64_t)(p % (size_t)t->shape[d]);
        p /= (size_t)t->shape[d];
    }
    nb_dims_str(t->ndim, idx, "[]", buf, n);
}

nb_tensor *nb_embedding(nb_ctx *ctx, nb_tensor *weight, const nb_tensor *ids) {
    const char *op = nb_op_name(NB_OP_EMBEDDING);
    static const char *const names[1] = {"weight"};
    static const bool optional[1] = {false};
    if (!check_named_inputs(ctx, op, 1, &weight, names, optional)) return NULL;
    char sw[64], si[64];
    if (!ids) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: ids is NULL", op);
        return NULL;
    }
    if (!nb_check_live(ctx, op, 1, &ids)) return NULL;
    if (weight->ndim != 2) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: weight %s has %d dims, expected 2 (num_embeddings, embedding_dim)", op,
                    nb_shape_str(weight, sw, sizeof sw), weight->ndim);
        return NULL;
    }
    if (ids->dtype != NB_I64) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: ids %s are %s, expected i64", op,
                    nb_shape_str(ids, si, sizeof si), nb_dtype_name(ids->dtype));
        return NULL;
    }
    if (ids->ndim > NB_MAX_DIMS - 1) {
        nb_ctx_fail(ctx, NB_ERR_SIZE,
                    "%s: ids %s have %d dims, expected at most %d (the result adds one)", op,
                    nb_shape_str(ids, si, sizeof si), ids->ndim, NB_MAX_DIMS - 1);
        return NULL;
    }
    const int64_t *id = ids->data;
    int64_t num = weight->shape[0];
    for (size_t p = 0; p < ids->numel; p++) {
        if (id[p] < 0 || id[p] >= num) {
            char pos[64];
            index_str(ids, p, pos, sizeof pos);
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "%s: ids%s = %lld is out of range for weight %s: expected 0 <= id < %lld",
                        op, pos, (long long)id[p], nb_shape_str(weight, sw, sizeof sw),
                        (long long)num);
            return NULL;
        }
    }
    int64_t shape[NB_MAX_DIMS];
    for (int d = 0; d < ids->ndim; d++) shape[d] = ids->shape[d];
    shape[ids->ndim] = weight->shape[1];
    nb_tensor *out = nb_empty(ctx, weight->dtype, ids->ndim + 1, shape); /* rows copied in */
    if (!out) return NULL;
    size_t row = (size_t)weight->shape[1] * nb_dtype_size(weight->dtype);
    for (size_t p = 0; p < ids->numel; p++)
        memcpy((char *)out->data + p * row, (const char *)weight->data + (size_t)id[p] * row, row);
    nb_node *n = nb_record_op(ctx, NB_OP_EMBEDDING, out, 1, &weight, embedding_backward);
    if (n) {
        n->saved = nb_ctx_alloc_raw(ctx, ids->numel * sizeof(int64_t));
        if (!n->saved) return NULL;
        memcpy(n->saved, id, ids->numel * sizeof(int64_t));
        n->i[0] = (int64_t)ids->numel;
    }
    return out;
}

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
 * row after row (they did when dw itself took every row's add). */
enum { LN_COLS = 64 };
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

enum { LN_GRAIN = 4096 }; /* elements worth a thread */

static void layer_norm_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = n->in[0], *out = n->out;
    nb_tensor *w = n->i[0] ? n->in[1] : NULL;
    nb_tensor *b = n->i[1] ? n->in[1 + (n->i[0] ? 1 : 0)] : NULL;
    ln_job j = {x, w, b, out->grad, n->saved, 0, NULL, nb_grad_buffer(ctx, w),
                nb_grad_buffer(ctx, b), (size_t)x->shape[x->ndim - 1], false};
    int64_t D = (int64_t)j.D, R = (int64_t)(x->numel / j.D);
    if (j.gw || j.gb) nb_parallel_for(D, 1 + LN_GRAIN / R, ln_bwd_cols, &j);
    /* x's buffer asked for after w's and b's: x may be one of them */
    bool f32 = x->dtype == NB_F32 && j.D <= LN_ROW_MAX;
    j.gx = f32 ? nb_grad_buffer_fresh(ctx, x, &j.gx_fresh) : nb_grad_buffer(ctx, x);
    if (j.gx) nb_parallel_for(R, 1 + LN_GRAIN / D, ln_bwd_rows, &j);
}

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

nb_tensor *nb_layer_norm(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b, double eps) {
    const char *op = nb_op_name(NB_OP_LAYER_NORM);
    nb_tensor *all[3] = {x, w, b};
    static const char *const names[3] = {"x", "weight", "bias"};
    static const bool optional[3] = {false, true, true};
    if (!check_named_inputs(ctx, op, 3, all, names, optional)) return NULL;
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
