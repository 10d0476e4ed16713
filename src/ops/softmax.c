/* ops/softmax.c - softmax and log_softmax along the last dim.
 *
 * Both subtract the row max before exponentiating, so logits like 1000 do not
 * overflow. A row that is entirely -inf (a fully masked query) has no finite
 * max; instead of PyTorch's NaN it gives zeros (softmax) or -inf
 * (log_softmax) and a zero gradient. Every kernel walks one contiguous row at
 * a time. */
#include "ops/ops_internal.h"

/* exp and log in the precision of their argument. */
#define NB_EXP(x) _Generic((x), float: expf, default: exp)(x)
#define NB_LOG(x) _Generic((x), float: logf, default: log)(x)

/* a (..., C) is seen as rows (R, C); a 0-dim tensor is one row of one; an
 * empty one has no rows. */
static void rows_of(const nb_tensor *a, size_t *rows, size_t *cols) {
    *cols = a->ndim ? (size_t)a->shape[a->ndim - 1] : 1;
    *rows = *cols ? a->numel / *cols : 0;
}

/* The forward of both ops, rows [lo, hi). For each row x with max m (a NaN
 * in the row makes the whole row NaN):
 *   s = sum_j exp(x_j - m),  softmax_j = exp(x_j - m) / s,
 *   log_softmax_j = (x_j - m) - log(s).
 * A fully masked row (m = -inf) gives 0 / -inf; a NaN in it stays NaN.
 * float softmax rows go through the SIMD kernel (kernels/vec_*.c). */
typedef struct sm_job {
    nb_tensor *out;
    const nb_tensor *a;
    size_t cols;
    void *ga;          /* backward: the input's gradient */
    bool log_out;
    const nb_vec_kernels *vk;
} sm_job;

static void softmax_rows(void *arg, int64_t lo, int64_t hi) {
    const sm_job *jb = arg;
    const nb_tensor *a = jb->a;
    size_t cols = jb->cols;
    bool log_out = jb->log_out;
#define K(T)                                                                      \
    {                                                                             \
        for (size_t r = (size_t)lo; r < (size_t)hi; r++) {                        \
            const T *x = (const T *)a->data + r * cols;                           \
            T *y = (T *)jb->out->data + r * cols;                                 \
            T m = x[0];                                                           \
            if (sizeof(T) == sizeof(float)) {                                     \
                m = (T)jb->vk->max((const float *)x, cols);                       \
            } else {                                                              \
                bool nan_ = isnan(x[0]);                                          \
                for (size_t j = 1; j < cols; j++) { /* selects, not branches */   \
                    m = x[j] > m ? x[j] : m;                                      \
                    nan_ |= isnan(x[j]);                                          \
                }                                                                 \
                if (nan_) m = (T)NAN;                                             \
            }                                                                     \
            bool nan_ = isnan(m);                                                 \
            if (m == -INFINITY) {                                                 \
                for (size_t j = 0; j < cols; j++)                                 \
                    y[j] = x[j] == -INFINITY ? (log_out ? (T)-INFINITY : (T)0) : x[j]; \
                continue;                                                         \
            }                                                                     \
            T s = 0;                                                              \
            if (log_out) {                                                        \
                for (size_t j = 0; j < cols; j++) s += NB_EXP(x[j] - m);          \
                T log_s = NB_LOG(s); /* x - m first: exact near large m */        \
                for (size_t j = 0; j < cols; j++) y[j] = (x[j] - m) - log_s;      \
            } else if (sizeof(T) == sizeof(float) && !nan_) {                     \
                /* exp(-inf - m) is exactly 0 there too */                        \
                float sf = jb->vk->exp_sub_sum((float *)y, (const float *)x,      \
                                               (float)m, cols);                   \
                jb->vk->scale((float *)y, 1.0f / sf, cols);                       \
            } else {                                                              \
                for (size_t j = 0; j < cols; j++) {                               \
                    /* masked entries (-inf) are exactly 0: no exp call */        \
                    y[j] = x[j] == -INFINITY ? (T)0 : NB_EXP(x[j] - m);           \
                    s += y[j];                                                    \
                }                                                                 \
                T inv = (T)1 / s;                                                 \
                for (size_t j = 0; j < cols; j++) y[j] *= inv;                    \
            }                                                                     \
        }                                                                         \
    }
    NB_DISPATCH(a->dtype, K);
#undef K
}

/* Rows worth a thread: some 16k elements. */
static int64_t sm_grain(size_t cols) {
    size_t g = cols ? 16384 / cols : 1;
    return g ? (int64_t)g : 1;
}

static void softmax_forward(nb_tensor *out, const nb_tensor *a, bool log_out) {
    size_t rows, cols;
    rows_of(a, &rows, &cols);
    sm_job jb = {out, a, cols, NULL, log_out, nb_vec()};
    nb_parallel_for((int64_t)rows, sm_grain(cols), softmax_rows, &jb);
}

static nb_tensor *softmax_op(nb_ctx *ctx, nb_op op, nb_tensor *a, nb_backward_fn backward) {
    if (!nb_check_float_inputs(ctx, nb_op_name(op), 1, &a)) return NULL;
    nb_tensor *out = nb_empty(ctx, a->dtype, a->ndim, a->shape); /* forward writes all */
    if (!out) return NULL;
    softmax_forward(out, a, op == NB_OP_LOG_SOFTMAX);
    nb_record_op(ctx, op, out, 1, &a, backward);
    return out;
}

/* ---- softmax: y = softmax(a) over the last dim; a, y (..., C) -----------------
 * Backward: dx_j += y_j * (dy_j - sum_k dy_k y_k). Reuses the saved output y
 * (the node's output), not the input. Where y_j is 0 (a -inf input, or a
 * fully masked row) the gradient is exactly 0. */
static void softmax_backward_rows(void *arg, int64_t lo, int64_t hi) {
    const sm_job *jb = arg;
    const nb_tensor *out = jb->out;
    size_t cols = jb->cols;
    void *ga = jb->ga;
#define K(T)                                                                  \
    {                                                                         \
        for (size_t r = (size_t)lo; r < (size_t)hi; r++) {                    \
            const T *y = (const T *)out->data + r * cols;                     \
            const T *dy = (const T *)out->grad + r * cols;                    \
            T *dx = (T *)ga + r * cols;                                       \
            if (sizeof(T) == sizeof(float)) {                                 \
                jb->vk->softmax_bwd((float *)dx, (const float *)y,            \
                                    (const float *)dy, cols);                 \
                continue;                                                     \
            }                                                                 \
            T dot = 0;                                                        \
            for (size_t j = 0; j < cols; j++) dot += dy[j] * y[j];            \
            for (size_t j = 0; j < cols; j++) dx[j] += y[j] * (dy[j] - dot);  \
        }                                                                     \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
}

static void softmax_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    void *ga = nb_grad_buffer(ctx, a);
    if (!ga) return;
    size_t rows, cols;
    rows_of(a, &rows, &cols);
    sm_job jb = {out, a, cols, ga, false, nb_vec()};
    nb_parallel_for((int64_t)rows, sm_grain(cols), softmax_backward_rows, &jb);
}

nb_tensor *nb_softmax(nb_ctx *ctx, nb_tensor *a) {
    return softmax_op(ctx, NB_OP_SOFTMAX, a, softmax_backward);
}

void nb_graph_backward_softmax(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *y = n->out; /* y (dout - sum_k dout_k y_k) */
    nb_tensor *s = nb_sum_dim(ctx, nb_mul(ctx, dout, y), -1, true);
    din[0] = nb_mul(ctx, y, nb_sub(ctx, dout, s));
}

/* ---- log_softmax: y = log(softmax(a)) over the last dim; a, y (..., C) ---------
 * Backward: dx_j += dy_j - exp(y_j) * sum_k dy_k. Reuses the saved output y,
 * whose exp is the softmax. A fully masked row (every y_j = -inf) gets no
 * gradient; in a partly masked row a -inf input gets dy_j, as in PyTorch. */
static void log_softmax_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    void *ga = nb_grad_buffer(ctx, a);
    if (!ga) return;
    size_t rows, cols;
    rows_of(a, &rows, &cols);
#define K(T)                                                                  \
    {                                                                         \
        for (size_t r = 0; r < rows; r++) {                                   \
            const T *y = (const T *)out->data + r * cols;                     \
            const T *dy = (const T *)out->grad + r * cols;                    \
            T *dx = (T *)ga + r * cols;                                       \
            T m = y[0], sum = 0;                                              \
            for (size_t j = 0; j < cols; j++) {                               \
                if (y[j] > m) m = y[j];                                       \
                sum += dy[j];                                                 \
            }                                                                 \
            if (m == -INFINITY) continue; /* fully masked */                  \
            for (size_t j = 0; j < cols; j++) dx[j] += dy[j] - NB_EXP(y[j]) * sum; \
        }                                                                     \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
}

nb_tensor *nb_log_softmax(nb_ctx *ctx, nb_tensor *a) {
    return softmax_op(ctx, NB_OP_LOG_SOFTMAX, a, log_softmax_backward);
}

void nb_graph_backward_log_softmax(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *y = n->out; /* dout - e^y sum_k dout_k */
    nb_tensor *s = nb_sum_dim(ctx, dout, -1, true);
    din[0] = nb_sub(ctx, dout, nb_mul(ctx, nb_exp(ctx, y), s));
}

/* forward mode: softmax's Jacobian diag(y) - y yᵀ (per row) is symmetric,
 * so its tangent is its graph backward on t; log_softmax's is
 * t - Σ softmax(x) t (per row). */
nb_tensor *nb_forward_softmax(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return nb_forward_symmetric(ctx, n, tin, nb_graph_backward_softmax);
}

nb_tensor *nb_forward_log_softmax(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (!tin[0]) return NULL;
    nb_tensor *s = nb_sum_dim(ctx, nb_mul(ctx, nb_exp(ctx, n->out), tin[0]), -1, true);
    return nb_sub(ctx, tin[0], s);
}
