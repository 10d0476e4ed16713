/* check_softmax.c - masked_fill, causal_fill, softmax, log_softmax,
 * cross_entropy and mse_loss: values in both dtypes, gradients (by hand and
 * by nb_gradcheck), masked rows, large logits and error messages.
 * Expected values are worked out from the definitions (math.exp in float64). */
#include "check_nabla.h"

static nb_tensor *bool_of(nb_ctx *ctx, int nd, const int64_t *sh, const double *v) {
    return nb_from_doubles(ctx, NB_BOOL, nd, sh, v);
}

static bool has_nan(const nb_tensor *t, bool grad) {
    for (size_t i = 0; i < t->numel; i++)
        if (isnan(grad ? nb_grad_get(t, i) : nb_get(t, i))) return true;
    return false;
}

static void assert_gradcheck(nb_gradcheck_fn f, void *user, int n, nb_tensor *const *in) {
    nb_gradcheck_result r;
    nb_ctx *ctx = nb_ctx_new(0); /* records a failure's message */
    nb_status st = nb_gradcheck(ctx, f, user, n, in, NULL, &r);
    ck_assert_msg(st == NB_OK && r.passed, "%s", r.message);
    nb_ctx_free(ctx);
}

/* ---- masked_fill ------------------------------------------------------------- */

START_TEST(test_masked_fill_values_both_dtypes) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
        nb_tensor *m = bool_of(ctx, NB_SHAPE(2, 3), (double[]){0, 1, 0, 1, 0, 0});
        nb_tensor *y = nb_masked_fill(ctx, a, m, -7.5);
        ck_assert_tensor_near(y, ((double[]){1, -7.5, 3, -7.5, 5, 6}), 6, 0);
        ck_assert_int_eq(y->dtype, dt);
        ck_assert_int_eq(y->ndim, 2);
        nb_tensor *z = nb_masked_fill(ctx, a, m, -INFINITY);
        ck_assert(isinf(nb_get(z, 1)) && nb_get(z, 1) < 0);
        ck_assert(isinf(nb_get(z, 3)) && nb_get(z, 3) < 0);
        ck_assert_double_eq(nb_get(z, 5), 6);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_masked_fill_broadcast_mask) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    /* (3) -> (2, 3): a column mask */
    nb_tensor *y = nb_masked_fill(ctx, a, bool_of(ctx, NB_SHAPE(3), (double[]){0, 0, 1}), 0);
    ck_assert_tensor_near(y, ((double[]){1, 2, 0, 4, 5, 0}), 6, 0);
    /* (2, 1) -> (2, 3): a row mask */
    y = nb_masked_fill(ctx, a, bool_of(ctx, NB_SHAPE(2, 1), (double[]){1, 0}), 9);
    ck_assert_tensor_near(y, ((double[]){9, 9, 9, 4, 5, 6}), 6, 0);
    /* 0-dim mask fills everything */
    y = nb_masked_fill(ctx, a, bool_of(ctx, 0, NULL, (double[]){1}), -1);
    ck_assert_tensor_near(y, ((double[]){-1, -1, -1, -1, -1, -1}), 6, 0);
    /* (1, 1, 2, 2) mask on (2, 2, 2, 2) scores, as attention's mask buffer */
    nb_tensor *s = nb_ones(ctx, NB_F32, NB_SHAPE(2, 2, 2, 2));
    y = nb_masked_fill(ctx, s, bool_of(ctx, NB_SHAPE(1, 1, 2, 2), (double[]){0, 1, 0, 0}), 0);
    for (size_t i = 0; i < 16; i++) ck_assert_double_eq(nb_get(y, i), i % 4 == 1 ? 0 : 1);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_masked_fill_gradient_zero_where_filled) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(
        nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}));
    nb_tensor *m = bool_of(ctx, NB_SHAPE(3), (double[]){1, 0, 0});
    nb_tensor *y = nb_masked_fill(ctx, a, m, -INFINITY);
    nb_tensor *g = nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    /* the saved mask is a copy: changing the caller's mask does not change backward */
    nb_set(m, 0, 0);
    nb_set(m, 1, 1);
    ck_assert_int_eq(nb_backward(ctx, y, g), NB_OK);
    ck_assert_grad_near(a, ((double[]){0, 2, 3, 0, 5, 6}), 6, 0);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_masked_fill(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    /* a squared first, so the gradient is not just a copy of the mask */
    return nb_masked_fill(ctx, nb_mul(ctx, in[0], in[0]), user, 3.0);
}

START_TEST(test_masked_fill_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *m = bool_of(ctx, NB_SHAPE(2, 1, 3), (double[]){1, 0, 0, 0, 1, 1});
    nb_tensor *in[1] = {nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2, 3),
                                        (double[]){0.3, -1.2, 0.8, 1.5, -0.4, 2.0, 0.7, 0.1,
                                                   -0.9, 1.1, -1.7, 0.6})};
    assert_gradcheck(f_masked_fill, m, 1, in);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_masked_fill_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_masked_fill(ctx, a, nb_zeros(ctx, NB_F32, NB_SHAPE(2, 3)), 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "masked_fill: mask (2, 3) is f32, expected bool");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_masked_fill(ctx, a, NULL, 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "masked_fill: mask is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_masked_fill(ctx, NULL, nb_zeros(ctx, NB_BOOL, NB_SHAPE(3)), 0));
    ck_assert_error_has(ctx, "masked_fill: input 1 is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_masked_fill(ctx, a, nb_zeros(ctx, NB_BOOL, NB_SHAPE(2)), 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "masked_fill: mask (2) does not broadcast to input (2, 3): dim -1 "
                             "(from the right) is 2 vs 3, expected equal or 1");
    nb_ctx_clear_error(ctx);
    /* a mask that would broadcast a to a bigger shape is refused */
    ck_assert_ptr_null(nb_masked_fill(ctx, a, nb_zeros(ctx, NB_BOOL, NB_SHAPE(4, 2, 3)), 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "masked_fill: mask (4, 2, 3) has 3 dims but input (2, 3) has 2");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_masked_fill(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(2)),
                                      nb_zeros(ctx, NB_BOOL, NB_SHAPE(2)), 0));
    ck_assert_error_has(ctx, "masked_fill: input 1 (2) is i64, expected f32 or f64");
    ck_assert_ptr_null(nb_masked_fill(NULL, a, NULL, 0));
    nb_ctx_free(ctx);
}
END_TEST

/* ---- causal_fill --------------------------------------------------------------- */

START_TEST(test_causal_fill_values_both_dtypes) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        double v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        nb_tensor *sq = nb_causal_fill(ctx, nb_from_doubles(ctx, dt, NB_SHAPE(3, 3), v), 0);
        ck_assert_tensor_near(sq, ((double[]){1, 0, 0, 4, 5, 0, 7, 8, 9}), 9, 0);
        /* (T1, T2) = (2, 4) and (4, 2): j > i regardless of squareness */
        nb_tensor *wide = nb_causal_fill(ctx, nb_from_doubles(ctx, dt, NB_SHAPE(2, 4), v), -1);
        ck_assert_tensor_near(wide, ((double[]){1, -1, -1, -1, 5, 6, -1, -1}), 8, 0);
        nb_tensor *tall = nb_causal_fill(ctx, nb_from_doubles(ctx, dt, NB_SHAPE(4, 2), v), -1);
        ck_assert_tensor_near(tall, ((double[]){1, -1, 3, 4, 5, 6, 7, 8}), 8, 0);
        ck_assert_int_eq(tall->dtype, dt);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_causal_fill_batched_matches_masked_fill) {
    nb_ctx *ctx = nb_ctx_new(0);
    double v[36];
    for (int i = 0; i < 36; i++) v[i] = 0.25 * i - 3;
    nb_tensor *a = nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 2, 3, 3), v);
    double tri[9] = {0, 1, 1, 0, 0, 1, 0, 0, 0}; /* triu(ones(3, 3), diagonal=1) */
    nb_tensor *c = nb_causal_fill(ctx, a, -INFINITY);
    nb_tensor *m = nb_masked_fill(ctx, a, bool_of(ctx, NB_SHAPE(3, 3), tri), -INFINITY);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_nonnull(m);
    for (size_t i = 0; i < 36; i++) ck_assert(nb_get(c, i) == nb_get(m, i));
    ck_assert(isinf(nb_get(c, 9 + 1)));  /* matrix 1, (0, 1) */
    ck_assert_double_eq(nb_get(c, 9 + 3), v[12]); /* matrix 1, (1, 0) */
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_causal_fill_gradient_lower_triangle) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(nb_ones(ctx, NB_F64, NB_SHAPE(2, 2, 3)));
    nb_tensor *y = nb_causal_fill(ctx, a, -INFINITY);
    ck_assert_int_eq(nb_backward(ctx, y, nb_full(ctx, NB_F64, NB_SHAPE(2, 2, 3), 2.5)), NB_OK);
    ck_assert_grad_near(a, ((double[]){2.5, 0, 0, 2.5, 2.5, 0, 2.5, 0, 0, 2.5, 2.5, 0}), 12, 0);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_causal_softmax(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_softmax(ctx, nb_causal_fill(ctx, in[0], -INFINITY));
}

START_TEST(test_causal_fill_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_ptr_null(nb_causal_fill(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(5)), 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "causal_fill: input (5) has 1 dim, expected at least 2 (..., T1, T2)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_causal_fill(ctx, nb_scalar(ctx, NB_F64, 1), 0));
    ck_assert_error_has(ctx, "causal_fill: input () has 0 dims, expected at least 2");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_causal_fill(ctx, NULL, 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "causal_fill: input 1 is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_causal_fill(ctx, nb_zeros(ctx, NB_BOOL, NB_SHAPE(2, 2)), 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "causal_fill: input 1 (2, 2) is bool, expected f32 or f64");
    /* sticky: later ops do nothing */
    ck_assert_ptr_null(nb_softmax(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(2))));
    nb_ctx_free(ctx);
}
END_TEST

/* ---- softmax ------------------------------------------------------------------- */

START_TEST(test_softmax_known_row_both_dtypes) {
    /* row 1 of the seeds' attention scores */
    static const double x[6] = {0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865};
    static const double want[6] = {0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581};
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *y = nb_softmax(ctx, nb_from_doubles(ctx, dt, NB_SHAPE(6), x));
        ck_assert_int_eq(y->dtype, dt);
        for (size_t i = 0; i < 6; i++)
            ck_assert_double_eq(round(nb_get(y, i) * 1e4), round(want[i] * 1e4));
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_softmax_rows_exact) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        double tol = dt == NB_F32 ? 1e-6 : 1e-14;
        nb_ctx *ctx = nb_ctx_new(0);
        /* (2, 1, 3): rows [1, 2, 3] and [3, 3, 3] */
        nb_tensor *y = nb_softmax(
            ctx, nb_from_doubles(ctx, dt, NB_SHAPE(2, 1, 3), (double[]){1, 2, 3, 3, 3, 3}));
        ck_assert_tensor_near(y, ((double[]){0.09003057317038046, 0.24472847105479764,
                                             0.6652409557748218, 1.0 / 3, 1.0 / 3, 1.0 / 3}),
                              6, tol);
        char s[64];
        ck_assert_str_eq(nb_shape_str(y, s, sizeof s), "(2, 1, 3)");
        /* a 0-dim tensor is a row of one */
        ck_assert_double_eq(nb_item(nb_softmax(ctx, nb_scalar(ctx, dt, -4))), 1.0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_softmax_large_logits_stable) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        double tol = dt == NB_F32 ? 1e-6 : 1e-14;
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x =
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){1000, 1001, -1000, -1001});
        nb_tensor *y = nb_softmax(ctx, x);
        ck_assert_tensor_near(y, ((double[]){0.2689414213699951, 0.7310585786300049,
                                             0.7310585786300049, 0.2689414213699951}),
                              4, tol);
        nb_tensor *l = nb_log_softmax(ctx, x);
        ck_assert_tensor_near(l, ((double[]){-1.3132616875182228, -0.31326168751822286,
                                             -0.31326168751822286, -1.3132616875182228}),
                              4, dt == NB_F32 ? 1e-5 : 1e-12);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* The seeds' causal scores, already computed with a 6x6 dot product. */
static const double CAUSAL_SCORES[36] = {
    0.9231, 1.3545, 1.3241, 0.7910, 0.4032, 1.1330, /* */
    1.2705, 1.8524, 1.8111, 1.0795, 0.5577, 1.5440, /* */
    1.2544, 1.8284, 1.7877, 1.0654, 0.5508, 1.5238, /* */
    0.6973, 1.0167, 0.9941, 0.5925, 0.3061, 0.8475, /* */
    0.6114, 0.8819, 0.8626, 0.5121, 0.2707, 0.7307, /* */
    0.8995, 1.3165, 1.2871, 0.7682, 0.3937, 1.0996,
};

START_TEST(test_softmax_causal_attention_weights) {
    static const double want[36] = {
        1.0000, 0,      0,      0,      0,      0,      /* */
        0.3986, 0.6014, 0,      0,      0,      0,      /* */
        0.2526, 0.3791, 0.3683, 0,      0,      0,      /* */
        0.2265, 0.2839, 0.2794, 0.2103, 0,      0,      /* */
        0.1952, 0.2363, 0.2331, 0.1820, 0.1534, 0,      /* */
        0.1557, 0.2092, 0.2048, 0.1419, 0.1089, 0.1794,
    };
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *s = nb_from_doubles(ctx, dt, NB_SHAPE(6, 6), CAUSAL_SCORES);
        nb_tensor *w = nb_softmax(ctx, nb_scale(ctx, nb_causal_fill(ctx, s, -INFINITY),
                                                1.0 / sqrt(2.0)));
        ck_assert_tensor_near(w, want, 36, 1e-4);
        for (size_t i = 0; i < 6; i++)
            for (size_t j = i + 1; j < 6; j++) ck_assert(nb_get(w, i * 6 + j) == 0.0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_softmax_fully_masked_row_zero) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){0.5, -1, 2, 7, 8, 9}));
        /* row 1 fully masked, row 0 not at all */
        nb_tensor *m = bool_of(ctx, NB_SHAPE(2, 1), (double[]){0, 1});
        nb_tensor *y = nb_softmax(ctx, nb_masked_fill(ctx, a, m, -INFINITY));
        ck_assert(!has_nan(y, false));
        for (size_t i = 3; i < 6; i++) ck_assert(nb_get(y, i) == 0.0);
        ck_assert_double_eq_tol(nb_get(y, 0) + nb_get(y, 1) + nb_get(y, 2), 1.0, 1e-6);
        nb_tensor *g = nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, -2, 3, 4, 5, 6});
        ck_assert_int_eq(nb_backward(ctx, y, g), NB_OK);
        ck_assert(!has_nan(a, true));
        for (size_t i = 3; i < 6; i++) ck_assert(nb_grad_get(a, i) == 0.0);
        /* directly on an all -inf input too */
        nb_tensor *inf = nb_requires_grad(nb_full(ctx, dt, NB_SHAPE(4), -INFINITY));
        nb_tensor *z = nb_softmax(ctx, inf);
        ck_assert_tensor_near(z, ((double[]){0, 0, 0, 0}), 4, 0);
        ck_assert_int_eq(nb_backward(ctx, z, nb_ones(ctx, dt, NB_SHAPE(4))), NB_OK);
        ck_assert_grad_near(inf, ((double[]){0, 0, 0, 0}), 4, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_softmax_partially_masked_exact_zero_grad) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(3), (double[]){1, -INFINITY, 2}));
        nb_tensor *y = nb_softmax(ctx, a);
        ck_assert_tensor_near(y, ((double[]){0.2689414213699951, 0, 0.7310585786300049}), 3,
                              1e-6);
        ck_assert(nb_get(y, 1) == 0.0);
        nb_tensor *g = nb_from_doubles(ctx, dt, NB_SHAPE(3), (double[]){1, 5, -2});
        ck_assert_int_eq(nb_backward(ctx, y, g), NB_OK);
        /* y * (dy - sum(dy * y)) */
        ck_assert_grad_near(a, ((double[]){0.5898357997244456, 0, -0.5898357997244454}), 3,
                            1e-6);
        ck_assert(nb_grad_get(a, 1) == 0.0);
        nb_ctx_free(ctx);
    }
}
END_TEST

static nb_tensor *f_softmax(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_softmax(ctx, in[0]);
}

START_TEST(test_softmax_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 1);
    nb_tensor *in[1] = {nb_normal(ctx, NB_F32, NB_SHAPE(2, 3, 4), 0, 1.5, &rng)};
    assert_gradcheck(f_softmax, NULL, 1, in);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_softmax_gradcheck_causal_masked) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 11, 3);
    /* (2, 4, 5): rows with 1..4 of 5 entries kept */
    nb_tensor *in[1] = {nb_normal(ctx, NB_F64, NB_SHAPE(2, 4, 5), 0, 1, &rng)};
    assert_gradcheck(f_causal_softmax, NULL, 1, in);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_masked_softmax(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    return nb_softmax(ctx, nb_masked_fill(ctx, in[0], user, -INFINITY));
}

START_TEST(test_softmax_gradcheck_padding_mask) {
    nb_ctx *ctx = nb_ctx_new(0);
    /* keys 2 and 3 padded in batch 0, key 0 in batch 1; (2, 1, 4) over (2, 3, 4) */
    nb_tensor *m = bool_of(ctx, NB_SHAPE(2, 1, 4), (double[]){0, 0, 1, 1, 1, 0, 0, 0});
    nb_tensor *in[1] = {nb_from_doubles(
        ctx, NB_F64, NB_SHAPE(2, 3, 4),
        (double[]){0.1, 0.9, -0.3, 1.2, -1.0, 0.4, 0.6, 0.2, 0.8, -0.5, 1.4, 0.0,
                   0.3, 0.3, -0.7, 1.1, 0.5, -1.2, 0.9, 0.2, -0.6, 0.7, 0.1, -0.2})};
    assert_gradcheck(f_masked_softmax, m, 1, in);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_softmax_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_ptr_null(nb_softmax(ctx, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "softmax: input 1 is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_log_softmax(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(2, 5))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "log_softmax: input 1 (2, 5) is i64, expected f32 or f64");
    ck_assert_ptr_null(nb_softmax(NULL, nb_ones(ctx, NB_F32, NB_SHAPE(2))));
    nb_ctx_free(ctx);
}
END_TEST

/* ---- log_softmax ----------------------------------------------------------------- */

START_TEST(test_log_softmax_values_and_grad) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        double tol = dt == NB_F32 ? 1e-6 : 1e-14;
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(nb_from_doubles(ctx, dt, NB_SHAPE(3), (double[]){1, 2, 3}));
        nb_tensor *y = nb_log_softmax(ctx, a);
        ck_assert_int_eq(y->dtype, dt);
        ck_assert_tensor_near(y, ((double[]){-2.4076059644443806, -1.4076059644443804,
                                             -0.4076059644443804}),
                              3, tol);
        /* dy = onehot(0): dx = dy - softmax * 1 */
        ck_assert_int_eq(nb_backward(ctx, y, nb_from_doubles(ctx, dt, NB_SHAPE(3),
                                                             (double[]){1, 0, 0})),
                         NB_OK);
        ck_assert_grad_near(a, ((double[]){0.9099694268296196, -0.24472847105479764,
                                           -0.6652409557748218}),
                            3, tol);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_log_softmax_fully_masked_row) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){0.5, 1.5, 2, 3}));
        nb_tensor *m = bool_of(ctx, NB_SHAPE(2, 2), (double[]){0, 1, 1, 1});
        nb_tensor *y = nb_log_softmax(ctx, nb_masked_fill(ctx, a, m, -INFINITY));
        /* row 0 keeps one entry: log(1) = 0, the masked one -inf; row 1 all -inf */
        ck_assert(!has_nan(y, false));
        ck_assert_double_eq(nb_get(y, 0), 0.0);
        for (size_t i = 1; i < 4; i++) ck_assert(isinf(nb_get(y, i)) && nb_get(y, i) < 0);
        nb_tensor *g = nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){2, 0, 3, 4});
        ck_assert_int_eq(nb_backward(ctx, y, g), NB_OK);
        ck_assert(!has_nan(a, true));
        ck_assert_grad_near(a, ((double[]){0, 0, 0, 0}), 4, 0);
        /* the fully masked row's gradient is zero at log_softmax itself */
        nb_tensor *inf = nb_requires_grad(nb_full(ctx, dt, NB_SHAPE(3), -INFINITY));
        nb_tensor *z = nb_log_softmax(ctx, inf);
        ck_assert_int_eq(nb_backward(ctx, z, nb_ones(ctx, dt, NB_SHAPE(3))), NB_OK);
        ck_assert_grad_near(inf, ((double[]){0, 0, 0}), 3, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

static nb_tensor *f_log_softmax(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_log_softmax(ctx, in[0]);
}

/* log_softmax of a causally masked input, its -inf outputs zeroed again so
 * the finite differences are defined. */
static nb_tensor *f_causal_log_softmax(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_causal_fill(ctx, nb_log_softmax(ctx, nb_causal_fill(ctx, in[0], -INFINITY)), 0);
}

START_TEST(test_log_softmax_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 9);
    nb_tensor *in[1] = {nb_normal(ctx, NB_F64, NB_SHAPE(3, 5), 0, 2, &rng)};
    assert_gradcheck(f_log_softmax, NULL, 1, in);
    nb_tensor *in2[1] = {nb_normal(ctx, NB_F32, NB_SHAPE(2, 4, 4), 0, 1, &rng)};
    assert_gradcheck(f_causal_log_softmax, NULL, 1, in2);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- cross_entropy ----------------------------------------------------------------- */

static nb_tensor *i64_of(nb_ctx *ctx, int nd, const int64_t *sh, const int64_t *v) {
    return nb_from_data(ctx, NB_I64, nd, sh, v);
}

START_TEST(test_cross_entropy_value_both_dtypes) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *l = nb_from_doubles(ctx, dt, NB_SHAPE(1, 3), (double[]){2, 1, 0.1});
        nb_tensor *loss = nb_cross_entropy(ctx, l, i64_of(ctx, NB_SHAPE(1), (int64_t[]){0}));
        ck_assert_int_eq(loss->ndim, 0);
        ck_assert_int_eq(loss->dtype, dt);
        /* log(e^2 + e^1 + e^0.1) - 2 */
        ck_assert_double_eq_tol(nb_item(loss), 0.41703001627783354,
                                dt == NB_F32 ? 1e-6 : 1e-14);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_cross_entropy_batch_value_and_grad) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        double tol = dt == NB_F32 ? 1e-6 : 1e-14;
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *l = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 2, 0.5, -1, 0, 3}));
        nb_tensor *loss = nb_cross_entropy(ctx, l, i64_of(ctx, NB_SHAPE(2), (int64_t[]){1, 2}));
        ck_assert_double_eq_tol(nb_item(loss), 0.265126343932687, tol);
        ck_assert_int_eq(nb_backward(ctx, loss, NULL), NB_OK);
        /* (softmax - onehot) / N */
        ck_assert_grad_near(l, ((double[]){0.11561194881107453, -0.18573414039411879,
                                           0.07012219158304424, 0.008573912772760196,
                                           0.02330631128898695, -0.03188022406174712}),
                            6, tol);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_cross_entropy_3d_logits) {
    nb_ctx *ctx = nb_ctx_new(0);
    double v[12] = {0.5, -1.0, 2.0, 1.5, 0.3, -0.7, 0.0, 0.0, 0.0, -2.0, 1.0, 0.25};
    int64_t t[4] = {2, 0, 1, 1};
    /* (B, T, C) = (2, 2, 3) with targets (2, 2): the same as (4, 3) with (4) */
    nb_tensor *l3 = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2, 3), v);
    nb_tensor *l2 = nb_from_doubles(ctx, NB_F64, NB_SHAPE(4, 3), v);
    double a = nb_item(nb_cross_entropy(ctx, l3, i64_of(ctx, NB_SHAPE(2, 2), t)));
    double b = nb_item(nb_cross_entropy(ctx, l2, i64_of(ctx, NB_SHAPE(4), t)));
    ck_assert_double_eq_tol(a, 0.5262637625100738, 1e-14);
    ck_assert_double_eq(a, b);
    /* unbatched (C) with a 0-dim target */
    nb_tensor *l1 = nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){2, 1, 0.1});
    double c = nb_item(nb_cross_entropy(ctx, l1, i64_of(ctx, 0, NULL, (int64_t[]){0})));
    ck_assert_double_eq_tol(c, 0.41703001627783354, 1e-14);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_cross_entropy_large_logits_stable) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *l = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){1000, 1001, -1000, -1001}));
        nb_tensor *loss =
            nb_cross_entropy(ctx, l, i64_of(ctx, NB_SHAPE(2), (int64_t[]){0, 0}));
        /* (1.31326... + 0.31326...) / 2 */
        ck_assert_double_eq_tol(nb_item(loss), 0.8132616875182228, 1e-6);
        ck_assert_int_eq(nb_backward(ctx, loss, NULL), NB_OK);
        ck_assert(!has_nan(l, true));
        ck_assert_grad_near(l, ((double[]){(0.2689414213699951 - 1) / 2, 0.7310585786300049 / 2,
                                           (0.7310585786300049 - 1) / 2, 0.2689414213699951 / 2}),
                            4, 1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

static nb_tensor *f_cross_entropy(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_cross_entropy(ctx, in[0], in[1]);
}

START_TEST(test_cross_entropy_gradcheck_fixed_targets) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 4);
    /* targets are an I64 input: copied, not differentiated */
    nb_tensor *in[2] = {nb_normal(ctx, NB_F64, NB_SHAPE(2, 3, 5), 0, 1.5, &rng),
                        i64_of(ctx, NB_SHAPE(2, 3), (int64_t[]){4, 0, 2, 2, 1, 3})};
    assert_gradcheck(f_cross_entropy, NULL, 2, in);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_cross_entropy_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *l = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_cross_entropy(ctx, l, i64_of(ctx, NB_SHAPE(2), (int64_t[]){1, 3})));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "cross_entropy: target 3 at index 1 is out of range for logits "
                             "(2, 3), expected 0..2");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_cross_entropy(ctx, l, i64_of(ctx, NB_SHAPE(2), (int64_t[]){-1, 0})));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "target -1 at index 0 is out of range");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_cross_entropy(ctx, l, nb_zeros(ctx, NB_F32, NB_SHAPE(2))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "cross_entropy: targets (2) are f32, expected i64 class indices");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_cross_entropy(ctx, l, nb_zeros(ctx, NB_I64, NB_SHAPE(3))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "cross_entropy: logits (2, 3) and targets (3) do not match, "
                             "expected targets of shape (2)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_cross_entropy(ctx, l, nb_zeros(ctx, NB_I64, NB_SHAPE(2, 1))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_cross_entropy(ctx, nb_scalar(ctx, NB_F64, 1),
                                        nb_zeros(ctx, NB_I64, NB_SHAPE(1))));
    ck_assert_error_has(ctx, "cross_entropy: logits () have no class dim");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_cross_entropy(ctx, l, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "cross_entropy: targets is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_cross_entropy(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(2, 3)),
                                        nb_zeros(ctx, NB_I64, NB_SHAPE(2))));
    ck_assert_error_has(ctx, "cross_entropy: input 1 (2, 3) is i64, expected f32 or f64");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_cross_entropy_no_grad_records_nothing) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *l = nb_requires_grad(nb_ones(ctx, NB_F64, NB_SHAPE(2, 4)));
    nb_set_grad_enabled(ctx, false);
    nb_tensor *loss = nb_cross_entropy(ctx, l, i64_of(ctx, NB_SHAPE(2), (int64_t[]){0, 3}));
    ck_assert_double_eq_tol(nb_item(loss), log(4.0), 1e-14);
    ck_assert_int_eq(nb_tape_len(ctx), 0);
    ck_assert(!loss->requires_grad);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- mse_loss --------------------------------------------------------------------- */

START_TEST(test_mse_loss_values_and_grad) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){1, 2, 3, 4}));
        nb_tensor *b = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){0.5, 2.5, 1, 4}));
        nb_tensor *loss = nb_mse_loss(ctx, a, b);
        ck_assert_int_eq(loss->ndim, 0);
        ck_assert_int_eq(loss->dtype, dt);
        ck_assert_double_eq_tol(nb_item(loss), 1.125, 1e-12);
        ck_assert_int_eq(nb_backward(ctx, loss, NULL), NB_OK);
        ck_assert_grad_near(a, ((double[]){0.25, -0.25, 1.0, 0.0}), 4, 1e-7);
        ck_assert_grad_near(b, ((double[]){-0.25, 0.25, -1.0, 0.0}), 4, 1e-7);
        nb_ctx_free(ctx);
    }
}
END_TEST

static nb_tensor *f_mse(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_mse_loss(ctx, in[0], in[1]);
}

START_TEST(test_mse_loss_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 2);
    nb_tensor *in[2] = {nb_normal(ctx, NB_F64, NB_SHAPE(3, 4), 0, 1, &rng),
                        nb_normal(ctx, NB_F32, NB_SHAPE(3, 4), 0, 1, &rng)};
    in[1] = nb_copy(ctx, in[1], NB_F64);
    assert_gradcheck(f_mse, NULL, 2, in);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_mse_loss_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_mse_loss(ctx, a, nb_ones(ctx, NB_F32, NB_SHAPE(3, 2))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "mse_loss: shapes (2, 3) and (3, 2) differ, expected equal shapes");
    nb_ctx_clear_error(ctx);
    /* no broadcasting, unlike PyTorch's warning-and-broadcast */
    ck_assert_ptr_null(nb_mse_loss(ctx, a, nb_ones(ctx, NB_F32, NB_SHAPE(3))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_mse_loss(ctx, a, nb_ones(ctx, NB_F64, NB_SHAPE(2, 3))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "mse_loss: mixed dtypes: input 1 (2, 3) is f32 but input 2 (2, 3) "
                             "is f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_mse_loss(ctx, NULL, a));
    ck_assert_error_has(ctx, "mse_loss: input 1 is NULL");
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_softmax(void) {
    Suite *s = suite_create("softmax");
    TCase *mask = tcase_create("mask");
    tcase_add_test(mask, test_masked_fill_values_both_dtypes);
    tcase_add_test(mask, test_masked_fill_broadcast_mask);
    tcase_add_test(mask, test_masked_fill_gradient_zero_where_filled);
    tcase_add_test(mask, test_masked_fill_gradcheck);
    tcase_add_test(mask, test_masked_fill_errors);
    tcase_add_test(mask, test_causal_fill_values_both_dtypes);
    tcase_add_test(mask, test_causal_fill_batched_matches_masked_fill);
    tcase_add_test(mask, test_causal_fill_gradient_lower_triangle);
    tcase_add_test(mask, test_causal_fill_errors);
    suite_add_tcase(s, mask);

    TCase *sm = tcase_create("softmax");
    tcase_set_timeout(sm, 30);
    tcase_add_test(sm, test_softmax_known_row_both_dtypes);
    tcase_add_test(sm, test_softmax_rows_exact);
    tcase_add_test(sm, test_softmax_large_logits_stable);
    tcase_add_test(sm, test_softmax_causal_attention_weights);
    tcase_add_test(sm, test_softmax_fully_masked_row_zero);
    tcase_add_test(sm, test_softmax_partially_masked_exact_zero_grad);
    tcase_add_test(sm, test_softmax_gradcheck);
    tcase_add_test(sm, test_softmax_gradcheck_causal_masked);
    tcase_add_test(sm, test_softmax_gradcheck_padding_mask);
    tcase_add_test(sm, test_softmax_errors);
    tcase_add_test(sm, test_log_softmax_values_and_grad);
    tcase_add_test(sm, test_log_softmax_fully_masked_row);
    tcase_add_test(sm, test_log_softmax_gradcheck);
    suite_add_tcase(s, sm);

    TCase *loss = tcase_create("loss");
    tcase_set_timeout(loss, 30);
    tcase_add_test(loss, test_cross_entropy_value_both_dtypes);
    tcase_add_test(loss, test_cross_entropy_batch_value_and_grad);
    tcase_add_test(loss, test_cross_entropy_3d_logits);
    tcase_add_test(loss, test_cross_entropy_large_logits_stable);
    tcase_add_test(loss, test_cross_entropy_gradcheck_fixed_targets);
    tcase_add_test(loss, test_cross_entropy_errors);
    tcase_add_test(loss, test_cross_entropy_no_grad_records_nothing);
    tcase_add_test(loss, test_mse_loss_values_and_grad);
    tcase_add_test(loss, test_mse_loss_gradcheck);
    tcase_add_test(loss, test_mse_loss_errors);
    suite_add_tcase(s, loss);
    return s;
}
