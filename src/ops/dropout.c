/* ops/dropout.c - dropout: a mask drawn from the caller's PCG32, forward
 * then backward (which reuses the mask). */
#include "ops/ops_internal.h"

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

static void dropout_backward(nb_ctx *ctx, nb_node *n); /* below, after the forward */

nb_tensor *nb_dropout(nb_ctx *ctx, nb_tensor *x, double p, bool train, struct nb_pcg32 *rng) {
    const char *op = nb_op_name(NB_OP_DROPOUT);
    static const char *const names[1] = {"x"};
    static const bool optional[1] = {false};
    if (!nb_check_named_inputs(ctx, op, 1, &x, names, optional)) return NULL;
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

/* ---- backward ----------------------------------------------------------------------------- */

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

/* ---- graph backward: dout times the saved mask's constant scale ----------- */
void nb_graph_backward_dropout(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0];
    const unsigned char *mask = n->saved;
    nb_tensor *m = nb_zeros(ctx, x->dtype, x->ndim, x->shape);
    if (!m) return;
    for (size_t i = 0; mask && i < x->numel; i++)
        if (mask[i]) nb_set(m, i, n->f[0]);
    din[0] = nb_mul(ctx, dout, m);
}

/* forward mode: t · mask / (1 - p), the diagonal graph backward on t */
nb_tensor *nb_forward_dropout(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return nb_forward_symmetric(ctx, n, tin, nb_graph_backward_dropout);
}
