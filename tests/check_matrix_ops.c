/* check_matrix_ops.c - the bad-input matrix for the ops of nabla/ops.h.
 *
 * THE MATRIX (tests/check_matrix*.c): every function declared in
 * include/nabla.h and include/nabla/ (every .h) has cases here, with hostile
 * arguments: NULL for each pointer, mismatched shapes, zero-size dims, sizes
 * whose product overflows, mixed dtypes, NaN/Inf data, negative and huge
 * counts, out-of-range enums, the wrong mode. Each case asserts a clear
 * error (the status, and a message naming the op) or the documented result.
 * Check's fork mode isolates a crash to one case, each case has Check's
 * time limit, and `make memcheck` runs them under valgrind for leaks.
 *
 * tools/test/matrix_coverage.py (run by `make test`) lists the public functions
 * and fails for any that no tests/check_matrix*.c file calls: a NEW PUBLIC
 * FUNCTION needs at least one case calling it (`nb_name(`) in one of these
 * files, or in the call of its NB_OP row in nabla/ops.def. A new op's row
 * gives it the whole battery below (an NB_OP_HAND op needs its w_<name> and
 * a row of hand_ops here); another function gets a START_TEST in the file of
 * its header's area:
 *   check_matrix_ops.c   nabla/ops.h
 *   check_matrix_core.c  nabla/core.h, nabla/random.h
 *   check_matrix_misc.c  nabla/nn.h, nabla/optim.h, nabla/io.h, nabla/gradcheck.h
 *   check_matrix_data.c  nabla/data.h       check_matrix_gpt.c  nabla/gpt.h
 *   check_matrix_teach.c nabla/teach.h, print options, fused attention
 * (or a new tests/check_matrix_<area>.c: the script reads them all).
 *
 * Here every op of the list gets the same battery: a valid call works; NULL
 * ctx gives NULL; each NULL tensor gives NB_ERR_NULL; an I64 input where a
 * float is needed and mixed f32/f64 give NB_ERR_DTYPE; a second input of the
 * wrong shape gives an error naming the op; NaN/Inf data never crash (and
 * propagate through elementwise ops); an earlier error is kept (sticky);
 * with grad disabled nothing is recorded. Per-op value cases (dims, counts,
 * probabilities, enums) follow the table. */
#include "check_nabla.h"

#include "matrix_util.h"
#include "op_rows.h"

/* ---- the op table ---------------------------------------------------------- */
static nb_pcg32 g_rng;

typedef nb_tensor *(*op2_fn)(nb_ctx *ctx, nb_tensor *a, nb_tensor *b);

#define ELEMWISE   1u /* out[0] is NaN when a[0] is */
#define B_FLOAT    2u /* b is a float input of a's dtype */
#define B_OPT      4u /* b may be NULL (layer_norm without affine) */
#define B_ANYSHAPE 8u /* any shape of b fits (embedding's ids) */

typedef struct op_case {
    const char *name; /* the op named in errors */
    op2_fn fn;        /* a hand-written case's call, or NULL for a row's */
    int n_in; /* 1: only a; 2: a and b */
    int a_nd;
    int64_t a_shape[NB_MAX_DIMS];
    int b_nd;
    int64_t b_shape[NB_MAX_DIMS];
    nb_dtype b_dt;
    unsigned flags;
    nb_gradcheck_fn row; /* an NB_OP row's call (op_rows.h) */
} op_case;

static nb_tensor *w_pow(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_pow(c, a, 3);
}
static nb_tensor *w_gelu(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_gelu(c, a, NB_GELU_NONE);
}
static nb_tensor *w_gelu_tanh(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_gelu(c, a, NB_GELU_TANH);
}
static nb_tensor *w_sum_dim(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_sum_dim(c, a, 1, false);
}
static nb_tensor *w_mean_dim(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_mean_dim(c, a, -1, true);
}
static nb_tensor *w_max_dim(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_max_dim(c, a, 1, false, NULL);
}
static nb_tensor *w_topk(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_topk(c, a, 2, 1, NULL);
}
static nb_tensor *w_index_select(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_index_select(c, a, b);
}
static nb_tensor *w_index_add(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_index_add(c, a, b, a); /* a's own rows added at ids b */
}
static nb_tensor *w_transpose(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_transpose(c, a, 0, 1);
}
static nb_tensor *w_permute(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_permute(c, a, (const int[]){1, 0});
}
static nb_tensor *w_reshape(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_reshape(c, a, NB_SHAPE(3, 2));
}
static nb_tensor *w_causal_fill(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_causal_fill(c, a, -INFINITY);
}
static nb_tensor *w_dropout(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    return nb_dropout(c, a, 0.5, true, &g_rng);
}
static nb_tensor *w_concat(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    nb_tensor *ts[2] = {a, b};
    return nb_concat(c, 2, ts, 0);
}
static nb_tensor *w_split(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    (void)b;
    nb_tensor *out[2] = {NULL, NULL};
    return nb_split(c, a, 1, 2, (const int64_t[]){1, 2}, out) == NB_OK ? out[1] : NULL;
}
static nb_tensor *w_masked_fill(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_masked_fill(c, a, b, -1);
}
static nb_tensor *w_cross_entropy(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_cross_entropy(c, a, b);
}
static nb_tensor *w_linear(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_linear(c, a, b, NULL);
}
static nb_tensor *w_grouped_linear(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    nb_tensor *w[2] = {b, b}; /* one weight for both groups: rows 0 and 1-2 */
    return nb_grouped_linear(c, a, 2, w, (const int64_t[]){1, 2});
}
static nb_tensor *w_embedding(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_embedding(c, a, b);
}
static nb_tensor *w_layer_norm(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_layer_norm(c, a, b, b, 1e-5);
}
static nb_tensor *w_rms_norm(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_rms_norm(c, a, b, 1e-5);
}
static nb_tensor *w_sdpa(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_sdpa(c, a, b, b, NULL, true, 0.5, 0.0, 0);
}
/* b is both tables */
static nb_tensor *w_rope(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
    return nb_rope(c, a, b, b, 1, 0);
}

#define S2(x, y)                                                                                   \
    2, { x, y, 1, 1 }
#define S1(x)                                                                                      \
    1, { x, 1, 1, 1 }
#define NONE                                                                                       \
    0, { 1, 1, 1, 1 }
/* The hand-written cases, for the NB_OP_HAND ops of the list (their row
 * field is left out: NULL). */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const op_case hand_ops[] = {
    {"sdpa", w_sdpa, 2, 4, {1, 3, 2, 4}, 4, {1, 3, 2, 4}, NB_F32, ELEMWISE | B_FLOAT},
    {"concat", w_concat, 2, S2(2, 3), S2(2, 3), NB_F32, ELEMWISE | B_FLOAT},
    {"linear", w_linear, 2, S2(2, 3), S2(4, 3), NB_F32, ELEMWISE | B_FLOAT},
    {"grouped_linear", w_grouped_linear, 2, S2(3, 3), S2(4, 3), NB_F32, ELEMWISE | B_FLOAT},
    {"layer_norm", w_layer_norm, 2, S2(2, 3), S1(3), NB_F32, ELEMWISE | B_FLOAT | B_OPT},
    {"rms_norm", w_rms_norm, 2, S2(2, 3), S1(3), NB_F32, ELEMWISE | B_FLOAT | B_OPT},
    {"masked_fill", w_masked_fill, 2, S2(2, 3), S2(2, 3), NB_BOOL, 0},
    {"cross_entropy", w_cross_entropy, 2, S2(2, 3), S1(2), NB_I64, ELEMWISE},
    {"embedding", w_embedding, 2, S2(5, 3), S2(2, 2), NB_I64, B_ANYSHAPE},
    {"pow", w_pow, 1, S2(2, 3), NONE, NB_F32, ELEMWISE},
    {"gelu", w_gelu, 1, S2(2, 3), NONE, NB_F32, ELEMWISE},
    {"gelu", w_gelu_tanh, 1, S2(2, 3), NONE, NB_F32, ELEMWISE},
    {"sum_dim", w_sum_dim, 1, S2(2, 3), NONE, NB_F32, ELEMWISE},
    {"mean_dim", w_mean_dim, 1, S2(2, 3), NONE, NB_F32, ELEMWISE},
    {"max_dim", w_max_dim, 1, S2(2, 3), NONE, NB_F32, 0},
    {"topk", w_topk, 1, S2(2, 3), NONE, NB_F32, ELEMWISE},
    {"index_select", w_index_select, 2, S2(5, 3), S1(4), NB_I64, 0},
    {"index_add", w_index_add, 2, S2(4, 3), S1(4), NB_I64, 0},
    {"transpose", w_transpose, 1, S2(2, 3), NONE, NB_F32, ELEMWISE},
    {"permute", w_permute, 1, S2(2, 3), NONE, NB_F32, ELEMWISE},
    {"reshape", w_reshape, 1, S2(2, 3), NONE, NB_F32, ELEMWISE},
    {"causal_fill", w_causal_fill, 1, S2(3, 3), NONE, NB_F32, ELEMWISE},
    {"split", w_split, 1, S2(2, 3), NONE, NB_F32, 0},
    {"dropout", w_dropout, 1, S2(2, 3), NONE, NB_F32, 0},
    {"rope", w_rope, 2, 3, {2, 3, 4}, S2(5, 4), NB_F32, ELEMWISE | B_FLOAT},
};

/* Every NB_OP_HAND op of the list has its w_<name> above (a missing one
 * stops the build here, naming it) and a row of hand_ops (the test
 * test_every_op_has_a_case). */
static const op2_fn hand_fns[] = {
#define NB_OP(id, name, n_in, formula, ...)
#define NB_OP_HAND(id, name, n_in, formula, tangent) w_##name,
#include "nabla/ops.def"
#undef NB_OP
#undef NB_OP_HAND
};

/* The battery's cases: the list's NB_OP rows (their first input as a, the
 * second as b), then hand_ops; filled when the suite is made. */
#define MAX_OPS 128
static op_case ops[MAX_OPS];
static int N_OPS;

static void make_cases(void) {
    N_OPS = 0;
    for (int i = 0; i < NB_N_ROW_CASES && N_OPS < MAX_OPS; i++) {
        const nb_row_case *r = &nb_row_cases[i];
        op_case *o = &ops[N_OPS++];
        *o = (op_case){r->name, NULL, r->n_in, r->in[0].ndim, {0}, 0, {0}, NB_F32,
                       ELEMWISE | (r->n_in > 1 ? B_FLOAT : 0u), r->fn};
        memcpy(o->a_shape, r->in[0].shape, sizeof o->a_shape);
        if (r->n_in > 1) {
            o->b_nd = r->in[1].ndim;
            memcpy(o->b_shape, r->in[1].shape, sizeof o->b_shape);
        }
    }
    for (size_t i = 0; i < sizeof hand_ops / sizeof hand_ops[0] && N_OPS < MAX_OPS; i++)
        ops[N_OPS++] = hand_ops[i];
}

/* The op under test on a (and b): the hand-written call or the row's. */
static nb_tensor *call(const op_case *o, nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    if (o->fn) return o->fn(ctx, a, b);
    nb_tensor *const x[2] = {a, b};
    return o->row(ctx, x, NULL);
}

/* a (values 0.1, 0.2, ... of dtype dt) and b (the case's dtype; ids 0/1). */
static nb_tensor *make_a(nb_ctx *ctx, const op_case *o, nb_dtype dt) {
    nb_tensor *a = nb_empty(ctx, dt, o->a_nd, o->a_shape);
    for (size_t i = 0; a && i < a->numel; i++)
        nb_set(a, i, dt == NB_I64 ? 1 : 0.1 * (double)(i + 1));
    return a;
}

static nb_tensor *make_b(nb_ctx *ctx, const op_case *o, nb_dtype dt, int nd, const int64_t *shape) {
    if (o->n_in < 2)
        return NULL;
    nb_tensor *b = nb_empty(ctx, dt, nd, shape);
    for (size_t i = 0; b && i < b->numel; i++)
        nb_set(b, i, dt == NB_I64 || dt == NB_BOOL ? (double)(i % 2) : 0.05 * (double)(i + 1));
    return b;
}

START_TEST(test_op_valid) {
    const op_case *o = &ops[_i];
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(make_a(ctx, o, NB_F32));
    nb_tensor *b = make_b(ctx, o, o->b_dt, o->b_nd, o->b_shape);
    nb_tensor *y = call(o, ctx, a, b);
    ck_assert_msg(y, "%s: %s", o->name, nb_ctx_error(ctx));
    ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, y), NULL), NB_OK);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_op_null) {
    const op_case *o = &ops[_i];
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = make_a(ctx, o, NB_F32);
    nb_tensor *b = make_b(ctx, o, o->b_dt, o->b_nd, o->b_shape);
    ck_assert_ptr_null(call(o, NULL, a, b));
    expect_fail(ctx, call(o, ctx, NULL, b) == NULL, NB_ERR_NULL, o->name);
    if (o->n_in == 2 && !(o->flags & B_OPT))
        expect_fail(ctx, call(o, ctx, a, NULL) == NULL, NB_ERR_NULL, o->name);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_op_dtype) {
    const op_case *o = &ops[_i];
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *b = make_b(ctx, o, o->b_dt, o->b_nd, o->b_shape);
    expect_fail(ctx, call(o, ctx, make_a(ctx, o, NB_I64), b) == NULL, NB_ERR_DTYPE, o->name);
    expect_fail(ctx, call(o, ctx, make_a(ctx, o, NB_BOOL), b) == NULL, NB_ERR_DTYPE, o->name);
    if (o->flags & B_FLOAT) {
        nb_tensor *a64 = make_a(ctx, o, NB_F64);
        expect_fail(ctx, call(o, ctx, a64, b) == NULL, NB_ERR_DTYPE, o->name);
        nb_tensor *bi = make_b(ctx, o, NB_I64, o->b_nd, o->b_shape);
        expect_fail(ctx, call(o, ctx, make_a(ctx, o, NB_F32), bi) == NULL, NB_ERR_DTYPE, o->name);
    }
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_op_shape) {
    const op_case *o = &ops[_i];
    if (o->n_in < 2 || (o->flags & B_ANYSHAPE))
        return;
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = make_a(ctx, o, NB_F32);
    nb_tensor *b = make_b(ctx, o, o->b_dt, 3, (const int64_t[]){5, 7, 2});
    nb_tensor *y = call(o, ctx, a, b);
    ck_assert_msg(!y, "%s accepted a (5, 7, 2) second input", o->name);
    ck_assert_int_ne(nb_ctx_status(ctx), NB_OK);
    ck_assert_error_has(ctx, o->name);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_op_nan_inf) {
    const op_case *o = &ops[_i];
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(make_a(ctx, o, NB_F32));
    nb_set(a, 0, NAN);
    nb_set(a, 1, INFINITY);
    nb_set(a, a->numel - 1, -INFINITY);
    nb_tensor *b = make_b(ctx, o, o->b_dt, o->b_nd, o->b_shape);
    nb_tensor *y = call(o, ctx, a, b);
    ck_assert_msg(y, "%s refused NaN/Inf data: %s", o->name, nb_ctx_error(ctx));
    if (o->flags & ELEMWISE)
        ck_assert_msg(isnan(nb_get(y, 0)), "%s lost the NaN", o->name);
    ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, y), NULL), NB_OK);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_op_sticky_and_no_grad) {
    const op_case *o = &ops[_i];
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(make_a(ctx, o, NB_F32));
    nb_tensor *b = make_b(ctx, o, o->b_dt, o->b_nd, o->b_shape);
    nb_ctx_fail(ctx, NB_ERR_STATE, "earlier failure");
    ck_assert_ptr_null(call(o, ctx, a, b));
    ck_assert_str_eq(nb_ctx_error(ctx), "earlier failure");
    nb_ctx_clear_error(ctx);
    nb_set_grad_enabled(ctx, false);
    int len = nb_tape_len(ctx);
    nb_tensor *y = call(o, ctx, a, b);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(nb_tape_len(ctx), len);
    ck_assert_ptr_null(y->node);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- per-op values: dims, counts, sizes, enums -------------------------- */
START_TEST(test_dims_out_of_range) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    expect_fail(ctx, !nb_sum_dim(ctx, a, 2, false), NB_ERR_VALUE, "sum_dim");
    expect_fail(ctx, !nb_mean_dim(ctx, a, -3, false), NB_ERR_VALUE, "mean_dim");
    expect_fail(ctx, !nb_max_dim(ctx, a, 99, false, NULL), NB_ERR_VALUE, "max_dim");
    expect_fail(ctx, !nb_transpose(ctx, a, 0, INT32_MIN), NB_ERR_VALUE, "transpose");
    expect_any(ctx, !nb_permute(ctx, a, (const int[]){0, 0}), "permute");
    expect_any(ctx, !nb_permute(ctx, a, (const int[]){0, 7}), "permute");
    expect_fail(ctx, !nb_permute(ctx, a, NULL), NB_ERR_NULL, "permute");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_reshape_sizes) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    expect_any(ctx, !nb_reshape(ctx, a, NB_SHAPE(4, 2)), "reshape");
    expect_any(ctx, !nb_reshape(ctx, a, NB_SHAPE(0, 6)), "reshape");
    expect_any(ctx, !nb_reshape(ctx, a, NB_SHAPE(-2, -3)), "reshape");
    expect_any(ctx, !nb_reshape(ctx, a, NB_SHAPE(INT64_MAX, 2, 3)), "reshape");
    expect_any(ctx, !nb_reshape(ctx, a, NB_SHAPE((int64_t)1 << 32, (int64_t)1 << 32)), "reshape");
    expect_any(ctx, !nb_reshape(ctx, a, 9, (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 2, 3}), "reshape");
    expect_any(ctx, !nb_reshape(ctx, a, -1, (const int64_t[]){6}), "reshape");
    expect_fail(ctx, !nb_reshape(ctx, a, 2, NULL), NB_ERR_NULL, "reshape");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_concat_split_counts) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3)), *b = nb_ones(ctx, NB_F32, NB_SHAPE(2, 4));
    nb_tensor *ts[2] = {a, b}, *out[3];
    expect_any(ctx, !nb_concat(ctx, 0, ts, 0), "concat");
    expect_any(ctx, !nb_concat(ctx, -1, ts, 0), "concat");
    expect_fail(ctx, !nb_concat(ctx, 2, NULL, 0), NB_ERR_NULL, "concat");
    expect_fail(ctx, !nb_concat(ctx, 2, ts, 0), NB_ERR_SHAPE, "concat"); /* 3 vs 4 columns */
    expect_fail(ctx, !nb_concat(ctx, 2, ts, 5), NB_ERR_VALUE, "concat");
    ck_assert_ptr_nonnull(nb_concat(ctx, 2, ts, 1)); /* (2, 7) */
    expect_any(ctx, nb_split(ctx, a, 1, 2, (const int64_t[]){1, 1}, out), "split");
    expect_any(ctx, nb_split(ctx, a, 1, 2, (const int64_t[]){-1, 4}, out), "split");
    ck_assert_int_eq(nb_split(ctx, a, 1, 2, (const int64_t[]){0, 3}, out), NB_OK); /* an empty piece, as PyTorch */
    expect_any(ctx, nb_split(ctx, a, 1, -2, (const int64_t[]){1, 2}, out), "split");
    expect_any(ctx, nb_split(ctx, a, 1, 2, (const int64_t[]){INT64_MAX, INT64_MAX - 2}, out),
               "split");
    expect_any(ctx, nb_split(ctx, a, 9, 2, (const int64_t[]){1, 2}, out), "split");
    expect_fail(ctx, nb_split(ctx, a, 1, 2, NULL, out), NB_ERR_NULL, "split");
    expect_fail(ctx, nb_split(ctx, a, 1, 2, (const int64_t[]){1, 2}, NULL), NB_ERR_NULL, "split");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_value_arguments) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 2);
    expect_fail(ctx, !nb_dropout(ctx, a, 1.5, true, &rng), NB_ERR_VALUE, "dropout");
    expect_fail(ctx, !nb_dropout(ctx, a, -0.1, true, &rng), NB_ERR_VALUE, "dropout");
    expect_fail(ctx, !nb_dropout(ctx, a, NAN, true, &rng), NB_ERR_VALUE, "dropout");
    /* Eval mode is the identity; p = 1 in training zeroes everything. */
    ck_assert_double_eq(nb_get(nb_dropout(ctx, a, 0.5, false, NULL), 4), 1.0);
    ck_assert_double_eq(nb_get(nb_dropout(ctx, a, 1.0, true, &rng), 4), 0.0);
    expect_any(ctx, !nb_gelu(ctx, a, (nb_gelu_approx)99), "gelu");
    expect_any(ctx, !nb_layer_norm(ctx, a, NULL, NULL, -1), "layer_norm");
    expect_any(ctx, !nb_layer_norm(ctx, a, NULL, NULL, NAN), "layer_norm");
    ck_assert_ptr_nonnull(nb_layer_norm(ctx, a, NULL, NULL, 1e-5)); /* affine-free */
    expect_fail(ctx, !nb_rms_norm(ctx, a, NULL, 0), NB_ERR_VALUE, "rms_norm");
    expect_fail(ctx, !nb_rms_norm(ctx, a, NULL, INFINITY), NB_ERR_VALUE, "rms_norm");
    expect_fail(ctx, !nb_rms_norm(ctx, a, NULL, NAN), NB_ERR_VALUE, "rms_norm");
    expect_fail(ctx, !nb_rms_norm(ctx, nb_scalar(ctx, NB_F32, 1), NULL, 1e-5), NB_ERR_SHAPE,
                "rms_norm");
    ck_assert_ptr_nonnull(nb_rms_norm(ctx, a, NULL, 1e-5)); /* without weight */
    ck_assert_str_eq(nb_op_name((nb_op)-1), "?");
    ck_assert_str_eq(nb_op_name(NB_OP_COUNT), "?");
    ck_assert_str_eq(nb_op_name(NB_OP_ADD), "add");
    ck_assert_int_eq(nb_op_arity(NB_OP_MATMUL), 2);
    ck_assert_int_eq(nb_op_arity((nb_op)1000), 0);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_index_arguments) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *w = nb_ones(ctx, NB_F32, NB_SHAPE(5, 3));
    nb_tensor *logits = nb_ones(ctx, NB_F32, NB_SHAPE(2, 5));
    const double bad_ids[4][2] = {{0, 5}, {-1, 0}, {0, 1e15}, {INT64_MIN, 0}};
    for (int k = 0; k < 4; k++) {
        nb_tensor *ids = nb_empty(ctx, NB_I64, NB_SHAPE(2));
        ((int64_t *)ids->data)[0] = k == 3 ? INT64_MIN : (int64_t)bad_ids[k][0];
        ((int64_t *)ids->data)[1] = (int64_t)bad_ids[k][1];
        expect_fail(ctx, !nb_embedding(ctx, w, ids), NB_ERR_VALUE, "embedding");
        expect_fail(ctx, !nb_cross_entropy(ctx, logits, ids), NB_ERR_VALUE, "cross_entropy");
    }
    /* ids of 8 dims would give a 9-dim output. */
    nb_tensor *ids4 = nb_zeros(ctx, NB_I64, NB_SHAPE(2, 1, 1, 1, 1, 1, 2, 2));
    expect_any(ctx, !nb_embedding(ctx, w, ids4), "embedding");
    /* topk: k outside [0, n], a dim outside x */
    expect_fail(ctx, !nb_topk(ctx, w, 4, 1, NULL), NB_ERR_VALUE, "topk");
    expect_fail(ctx, !nb_topk(ctx, w, -1, 1, NULL), NB_ERR_VALUE, "topk");
    expect_fail(ctx, !nb_topk(ctx, nb_scalar(ctx, NB_F32, 1), 0, 0, NULL), NB_ERR_VALUE, "topk");
    expect_any(ctx, !nb_topk(ctx, w, 1, 2, NULL), "topk");
    /* index_select and index_add: ids out of range, not I64, not 1-D, not
     * one per row of src; src rows of another shape; a 0-dim x */
    nb_tensor *src = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    for (int k = 0; k < 2; k++) {
        nb_tensor *ids = nb_from_data(ctx, NB_I64, NB_SHAPE(2), (const int64_t[]){0, k ? -1 : 5});
        expect_fail(ctx, !nb_index_select(ctx, w, ids), NB_ERR_VALUE, "index_select");
        expect_fail(ctx, !nb_index_add(ctx, w, ids, src), NB_ERR_VALUE, "index_add");
    }
    nb_tensor *fids = nb_zeros(ctx, NB_F32, NB_SHAPE(2));
    expect_fail(ctx, !nb_index_select(ctx, w, fids), NB_ERR_DTYPE, "index_select");
    expect_fail(ctx, !nb_index_add(ctx, w, fids, src), NB_ERR_DTYPE, "index_add");
    nb_tensor *ids2d = nb_zeros(ctx, NB_I64, NB_SHAPE(1, 2));
    expect_fail(ctx, !nb_index_select(ctx, w, ids2d), NB_ERR_SHAPE, "index_select");
    nb_tensor *ids3 = nb_zeros(ctx, NB_I64, NB_SHAPE(3));
    expect_fail(ctx, !nb_index_add(ctx, w, ids3, src), NB_ERR_SHAPE, "index_add");
    nb_tensor *ids2 = nb_zeros(ctx, NB_I64, NB_SHAPE(2));
    expect_fail(ctx, !nb_index_add(ctx, w, ids2, nb_ones(ctx, NB_F32, NB_SHAPE(2, 4))),
                NB_ERR_SHAPE, "index_add");
    expect_fail(ctx, !nb_index_add(ctx, w, ids2, nb_ones(ctx, NB_F64, NB_SHAPE(2, 3))),
                NB_ERR_DTYPE, "index_add");
    expect_fail(ctx, !nb_index_add(ctx, w, NULL, src), NB_ERR_NULL, "index_add");
    expect_fail(ctx, !nb_index_select(ctx, nb_scalar(ctx, NB_F32, 1), ids2), NB_ERR_SHAPE,
                "index_select");
    nb_tensor *mask = nb_ones(ctx, NB_F32, NB_SHAPE(2, 5));
    expect_fail(ctx, !nb_masked_fill(ctx, logits, mask, 0), NB_ERR_DTYPE, "masked_fill");
    expect_any(ctx, !nb_causal_fill(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(7)), 0), "causal_fill");
    nb_ctx_free(ctx);
}
END_TEST

/* Empty tensors: where PyTorch refuses (the maximum over an empty dim,
 * cross-entropy over no classes, a -1 beside a 0 in reshape), each with its
 * error; and the ops that take them, without one. */
START_TEST(test_empty_inputs) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *e = nb_zeros(ctx, NB_F32, NB_SHAPE(0, 3)), *e2 = nb_zeros(ctx, NB_F32, NB_SHAPE(2, 0));
    expect_fail(ctx, !nb_max_dim(ctx, e, 0, false, NULL), NB_ERR_SHAPE, "max_dim");
    expect_fail(ctx, !nb_cross_entropy(ctx, e2, nb_zeros(ctx, NB_I64, NB_SHAPE(2))), NB_ERR_SHAPE,
                "cross_entropy");
    expect_fail(ctx, !nb_reshape(ctx, e, NB_SHAPE(-1, 0)), NB_ERR_SHAPE, "reshape");
    nb_tensor *ok[] = {nb_exp(ctx, e), nb_gelu(ctx, e, NB_GELU_TANH), nb_sum(ctx, e),
                       nb_softmax(ctx, e2), nb_log_softmax(ctx, e), nb_transpose(ctx, e, 0, 1),
                       nb_causal_fill(ctx, e, -1), nb_masked_fill(ctx, e, nb_zeros(ctx, NB_BOOL, NB_SHAPE(3)), 0),
                       nb_matmul(ctx, e2, nb_ones(ctx, NB_F32, NB_SHAPE(0, 5))),
                       nb_dropout(ctx, e, 0.5, true, &(nb_pcg32){0}),
                       nb_linear(ctx, e2, nb_ones(ctx, NB_F32, NB_SHAPE(4, 0)), NULL),
                       nb_linear(ctx, e, nb_ones(ctx, NB_F32, NB_SHAPE(4, 3)), NULL),
                       nb_layer_norm(ctx, e2, NULL, NULL, 1e-5),
                       nb_rms_norm(ctx, e2, NULL, 1e-5),
                       nb_sdpa(ctx, nb_zeros(ctx, NB_F32, NB_SHAPE(1, 0, 2, 4)),
                               nb_ones(ctx, NB_F32, NB_SHAPE(1, 3, 2, 4)),
                               nb_ones(ctx, NB_F32, NB_SHAPE(1, 3, 2, 4)), NULL, true, 0.5, 0, 1)};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        ck_assert_msg(ok[i] != NULL, "empty input %zu refused: %s", i, nb_ctx_error(ctx));
    nb_ctx_free(ctx);
}
END_TEST

/* rope's arguments: each bad one named, by rope or rope_tables */
START_TEST(test_rope_arguments) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3, 4)), *cos = NULL, *sin = NULL;
    ck_assert_int_eq(nb_rope_tables(ctx, 4, 5, 10000, NULL, NB_F32, &cos, &sin), NB_OK);
    nb_tensor *odd = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3, 5));
    expect_fail(ctx, !nb_rope(ctx, odd, cos, sin, 0, 0), NB_ERR_SHAPE, "rope");
    expect_fail(ctx, !nb_rope(ctx, x, cos, sin, 3, 0), NB_ERR_SHAPE, "rope"); /* 3 + 3 > 5 */
    ck_assert_ptr_nonnull(nb_rope(ctx, x, cos, sin, 2, 0));                     /* 2 + 3 = 5 */
    expect_fail(ctx, !nb_rope(ctx, x, cos, sin, INT64_MAX, 0), NB_ERR_SHAPE, "rope");
    expect_fail(ctx, !nb_rope(ctx, x, cos, sin, -1, 0), NB_ERR_VALUE, "rope");
    expect_fail(ctx, !nb_rope(ctx, x, cos, sin, 0, 4), NB_ERR_VALUE, "rope"); /* unknown flag */
    expect_fail(ctx, !nb_rope(ctx, x, cos, sin, 0, ~0u), NB_ERR_VALUE, "rope");
    expect_fail(ctx, !nb_rope(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(4)), cos, sin, 0, 0), NB_ERR_SHAPE,
                "rope");
    expect_fail(ctx, !nb_rope(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(3, 4)), cos, sin, 0, NB_ROPE_THD),
                NB_ERR_SHAPE, "rope");
    /* (2, 3, 4) read as (T 2, H 3, hd 4) */
    ck_assert_ptr_nonnull(nb_rope(ctx, x, cos, sin, 3, NB_ROPE_THD));
    nb_tensor *c8 = nb_ones(ctx, NB_F32, NB_SHAPE(5, 8)), *c64 = nb_ones(ctx, NB_F64, NB_SHAPE(5, 4));
    nb_tensor *c3 = nb_ones(ctx, NB_F32, NB_SHAPE(5, 4, 1)), *c6 = nb_ones(ctx, NB_F32, NB_SHAPE(6, 4));
    expect_fail(ctx, !nb_rope(ctx, x, c8, sin, 0, 0), NB_ERR_SHAPE, "rope");  /* head_dim 8 */
    expect_fail(ctx, !nb_rope(ctx, x, cos, c3, 0, 0), NB_ERR_SHAPE, "rope");  /* 3 dims */
    expect_fail(ctx, !nb_rope(ctx, x, cos, c6, 0, 0), NB_ERR_SHAPE, "rope");  /* 5 and 6 rows */
    expect_fail(ctx, !nb_rope(ctx, x, c64, sin, 0, 0), NB_ERR_DTYPE, "rope");
    expect_fail(ctx, !nb_rope(ctx, x, cos, NULL, 0, 0), NB_ERR_NULL, "rope");
    nb_tensor *learned = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(5, 4)));
    expect_fail(ctx, !nb_rope(ctx, x, cos, learned, 0, 0), NB_ERR_VALUE, "rope");
    /* empty: no positions, or no rows */
    ck_assert_ptr_nonnull(nb_rope(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(2, 0, 4)), cos, sin, 5, 0));
    ck_assert_ptr_nonnull(nb_rope(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(0, 3, 4)), cos, sin, 0, 0));

    const nb_rope_scaling ok = {32, 1, 4, 8192};
    nb_rope_scaling bad[] = {ok, ok, ok, ok, ok, ok};
    bad[0].factor = 0.5, bad[1].factor = NAN, bad[2].low_freq_factor = 0;
    bad[3].high_freq_factor = 1, bad[4].high_freq_factor = INFINITY;
    bad[5].original_max_position_embeddings = 0;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        expect_fail(ctx, nb_rope_tables(ctx, 4, 5, 1e4, &bad[k], NB_F32, &cos, &sin) &&
                             !cos && !sin, NB_ERR_VALUE, "rope_tables");
    const int64_t bad_hd[] = {3, 0, -2};
    for (size_t k = 0; k < 3; k++)
        expect_fail(ctx, nb_rope_tables(ctx, bad_hd[k], 5, 1e4, NULL, NB_F32, &cos, &sin),
                    NB_ERR_VALUE, "rope_tables");
    expect_fail(ctx, nb_rope_tables(ctx, 4, -1, 1e4, NULL, NB_F32, &cos, &sin), NB_ERR_VALUE,
                "rope_tables");
    const double bad_theta[] = {0, -1, 0.5, 4.9e-324, NAN, INFINITY};
    for (size_t k = 0; k < 6; k++)
        expect_fail(ctx, nb_rope_tables(ctx, 4, 5, bad_theta[k], NULL, NB_F32, &cos, &sin),
                    NB_ERR_VALUE, "rope_tables");
    expect_fail(ctx, nb_rope_tables(ctx, 4, 5, 1e4, NULL, NB_I64, &cos, &sin), NB_ERR_DTYPE,
                "rope_tables");
    expect_fail(ctx, nb_rope_tables(ctx, 4, 5, 1e4, NULL, (nb_dtype)99, &cos, &sin), NB_ERR_DTYPE,
                "rope_tables");
    expect_fail(ctx, nb_rope_tables(ctx, 4, 5, 1e4, NULL, NB_F32, NULL, &sin), NB_ERR_NULL,
                "rope_tables");
    expect_fail(ctx, nb_rope_tables(ctx, 4, 5, 1e4, NULL, NB_F32, &cos, NULL), NB_ERR_NULL,
                "rope_tables");
    /* sizes whose product overflows, and a huge head_dim with one position */
    expect_fail(ctx, nb_rope_tables(ctx, 4, INT64_MAX / 2, 1e4, NULL, NB_F32, &cos, &sin),
                NB_ERR_SIZE, "rope_tables");
    expect_fail(ctx, nb_rope_tables(ctx, INT64_MAX - 1, 1, 1e4, NULL, NB_F32, &cos, &sin),
                NB_ERR_SIZE, "rope_tables");
    ck_assert_int_eq(nb_rope_tables(ctx, 4, 0, 1e4, &ok, NB_F64, &cos, &sin), NB_OK);
    ck_assert_int_eq((int)cos->numel + (int)sin->numel, 0);
    ck_assert_int_eq(nb_rope_tables(NULL, 4, 5, 1e4, NULL, NB_F32, &cos, &sin), NB_ERR_NULL);
    ck_assert_ptr_null(cos);
    nb_ctx_fail(ctx, NB_ERR_STATE, "earlier failure");
    ck_assert_int_eq(nb_rope_tables(ctx, 4, 5, 1e4, NULL, NB_F32, &cos, &sin), NB_ERR_STATE);
    ck_assert_str_eq(nb_ctx_error(ctx), "earlier failure");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_every_op_has_a_case) {
    ck_assert_int_le(N_OPS, MAX_OPS - 1);
    for (size_t k = 0; k < sizeof hand_fns / sizeof hand_fns[0]; k++) {
        bool used = false;
        for (size_t i = 0; i < sizeof hand_ops / sizeof hand_ops[0]; i++)
            used = used || hand_ops[i].fn == hand_fns[k];
        ck_assert_msg(used, "a w_<name> of an NB_OP_HAND op has no row in hand_ops");
    }
    for (int op = 0; op < NB_OP_CUSTOM; op++) {
        bool found = false;
        for (int i = 0; i < N_OPS; i++) found = found || !strcmp(ops[i].name, nb_op_name(op));
        ck_assert_msg(found, "op %s has no case in the battery", nb_op_name(op));
    }
}
END_TEST

Suite *suite_matrix_ops(void) {
    make_cases();
    Suite *s = suite_create("matrix_ops");
    TCase *tc = tcase_create("battery");
    tcase_add_test(tc, test_every_op_has_a_case);
    tcase_add_loop_test(tc, test_op_valid, 0, N_OPS);
    tcase_add_loop_test(tc, test_op_null, 0, N_OPS);
    tcase_add_loop_test(tc, test_op_dtype, 0, N_OPS);
    tcase_add_loop_test(tc, test_op_shape, 0, N_OPS);
    tcase_add_loop_test(tc, test_op_nan_inf, 0, N_OPS);
    tcase_add_loop_test(tc, test_op_sticky_and_no_grad, 0, N_OPS);
    suite_add_tcase(s, tc);
    TCase *tv = tcase_create("values");
    tcase_add_test(tv, test_dims_out_of_range);
    tcase_add_test(tv, test_reshape_sizes);
    tcase_add_test(tv, test_empty_inputs);
    tcase_add_test(tv, test_concat_split_counts);
    tcase_add_test(tv, test_value_arguments);
    tcase_add_test(tv, test_index_arguments);
    tcase_add_test(tv, test_rope_arguments);
    suite_add_tcase(s, tv);
    return s;
}
