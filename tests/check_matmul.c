/* check_matmul.c - the matrix product: values (hand-computed, from the
 * seed embeddings, and against a naive triple loop), batching and batch
 * broadcasting, vectors as torch.matmul takes them, gradients (by hand,
 * by nb_gradcheck and nb_gradgradcheck), errors. */
#include "check_nabla.h"

/* c (n, m) = a (n, k) @ b (k, m), the textbook triple loop in double. */
static void naive_mm(double *c, const double *a, const double *b, int64_t n, int64_t k,
                     int64_t m) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++) s += a[i * k + p] * b[p * m + j];
            c[i * m + j] = s;
        }
}

/* The values of t as doubles (caller frees). */
static double *values_of(const nb_tensor *t) {
    double *v = malloc(t->numel * sizeof *v);
    for (size_t i = 0; i < t->numel; i++) v[i] = nb_get(t, i);
    return v;
}

static double *grad_of(const nb_tensor *t) {
    double *v = malloc(t->numel * sizeof *v);
    for (size_t i = 0; i < t->numel; i++) v[i] = nb_grad_get(t, i);
    return v;
}

/* Transposes the last two dims of a (batch, r, c) array of doubles. */
static double *transposed(const double *x, int64_t batch, int64_t r, int64_t c) {
    double *y = malloc((size_t)(batch * r * c) * sizeof *y);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) y[b * r * c + j * r + i] = x[b * r * c + i * c + j];
    return y;
}

/* Asserts |got - want| <= tol * (1 + |want|) elementwise. */
static void assert_close(const double *got, const double *want, size_t n, double tol,
                         const char *what) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                      "%s element %zu: got %.9g, want %.9g", what, i, got[i], want[i]);
}

/* ---- values ---------------------------------------------------------------------- */

START_TEST(test_matmul_2d_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        /* [[1,2,3],[4,5,6]] @ [[7,8],[9,10],[11,12]] = [[58,64],[139,154]] */
        nb_tensor *a = nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
        nb_tensor *b = nb_from_doubles(ctx, dt, NB_SHAPE(3, 2), (double[]){7, 8, 9, 10, 11, 12});
        nb_tensor *c = nb_matmul(ctx, a, b);
        char s[64];
        ck_assert_str_eq(nb_shape_str(c, s, sizeof s), "(2, 2)");
        ck_assert_int_eq(c->dtype, dt);
        ck_assert_tensor_near(c, ((double[]){58, 64, 139, 154}), 4, 1e-5);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_matmul_seed_scores) {
    /* attention scores of the seed embeddings: X (6, 3) @ X^T (3, 6) */
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = nb_from_doubles(ctx, dt, NB_SHAPE(6, 3), NB_SEED_INPUTS);
        nb_tensor *s = nb_matmul(ctx, x, nb_transpose(ctx, x, 0, 1));
        ck_assert_ptr_nonnull(s);
        ck_assert_int_eq(s->shape[0], 6);
        ck_assert_int_eq(s->shape[1], 6);
        /* rows 1 and 2 ("Your", "journey"), printed to 4 decimals */
        const double row1[6] = {0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310};
        const double row2[6] = {0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865};
        for (int j = 0; j < 6; j++) {
            ck_assert_double_eq_tol(nb_get(s, j), row1[j], 6e-5);
            ck_assert_double_eq_tol(nb_get(s, 6 + j), row2[j], 6e-5);
        }
        /* symmetric, with the squared norms on the diagonal */
        ck_assert_double_eq_tol(nb_get(s, 1 * 6 + 2), nb_get(s, 2 * 6 + 1), 1e-6);
        ck_assert_double_eq_tol(nb_get(s, 0), 0.43 * 0.43 + 0.15 * 0.15 + 0.89 * 0.89, 1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_matmul_batched_3d) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        /* two batch entries, each (2, 2) @ (2, 1) */
        nb_tensor *a = nb_from_doubles(ctx, dt, NB_SHAPE(2, 2, 2),
                                       (double[]){1, 2, 3, 4, /* */ -1, 0, 0.5, 2});
        nb_tensor *b = nb_from_doubles(ctx, dt, NB_SHAPE(2, 2, 1), (double[]){1, 1, /* */ 2, 3});
        nb_tensor *c = nb_matmul(ctx, a, b);
        char s[64];
        ck_assert_str_eq(nb_shape_str(c, s, sizeof s), "(2, 2, 1)");
        ck_assert_tensor_near(c, ((double[]){3, 7, -2, 7}), 4, 1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_matmul_broadcast_2d_operand) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_from_doubles(ctx, dt, NB_SHAPE(2, 1, 2), (double[]){1, 2, 3, 4});
        nb_tensor *w = nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 0, -1, 2, 1, 0});
        /* (B, T, C) @ (C, K): the weight is shared by the batch */
        nb_tensor *c = nb_matmul(ctx, a, w);
        char s[64];
        ck_assert_str_eq(nb_shape_str(c, s, sizeof s), "(2, 1, 3)");
        ck_assert_tensor_near(c, ((double[]){5, 2, -1, 11, 4, -3}), 6, 1e-6);
        /* (n, k) @ (B, k, m): the left operand is shared instead */
        nb_tensor *l = nb_from_doubles(ctx, dt, NB_SHAPE(1, 2), (double[]){1, -1});
        nb_tensor *r = nb_from_doubles(ctx, dt, NB_SHAPE(3, 2, 2),
                                       (double[]){1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 1, 0});
        nb_tensor *d = nb_matmul(ctx, l, r);
        ck_assert_str_eq(nb_shape_str(d, s, sizeof s), "(3, 1, 2)");
        ck_assert_tensor_near(d, ((double[]){-2, -2, -2, -2, -1, 1}), 6, 1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* Compares nb_matmul of random a (sa) and b (sb) with the naive loop per
 * batch entry; ia/ib map an output batch index to the operands'. */
static void check_against_naive(nb_dtype dt, int na, const int64_t *sa, int nbd,
                                const int64_t *sb, const char *want_shape, int64_t batch,
                                int64_t (*ia)(int64_t), int64_t (*ib)(int64_t), double tol) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 3);
    nb_tensor *a = nb_uniform(ctx, dt, na, sa, -1, 1, &rng);
    nb_tensor *b = nb_uniform(ctx, dt, nbd, sb, -1, 1, &rng);
    nb_tensor *c = nb_matmul(ctx, a, b);
    ck_assert_msg(c != NULL, "%s", nb_ctx_error(ctx));
    char s[64];
    ck_assert_str_eq(nb_shape_str(c, s, sizeof s), want_shape);
    int64_t n = sa[na - 2], k = sa[na - 1], m = sb[nbd - 1];
    double *av = values_of(a), *bv = values_of(b), *cv = values_of(c);
    double *want = malloc((size_t)(n * m) * sizeof *want);
    for (int64_t e = 0; e < batch; e++) {
        naive_mm(want, av + ia(e) * n * k, bv + ib(e) * k * m, n, k, m);
        assert_close(cv + e * n * m, want, (size_t)(n * m), tol, "batched matmul");
    }
    free(av), free(bv), free(cv), free(want);
    nb_ctx_free(ctx);
}

static int64_t same(int64_t e) { return e; }
static int64_t zero(int64_t e) { return e * 0; }
/* (2, 1, T, D) @ (3, D, K) -> (2, 3, T, K): a follows the first batch dim */
static int64_t first_of_2x3(int64_t e) { return e / 3; }
static int64_t second_of_2x3(int64_t e) { return e % 3; }

START_TEST(test_matmul_4d_heads) {
    /* (B, H, T, D) @ (B, H, D, T) in both dtypes */
    check_against_naive(NB_F32, NB_SHAPE(2, 3, 5, 4), NB_SHAPE(2, 3, 4, 5), "(2, 3, 5, 5)", 6,
                        same, same, 1e-5);
    check_against_naive(NB_F64, NB_SHAPE(2, 3, 5, 4), NB_SHAPE(2, 3, 4, 5), "(2, 3, 5, 5)", 6,
                        same, same, 1e-12);
    /* attention @ values with a narrow head: 8 floats / 3 doubles a row */
    check_against_naive(NB_F32, NB_SHAPE(2, 3, 9, 9), NB_SHAPE(2, 3, 9, 8), "(2, 3, 9, 8)", 6,
                        same, same, 1e-5);
    check_against_naive(NB_F64, NB_SHAPE(2, 3, 9, 9), NB_SHAPE(2, 3, 9, 3), "(2, 3, 9, 3)", 6,
                        same, same, 1e-12);
}
END_TEST

START_TEST(test_matmul_4d_broadcast_batch) {
    check_against_naive(NB_F32, NB_SHAPE(2, 1, 5, 3), NB_SHAPE(3, 3, 6), "(2, 3, 5, 6)", 6,
                        first_of_2x3, second_of_2x3, 1e-5);
    check_against_naive(NB_F64, NB_SHAPE(2, 1, 5, 3), NB_SHAPE(3, 3, 6), "(2, 3, 5, 6)", 6,
                        first_of_2x3, second_of_2x3, 1e-12);
    /* (B, T, C) @ (C, K) and (B, H, T, D) @ (D, K): the folded path */
    check_against_naive(NB_F32, NB_SHAPE(3, 7, 9), NB_SHAPE(9, 11), "(3, 7, 11)", 3, same,
                        zero, 1e-5);
    check_against_naive(NB_F64, NB_SHAPE(2, 2, 5, 9), NB_SHAPE(9, 20), "(2, 2, 5, 20)", 4,
                        same, zero, 1e-12);
    /* 3-D @ 4-D with a broadcast leading dim on each side */
    check_against_naive(NB_F64, NB_SHAPE(3, 4, 2), NB_SHAPE(2, 1, 2, 5), "(2, 3, 4, 5)", 6,
                        second_of_2x3, first_of_2x3, 1e-12);
}
END_TEST

START_TEST(test_matmul_f32_matches_naive_odd_sizes) {
    /* 37 x 53 @ 53 x 29: no size is a multiple of a tile, so every loop tail runs */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 2024, 1);
    nb_tensor *a = nb_uniform(ctx, NB_F32, NB_SHAPE(37, 53), -1, 1, &rng);
    nb_tensor *b = nb_uniform(ctx, NB_F32, NB_SHAPE(53, 29), -1, 1, &rng);
    nb_tensor *c = nb_matmul(ctx, a, b);
    ck_assert_ptr_nonnull(c);
    const float *x = a->data, *y = b->data;
    for (int i = 0; i < 37; i++)
        for (int j = 0; j < 29; j++) {
            double s = 0;
            for (int p = 0; p < 53; p++) s += (double)x[i * 53 + p] * (double)y[p * 29 + j];
            /* |terms| < 1, 53 of them: float rounding stays far below 1e-4 */
            ck_assert_msg(fabs(nb_get(c, (size_t)(i * 29 + j)) - s) < 1e-4,
                          "c[%d][%d] = %.7f, naive %.7f", i, j, nb_get(c, (size_t)(i * 29 + j)), s);
        }
    nb_ctx_free(ctx);
}
END_TEST

/* The backward against naive products: dA = G @ B^T, dB = A^T @ G. */
static void check_backward_naive(nb_dtype dt, int64_t n, int64_t k, int64_t m, double tol) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, (uint64_t)(n * 1000 + k * 10 + m), 5);
    nb_tensor *a = nb_requires_grad(nb_uniform(ctx, dt, NB_SHAPE(n, k), -1, 1, &rng));
    nb_tensor *b = nb_requires_grad(nb_uniform(ctx, dt, NB_SHAPE(k, m), -1, 1, &rng));
    nb_tensor *g = nb_uniform(ctx, dt, NB_SHAPE(n, m), -1, 1, &rng);
    nb_tensor *c = nb_matmul(ctx, a, b);
    ck_assert_int_eq(nb_backward(ctx, c, g), NB_OK);
    double *av = values_of(a), *bv = values_of(b), *gv = values_of(g);
    double *bt = transposed(bv, 1, k, m), *at = transposed(av, 1, n, k);
    double *want_a = malloc((size_t)(n * k) * sizeof *want_a);
    double *want_b = malloc((size_t)(k * m) * sizeof *want_b);
    naive_mm(want_a, gv, bt, n, m, k);
    naive_mm(want_b, at, gv, k, n, m);
    double *da = grad_of(a), *db = grad_of(b);
    assert_close(da, want_a, (size_t)(n * k), tol, "dA");
    assert_close(db, want_b, (size_t)(k * m), tol, "dB");
    free(av), free(bv), free(gv), free(bt), free(at), free(want_a), free(want_b), free(da),
        free(db);
    nb_ctx_free(ctx);
}

START_TEST(test_matmul_backward_matches_naive) {
    check_backward_naive(NB_F32, 37, 53, 29, 1e-5);
    check_backward_naive(NB_F64, 37, 53, 29, 1e-12);
    /* inner and output dims past the kernel's 256 block, and single rows/cols */
    check_backward_naive(NB_F32, 5, 300, 7, 1e-5);
    check_backward_naive(NB_F64, 300, 3, 1, 1e-12);
    check_backward_naive(NB_F64, 1, 1, 1, 1e-12);
}
END_TEST

START_TEST(test_matmul_large_inner_dim) {
    /* k = 600 spans three inner blocks; all ones make every entry exactly k */
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_ones(ctx, dt, NB_SHAPE(9, 600));
        nb_tensor *b = nb_full(ctx, dt, NB_SHAPE(600, 17), 0.5);
        nb_tensor *c = nb_matmul(ctx, a, b);
        ck_assert_ptr_nonnull(c);
        for (size_t i = 0; i < c->numel; i++) ck_assert_double_eq_tol(nb_get(c, i), 300.0, 1e-9);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* ---- gradients ---------------------------------------------------------------------- */

START_TEST(test_matmul_grad_by_hand) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}));
        nb_tensor *b = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(3, 2), (double[]){7, 8, 9, 10, 11, 12}));
        nb_tensor *c = nb_matmul(ctx, a, b);
        ck_assert_int_eq(nb_backward(ctx, c, nb_ones(ctx, dt, NB_SHAPE(2, 2))), NB_OK);
        /* dA[i][p] = sum_j B[p][j]; dB[p][j] = sum_i A[i][p] */
        ck_assert_grad_near(a, ((double[]){15, 19, 23, 15, 19, 23}), 6, 1e-5);
        ck_assert_grad_near(b, ((double[]){5, 5, 7, 7, 9, 9}), 6, 1e-5);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_matmul_grad_sums_over_broadcast_batch) {
    nb_ctx *ctx = nb_ctx_new(0);
    /* x (3, 2, 2) @ w (2, 1): w's gradient sums x^T @ g over all 3 batch entries */
    nb_tensor *x = nb_requires_grad(nb_from_doubles(
        ctx, NB_F64, NB_SHAPE(3, 2, 2), (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
    nb_tensor *w = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 1), (double[]){2, -1}));
    nb_tensor *y = nb_matmul(ctx, x, w);
    ck_assert_int_eq(nb_backward(ctx, y, nb_ones(ctx, NB_F64, NB_SHAPE(3, 2, 1))), NB_OK);
    ck_assert_grad_near(w, ((double[]){1 + 3 + 5 + 7 + 9 + 11, 2 + 4 + 6 + 8 + 10 + 12}), 2, 1e-12);
    ck_assert_grad_near(x, ((double[]){2, -1, 2, -1, 2, -1, 2, -1, 2, -1, 2, -1}), 12, 1e-12);
    /* a second backward adds the same again (accumulation, not assignment) */
    ck_assert_int_eq(nb_backward(ctx, y, nb_ones(ctx, NB_F64, NB_SHAPE(3, 2, 1))), NB_OK);
    ck_assert_double_eq_tol(nb_grad_get(w, 0), 72, 1e-12);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_matmul(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_matmul(ctx, in[0], in[1]);
}

static void gradcheck_shapes(int na, const int64_t *sa, int nbd, const int64_t *sb) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 11, 2);
    nb_tensor *in[2] = {nb_uniform(ctx, NB_F64, na, sa, -1, 1, &rng),
                        nb_uniform(ctx, NB_F64, nbd, sb, -1, 1, &rng)};
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_matmul, NULL, 2, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    ck_assert(r.max_abs_err < 1e-7);
    nb_ctx_free(ctx);
}

START_TEST(test_matmul_gradcheck_2d) {
    gradcheck_shapes(NB_SHAPE(3, 4), NB_SHAPE(4, 5));
    gradcheck_shapes(NB_SHAPE(1, 6), NB_SHAPE(6, 1));
}
END_TEST

START_TEST(test_matmul_gradcheck_batched_4d) {
    gradcheck_shapes(NB_SHAPE(2, 2, 3, 4), NB_SHAPE(2, 2, 4, 3));
}
END_TEST

START_TEST(test_matmul_gradcheck_broadcast_batch) {
    gradcheck_shapes(NB_SHAPE(2, 1, 3, 2), NB_SHAPE(3, 2, 2)); /* -> (2, 3, 3, 2) */
    gradcheck_shapes(NB_SHAPE(2, 3, 4), NB_SHAPE(4, 2));       /* folded (B*T, C) @ (C, K) */
    gradcheck_shapes(NB_SHAPE(3, 4), NB_SHAPE(2, 4, 2));       /* shared left operand */
}
END_TEST

static nb_tensor *f_self_matmul(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_matmul(ctx, in[0], in[0]); /* both gradients land in one buffer */
}

START_TEST(test_matmul_gradcheck_same_input_twice) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[1] = {nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2), (double[]){0.5, -1, 2, 0.25})};
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_self_matmul, NULL, 1, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_matmul_only_marked_inputs_get_grads) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    nb_tensor *b = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(3, 2)));
    nb_tensor *c = nb_matmul(ctx, a, b);
    ck_assert(c->requires_grad);
    ck_assert_int_eq(nb_backward(ctx, c, nb_ones(ctx, NB_F32, NB_SHAPE(2, 2))), NB_OK);
    ck_assert_ptr_null(a->grad);
    ck_assert_grad_near(b, ((double[]){2, 2, 2, 2, 2, 2}), 6, 1e-6);
    /* with grad disabled nothing is recorded */
    int len = nb_tape_len(ctx);
    nb_set_grad_enabled(ctx, false);
    nb_tensor *d = nb_matmul(ctx, a, b);
    ck_assert(!d->requires_grad);
    ck_assert_int_eq(nb_tape_len(ctx), len);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_matmul_steady_state_no_malloc) {
    /* a training-step loop whose first step outgrows the default arena; from
     * the second step on (after reset merged the chunks) nothing is malloc'd */
    nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 2);
    nb_tensor *w = nb_requires_grad(nb_uniform(params, NB_F32, NB_SHAPE(128, 256), -1, 1, &rng));
    nb_tensor *x = nb_uniform(params, NB_F32, NB_SHAPE(4, 64, 128), -1, 1, &rng);
    size_t mallocs = 0;
    for (int it = 0; it < 4; it++) {
        nb_ctx_reset(step);
        nb_tensor *h = nb_matmul(step, nb_reshape(step, x, NB_SHAPE(4, 2, 32, 128)), w);
        nb_tensor *s = nb_matmul(step, h, nb_transpose(step, h, -1, -2)); /* (4, 2, 32, 32) */
        nb_tensor *g = nb_ones(step, NB_F32, NB_SHAPE(4, 2, 32, 32));
        ck_assert_int_eq(nb_backward(step, s, g), NB_OK);
        if (it == 0) ck_assert_uint_gt(nb_ctx_mallocs(step), 1);
        if (it == 1) mallocs = nb_ctx_mallocs(step);
    }
    ck_assert_uint_eq(nb_ctx_mallocs(step), mallocs);
    nb_ctx_free(step);
    nb_ctx_free(params);
}
END_TEST

/* ---- vectors, as torch.matmul takes them ------------------------------------------- */

/* v (3) @ M (3, 2) -> (2); M (2, 3) @ v (3) -> (2); v (3) @ w (3) -> () */
START_TEST(test_matmul_vector_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *v = nb_from_doubles(ctx, dt, NB_SHAPE(3), (double[]){1, 2, 3});
        nb_tensor *w = nb_from_doubles(ctx, dt, NB_SHAPE(3), (double[]){4, 5, -6});
        nb_tensor *m32 = nb_from_doubles(ctx, dt, NB_SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6});
        nb_tensor *m23 = nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
        nb_tensor *vm = nb_matmul(ctx, v, m32), *mv = nb_matmul(ctx, m23, w);
        nb_tensor *dot = nb_matmul(ctx, v, w);
        ck_assert_int_eq(vm->ndim, 1);
        ck_assert_int_eq(vm->shape[0], 2);
        ck_assert_tensor_near(vm, ((double[]){22, 28}), 2, 1e-6);
        ck_assert_int_eq(mv->ndim, 1);
        ck_assert_int_eq(mv->shape[0], 2);
        ck_assert_tensor_near(mv, ((double[]){-4, 5}), 2, 1e-6);
        ck_assert_int_eq(dot->ndim, 0);
        ck_assert_int_eq(dot->numel, 1);
        ck_assert_double_eq_tol(nb_item(dot), 4 + 10 - 18, 1e-6);
        ck_assert_int_eq(nb_ctx_status(ctx), NB_OK);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* A vector beside a batch: (3) @ (2, 3, 2) -> (2, 2), (2, 2, 3) @ (3) ->
 * (2, 2), (3) @ (2, 1, 3, 4) -> (2, 1, 4), each against the naive product
 * of each batch entry. */
START_TEST(test_matmul_vector_batched) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 9);
    nb_tensor *v = nb_uniform(ctx, NB_F64, NB_SHAPE(3), -1, 1, &rng);
    nb_tensor *bl = nb_uniform(ctx, NB_F64, NB_SHAPE(2, 3, 2), -1, 1, &rng);
    nb_tensor *br = nb_uniform(ctx, NB_F64, NB_SHAPE(2, 2, 3), -1, 1, &rng);
    nb_tensor *b4 = nb_uniform(ctx, NB_F64, NB_SHAPE(2, 1, 3, 4), -1, 1, &rng);
    nb_tensor *left = nb_matmul(ctx, v, bl), *right = nb_matmul(ctx, br, v);
    nb_tensor *left4 = nb_matmul(ctx, v, b4);
    ck_assert_int_eq(left->ndim, 2);
    ck_assert_int_eq(left->shape[0], 2);
    ck_assert_int_eq(left->shape[1], 2);
    ck_assert_int_eq(right->ndim, 2);
    ck_assert_int_eq(left4->ndim, 3);
    ck_assert_int_eq(left4->shape[0], 2);
    ck_assert_int_eq(left4->shape[1], 1);
    ck_assert_int_eq(left4->shape[2], 4);
    const double *vs = v->data;
    double want[8];
    for (int e = 0; e < 2; e++) {
        naive_mm(want + 2 * e, vs, (const double *)bl->data + 6 * e, 1, 3, 2);
        assert_close((const double *)left->data + 2 * e, want + 2 * e, 2, 1e-14, "v @ b");
        naive_mm(want + 2 * e, (const double *)br->data + 6 * e, vs, 2, 3, 1);
        assert_close((const double *)right->data + 2 * e, want + 2 * e, 2, 1e-14, "b @ v");
        naive_mm(want, vs, (const double *)b4->data + 12 * e, 1, 3, 4);
        assert_close((const double *)left4->data + 4 * e, want, 4, 1e-14, "v @ b4");
    }
    nb_ctx_free(ctx);
}
END_TEST

/* Gradients by hand: for y = sum(v @ M), dv = M's row sums and dM[p][j] =
 * v[p]; for the dot d = v . w, dv = w and dw = v. */
START_TEST(test_matmul_vector_grad_by_hand) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *v = nb_requires_grad(nb_from_doubles(ctx, dt, NB_SHAPE(3), (double[]){1, 2, 3}));
        nb_tensor *m = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6}));
        ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, nb_matmul(ctx, v, m)), NULL), NB_OK);
        ck_assert_grad_near(v, ((double[]){3, 7, 11}), 3, 1e-6);
        ck_assert_grad_near(m, ((double[]){1, 1, 2, 2, 3, 3}), 6, 1e-6);
        nb_zero_grad(v), nb_zero_grad(m);
        nb_tensor *w = nb_requires_grad(nb_from_doubles(ctx, dt, NB_SHAPE(3), (double[]){4, 5, -6}));
        ck_assert_int_eq(nb_backward(ctx, nb_matmul(ctx, v, w), NULL), NB_OK);
        ck_assert_grad_near(v, ((double[]){4, 5, -6}), 3, 1e-6);
        ck_assert_grad_near(w, ((double[]){1, 2, 3}), 3, 1e-6);
        /* M @ v with an output gradient g: dM[i][p] = g[i] v[p], dv = M^T g */
        nb_tensor *m23 = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}));
        nb_zero_grad(v);
        ck_assert_int_eq(nb_backward(ctx, nb_matmul(ctx, m23, v),
                                     nb_from_doubles(ctx, dt, NB_SHAPE(2), (double[]){1, -2})),
                         NB_OK);
        ck_assert_grad_near(m23, ((double[]){1, 2, 3, -2, -4, -6}), 6, 1e-6);
        ck_assert_grad_near(v, ((double[]){-7, -8, -9}), 3, 1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* gradcheck and gradgradcheck (the graph backward, second order) on every
 * vector form: vector @ matrix, matrix @ vector, the dot, and a vector
 * beside a batch on either side. */
START_TEST(test_matmul_vector_gradcheck_and_second_order) {
    struct { int na; int64_t sa[4]; int nb; int64_t sb[4]; } cases[] = {
        {1, {4}, 2, {4, 3}},       {2, {3, 4}, 1, {4}},       {1, {4}, 1, {4}},
        {1, {3}, 3, {2, 3, 2}},    {3, {2, 2, 3}, 1, {3}},    {1, {3}, 4, {2, 1, 3, 2}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 3, i);
        nb_tensor *in[2] = {
            nb_requires_grad(nb_uniform(ctx, NB_F64, cases[i].na, cases[i].sa, -1, 1, &rng)),
            nb_requires_grad(nb_uniform(ctx, NB_F64, cases[i].nb, cases[i].sb, -1, 1, &rng))};
        nb_gradcheck_result r;
        ck_assert_int_eq(nb_gradcheck(ctx, f_matmul, NULL, 2, in, NULL, &r), NB_OK);
        ck_assert_msg(r.passed && r.max_abs_err < 1e-7, "case %zu: %s", i, r.message);
        ck_assert_int_eq(nb_gradgradcheck(ctx, f_matmul, NULL, 2, in, NULL, &r), NB_OK);
        ck_assert_msg(r.passed && r.max_abs_err < 1e-7, "case %zu second order: %s", i, r.message);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* Second order by hand: for d = v . w, d/dw <d(d)/dv, u> = u. */
START_TEST(test_matmul_dot_hvp) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *v = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){1, 2, 3}));
    nb_tensor *w = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){4, 5, 6}));
    nb_tensor *d = nb_matmul(ctx, v, w);
    nb_tensor *in[2] = {v, w}, *hv[2];
    nb_tensor *u[2] = {nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){0.5, -1, 2}),
                       nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){3, 0, -2})};
    ck_assert_int_eq(nb_hvp(ctx, d, 2, in, u, NULL, hv), NB_OK);
    ck_assert_tensor_near(hv[0], ((double[]){3, 0, -2}), 3, 1e-15);  /* H = [[0, I], [I, 0]] */
    ck_assert_tensor_near(hv[1], ((double[]){0.5, -1, 2}), 3, 1e-15);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------- */

START_TEST(test_matmul_error_inner_dims) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(6, 3));
    nb_tensor *b = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_matmul(ctx, a, b));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "matmul: (6, 3) @ (2, 3): inner dims 3 and 2 differ, expected "
                             "(..., n, k) @ (..., k, m), where either may be a vector (k)");
    /* sticky: a valid product now returns NULL too */
    ck_assert_ptr_null(nb_matmul(ctx, a, nb_transpose(ctx, b, 0, 1)));
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_matmul(ctx, a, nb_ones(ctx, NB_F32, NB_SHAPE(2))));
    ck_assert_error_has(ctx, "matmul: (6, 3) @ (2): inner dims 3 and 2 differ");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_matmul_error_scalar_operand) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *m = nb_ones(ctx, NB_F64, NB_SHAPE(3, 2));
    ck_assert_ptr_null(nb_matmul(ctx, m, nb_scalar(ctx, NB_F64, 2)));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "matmul: (3, 2) @ (): input 2 has 0 dims, expected 1 to 8");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_matmul(ctx, nb_scalar(ctx, NB_F64, 2), nb_ones(ctx, NB_F64, NB_SHAPE(2))));
    ck_assert_error_has(ctx, "matmul: () @ (2): input 1 has 0 dims");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_matmul_error_batch_dims) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 4, 3));
    nb_tensor *b = nb_ones(ctx, NB_F32, NB_SHAPE(3, 3, 5));
    ck_assert_ptr_null(nb_matmul(ctx, a, b));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "matmul: (2, 4, 3) @ (3, 3, 5): batch dims (2) and (3) do not "
                             "broadcast, expected equal sizes or 1");
    nb_ctx_clear_error(ctx);
    nb_tensor *c = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3, 4, 3));
    nb_tensor *d = nb_ones(ctx, NB_F32, NB_SHAPE(2, 2, 3, 5));
    ck_assert_ptr_null(nb_matmul(ctx, c, d));
    ck_assert_error_has(ctx, "batch dims (2, 3) and (2, 2) do not broadcast");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_matmul_error_inputs) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 2));
    ck_assert_ptr_null(nb_matmul(ctx, a, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "matmul: input 2 is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_matmul(ctx, a, nb_ones(ctx, NB_F64, NB_SHAPE(2, 2))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "matmul: mixed dtypes: input 1 (2, 2) is f32 but input 2 (2, 2) is f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_matmul(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(2, 2)), a));
    ck_assert_error_has(ctx, "matmul: input 1 (2, 2) is i64, expected f32 or f64");
    ck_assert_ptr_null(nb_matmul(NULL, a, a));
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_matmul(void) {
    Suite *s = suite_create("matmul");
    TCase *tc = tcase_create("values");
    tcase_add_test(tc, test_matmul_2d_values);
    tcase_add_test(tc, test_matmul_seed_scores);
    tcase_add_test(tc, test_matmul_batched_3d);
    tcase_add_test(tc, test_matmul_broadcast_2d_operand);
    tcase_add_test(tc, test_matmul_4d_heads);
    tcase_add_test(tc, test_matmul_4d_broadcast_batch);
    tcase_add_test(tc, test_matmul_f32_matches_naive_odd_sizes);
    tcase_add_test(tc, test_matmul_large_inner_dim);
    suite_add_tcase(s, tc);

    tc = tcase_create("gradients");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_matmul_grad_by_hand);
    tcase_add_test(tc, test_matmul_backward_matches_naive);
    tcase_add_test(tc, test_matmul_grad_sums_over_broadcast_batch);
    tcase_add_test(tc, test_matmul_gradcheck_2d);
    tcase_add_test(tc, test_matmul_gradcheck_batched_4d);
    tcase_add_test(tc, test_matmul_gradcheck_broadcast_batch);
    tcase_add_test(tc, test_matmul_gradcheck_same_input_twice);
    tcase_add_test(tc, test_matmul_only_marked_inputs_get_grads);
    tcase_add_test(tc, test_matmul_steady_state_no_malloc);
    suite_add_tcase(s, tc);

    tc = tcase_create("vectors");
    tcase_add_test(tc, test_matmul_vector_values);
    tcase_add_test(tc, test_matmul_vector_batched);
    tcase_add_test(tc, test_matmul_vector_grad_by_hand);
    tcase_add_test(tc, test_matmul_vector_gradcheck_and_second_order);
    tcase_add_test(tc, test_matmul_dot_hvp);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, test_matmul_error_inner_dims);
    tcase_add_test(tc, test_matmul_error_scalar_operand);
    tcase_add_test(tc, test_matmul_error_batch_dims);
    tcase_add_test(tc, test_matmul_error_inputs);
    suite_add_tcase(s, tc);
    return s;
}
