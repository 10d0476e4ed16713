/* ops_binary.c - add, sub, mul, div with numpy/PyTorch broadcasting.
 *
 * Shapes are padded to 4 dims on the left; an input's stride is 0 along a
 * dim it broadcasts, so one 4-deep loop serves every shape pair. The same
 * loop runs backward, where `+=` into a stride-0 position is exactly the sum
 * over the broadcast dims that broadcasting's gradient needs. */
#include "nb_internal.h"

typedef struct bcast {
    int64_t shape[4];            /* output shape, padded */
    int64_t sa[4], sb[4];        /* input strides in elements, 0 where broadcast */
    bool flat;                   /* a, b and out all have the same shape */
} bcast;

static void bcast_init(bcast *bc, const nb_tensor *out, const nb_tensor *a, const nb_tensor *b) {
    nb_shape4(out->ndim, out->shape, bc->shape);
    nb_broadcast_strides(a, out->ndim, out->shape, bc->sa);
    nb_broadcast_strides(b, out->ndim, out->shape, bc->sb);
    bc->flat = a->numel == out->numel && b->numel == out->numel;
}

/* Runs BODY with o (output index), ia, ib (input indices) in row-major order. */
#define BCAST_FOR(bc, BODY)                                                         \
    do {                                                                            \
        if ((bc)->flat) {                                                           \
            size_t n_ = (size_t)((bc)->shape[0] * (bc)->shape[1] * (bc)->shape[2] * \
                                 (bc)->shape[3]);                                   \
            for (size_t o = 0; o < n_; o++) {                                       \
                size_t ia = o, ib = o;                                              \
                BODY                                                                \
            }                                                                       \
        } else {                                                                    \
            size_t o = 0;                                                           \
            for (int64_t i0 = 0; i0 < (bc)->shape[0]; i0++)                         \
                for (int64_t i1 = 0; i1 < (bc)->shape[1]; i1++)                     \
                    for (int64_t i2 = 0; i2 < (bc)->shape[2]; i2++)                 \
                        for (int64_t i3 = 0; i3 < (bc)->shape[3]; i3++, o++) {      \
                            size_t ia = (size_t)(i0 * (bc)->sa[0] + i1 * (bc)->sa[1] + \
                                                 i2 * (bc)->sa[2] + i3 * (bc)->sa[3]); \
                            size_t ib = (size_t)(i0 * (bc)->sb[0] + i1 * (bc)->sb[1] + \
                                                 i2 * (bc)->sb[2] + i3 * (bc)->sb[3]); \
                            BODY                                                    \
                        }                                                           \
        }                                                                           \
    } while (0)

/* Shared front half of the four ops: checks, broadcast shape, output. */
static nb_tensor *binary_out(nb_ctx *ctx, nb_op op, nb_tensor *a, nb_tensor *b) {
    nb_tensor *in[2] = {a, b};
    if (!nb_check_float_inputs(ctx, nb_op_name(op), 2, in)) return NULL;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    if (!nb_broadcast_shape(ctx, nb_op_name(op), a, b, &ndim, shape)) return NULL;
    return nb_empty_raw(ctx, a->dtype, ndim, shape); /* every element is written */
}

static nb_tensor *binary_finish(nb_ctx *ctx, nb_op op, nb_tensor *out, nb_tensor *a,
                                nb_tensor *b, nb_backward_fn backward) {
    nb_tensor *in[2] = {a, b};
    nb_record_op(ctx, op, out, 2, in, backward);
    return out;
}

/* ---- add: out = a + b;  da += g, db += g ------------------------------------ */
static void add_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *b = n->in[1], *out = n->out;
    void *ga = nb_grad_buffer(ctx, a), *gb = nb_grad_buffer(ctx, b);
    bcast bc;
    bcast_init(&bc, out, a, b);
#define K(T)                                                                  \
    {                                                                         \
        const T *g = out->grad;                                               \
        T *da = ga, *db = gb;                                                 \
        if (da) BCAST_FOR(&bc, da[ia] += g[o]; (void)ib;);                    \
        if (db) BCAST_FOR(&bc, db[ib] += g[o]; (void)ia;);                    \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
}

nb_tensor *nb_add(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    nb_tensor *out = binary_out(ctx, NB_OP_ADD, a, b);
    if (!out) return NULL;
    bcast bc;
    bcast_init(&bc, out, a, b);
#define K(T)                                                                  \
    {                                                                         \
        const T *x = a->data, *y = b->data;                                   \
        T *z = out->data;                                                     \
        BCAST_FOR(&bc, z[o] = x[ia] + y[ib];);                                \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
    return binary_finish(ctx, NB_OP_ADD, out, a, b, add_backward);
}

/* ---- sub: out = a - b;  da += g, db -= g ------------------------------------ */
static void sub_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *b = n->in[1], *out = n->out;
    void *ga = nb_grad_buffer(ctx, a), *gb = nb_grad_buffer(ctx, b);
    bcast bc;
    bcast_init(&bc, out, a, b);
#define K(T)                                                                  \
    {                                                                         \
        const T *g = out->grad;                                               \
        T *da = ga, *db = gb;                                                 \
        if (da) BCAST_FOR(&bc, da[ia] += g[o]; (void)ib;);                    \
        if (db) BCAST_FOR(&bc, db[ib] -= g[o]; (void)ia;);                    \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
}

nb_tensor *nb_sub(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    nb_tensor *out = binary_out(ctx, NB_OP_SUB, a, b);
    if (!out) return NULL;
    bcast bc;
    bcast_init(&bc, out, a, b);
#define K(T)                                                                  \
    {                                                                         \
        const T *x = a->data, *y = b->data;                                   \
        T *z = out->data;                                                     \
        BCAST_FOR(&bc, z[o] = x[ia] - y[ib];);                                \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
    return binary_finish(ctx, NB_OP_SUB, out, a, b, sub_backward);
}

/* ---- mul: out = a * b;  da += g * b, db += g * a (reuses both inputs) -------- */
static void mul_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *b = n->in[1], *out = n->out;
    void *ga = nb_grad_buffer(ctx, a), *gb = nb_grad_buffer(ctx, b);
    bcast bc;
    bcast_init(&bc, out, a, b);
#define K(T)                                                                  \
    {                                                                         \
        const T *g = out->grad, *x = a->data, *y = b->data;                   \
        T *da = ga, *db = gb;                                                 \
        if (da) BCAST_FOR(&bc, da[ia] += g[o] * y[ib];);                      \
        if (db) BCAST_FOR(&bc, db[ib] += g[o] * x[ia];);                      \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
}

nb_tensor *nb_mul(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    nb_tensor *out = binary_out(ctx, NB_OP_MUL, a, b);
    if (!out) return NULL;
    bcast bc;
    bcast_init(&bc, out, a, b);
#define K(T)                                                                  \
    {                                                                         \
        const T *x = a->data, *y = b->data;                                   \
        T *z = out->data;                                                     \
        BCAST_FOR(&bc, z[o] = x[ia] * y[ib];);                                \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
    return binary_finish(ctx, NB_OP_MUL, out, a, b, mul_backward);
}

/* ---- div: out = a / b;  da += g / b, db -= g * a / b^2 (reuses a, b) --------- */
static void div_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *b = n->in[1], *out = n->out;
    void *ga = nb_grad_buffer(ctx, a), *gb = nb_grad_buffer(ctx, b);
    bcast bc;
    bcast_init(&bc, out, a, b);
#define K(T)                                                                  \
    {                                                                         \
        const T *g = out->grad, *x = a->data, *y = b->data;                   \
        T *da = ga, *db = gb;                                                 \
        if (da) BCAST_FOR(&bc, da[ia] += g[o] / y[ib];);                      \
        if (db) BCAST_FOR(&bc, db[ib] -= g[o] * x[ia] / (y[ib] * y[ib]););    \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
}

nb_tensor *nb_div(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    nb_tensor *out = binary_out(ctx, NB_OP_DIV, a, b);
    if (!out) return NULL;
    bcast bc;
    bcast_init(&bc, out, a, b);
#define K(T)                                                                  \
    {                                                                         \
        const T *x = a->data, *y = b->data;                                   \
        T *z = out->data;                                                     \
        BCAST_FOR(&bc, z[o] = x[ia] / y[ib];);                                \
    }
    NB_DISPATCH(out->dtype, K);
#undef K
    return binary_finish(ctx, NB_OP_DIV, out, a, b, div_backward);
}
