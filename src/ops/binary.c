/* ops/binary.c - add, sub, mul, div with numpy/PyTorch broadcasting.
 *
 * Shapes are padded to NB_MAX_DIMS dims on the left; an input's stride is 0
 * along a dim it broadcasts, so one loop (NB_BCAST_FOR) serves every shape
 * pair. The same
 * loop runs backward, where `+=` into a stride-0 position is exactly the sum
 * over the broadcast dims that broadcasting's gradient needs.
 *
 * As in unary.c, one driver does the checks, the broadcast shape, the
 * output and the recording, and each op is one BINARY_OP line giving its
 * forward formula and what its backward adds to each input's gradient, side
 * by side. */
#include "ops/ops_internal.h"

typedef struct bcast {
    int64_t shape[NB_MAX_DIMS];           /* output shape, padded */
    int64_t sa[NB_MAX_DIMS], sb[NB_MAX_DIMS]; /* input strides in elements, 0 where broadcast */
    size_t numel;                         /* the output's elements */
    bool flat;                            /* a, b and out all have the same shape */
} bcast;

static void bcast_init(bcast *bc, const nb_tensor *out, const nb_tensor *a, const nb_tensor *b) {
    nb_shape_pad(out->ndim, out->shape, bc->shape);
    bc->numel = out->numel;
    nb_broadcast_strides(a, out->ndim, out->shape, bc->sa);
    nb_broadcast_strides(b, out->ndim, out->shape, bc->sb);
    bc->flat = a->numel == out->numel && b->numel == out->numel;
}

/* Runs BODY with o (output index), ia, ib (input indices) in row-major order. */
#define BCAST_FOR(bc, BODY)                                                         \
    do {                                                                            \
        if ((bc)->flat) {                                                           \
            for (size_t o = 0; o < (bc)->numel; o++) {                              \
                size_t ia = o, ib = o;                                              \
                BODY                                                                \
            }                                                                       \
        } else {                                                                    \
            NB_BCAST_FOR((bc)->shape, (bc)->sa, (bc)->sb, {                         \
                size_t ia = i1, ib = i2;                                            \
                BODY                                                                \
            });                                                                     \
        }                                                                           \
    } while (0)

/* The element loops, with T a block-local typedef (float or double): x and y
 * are the input elements at ia and ib, g the output gradient at o. The
 * backward runs one loop per input that needs a gradient, so in the flat
 * case each is a plain `+=` over the elements that the compiler vectorizes. */
#define BINARY_FWD_LOOP(TYPE, FWD)                                              \
    {                                                                           \
        typedef TYPE T;                                                         \
        const T *xs = a->data, *ys = b->data;                                   \
        T *zs = out->data;                                                      \
        BCAST_FOR(bc, {                                                         \
            const T x = xs[ia];                                                 \
            const T y = ys[ib];                                                 \
            zs[o] = FWD;                                                        \
        });                                                                     \
    }

/* D[I] += EXPR over the broadcast elements (D is da or db, I its index). */
#define BINARY_ACCUMULATE(D, I, EXPR)                                           \
    BCAST_FOR(&bc, {                                                            \
        const T g = gs[o];                                                      \
        const T x = xs[ia];                                                     \
        const T y = ys[ib];                                                     \
        D[I] += EXPR;                                                           \
        (void)x; (void)y;                                                       \
    })

#define BINARY_BWD_LOOP(TYPE, DA, DB)                                           \
    {                                                                           \
        typedef TYPE T;                                                         \
        const T *xs = a->data, *ys = b->data, *gs = out->grad;                  \
        T *da = ga, *db = gb;                                                   \
        if (da) BINARY_ACCUMULATE(da, ia, DA);                                  \
        if (db) BINARY_ACCUMULATE(db, ib, DB);                                  \
    }

/* Defines NAME_forward (z = FWD from x, y) and NAME_backward (da += DA,
 * db += DB, from g, x, y). DA and DB are g times dz/dx and dz/dy, written so
 * that each rounds as the op's rule states it (g / y, not g * (1 / y)). */
#define BINARY_OP(NAME, FWD, DA, DB)                                            \
    static void NAME##_forward(const bcast *bc, const nb_tensor *a,             \
                               const nb_tensor *b, nb_tensor *out) {            \
        if (out->dtype == NB_F32)                                               \
            BINARY_FWD_LOOP(float, FWD)                                         \
        else                                                                    \
            BINARY_FWD_LOOP(double, FWD)                                        \
    }                                                                           \
    static void NAME##_backward(nb_ctx *ctx, nb_node *n) {                      \
        nb_tensor *a = n->in[0], *b = n->in[1], *out = n->out;                  \
        void *ga = nb_grad_buffer(ctx, a), *gb = nb_grad_buffer(ctx, b);        \
        bcast bc;                                                               \
        bcast_init(&bc, out, a, b);                                             \
        if (out->dtype == NB_F32)                                               \
            BINARY_BWD_LOOP(float, DA, DB)                                      \
        else                                                                    \
            BINARY_BWD_LOOP(double, DA, DB)                                     \
    }

/* The forward kernel of an op: z = FWD over the broadcast elements. */
typedef void (*binary_fwd)(const bcast *bc, const nb_tensor *a, const nb_tensor *b,
                           nb_tensor *out);

/* The shared driver: checks, broadcast shape, output, forward, record.
 * a, b (f32/f64, one dtype, broadcastable) -> out (the broadcast shape). */
static nb_tensor *binary(nb_ctx *ctx, nb_op op, nb_tensor *a, nb_tensor *b, binary_fwd forward,
                         nb_backward_fn backward) {
    nb_tensor *in[2] = {a, b};
    if (!nb_check_float_inputs(ctx, nb_op_name(op), 2, in)) return NULL;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    if (!nb_broadcast_shape(ctx, nb_op_name(op), a, b, &ndim, shape)) return NULL;
    nb_tensor *out = nb_empty(ctx, a->dtype, ndim, shape); /* forward writes all */
    if (!out) return NULL;
    bcast bc;
    bcast_init(&bc, out, a, b);
    forward(&bc, a, b, out);
    nb_record_op(ctx, op, out, 2, in, backward);
    return out;
}

/* ---- add: z = x + y;  dz/dx = 1, dz/dy = 1 ---------------------------------- */
BINARY_OP(add, x + y, g, g)

/* y (+)= x over float ranges split among the threads: the SIMD add of each
 * element is the same whatever the split. */
typedef struct add_job {
    float *y;
    const float *x, *x2; /* y = x + x2 when x2 is set, else y += x */
    const nb_vec_kernels *vk;
} add_job;

static void add_range(void *arg, int64_t lo, int64_t hi) {
    const add_job *j = arg;
    if (j->x2) {
        memcpy(j->y + lo, j->x + lo, (size_t)(hi - lo) * sizeof(float));
        j->vk->add(j->y + lo, j->x2 + lo, (size_t)(hi - lo));
    } else {
        j->vk->add(j->y + lo, j->x + lo, (size_t)(hi - lo));
    }
}

#define ADD_GRAIN 16384 /* elements worth a thread */

static void add_par(float *y, const float *x, const float *x2, size_t n) {
    add_job j = {y, x, x2, nb_vec()};
    nb_parallel_for((int64_t)n, ADD_GRAIN, add_range, &j);
}

/* float32 without broadcasting (the residual adds): da += g and db += g
 * through the SIMD add (the same adds, so the same bits). */
static void add_backward_fast(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *b = n->in[1], *out = n->out;
    if (out->dtype != NB_F32 || a->numel != out->numel || b->numel != out->numel) {
        add_backward(ctx, n);
        return;
    }
    nb_tensor *ab[2] = {a, b};
    /* a may take out's buffer whole (b, read after, then copies from a's) */
    const float *g_out = out->grad;
    for (int i = 0; i < 2; i++) { /* a, then b: they may be one tensor */
        if (i == 0 && nb_grad_take(ctx, a, out)) continue;
        bool fresh;
        float *g = nb_grad_buffer_fresh(ctx, ab[i], &fresh);
        if (g && fresh) nb_copy_par(g, g_out, out->numel * sizeof(float));
        else if (g) add_par(g, g_out, NULL, out->numel);
    }
}

/* And its forward: z = x, then z += y (addition commutes: the same bits). */
static void add_forward_fast(const bcast *bc, const nb_tensor *a, const nb_tensor *b,
                             nb_tensor *out) {
    if (out->dtype != NB_F32 || !bc->flat || a->data == out->data || b->data == out->data) {
        add_forward(bc, a, b, out);
        return;
    }
    add_par(out->data, a->data, b->data, out->numel);
}

nb_tensor *nb_add(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    return binary(ctx, NB_OP_ADD, a, b, add_forward_fast, add_backward_fast);
}

/* Each op's graph backward, after it, is its rule written with recorded
 * ops; a broadcast input's share is summed back to its shape (nb_sum_to). */
void nb_graph_backward_add(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_sum_to(ctx, dout, n->in[0]);
    din[1] = nb_sum_to(ctx, dout, n->in[1]);
}

/* ---- sub: z = x - y;  dz/dx = 1, dz/dy = -1 --------------------------------- */
BINARY_OP(sub, x - y, g, -g)
nb_tensor *nb_sub(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    return binary(ctx, NB_OP_SUB, a, b, sub_forward, sub_backward);
}

void nb_graph_backward_sub(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_sum_to(ctx, dout, n->in[0]);
    din[1] = nb_sum_to(ctx, nb_neg(ctx, dout), n->in[1]);
}

/* ---- mul: z = x y;  dz/dx = y, dz/dy = x (reuses both inputs) --------------- */
BINARY_OP(mul, x * y, g * y, g * x)

/* float32 fast paths for the two shapes a training step multiplies most:
 * the same shape (the gated MLP's silu(h1) · h2) and a row scale, s (R, 1)
 * against x (R, D) with equal leading dims (a mixture of experts' gates on
 * its stacked rows). Each runs over rows split among the threads and does
 * the generic loop's arithmetic in its order (a row's ds is summed from d =
 * 0 up), so the results are the generic path's bits at any thread count.
 * A gradient buffer the op is first to write is stored, not cleared and
 * added to. */
typedef struct mul_job {
    const float *x, *s, *g; /* x (R, D), s (R, D) or (R, 1), g = dout (R, D) */
    float *z, *dx, *ds;     /* forward: z; backward: dx and ds, either NULL */
    bool dx_fresh, ds_fresh;
    int64_t D;
    bool row; /* s is (R, 1) */
} mul_job;

NB_HOT static void mul_fwd_range(void *arg, int64_t lo, int64_t hi) {
    const mul_job *j = arg;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + r * j->D, *s = j->row ? j->s + r : j->s + r * j->D;
        float *z = j->z + r * j->D;
        if (j->row)
            for (int64_t d = 0; d < j->D; d++) z[d] = x[d] * s[0];
        else
            for (int64_t d = 0; d < j->D; d++) z[d] = x[d] * s[d];
    }
}

NB_HOT static void mul_bwd_range(void *arg, int64_t lo, int64_t hi) {
    const mul_job *j = arg;
    const int64_t D = j->D;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + r * D, *g = j->g + r * D;
        const float *s = j->row ? j->s + r : j->s + r * D;
        if (j->dx) { /* dx += g s */
            float *dx = j->dx + r * D;
            if (j->dx_fresh && j->row) for (int64_t d = 0; d < D; d++) dx[d] = g[d] * s[0];
            else if (j->dx_fresh) for (int64_t d = 0; d < D; d++) dx[d] = g[d] * s[d];
            else if (j->row) for (int64_t d = 0; d < D; d++) dx[d] += g[d] * s[0];
            else for (int64_t d = 0; d < D; d++) dx[d] += g[d] * s[d];
        }
        if (!j->ds) continue;
        if (j->row) { /* ds[r] += sum_d g x, in d order */
            float acc = j->ds_fresh ? 0.0f : j->ds[r];
            for (int64_t d = 0; d < D; d++) acc += g[d] * x[d];
            j->ds[r] = acc;
        } else {
            float *ds = j->ds + r * D;
            if (j->ds_fresh) for (int64_t d = 0; d < D; d++) ds[d] = g[d] * x[d];
            else for (int64_t d = 0; d < D; d++) ds[d] += g[d] * x[d];
        }
    }
}

#define MUL_GRAIN 8192 /* elements worth a thread */

/* Fills j with x and s for a (R, D) by (R, D) or (R, 1) product, either
 * way round; false when the shapes are neither (the generic loop runs). */
static bool mul_fast_shape(const nb_tensor *a, const nb_tensor *b, const nb_tensor *out,
                           mul_job *j, bool *swapped) {
    if (out->dtype != NB_F32 || out->ndim < 1 || out->numel == 0) return false;
    *swapped = false;
    if (a->numel == out->numel && b->numel == out->numel) {
        *j = (mul_job){.x = a->data, .s = b->data, .D = out->shape[out->ndim - 1]};
        return true;
    }
    const nb_tensor *x = a, *s = b;
    if (a->numel != out->numel) x = b, s = a, *swapped = true;
    if (x->numel != out->numel || x->ndim != out->ndim || s->ndim != out->ndim) return false;
    for (int d = 0; d < out->ndim - 1; d++)
        if (s->shape[d] != out->shape[d]) return false;
    if (s->shape[out->ndim - 1] != 1) return false;
    *j = (mul_job){.x = x->data, .s = s->data, .D = out->shape[out->ndim - 1], .row = true};
    return true;
}

static void mul_forward_fast(const bcast *bc, const nb_tensor *a, const nb_tensor *b,
                             nb_tensor *out) {
    mul_job j;
    bool swapped;
    if (!mul_fast_shape(a, b, out, &j, &swapped)) {
        mul_forward(bc, a, b, out);
        return;
    }
    j.z = out->data;
    nb_parallel_for((int64_t)out->numel / j.D, MUL_GRAIN / j.D + 1, mul_fwd_range, &j);
}

static void mul_backward_fast(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *b = n->in[1], *out = n->out;
    mul_job j;
    bool swapped;
    if (a == b || !mul_fast_shape(a, b, out, &j, &swapped)) {
        mul_backward(ctx, n);
        return;
    }
    nb_tensor *x = swapped ? b : a, *s = swapped ? a : b;
    j.g = out->grad;
    j.dx = nb_grad_buffer_fresh(ctx, x, &j.dx_fresh);
    j.ds = nb_grad_buffer_fresh(ctx, s, &j.ds_fresh);
    if (!j.dx && !j.ds) return;
    nb_parallel_for((int64_t)out->numel / j.D, MUL_GRAIN / j.D + 1, mul_bwd_range, &j);
}

nb_tensor *nb_mul(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    return binary(ctx, NB_OP_MUL, a, b, mul_forward_fast, mul_backward_fast);
}

void nb_graph_backward_mul(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *a = n->in[0], *b = n->in[1];
    if (a->requires_grad) din[0] = nb_sum_to(ctx, nb_mul(ctx, dout, b), a);
    if (b->requires_grad) din[1] = nb_sum_to(ctx, nb_mul(ctx, dout, a), b);
}

/* ---- div: z = x / y;  dz/dx = 1 / y, dz/dy = -x / y^2 (reuses both inputs) -- */
BINARY_OP(div, x / y, g / y, -(g * x / (y * y)))
nb_tensor *nb_div(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    return binary(ctx, NB_OP_DIV, a, b, div_forward, div_backward);
}

void nb_graph_backward_div(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *a = n->in[0], *b = n->in[1]; /* dout / b,  -dout a / b^2 */
    if (a->requires_grad) din[0] = nb_sum_to(ctx, nb_div(ctx, dout, b), a);
    if (b->requires_grad)
        din[1] = nb_sum_to(ctx, nb_neg(ctx, nb_div(ctx, nb_mul(ctx, dout, a), nb_mul(ctx, b, b))),
                           b);
}

/* ---- forward-mode rules: the tangent of a broadcast result -------------------
 * add: ta + tb;  sub: ta - tb;  mul: ta b + a tb;  div: (ta - out tb) / b. */
nb_tensor *nb_forward_add(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return nb_fwd_sum(ctx, n->out, tin[0], tin[1], 1);
}

nb_tensor *nb_forward_sub(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return nb_fwd_sum(ctx, n->out, tin[0], tin[1], -1);
}

nb_tensor *nb_forward_mul(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    nb_tensor *a = tin[0] ? nb_mul(ctx, tin[0], n->in[1]) : NULL;
    nb_tensor *b = tin[1] ? nb_mul(ctx, n->in[0], tin[1]) : NULL;
    return nb_fwd_sum(ctx, n->out, a, b, 1);
}

nb_tensor *nb_forward_div(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    nb_tensor *b = n->in[1];
    nb_tensor *num = nb_fwd_sum(ctx, n->out, tin[0], tin[1] ? nb_mul(ctx, n->out, tin[1]) : NULL,
                                -1);
    return num ? nb_div(ctx, num, b) : NULL;
}
