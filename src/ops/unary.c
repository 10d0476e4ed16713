/* ops/unary.c - the elementwise ops of one tensor (their rows in
 * nabla/ops.def say which).
 *
 * Every op here maps x (any shape) to y (the same shape), element by element,
 * so one driver does the checks, the output and the recording, and each op is
 * one UNARY_OP line giving its forward formula and its derivative dy/dx side
 * by side, then its public function, then its graph backward (the same
 * derivative written with recorded ops, for second order). The backward is
 * always dx += g * dy/dx. The derivative may read x (the input), y (the
 * saved output) and p (the op's scalar, node->f[0]); where y is the cheaper
 * source (exp, sqrt, tanh, sigmoid, relu) it reuses y.
 *
 * Kernels are written once over T and use <tgmath.h>, so exp, tanh, erf, ...
 * run in float for f32 tensors and in double for f64, as PyTorch's CPU kernels
 * do. log and sqrt of negative numbers give NaN, as in PyTorch; that is a
 * value, not an error. */
#include "ops/ops_internal.h"

#include <tgmath.h>

/* The forward kernel of an op: y = FWD over every element, p is its scalar. */
typedef void (*unary_fwd)(const nb_tensor *a, nb_tensor *out, double p);

/* The element loops, with T a block-local typedef (float or double) so the
 * op's expressions can name it. */
#define UNARY_FWD_LOOP(TYPE, FWD)                                               \
    {                                                                           \
        typedef TYPE T;                                                         \
        const T *xs = a->data;                                                  \
        T *ys = out->data;                                                      \
        const T p = (T)p_;                                                      \
        for (size_t i = (size_t)lo; i < (size_t)hi; i++) {                      \
            const T x = xs[i];                                                  \
            T y;                                                                \
            FWD;                                                                \
            ys[i] = y;                                                          \
            (void)x, (void)p;                                                   \
        }                                                                       \
    }

#define UNARY_BWD_LOOP(TYPE, DER)                                               \
    {                                                                           \
        typedef TYPE T;                                                         \
        const T *xs = a->data, *ys = out->data, *gs = out->grad;                \
        T *dx = ga;                                                             \
        const T p = (T)p_;                                                      \
        for (size_t i = (size_t)lo; i < (size_t)hi; i++) {                      \
            const T x = xs[i], y = ys[i];                                       \
            T d;                                                                \
            DER;                                                                \
            dx[i] += gs[i] * d;                                                 \
            (void)x, (void)y, (void)p;                                          \
        }                                                                       \
    }

/* Defines NAME_forward (y from x and p) and NAME_backward (dx += g * d, with
 * d = dy/dx from x, y and p), each split over threads in element ranges
 * (every element is independent, so the bits do not depend on the split).
 * FWD assigns y; DER assigns d. */
typedef struct unary_job {
    const nb_tensor *a;
    nb_tensor *out;
    double p;
    void *ga;
} unary_job;

#define UNARY_GRAIN 16384 /* elements worth a thread */

#define UNARY_OP(NAME, FWD, DER)                                                \
    static void NAME##_fwd_range(void *arg, int64_t lo, int64_t hi) {           \
        const unary_job *j = arg;                                               \
        const nb_tensor *a = j->a;                                              \
        nb_tensor *out = j->out;                                                \
        double p_ = j->p;                                                       \
        if (a->dtype == NB_F32)                                                 \
            UNARY_FWD_LOOP(float, FWD)                                          \
        else                                                                    \
            UNARY_FWD_LOOP(double, FWD)                                         \
    }                                                                           \
    static void NAME##_forward(const nb_tensor *a, nb_tensor *out, double p_) { \
        unary_job j = {a, out, p_, NULL};                                       \
        nb_parallel_for((int64_t)a->numel, UNARY_GRAIN, NAME##_fwd_range, &j);  \
    }                                                                           \
    static void NAME##_bwd_range(void *arg, int64_t lo, int64_t hi) {           \
        const unary_job *j = arg;                                               \
        const nb_tensor *a = j->a, *out = j->out;                               \
        void *ga = j->ga;                                                       \
        double p_ = j->p;                                                       \
        if (a->dtype == NB_F32)                                                 \
            UNARY_BWD_LOOP(float, DER)                                          \
        else                                                                    \
            UNARY_BWD_LOOP(double, DER)                                         \
    }                                                                           \
    static void NAME##_backward(nb_ctx *ctx, nb_node *n) {                      \
        nb_tensor *a = n->in[0], *out = n->out;                                 \
        void *ga = nb_grad_buffer(ctx, a);                                      \
        if (!ga) return;                                                        \
        unary_job j = {a, out, n->f[0], ga};                                    \
        nb_parallel_for((int64_t)a->numel, UNARY_GRAIN, NAME##_bwd_range, &j);  \
    }

/* The shared driver: a (any shape, f32/f64) -> out (same shape). Records the
 * node with p in f[0]; returns the node through *node_out when asked (gelu
 * stores its variant there too). */
static nb_tensor *unary(nb_ctx *ctx, nb_op op, nb_tensor *a, double p, unary_fwd forward,
                        nb_backward_fn backward, nb_node **node_out) {
    if (!nb_check_float_inputs(ctx, nb_op_name(op), 1, &a)) return NULL;
    nb_tensor *out = nb_empty(ctx, a->dtype, a->ndim, a->shape); /* forward writes all */
    if (!out) return NULL;
    forward(a, out, p);
    nb_node *n = nb_record_op(ctx, op, out, 1, &a, backward);
    if (n) n->f[0] = p;
    if (node_out) *node_out = n;
    return out;
}

/* ---- neg: y = -x;  dy/dx = -1 --------------------------------------------- */
UNARY_OP(neg, y = -x, d = -1)
nb_tensor *nb_neg(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_NEG, a, 0, neg_forward, neg_backward, NULL);
}

void nb_graph_backward_neg(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    NB_UNUSED(n);
    din[0] = nb_neg(ctx, dout);
}

/* ---- scale: y = x * s;  dy/dx = s ------------------------------------------ */
UNARY_OP(scale, y = x * p, d = p)
nb_tensor *nb_scale(nb_ctx *ctx, nb_tensor *a, double s) {
    return unary(ctx, NB_OP_SCALE, a, s, scale_forward, scale_backward, NULL);
}

void nb_graph_backward_scale(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_scale(ctx, dout, n->f[0]);
}

/* ---- add_scalar: y = x + s;  dy/dx = 1 ------------------------------------- */
UNARY_OP(add_scalar, y = x + p, d = 1)
nb_tensor *nb_add_scalar(nb_ctx *ctx, nb_tensor *a, double s) {
    return unary(ctx, NB_OP_ADD_SCALAR, a, s, add_scalar_forward, add_scalar_backward, NULL);
}

void nb_graph_backward_add_scalar(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    NB_UNUSED(ctx), NB_UNUSED(n);
    din[0] = dout;
}

/* ---- exp: y = e^x;  dy/dx = e^x = y (reuses the saved output) --------------- */
UNARY_OP(exp, y = exp(x), d = y)

/* float exp through the SIMD polynomial (kernels/vec_*.c, within 2 ulp of
 * expf), split over threads; double through the loop above. */
typedef struct exp_job {
    const float *x;
    float *y;
    const nb_vec_kernels *vk;
} exp_job;

static void exp_range(void *arg, int64_t lo, int64_t hi) {
    const exp_job *j = arg;
    j->vk->exp_sub_sum(j->y + lo, j->x + lo, 0.0f, (size_t)(hi - lo));
}

static void exp_forward_fast(const nb_tensor *a, nb_tensor *out, double p_) {
    if (a->dtype != NB_F32) {
        exp_forward(a, out, p_);
        return;
    }
    exp_job j = {a->data, out->data, nb_vec()};
    nb_parallel_for((int64_t)a->numel, 16384, exp_range, &j);
}

nb_tensor *nb_exp(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_EXP, a, 0, exp_forward_fast, exp_backward, NULL);
}

void nb_graph_backward_exp(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_mul(ctx, dout, n->out); /* dout e^x */
}

/* ---- log: y = ln x;  dy/dx = 1 / x (reuses the input) ----------------------- */
UNARY_OP(log, y = log(x), d = 1 / x)
nb_tensor *nb_log(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_LOG, a, 0, log_forward, log_backward, NULL);
}

void nb_graph_backward_log(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_div(ctx, dout, n->in[0]); /* dout / x */
}

/* ---- sqrt: y = x^(1/2);  dy/dx = 1 / (2 sqrt x) = 0.5 / y (reuses the output;
 * inf at x = 0, as in PyTorch) --------------------------------------------- */
UNARY_OP(sqrt, y = sqrt(x), d = (T)0.5 / y)
nb_tensor *nb_sqrt(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_SQRT, a, 0, sqrt_forward, sqrt_backward, NULL);
}

void nb_graph_backward_sqrt(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_div(ctx, nb_scale(ctx, dout, 0.5), n->out); /* dout / (2 sqrt x) */
}

/* ---- pow: y = x^p;  dy/dx = p x^(p-1) (reuses the input). For p == 0 the
 * derivative is 0 everywhere, as in PyTorch (0 * 0^-1 would give NaN at 0). */
UNARY_OP(pow, y = pow(x, p), d = p == 0 ? 0 : p * pow(x, p - 1))
nb_tensor *nb_pow(nb_ctx *ctx, nb_tensor *a, double p) {
    return unary(ctx, NB_OP_POW, a, p, pow_forward, pow_backward, NULL);
}

void nb_graph_backward_pow(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    double p = n->f[0]; /* dout p x^(p-1); 0 for p == 0 */
    din[0] = p == 0 ? nb_scale(ctx, dout, 0.0)
                    : nb_mul(ctx, dout, nb_scale(ctx, nb_pow(ctx, n->in[0], p - 1), p));
}

/* ---- tanh: y = tanh x;  dy/dx = 1 - tanh^2 x = 1 - y^2 (reuses the output) -- */
UNARY_OP(tanh, y = tanh(x), d = 1 - y * y)
nb_tensor *nb_tanh(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_TANH, a, 0, tanh_forward, tanh_backward, NULL);
}

void nb_graph_backward_tanh(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *y = n->out; /* dout (1 - y^2) */
    din[0] = nb_mul(ctx, dout, nb_add_scalar(ctx, nb_neg(ctx, nb_mul(ctx, y, y)), 1.0));
}

/* ---- sigmoid: y = 1 / (1 + e^-x);  dy/dx = y (1 - y) (reuses the output) ---- */
UNARY_OP(sigmoid, y = 1 / (1 + exp(-x)), d = y * (1 - y))
nb_tensor *nb_sigmoid(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_SIGMOID, a, 0, sigmoid_forward, sigmoid_backward, NULL);
}

void nb_graph_backward_sigmoid(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *y = n->out; /* dout y (1 - y) */
    din[0] = nb_mul(ctx, dout, nb_mul(ctx, y, nb_add_scalar(ctx, nb_neg(ctx, y), 1.0)));
}

/* ---- erf: y = erf x;  dy/dx = 2/sqrt(pi) e^(-x^2) (reuses the input). It
 * is the error function GELU's exact form is built on, and an op so that
 * GELU's derivative can be recorded: its gradient is made of ops too. */
#define NB_2_SQRTPI 1.12837916709551257390 /* 2 / sqrt(pi) */
UNARY_OP(erf, y = erf(x), d = (T)NB_2_SQRTPI * exp(-x * x))
nb_tensor *nb_erf(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_ERF, a, 0, erf_forward, erf_backward, NULL);
}

void nb_graph_backward_erf(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0]; /* dout 2/sqrt(pi) e^(-x^2) */
    nb_tensor *e = nb_exp(ctx, nb_neg(ctx, nb_mul(ctx, x, x)));
    din[0] = nb_mul(ctx, dout, nb_scale(ctx, e, NB_2_SQRTPI));
}

/* ---- relu: y = max(x, 0);  dy/dx = 1 where y > 0, else 0 (reuses the output).
 * The gradient at x == 0 is 0 and NaN passes through, as in PyTorch. */
UNARY_OP(relu, y = x < 0 ? 0 : x, d = y <= 0 ? 0 : 1)
nb_tensor *nb_relu(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_RELU, a, 0, relu_forward, relu_backward, NULL);
}

/* relu's derivative, the step [x > 0], is a constant: its own derivative is
 * 0 wherever it is defined. */
void nb_graph_backward_relu(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0];
    nb_tensor *step = nb_zeros(ctx, x->dtype, x->ndim, x->shape);
    if (!step) return;
    for (size_t i = 0; i < x->numel; i++)
        if (nb_get(x, i) > 0) nb_set(step, i, 1.0);
    din[0] = nb_mul(ctx, dout, step);
}

/* ---- gelu ------------------------------------------------------------------ */
#define NB_SQRT1_2 0.70710678118654752440     /* 1 / sqrt(2) */
#define NB_INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi): the normal pdf at 0 */
#define NB_SQRT_2_PI 0.79788456080286535588   /* sqrt(2 / pi) */
#define NB_GELU_KAPPA 0.044715

/* Exact: y = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2;
 * dy/dx = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi) (reuses the input). */
UNARY_OP(gelu_erf,
         y = x * (T)0.5 * (1 + erf(x * (T)NB_SQRT1_2)),
         d = (T)0.5 * (1 + erf(x * (T)NB_SQRT1_2)) +
             x * (T)NB_INV_SQRT_2PI * exp((T)-0.5 * x * x))

/* Tanh approximation (PyTorch's approximate='tanh'):
 * y = x/2 (1 + t), t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3);
 * dy/dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 * (reuses the input; t is recomputed rather than saved). */
#define GELU_TANH_T(T) tanh((T)NB_SQRT_2_PI * (x + (T)NB_GELU_KAPPA * x * x * x))
UNARY_OP(gelu_tanh,
         y = (T)0.5 * x * (1 + GELU_TANH_T(T)),
         const T t = GELU_TANH_T(T);
         d = (T)0.5 * (1 + t) + (T)0.5 * x * (1 - t * t) * (T)NB_SQRT_2_PI *
                                    (1 + 3 * (T)NB_GELU_KAPPA * x * x))

/* float32 through the SIMD kernels (kernels/vec_*.c: the same formulas with
 * nb_expf_poly and a fitted erfc, within a few ulp of libm's), split over
 * threads; double through the loops above. */
typedef struct gelu_job {
    const float *x, *dy;
    float *y; /* forward: out; backward: dx */
    int tanh_approx;
    const nb_vec_kernels *vk;
    int store; /* backward: dx is a fresh buffer, stored into, not added to */
    float *d;  /* the saved gelu'(x): written by gelu_d, read by the saved backward */
} gelu_job;

static void gelu_fwd_range(void *arg, int64_t lo, int64_t hi) {
    const gelu_job *j = arg;
    j->vk->gelu(j->y + lo, j->x + lo, (size_t)(hi - lo), j->tanh_approx);
}

static void gelu_fwd_d_range(void *arg, int64_t lo, int64_t hi) {
    const gelu_job *j = arg;
    j->vk->gelu_d(j->y + lo, j->d + lo, j->x + lo, (size_t)(hi - lo), j->tanh_approx);
}

/* dx = dy * d, or dx += dy * d: gelu_bwd's arithmetic with d already known */
static void gelu_saved_bwd_range(void *arg, int64_t lo, int64_t hi) {
    const gelu_job *j = arg;
    const float *d = j->d, *dy = j->dy;
    float *dx = j->y;
    if (j->store)
        for (int64_t i = lo; i < hi; i++) dx[i] = dy[i] * d[i];
    else
        for (int64_t i = lo; i < hi; i++) dx[i] = dx[i] + dy[i] * d[i];
}

static void gelu_bwd_range(void *arg, int64_t lo, int64_t hi) {
    const gelu_job *j = arg;
    j->vk->gelu_bwd(j->y + lo, j->x + lo, j->dy + lo, (size_t)(hi - lo), j->tanh_approx,
                    j->store);
}

/* GELU costs some 20 times a plain elementwise op per element (a division,
 * an exp and a polynomial): 2048 elements already repay a worker. */
#define GELU_GRAIN 2048

static void gelu_f32_forward(const nb_tensor *a, nb_tensor *out, int tanh_approx) {
    gelu_job j = {a->data, NULL, out->data, tanh_approx, nb_vec(), false, NULL};
    nb_parallel_for((int64_t)a->numel, GELU_GRAIN, gelu_fwd_range, &j);
}

static void gelu_erf_forward_fast(const nb_tensor *a, nb_tensor *out, double p_) {
    if (a->dtype == NB_F32) gelu_f32_forward(a, out, 0);
    else gelu_erf_forward(a, out, p_);
}

static void gelu_tanh_forward_fast(const nb_tensor *a, nb_tensor *out, double p_) {
    if (a->dtype == NB_F32) gelu_f32_forward(a, out, 1);
    else gelu_tanh_forward(a, out, p_);
}

static void gelu_f32_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    bool fresh;
    float *ga = nb_grad_buffer_fresh(ctx, a, &fresh);
    if (!ga) return;
    /* a fresh buffer is stored into, not cleared and added to */
    gelu_job j = {a->data, out->grad, ga, (int)n->i[0] == NB_GELU_TANH, nb_vec(), fresh, NULL};
    nb_parallel_for((int64_t)a->numel, GELU_GRAIN, gelu_bwd_range, &j);
}

static void gelu_erf_backward_fast(nb_ctx *ctx, nb_node *n) {
    if (n->in[0]->dtype == NB_F32) gelu_f32_backward(ctx, n);
    else gelu_erf_backward(ctx, n);
}

static void gelu_tanh_backward_fast(nb_ctx *ctx, nb_node *n) {
    if (n->in[0]->dtype == NB_F32) gelu_f32_backward(ctx, n);
    else gelu_tanh_backward(ctx, n);
}

/* A small float32 GELU on the tape keeps gelu'(x) from its forward (one
 * pass computes y and d), so its backward is dx = dy * d instead of a
 * second erf or tanh: in the tiny GPT (16K elements a layer) that recompute
 * is some 7% of a training step. Above GELU_SAVE_MAX elements the saved
 * buffer is a real cost in memory (1.5 MB a layer in the cpu-baby GPT, held
 * from the forward to the backward) while the recompute is a smaller share
 * of the step, so larger GELUs recompute. The bits are the same
 * either way: d is the value gelu_bwd multiplies dy by. */
#define GELU_SAVE_MAX ((size_t)1 << 16)
#define GELU_SAVED_GRAIN 16384 /* a multiply per element: small ones stay inline */

static void gelu_saved_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    bool fresh;
    float *ga = nb_grad_buffer_fresh(ctx, a, &fresh);
    if (!ga) return;
    gelu_job j = {NULL, out->grad, ga, 0, NULL, fresh, n->saved};
    nb_parallel_for((int64_t)a->numel, GELU_SAVED_GRAIN, gelu_saved_bwd_range, &j);
}

static nb_tensor *gelu_f32_saving(nb_ctx *ctx, nb_tensor *a, nb_gelu_approx approx) {
    nb_tensor *out = nb_empty(ctx, a->dtype, a->ndim, a->shape);
    float *d = out ? nb_ctx_alloc_raw(ctx, a->numel * sizeof(float)) : NULL; /* all written */
    if (!d) return NULL;
    gelu_job j = {a->data, NULL, out->data, approx == NB_GELU_TANH, nb_vec(), false, d};
    nb_parallel_for((int64_t)a->numel, GELU_GRAIN, gelu_fwd_d_range, &j);
    nb_node *n = nb_record_op(ctx, NB_OP_GELU, out, 1, &a, gelu_saved_backward);
    if (n) n->i[0] = approx, n->saved = d;
    return out;
}

/* The variant goes in node->i[0]; each variant has its own backward. */
nb_tensor *nb_gelu(nb_ctx *ctx, nb_tensor *a, nb_gelu_approx approx) {
    if (!nb_check_float_inputs(ctx, "gelu", 1, &a)) return NULL;
    if (approx != NB_GELU_NONE && approx != NB_GELU_TANH) {
        char s[64];
        nb_ctx_fail(ctx, NB_ERR_VALUE,
                    "gelu: approx %d for input %s is not valid, expected NB_GELU_NONE (0) or "
                    "NB_GELU_TANH (1)",
                    (int)approx, nb_shape_str(a, s, sizeof s));
        return NULL;
    }
    if (a->dtype == NB_F32 && a->numel <= GELU_SAVE_MAX && ctx->grad_enabled && a->requires_grad)
        return gelu_f32_saving(ctx, a, approx);
    nb_node *n = NULL;
    nb_tensor *out = approx == NB_GELU_TANH
                         ? unary(ctx, NB_OP_GELU, a, 0, gelu_tanh_forward_fast,
                                 gelu_tanh_backward_fast, &n)
                         : unary(ctx, NB_OP_GELU, a, 0, gelu_erf_forward_fast,
                                 gelu_erf_backward_fast, &n);
    if (n) n->i[0] = approx;
    return out;
}

/* GELU's derivative written with ops: erf's form
 *   d = Phi(x) + x phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2,
 *   phi(x) = e^(-x^2/2) / sqrt(2 pi);
 * the tanh form, with u = c (x + k x^3), t = tanh u, c = sqrt(2 / pi),
 *   d = (1 + t) / 2 + x (1 - t^2) c (1 + 3 k x^2) / 2. */
void nb_graph_backward_gelu(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0], *d;
    if ((int)n->i[0] == NB_GELU_TANH) {
        const double c = NB_SQRT_2_PI, k = NB_GELU_KAPPA;
        nb_tensor *x2 = nb_mul(ctx, x, x);
        nb_tensor *u = nb_scale(ctx, nb_add(ctx, x, nb_scale(ctx, nb_mul(ctx, x2, x), k)), c);
        nb_tensor *t = nb_tanh(ctx, u);
        nb_tensor *half_1pt = nb_scale(ctx, nb_add_scalar(ctx, t, 1.0), 0.5);
        nb_tensor *sech2 = nb_add_scalar(ctx, nb_neg(ctx, nb_mul(ctx, t, t)), 1.0);
        nb_tensor *du = nb_scale(ctx, nb_add_scalar(ctx, nb_scale(ctx, x2, 3 * k), 1.0), 0.5 * c);
        d = nb_add(ctx, half_1pt, nb_mul(ctx, x, nb_mul(ctx, sech2, du)));
    } else {
        nb_tensor *erf = nb_erf(ctx, nb_scale(ctx, x, NB_SQRT1_2));
        nb_tensor *cdf = nb_scale(ctx, nb_add_scalar(ctx, erf, 1.0), 0.5);
        nb_tensor *pdf = nb_scale(ctx, nb_exp(ctx, nb_scale(ctx, nb_mul(ctx, x, x), -0.5)),
                                  NB_INV_SQRT_2PI);
        d = nb_add(ctx, cdf, nb_mul(ctx, x, pdf));
    }
    din[0] = nb_mul(ctx, dout, d);
}

/* ---- silu: y = x sigmoid(x) = x / (1 + e^-x);  dy/dx = s (1 + x (1 - s)),
 * s = sigmoid(x) (reuses the input), PyTorch's forward and derivative. */
UNARY_OP(silu, y = x / (1 + exp(-x)), T s = 1 / (1 + exp(-x)); d = s * (1 + x * (1 - s)))

/* float32 takes exp(-x) from the SIMD polynomial (kernels/vec_*.c, as exp
 * does) a block at a time, and the rest in plain loops the compiler
 * vectorises; expf per element does not vectorise. On (64*256, 1024), one
 * thread, 2026-11-28, `AMD EPYC`: forward 51 -> 10 ms, backward 76 -> 21
 * ms. Past the polynomial's range e^-x is inf or huge, so y is -0 or tiny
 * and d 0 or tiny, never NaN. */
enum { SILU_BLOCK = 1024 };
typedef struct silu_job {
    const float *x, *dy;
    float *y, *dx; /* forward: y; backward: dx */
    const nb_vec_kernels *vk;
    bool store; /* backward: dx is fresh, stored rather than added to */
} silu_job;

/* e[j] = exp(-x[j]) for j < n <= SILU_BLOCK */
static void silu_exp_neg(const nb_vec_kernels *vk, float *e, const float *x, size_t n) {
    float t[SILU_BLOCK];
    for (size_t j = 0; j < n; j++) t[j] = -x[j];
    vk->exp_sub_sum(e, t, 0.0f, n);
}

NB_HOT static void silu_fwd_range_f32(void *arg, int64_t lo, int64_t hi) {
    const silu_job *j = arg;
    float e[SILU_BLOCK];
    for (size_t i = (size_t)lo; i < (size_t)hi; i += SILU_BLOCK) {
        size_t n = (size_t)hi - i < SILU_BLOCK ? (size_t)hi - i : SILU_BLOCK;
        const float *x = j->x + i;
        float *y = j->y + i;
        silu_exp_neg(j->vk, e, x, n);
        for (size_t k = 0; k < n; k++) y[k] = x[k] / (1 + e[k]);
    }
}

NB_HOT static void silu_bwd_range_f32(void *arg, int64_t lo, int64_t hi) {
    const silu_job *j = arg;
    float e[SILU_BLOCK];
    for (size_t i = (size_t)lo; i < (size_t)hi; i += SILU_BLOCK) {
        size_t n = (size_t)hi - i < SILU_BLOCK ? (size_t)hi - i : SILU_BLOCK;
        const float *x = j->x + i, *dy = j->dy + i;
        float *dx = j->dx + i;
        silu_exp_neg(j->vk, e, x, n);
        for (size_t k = 0; k < n; k++) {
            float s = 1 / (1 + e[k]);
            e[k] = s * (1 + x[k] * (1 - s)); /* d */
        }
        if (j->store)
            for (size_t k = 0; k < n; k++) dx[k] = dy[k] * e[k];
        else
            for (size_t k = 0; k < n; k++) dx[k] = dx[k] + dy[k] * e[k];
    }
}

static void silu_forward_fast(const nb_tensor *a, nb_tensor *out, double p_) {
    if (a->dtype != NB_F32) {
        silu_forward(a, out, p_);
        return;
    }
    silu_job j = {a->data, NULL, out->data, NULL, nb_vec(), false};
    nb_parallel_for((int64_t)a->numel, UNARY_GRAIN, silu_fwd_range_f32, &j);
}

static void silu_backward_fast(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    if (a->dtype != NB_F32) {
        silu_backward(ctx, n);
        return;
    }
    bool fresh = false;
    float *ga = nb_grad_buffer_fresh(ctx, a, &fresh);
    if (!ga) return;
    silu_job j = {a->data, out->grad, NULL, ga, nb_vec(), fresh};
    nb_parallel_for((int64_t)a->numel, UNARY_GRAIN, silu_bwd_range_f32, &j);
}

nb_tensor *nb_silu(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_SILU, a, 0, silu_forward_fast, silu_backward_fast, NULL);
}

void nb_graph_backward_silu(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0], *s = nb_sigmoid(ctx, x); /* dout s (1 + x (1 - s)) */
    nb_tensor *one_s = nb_add_scalar(ctx, nb_neg(ctx, s), 1.0);
    nb_tensor *d = nb_mul(ctx, s, nb_add_scalar(ctx, nb_mul(ctx, x, one_s), 1.0));
    din[0] = nb_mul(ctx, dout, d);
}

/* ---- relu2: y = max(x, 0)^2;  dy/dx = 2x where x > 0, else 0 (reuses the
 * input). One op because it beats the composition: forward + backward of a
 * (64*256, 1024) float32 tensor of U(-1, 1), best of 10, measured 2026-11-28
 * on an `AMD EPYC` (lscpu; 2 cores, shared): relu then mul 38-61 ms at 1
 * thread, 38-41 ms at 2; relu then pow 2 368-383 ms and 305-374 ms; relu2
 * 22-26 ms and 25-30 ms (one pass each way instead of two, no tensor in
 * between). Written as selects of constants times x, which gcc turns into
 * vector code; a select of x itself before the multiply compiled to a
 * branch per element, 10x slower on random signs. NaN passes through. */
UNARY_OP(relu2, T s = x < 0 ? 0 : 1; y = (s * x) * x, T s = x > 0 ? 2 : 0; d = s * x)
nb_tensor *nb_relu2(nb_ctx *ctx, nb_tensor *a) {
    return unary(ctx, NB_OP_RELU2, a, 0, relu2_forward, relu2_backward, NULL);
}

/* dout 2 relu(x): relu's step makes the derivative's own derivative 2 [x > 0] */
void nb_graph_backward_relu2(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_mul(ctx, dout, nb_scale(ctx, nb_relu(ctx, n->in[0]), 2.0));
}

/* ---- forward-mode rules ------------------------------------------------------
 * Every op here is elementwise, so its Jacobian is diagonal (symmetric):
 * the tangent is J t = J^T t, the graph backward applied to t. */
#define UNARY_FORWARD(NAME)                                                               \
    nb_tensor *nb_forward_##NAME(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {        \
        return nb_forward_symmetric(ctx, n, tin, nb_graph_backward_##NAME);               \
    }
UNARY_FORWARD(neg)
UNARY_FORWARD(scale)
UNARY_FORWARD(add_scalar)
UNARY_FORWARD(exp)
UNARY_FORWARD(log)
UNARY_FORWARD(sqrt)
UNARY_FORWARD(pow)
UNARY_FORWARD(tanh)
UNARY_FORWARD(sigmoid)
UNARY_FORWARD(erf)
UNARY_FORWARD(relu)
UNARY_FORWARD(gelu)
UNARY_FORWARD(silu)
UNARY_FORWARD(relu2)
