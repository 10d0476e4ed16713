/* check_nn_ops.c - linear, dropout, embedding, layer_norm, rms_norm: values in f32 and
 * f64 (hand-computed or from a plain double reference), gradients (by hand
 * and by nb_gradcheck), dropout's mask rule, and every error message. */
#include "check_nabla.h"

static nb_tensor *from(nb_ctx *ctx, nb_dtype dt, int nd, const int64_t *sh, const double *v) {
    return nb_from_doubles(ctx, dt, nd, sh, v);
}

static nb_tensor *leaf(nb_ctx *ctx, nb_dtype dt, int nd, const int64_t *sh, const double *v) {
    return nb_requires_grad(nb_from_doubles(ctx, dt, nd, sh, v));
}

/* uniform(-1, 1) leaf of the given shape */
static nb_tensor *rand_leaf(nb_ctx *ctx, nb_dtype dt, int nd, const int64_t *sh, uint64_t seed) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, seed, 7);
    return nb_requires_grad(nb_uniform(ctx, dt, nd, sh, -1.0, 1.0, &rng));
}

static bool shape_is(const nb_tensor *t, const char *want) {
    char s[64];
    return t && strcmp(nb_shape_str(t, s, sizeof s), want) == 0;
}

/* ==== linear ================================================================ */

/* y (R, O) = x (R, K) @ w^T + b, in double, straight from the definition */
static void ref_linear(const nb_tensor *x, const nb_tensor *w, const nb_tensor *b, double *y) {
    size_t O = (size_t)w->shape[0], K = (size_t)w->shape[1], R = x->numel / K;
    for (size_t r = 0; r < R; r++)
        for (size_t o = 0; o < O; o++) {
            double s = b ? nb_get(b, o) : 0.0;
            for (size_t k = 0; k < K; k++) s += nb_get(x, r * K + k) * nb_get(w, o * K + k);
            y[r * O + o] = s;
        }
}

START_TEST(test_linear_values_2d_both_dtypes) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = leaf(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
        nb_tensor *w = leaf(ctx, dt, NB_SHAPE(2, 3), (double[]){0.1, 0.2, 0.3, -1, 0, 1});
        nb_tensor *b = leaf(ctx, dt, NB_SHAPE(2), (double[]){0.5, -0.5});
        nb_tensor *y = nb_linear(ctx, x, w, b);
        ck_assert(shape_is(y, "(2, 2)"));
        ck_assert_int_eq(y->dtype, dt);
        ck_assert_tensor_near(y, ((double[]){1.9, 1.5, 3.7, 1.5}), 4, 1e-6);
        ck_assert_int_eq(nb_node_num_inputs(y->node), 3);
        ck_assert_str_eq(nb_node_name(y->node), "linear");
        nb_tensor *y0 = nb_linear(ctx, x, w, NULL);
        ck_assert_tensor_near(y0, ((double[]){1.4, 2, 3.2, 2}), 4, 1e-6);
        ck_assert_int_eq(nb_node_num_inputs(y0->node), 2);
        ck_assert_ptr_eq(nb_node_input(y0->node, 1), w);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_linear_gradients_by_hand) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = leaf(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
        nb_tensor *w = leaf(ctx, dt, NB_SHAPE(2, 3), (double[]){0.1, 0.2, 0.3, -1, 0, 1});
        nb_tensor *b = leaf(ctx, dt, NB_SHAPE(2), (double[]){0.5, -0.5});
        nb_tensor *y = nb_linear(ctx, x, w, b);
        /* dy = [[1, 2], [-1, 0.5]] */
        nb_tensor *dy = from(ctx, dt, NB_SHAPE(2, 2), (double[]){1, 2, -1, 0.5});
        ck_assert_int_eq(nb_backward(ctx, y, dy), NB_OK);
        /* dx = dy @ w: [0.1-2, 0.2, 0.3+2], [-0.1-0.5, -0.2, -0.3+0.5] */
        ck_assert_grad_near(x, ((double[]){-1.9, 0.2, 2.3, -0.6, -0.2, 0.2}), 6, 1e-6);
        /* dw = dy^T @ x: [1-4, 2-5, 3-6], [2+2, 4+2.5, 6+3] */
        ck_assert_grad_near(w, ((double[]){-3, -3, -3, 4, 6.5, 9}), 6, 1e-6);
        ck_assert_grad_near(b, ((double[]){0, 2.5}), 2, 1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* Shapes that exercise full and partial tiles: rows not a multiple of 2 or
 * 4, outputs not a multiple of 4, in_features beyond one SIMD width with a
 * tail. */
START_TEST(test_linear_nd_matches_reference) {
    static const int64_t xs[][5] = {
        /* ndim, shape... */
        {3, 2, 3, 4}, {4, 2, 1, 5, 37}, {1, 37}, {4, 1, 3, 3, 16}, {2, 9, 8},
    };
    static const int64_t outs[] = {5, 9, 6, 8, 1};
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        for (size_t c = 0; c < sizeof outs / sizeof outs[0]; c++) {
            nb_ctx *ctx = nb_ctx_new(0);
            int nd = (int)xs[c][0];
            const int64_t *sh = &xs[c][1];
            int64_t K = sh[nd - 1], O = outs[c];
            nb_pcg32 rng;
            nb_pcg32_seed(&rng, 42 + c, 1);
            nb_tensor *x = nb_uniform(ctx, dt, nd, sh, -1, 1, &rng);
            nb_tensor *w = nb_uniform(ctx, dt, NB_SHAPE(O, K), -1, 1, &rng);
            nb_tensor *b = nb_uniform(ctx, dt, NB_SHAPE(O), -1, 1, &rng);
            for (int with_b = 0; with_b < 2; with_b++) {
                nb_tensor *y = nb_linear(ctx, x, w, with_b ? b : NULL);
                ck_assert_ptr_nonnull(y);
                ck_assert_int_eq(y->ndim, nd);
                for (int d = 0; d < nd - 1; d++) ck_assert_int_eq(y->shape[d], sh[d]);
                ck_assert_int_eq(y->shape[nd - 1], O);
                double *want = malloc(y->numel * sizeof *want);
                ref_linear(x, w, with_b ? b : NULL, want);
                ck_assert_tensor_near(y, want, y->numel, dt == NB_F32 ? 1e-5 : 1e-13);
                free(want);
            }
            nb_ctx_free(ctx);
        }
    }
}
END_TEST

/* dx = dy @ w, dw = dy^T @ x, db = column sums of dy, against double loops,
 * on a shape with row and output tails (R = 7, O = 6, K = 19). */
START_TEST(test_linear_backward_matches_reference) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        size_t R = 7, O = 6, K = 19;
        nb_tensor *x = rand_leaf(ctx, dt, NB_SHAPE(7, 19), 1);
        nb_tensor *w = rand_leaf(ctx, dt, NB_SHAPE(6, 19), 2);
        nb_tensor *b = rand_leaf(ctx, dt, NB_SHAPE(6), 3);
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 4, 4);
        nb_tensor *dy = nb_uniform(ctx, dt, NB_SHAPE(7, 6), -1, 1, &rng);
        nb_tensor *y = nb_linear(ctx, x, w, b);
        ck_assert_int_eq(nb_backward(ctx, y, dy), NB_OK);
        double tol = dt == NB_F32 ? 1e-5 : 1e-13;
        for (size_t r = 0; r < R; r++)
            for (size_t k = 0; k < K; k++) {
                double s = 0;
                for (size_t o = 0; o < O; o++) s += nb_get(dy, r * O + o) * nb_get(w, o * K + k);
                ck_assert_double_eq_tol(nb_grad_get(x, r * K + k), s, tol);
            }
        for (size_t o = 0; o < O; o++) {
            double sb = 0;
            for (size_t r = 0; r < R; r++) sb += nb_get(dy, r * O + o);
            ck_assert_double_eq_tol(nb_grad_get(b, o), sb, tol);
            for (size_t k = 0; k < K; k++) {
                double s = 0;
                for (size_t r = 0; r < R; r++) s += nb_get(dy, r * O + o) * nb_get(x, r * K + k);
                ck_assert_double_eq_tol(nb_grad_get(w, o * K + k), s, tol);
            }
        }
        /* a second backward adds the same amounts again */
        double before = nb_grad_get(w, 5);
        ck_assert_int_eq(nb_backward(ctx, y, dy), NB_OK);
        ck_assert_double_eq_tol(nb_grad_get(w, 5), 2 * before, 4 * tol);
        nb_ctx_free(ctx);
    }
}
END_TEST

static nb_tensor *f_linear(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    return nb_linear(ctx, in[0], in[1], user ? in[2] : NULL);
}

START_TEST(test_linear_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[3] = {
        rand_leaf(ctx, NB_F64, NB_SHAPE(2, 3, 5), 11),
        rand_leaf(ctx, NB_F64, NB_SHAPE(6, 5), 12),
        rand_leaf(ctx, NB_F64, NB_SHAPE(6), 13),
    };
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_linear, (void *)1, 3, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    ck_assert(r.max_abs_err < 1e-7);
    ck_assert_int_eq(nb_gradcheck(ctx, f_linear, NULL, 2, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    /* 4-D x, f32 inputs (the check runs in f64) */
    nb_tensor *in4[3] = {
        rand_leaf(ctx, NB_F32, NB_SHAPE(2, 1, 3, 4), 14),
        rand_leaf(ctx, NB_F32, NB_SHAPE(5, 4), 15),
        rand_leaf(ctx, NB_F32, NB_SHAPE(5), 16),
    };
    ck_assert_int_eq(nb_gradcheck(ctx, f_linear, (void *)1, 3, in4, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    nb_ctx_free(ctx);
}
END_TEST

/* Parameters in a long-lived context, the step in another that is reset each
 * step: after the first step, no step calls malloc. */
START_TEST(test_linear_steady_state_no_malloc) {
    nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_tensor *w = rand_leaf(params, NB_F32, NB_SHAPE(16, 32), 1);
    nb_tensor *b = rand_leaf(params, NB_F32, NB_SHAPE(16), 2);
    size_t m_step = 0, m_params = 0;
    for (int it = 0; it < 4; it++) {
        nb_ctx_reset(step);
        nb_tensor *x = nb_ones(step, NB_F32, NB_SHAPE(4, 8, 32));
        nb_tensor *y = nb_linear(step, x, w, b);
        ck_assert_int_eq(nb_backward(step, y, nb_ones(step, NB_F32, NB_SHAPE(4, 8, 16))), NB_OK);
        if (it == 1) {
            m_step = nb_ctx_mallocs(step);
            m_params = nb_ctx_mallocs(params);
        } else if (it > 1) {
            ck_assert_uint_eq(nb_ctx_mallocs(step), m_step);
            ck_assert_uint_eq(nb_ctx_mallocs(params), m_params);
        }
    }
    /* 4 steps of 32 rows of ones: db = 4 * 32, dw = 4 * 32 * 1 */
    ck_assert_double_eq_tol(nb_grad_get(b, 3), 128.0, 1e-4);
    ck_assert_double_eq_tol(nb_grad_get(w, 100), 128.0, 1e-4);
    ck_assert_ptr_null(nb_ctx_error(params));
    nb_ctx_free(step);
    nb_ctx_free(params);
}
END_TEST

/* Only inputs that require grad get one; the others are left untouched. */
START_TEST(test_linear_grad_only_where_needed) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = from(ctx, NB_F32, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    nb_tensor *w = leaf(ctx, NB_F32, NB_SHAPE(2, 3), (double[]){0.1, 0.2, 0.3, -1, 0, 1});
    nb_tensor *b = from(ctx, NB_F32, NB_SHAPE(2), (double[]){0.5, -0.5});
    nb_tensor *y = nb_linear(ctx, x, w, b);
    ck_assert(y->requires_grad);
    ck_assert_int_eq(nb_backward(ctx, y, nb_ones(ctx, NB_F32, NB_SHAPE(2, 2))), NB_OK);
    ck_assert_ptr_null(x->grad);
    ck_assert_ptr_null(b->grad);
    ck_assert_grad_near(w, ((double[]){5, 7, 9, 5, 7, 9}), 6, 1e-6);
    /* nothing requires grad: nothing is recorded */
    nb_tensor *w1 = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    nb_tensor *z = nb_linear(ctx, x, w1, NULL);
    ck_assert_ptr_null(z->node);
    ck_assert_int_eq(nb_tape_len(ctx), 1);
    /* only the bias */
    nb_tensor *bb = leaf(ctx, NB_F32, NB_SHAPE(2), (double[]){0, 0});
    nb_tensor *yb = nb_linear(ctx, x, w1, bb);
    nb_tensor *dy = from(ctx, NB_F32, NB_SHAPE(2, 2), (double[]){1, 2, 3, 4});
    ck_assert_int_eq(nb_backward(ctx, yb, dy), NB_OK);
    ck_assert_grad_near(bb, ((double[]){4, 6}), 2, 1e-6);
    ck_assert_ptr_null(w1->grad);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_linear_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(6, 3));
    nb_tensor *w = nb_ones(ctx, NB_F32, NB_SHAPE(2, 4));
    ck_assert_ptr_null(nb_linear(ctx, x, w, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "linear: x (6, 3) does not fit weight (2, 4): x's last dim 3, "
                             "expected in_features 4");
    nb_ctx_clear_error(ctx);

    nb_tensor *w3 = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3, 1));
    ck_assert_ptr_null(nb_linear(ctx, x, w3, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "linear: weight (2, 3, 1) has 3 dims, expected 2 (out_features, "
                             "in_features)");
    nb_ctx_clear_error(ctx);

    nb_tensor *w23 = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_linear(ctx, x, w23, nb_ones(ctx, NB_F32, NB_SHAPE(3))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "linear: bias (3) does not fit weight (2, 3): expected shape (2)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_linear(ctx, x, w23, nb_ones(ctx, NB_F32, NB_SHAPE(1, 2))));
    ck_assert_error_has(ctx, "linear: bias (1, 2) does not fit weight (2, 3)");
    nb_ctx_clear_error(ctx);

    ck_assert_ptr_null(nb_linear(ctx, x, nb_ones(ctx, NB_F64, NB_SHAPE(2, 3)), NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "linear: mixed dtypes: x (6, 3) is f32 but weight (2, 3) is f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_linear(ctx, x, w23, nb_ones(ctx, NB_F64, NB_SHAPE(2))));
    ck_assert_error_has(ctx, "linear: mixed dtypes: x (6, 3) is f32 but bias (2) is f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_linear(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(6, 3)), w23, NULL));
    ck_assert_error_has(ctx, "linear: x (6, 3) is i64, expected f32 or f64");
    nb_ctx_clear_error(ctx);

    ck_assert_ptr_null(nb_linear(ctx, NULL, w23, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "linear: x is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_linear(ctx, x, NULL, NULL));
    ck_assert_error_has(ctx, "linear: weight is NULL");
    nb_ctx_clear_error(ctx);

    ck_assert_ptr_null(nb_linear(ctx, nb_scalar(ctx, NB_F32, 1), w23, NULL));
    ck_assert_error_has(ctx, "linear: x () has 0 dims, expected 1 to 8");
    nb_ctx_clear_error(ctx);

    /* a 1-D x is one row */
    nb_tensor *y = nb_linear(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(3)), w23, NULL);
    ck_assert(shape_is(y, "(2)"));
    ck_assert_tensor_near(y, ((double[]){3, 3}), 2, 1e-6);
    ck_assert_ptr_null(nb_linear(NULL, x, w23, NULL));
    nb_ctx_free(ctx);
}
END_TEST

/* ==== dropout =============================================================== */

START_TEST(test_dropout_identity_cases) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = leaf(ctx, NB_F32, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    nb_pcg32 rng, before;
    nb_pcg32_seed(&rng, 1, 2);
    before = rng;
    ck_assert_ptr_eq(nb_dropout(ctx, x, 0.0, true, &rng), x);
    ck_assert_ptr_eq(nb_dropout(ctx, x, 0.5, false, &rng), x);
    ck_assert_ptr_eq(nb_dropout(ctx, x, 1.0, false, NULL), x);
    ck_assert_ptr_eq(nb_dropout(ctx, x, 0.0, true, NULL), x);
    ck_assert_int_eq(nb_tape_len(ctx), 0);
    ck_assert(rng.state == before.state && rng.inc == before.inc); /* nothing drawn */
    ck_assert_ptr_null(nb_ctx_error(ctx));
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_dropout_p1_zeros_with_zero_grad) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = leaf(ctx, dt, NB_SHAPE(2, 2), (double[]){1, -2, 3, 4});
        nb_tensor *y = nb_dropout(ctx, x, 1.0, true, NULL); /* p == 1 draws nothing */
        ck_assert_ptr_ne(y, x);
        ck_assert_tensor_near(y, ((double[]){0, 0, 0, 0}), 4, 0);
        ck_assert_int_eq(nb_backward(ctx, y, nb_ones(ctx, dt, NB_SHAPE(2, 2))), NB_OK);
        ck_assert_grad_near(x, ((double[]){0, 0, 0, 0}), 4, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_dropout_half_doubles_survivors) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = nb_full(ctx, dt, NB_SHAPE(100, 100), 1.5);
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 2024, 3);
        nb_tensor *y = nb_dropout(ctx, x, 0.5, true, &rng);
        ck_assert_ptr_nonnull(y);
        size_t kept = 0;
        for (size_t i = 0; i < y->numel; i++) {
            double v = nb_get(y, i);
            ck_assert_msg(v == 0.0 || v == 3.0, "element %zu is %g, expected 0 or 3", i, v);
            kept += v != 0.0;
        }
        /* binomial(10000, 0.5): sd 50, so +-300 is 6 sd */
        ck_assert_msg(kept > 4700 && kept < 5300, "kept %zu of 10000", kept);
        /* p = 0.2: survivors are x / 0.8 and about 80% */
        nb_tensor *z = nb_dropout(ctx, x, 0.2, true, &rng);
        kept = 0;
        for (size_t i = 0; i < z->numel; i++) {
            double v = nb_get(z, i);
            ck_assert(v == 0.0 || fabs(v - 1.875) < 1e-6);
            kept += v != 0.0;
        }
        ck_assert_msg(kept > 7760 && kept < 8240, "kept %zu of 10000", kept);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* The mask is exactly the documented rule: element i is kept when the i-th
 * nb_pcg32_float draw is >= p. Same seed, same mask; another seed, another. */
START_TEST(test_dropout_mask_rule_and_seed) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F64, NB_SHAPE(10, 100));
    nb_pcg32 r1, r2, r3, ref;
    nb_pcg32_seed(&r1, 99, 5);
    nb_pcg32_seed(&r2, 99, 5);
    nb_pcg32_seed(&r3, 100, 5);
    nb_pcg32_seed(&ref, 99, 5);
    nb_tensor *a = nb_dropout(ctx, x, 0.3, true, &r1);
    nb_tensor *b = nb_dropout(ctx, x, 0.3, true, &r2);
    nb_tensor *c = nb_dropout(ctx, x, 0.3, true, &r3);
    size_t differ = 0;
    for (size_t i = 0; i < x->numel; i++) {
        double want = nb_pcg32_float(&ref) >= 0.3 ? 1.0 / 0.7 : 0.0;
        ck_assert_double_eq_tol(nb_get(a, i), want, 1e-12);
        ck_assert(nb_get(a, i) == nb_get(b, i));
        differ += nb_get(a, i) != nb_get(c, i);
    }
    ck_assert_uint_gt(differ, 0);
    /* exactly numel draws were made */
    ck_assert(r1.state == ref.state);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_dropout_backward_reuses_mask) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = rand_leaf(ctx, dt, NB_SHAPE(3, 40), 8);
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 7, 7);
        nb_tensor *y = nb_dropout(ctx, x, 0.25, true, &rng);
        nb_pcg32 after = rng;
        nb_tensor *dy = nb_full(ctx, dt, NB_SHAPE(3, 40), 3.0);
        ck_assert_int_eq(nb_backward(ctx, y, dy), NB_OK);
        ck_assert(rng.state == after.state); /* backward draws nothing */
        for (size_t i = 0; i < x->numel; i++) {
            bool kept = nb_get(y, i) != 0.0;
            ck_assert_double_eq_tol(nb_grad_get(x, i), kept ? 3.0 / 0.75 : 0.0, 1e-5);
            if (kept) ck_assert_double_eq_tol(nb_get(y, i), nb_get(x, i) / 0.75, 1e-6);
        }
        nb_ctx_free(ctx);
    }
}
END_TEST

static nb_tensor *f_dropout(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, *(const uint64_t *)user, 11); /* the same mask every evaluation */
    return nb_mul(ctx, nb_dropout(ctx, in[0], 0.4, true, &rng), in[1]);
}

START_TEST(test_dropout_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[2] = {rand_leaf(ctx, NB_F64, NB_SHAPE(3, 5), 21),
                        rand_leaf(ctx, NB_F64, NB_SHAPE(5), 22)};
    uint64_t seed = 31337;
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_dropout, &seed, 2, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    ck_assert(r.max_abs_err < 1e-7);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_dropout_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    ck_assert_ptr_null(nb_dropout(ctx, x, -0.1, true, &rng));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "dropout: p = -0.1 is outside [0, 1]");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_dropout(ctx, x, 1.5, false, &rng)); /* checked in eval mode too */
    ck_assert_error_has(ctx, "dropout: p = 1.5 is outside [0, 1]");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_dropout(ctx, x, NAN, true, &rng));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "dropout: p = nan is outside [0, 1]");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_dropout(ctx, x, 0.5, true, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "dropout: rng is NULL, but training with p = 0.5 needs it");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_dropout(ctx, NULL, 0.5, true, &rng));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "dropout: x is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_dropout(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(4)), 0.5, true, &rng));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "dropout: x (4) is i64, expected f32 or f64");
    ck_assert_ptr_null(nb_dropout(NULL, x, 0.5, true, &rng));
    nb_ctx_free(ctx);
}
END_TEST

/* ==== embedding ============================================================= */

static const double EMB_W[12] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};

START_TEST(test_embedding_values_both_dtypes) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *w = leaf(ctx, dt, NB_SHAPE(4, 3), EMB_W);
        nb_tensor *ids = nb_from_data(ctx, NB_I64, NB_SHAPE(2, 2), (int64_t[]){1, 3, 2, 0});
        nb_tensor *y = nb_embedding(ctx, w, ids);
        ck_assert(shape_is(y, "(2, 2, 3)"));
        ck_assert_int_eq(y->dtype, dt);
        ck_assert_tensor_near(y, ((double[]){10, 11, 12, 30, 31, 32, 20, 21, 22, 0, 1, 2}), 12,
                              0);
        ck_assert_int_eq(nb_node_num_inputs(y->node), 1);
        ck_assert_ptr_eq(nb_node_input(y->node, 0), w);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_embedding_scalar_and_3d_ids) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *w = from(ctx, NB_F32, NB_SHAPE(4, 3), EMB_W);
    nb_tensor *one = nb_from_data(ctx, NB_I64, 0, NULL, (int64_t[]){2});
    nb_tensor *y = nb_embedding(ctx, w, one);
    ck_assert(shape_is(y, "(3)"));
    ck_assert_tensor_near(y, ((double[]){20, 21, 22}), 3, 0);
    ck_assert_ptr_null(y->node); /* weight needs no grad: nothing recorded */
    nb_tensor *ids3 =
        nb_from_data(ctx, NB_I64, NB_SHAPE(2, 1, 2), (int64_t[]){3, 3, 0, 1});
    nb_tensor *z = nb_embedding(ctx, w, ids3);
    ck_assert(shape_is(z, "(2, 1, 2, 3)"));
    ck_assert_double_eq(nb_get(z, 5), 32);
    ck_assert_double_eq(nb_get(z, 9), 10);
    ck_assert_int_eq(nb_tape_len(ctx), 0);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_embedding_repeated_ids_accumulate) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *w = leaf(ctx, dt, NB_SHAPE(4, 3), EMB_W);
        nb_tensor *ids = nb_from_data(ctx, NB_I64, NB_SHAPE(5), (int64_t[]){1, 3, 1, 0, 1});
        nb_tensor *y = nb_embedding(ctx, w, ids);
        /* dy row p = (p + 1) * [1, 10, 100] */
        double g[15];
        for (int p = 0; p < 5; p++)
            for (int k = 0; k < 3; k++) g[p * 3 + k] = (p + 1) * pow(10, k);
        ck_assert_int_eq(nb_backward(ctx, y, from(ctx, dt, NB_SHAPE(5, 3), g)), NB_OK);
        /* row 1 gets positions 0, 2, 4 (1 + 3 + 5 = 9); row 3 gets 2; row 0 gets 4; row 2 none */
        ck_assert_grad_near(w, ((double[]){4, 40, 400, 9, 90, 900, 0, 0, 0, 2, 20, 200}), 12,
                            1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

static nb_tensor *f_embedding(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    return nb_mul(ctx, nb_embedding(ctx, in[0], user), in[1]);
}

START_TEST(test_embedding_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *ids = nb_from_data(ctx, NB_I64, NB_SHAPE(2, 3), (int64_t[]){4, 0, 4, 2, 4, 1});
    nb_tensor *in[2] = {rand_leaf(ctx, NB_F64, NB_SHAPE(5, 3), 31),
                        rand_leaf(ctx, NB_F64, NB_SHAPE(3), 32)};
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_embedding, ids, 2, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    ck_assert(r.max_abs_err < 1e-7);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_embedding_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *w = nb_ones(ctx, NB_F32, NB_SHAPE(4, 3));
    nb_tensor *bad = nb_from_data(ctx, NB_I64, NB_SHAPE(2, 2), (int64_t[]){1, 3, 7, 0});
    ck_assert_ptr_null(nb_embedding(ctx, w, bad));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "embedding: ids[1, 0] = 7 is out of range for weight (4, 3): "
                             "expected 0 <= id < 4");
    nb_ctx_clear_error(ctx);
    nb_tensor *neg = nb_from_data(ctx, NB_I64, NB_SHAPE(3), (int64_t[]){0, -1, 2});
    ck_assert_ptr_null(nb_embedding(ctx, w, neg));
    ck_assert_error_has(ctx, "embedding: ids[1] = -1 is out of range");
    nb_ctx_clear_error(ctx);

    ck_assert_ptr_null(nb_embedding(ctx, w, nb_zeros(ctx, NB_F32, NB_SHAPE(2, 3))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "embedding: ids (2, 3) are f32, expected i64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_embedding(ctx, w, nb_zeros(ctx, NB_I64, NB_SHAPE(1, 2, 1, 1, 1, 1, 1, 2))));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SIZE);
    ck_assert_error_has(ctx, "embedding: ids (1, 2, 1, 1, 1, 1, 1, 2) have 8 dims, expected at most 7");
    nb_ctx_clear_error(ctx);

    nb_tensor *ids = nb_zeros(ctx, NB_I64, NB_SHAPE(2));
    ck_assert_ptr_null(nb_embedding(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(4)), ids));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "embedding: weight (4) has 1 dims, expected 2 (num_embeddings, "
                             "embedding_dim)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_embedding(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(4, 3)), ids));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "embedding: weight (4, 3) is i64, expected f32 or f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_embedding(ctx, w, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "embedding: ids is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_embedding(ctx, NULL, ids));
    ck_assert_error_has(ctx, "embedding: weight is NULL");
    nb_ctx_free(ctx);
}
END_TEST

/* ==== layer_norm ============================================================ */

/* Rows [1, 2, 3, 4] and [-1, 0.5, 2, 7] with w, b; numbers from the
 * definition in double precision (python3). */
static const double LN_X[8] = {1, 2, 3, 4, -1, 0.5, 2, 7};
static const double LN_W[4] = {0.5, 1, -1, 2};
static const double LN_B[4] = {0.1, 0.2, 0.3, 0.4};
static const double LN_Y[8] = {
    -0.5708177099844635, -0.24721180665630899, -0.147211806656309, 3.0832708399378537,
    -0.4194819847214334, -0.34026126411029073, 0.3415585587777147, 3.6415675846617446,
};

START_TEST(test_layer_norm_basic_both_dtypes) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = from(ctx, dt, NB_SHAPE(3), (double[]){1, 2, 3});
        nb_tensor *y = nb_layer_norm(ctx, x, NULL, NULL, 1e-5);
        ck_assert(shape_is(y, "(3)"));
        ck_assert_int_eq(y->dtype, dt);
        /* 1 / sqrt(2/3 + 1e-5) = 1.2247356859083902 */
        ck_assert_tensor_near(y, ((double[]){-1.2247356859083902, 0, 1.2247356859083902}), 3,
                              1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_layer_norm_affine_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = from(ctx, dt, NB_SHAPE(2, 4), LN_X);
        nb_tensor *w = from(ctx, dt, NB_SHAPE(4), LN_W);
        nb_tensor *b = from(ctx, dt, NB_SHAPE(4), LN_B);
        ck_assert_tensor_near(nb_layer_norm(ctx, x, w, b, 1e-5), LN_Y, 8,
                              dt == NB_F32 ? 1e-6 : 1e-12);
        /* the same rows as (1, 2, 1, 4) */
        nb_tensor *x4 = from(ctx, dt, NB_SHAPE(1, 2, 1, 4), LN_X);
        nb_tensor *y4 = nb_layer_norm(ctx, x4, w, b, 1e-5);
        ck_assert(shape_is(y4, "(1, 2, 1, 4)"));
        ck_assert_tensor_near(y4, LN_Y, 8, dt == NB_F32 ? 1e-6 : 1e-12);
        /* b only: y = xhat + b; the first row's xhat is (-3, -1, 1, 3) / sqrt(5 + 4e-5) */
        nb_tensor *yb = nb_layer_norm(ctx, x, NULL, b, 1e-5);
        double s = 1 / sqrt(5 + 4e-5);
        const double want[4] = {-3 * s + 0.1, -s + 0.2, s + 0.3, 3 * s + 0.4};
        for (size_t i = 0; i < 4; i++) ck_assert_double_eq_tol(nb_get(yb, i), want[i], 1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_layer_norm_gradients_by_hand) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = leaf(ctx, dt, NB_SHAPE(2, 4), LN_X);
        nb_tensor *w = leaf(ctx, dt, NB_SHAPE(4), LN_W);
        nb_tensor *b = leaf(ctx, dt, NB_SHAPE(4), LN_B);
        nb_tensor *y = nb_layer_norm(ctx, x, w, b, 1e-5);
        nb_tensor *dy = from(ctx, dt, NB_SHAPE(2, 4), (double[]){1, -2, 0.5, 3, 0.25, 1, -1, 2});
        ck_assert_int_eq(nb_backward(ctx, y, dy), NB_OK);
        double tol = dt == NB_F32 ? 1e-5 : 1e-10;
        ck_assert_grad_near(x,
                            ((double[]){1.9677126298922665, -1.8782960277549954,
                                        -2.1466102321517857, 2.0571936300145146,
                                        0.030863318307893614, 0.08254261956444818,
                                        -0.156687990623, 0.04328205275065815}),
                            8, tol);
        ck_assert_grad_near(w,
                            ((double[]){-1.6013764123296435, 0.35416234920232725,
                                        0.2651644621058692, 7.266473844568525}),
                            4, tol);
        ck_assert_grad_near(b, ((double[]){1.25, -1, -0.5, 5}), 4, tol);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_layer_norm_node_inputs) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = leaf(ctx, NB_F64, NB_SHAPE(2, 4), LN_X);
    nb_tensor *w = leaf(ctx, NB_F64, NB_SHAPE(4), LN_W);
    nb_tensor *b = leaf(ctx, NB_F64, NB_SHAPE(4), LN_B);
    nb_tensor *full = nb_layer_norm(ctx, x, w, b, 1e-5);
    ck_assert_int_eq(nb_node_num_inputs(full->node), 3);
    ck_assert_str_eq(nb_node_name(full->node), "layer_norm");
    nb_tensor *wo = nb_layer_norm(ctx, x, w, NULL, 1e-5);
    ck_assert_int_eq(nb_node_num_inputs(wo->node), 2);
    ck_assert_ptr_eq(nb_node_input(wo->node, 1), w);
    nb_tensor *bo = nb_layer_norm(ctx, x, NULL, b, 1e-5);
    ck_assert_int_eq(nb_node_num_inputs(bo->node), 2);
    ck_assert_ptr_eq(nb_node_input(bo->node, 1), b);
    nb_tensor *none = nb_layer_norm(ctx, x, NULL, NULL, 1e-5);
    ck_assert_int_eq(nb_node_num_inputs(none->node), 1);
    /* bias only: its gradient is the column sum of dy, x's the plain normalised rule */
    ck_assert_int_eq(nb_backward(ctx, bo, nb_ones(ctx, NB_F64, NB_SHAPE(2, 4))), NB_OK);
    ck_assert_grad_near(b, ((double[]){2, 2, 2, 2}), 4, 1e-12);
    ck_assert_grad_near(x, ((double[]){0, 0, 0, 0, 0, 0, 0, 0}), 8, 1e-9);
    ck_assert_double_eq(nb_grad_get(w, 0), 0.0);
    nb_ctx_free(ctx);
}
END_TEST

/* Random (2, 3, 7) rows against the definition computed in double. */
START_TEST(test_layer_norm_matches_reference) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = rand_leaf(ctx, dt, NB_SHAPE(2, 3, 7), 51);
        nb_tensor *w = rand_leaf(ctx, dt, NB_SHAPE(7), 52);
        nb_tensor *b = rand_leaf(ctx, dt, NB_SHAPE(7), 53);
        nb_tensor *y = nb_layer_norm(ctx, x, w, b, 1e-3);
        ck_assert(shape_is(y, "(2, 3, 7)"));
        for (size_t r = 0; r < 6; r++) {
            double m = 0, v = 0;
            for (size_t d = 0; d < 7; d++) m += nb_get(x, r * 7 + d) / 7;
            for (size_t d = 0; d < 7; d++) v += pow(nb_get(x, r * 7 + d) - m, 2) / 7;
            for (size_t d = 0; d < 7; d++) {
                double want = (nb_get(x, r * 7 + d) - m) / sqrt(v + 1e-3) * nb_get(w, d) +
                              nb_get(b, d);
                ck_assert_double_eq_tol(nb_get(y, r * 7 + d), want, dt == NB_F32 ? 1e-6 : 1e-13);
            }
        }
        nb_ctx_free(ctx);
    }
}
END_TEST

/* A constant row has variance 0: eps keeps it finite, xhat is 0, y = b. */
START_TEST(test_layer_norm_constant_row) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = leaf(ctx, NB_F32, NB_SHAPE(1, 4), ((double[]){2, 2, 2, 2}));
    nb_tensor *w = leaf(ctx, NB_F32, NB_SHAPE(4), LN_W);
    nb_tensor *b = leaf(ctx, NB_F32, NB_SHAPE(4), LN_B);
    nb_tensor *y = nb_layer_norm(ctx, x, w, b, 1e-5);
    ck_assert_tensor_near(y, LN_B, 4, 1e-7);
    nb_set_detect_anomaly(ctx, true);
    nb_tensor *dy = from(ctx, NB_F32, NB_SHAPE(1, 4), (double[]){1, 2, 3, 4});
    ck_assert_int_eq(nb_backward(ctx, y, dy), NB_OK);
    /* dx = rstd * (dy*w - mean(dy*w)) with rstd = 1/sqrt(1e-5); dy*w = (0.5, 2, -3, 8) */
    double rs = 1 / sqrt(1e-5);
    ck_assert_grad_near(x, ((double[]){rs * -1.375, rs * 0.125, rs * -4.875, rs * 6.125}), 4,
                        1e-2);
    nb_ctx_free(ctx);
}
END_TEST

typedef struct ln_case {
    bool w, b;
} ln_case;

static nb_tensor *f_layer_norm(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    const ln_case *c = user;
    nb_tensor *w = c->w ? in[1] : NULL;
    nb_tensor *b = c->b ? in[c->w ? 2 : 1] : NULL;
    return nb_layer_norm(ctx, in[0], w, b, 1e-5);
}

START_TEST(test_layer_norm_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = rand_leaf(ctx, NB_F64, NB_SHAPE(2, 3, 5), 41);
    nb_tensor *w = rand_leaf(ctx, NB_F64, NB_SHAPE(5), 42);
    nb_tensor *b = rand_leaf(ctx, NB_F64, NB_SHAPE(5), 43);
    static const ln_case cases[4] = {{true, true}, {true, false}, {false, true}, {false, false}};
    for (int i = 0; i < 4; i++) {
        nb_tensor *in[3];
        int n = 0;
        in[n++] = x;
        if (cases[i].w) in[n++] = w;
        if (cases[i].b) in[n++] = b;
        nb_gradcheck_result r;
        ck_assert_int_eq(nb_gradcheck(ctx, f_layer_norm, (void *)&cases[i], n, in, NULL, &r), NB_OK);
        ck_assert_msg(r.passed, "case %d: %s", i, r.message);
    }
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_layer_norm_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    nb_tensor *w = nb_ones(ctx, NB_F32, NB_SHAPE(3));
    ck_assert_ptr_null(nb_layer_norm(ctx, x, nb_ones(ctx, NB_F32, NB_SHAPE(4)), NULL, 1e-5));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "layer_norm: weight (4) does not fit x (2, 3): expected shape (3)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, x, w, nb_ones(ctx, NB_F32, NB_SHAPE(1, 3)), 1e-5));
    ck_assert_error_has(ctx, "layer_norm: bias (1, 3) does not fit x (2, 3): expected shape (3)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, x, w, NULL, 0.0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "layer_norm: eps = 0, expected a finite number > 0");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, x, w, NULL, -1e-5));
    ck_assert_error_has(ctx, "layer_norm: eps = -1e-05, expected");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, x, w, NULL, NAN));
    ck_assert_error_has(ctx, "layer_norm: eps = nan, expected");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, x, w, NULL, INFINITY));
    ck_assert_error_has(ctx, "layer_norm: eps = inf, expected");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, x, nb_ones(ctx, NB_F64, NB_SHAPE(3)), NULL, 1e-5));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "layer_norm: mixed dtypes: x (2, 3) is f32 but weight (3) is f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, x, NULL, nb_ones(ctx, NB_F64, NB_SHAPE(3)), 1e-5));
    ck_assert_error_has(ctx, "layer_norm: mixed dtypes: x (2, 3) is f32 but bias (3) is f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, NULL, w, NULL, 1e-5));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "layer_norm: x is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, nb_scalar(ctx, NB_F32, 1), NULL, NULL, 1e-5));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "layer_norm: x () has 0 dims, expected at least 1");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_layer_norm(ctx, nb_zeros(ctx, NB_BOOL, NB_SHAPE(2, 3)), NULL, NULL,
                                     1e-5));
    ck_assert_error_has(ctx, "layer_norm: x (2, 3) is bool, expected f32 or f64");
    ck_assert_ptr_null(nb_layer_norm(NULL, x, w, NULL, 1e-5));
    nb_ctx_free(ctx);
}
END_TEST

/* ==== rms_norm ============================================================== */

/* LN_X's rows with LN_W: y and, for dy below, the gradients, from PyTorch
 * 2.4's definition in float64 (tools/ref/torchref.py's rms_norm, autograd). */
static const double RMS_Y[8] = {
    0.1825740641190532,   0.7302962564762128,  -1.0954443847143192, 2.921185025904851,
    -0.13576879660742278, 0.13576879660742278, -0.5430751864296911, 3.8015263050078376,
};
static const double RMS_DY[8] = {1, -2, 0.5, 3, 0.25, 1, -1, 2};

START_TEST(test_rms_norm_values_and_gradients) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = leaf(ctx, dt, NB_SHAPE(2, 4), LN_X);
        nb_tensor *w = leaf(ctx, dt, NB_SHAPE(4), LN_W);
        nb_tensor *y = nb_rms_norm(ctx, x, w, 1e-5);
        ck_assert(shape_is(y, "(2, 4)"));
        ck_assert_int_eq(y->dtype, dt);
        double tol = dt == NB_F32 ? 1e-6 : 1e-14;
        ck_assert_tensor_near(y, RMS_Y, 8, tol);
        ck_assert_int_eq(nb_backward(ctx, y, from(ctx, dt, NB_SHAPE(2, 4), RMS_DY)), NB_OK);
        ck_assert_grad_near(x,
                            ((double[]){-0.04868610875151702, -1.1928166022173532,
                                        -0.8763545827307638, 1.2658480779463575,
                                        0.1859781127456693, 0.19551963641793874,
                                        -0.032534233972781657, 0.021898977702687006}),
                            8, tol);
        ck_assert_grad_near(w,
                            ((double[]){0.297263729934395, -1.3248237163450027,
                                        0.004647005927468473, 8.183303843865115}),
                            4, tol);
        /* without weight: the first row is x / sqrt(7.5 + 1e-5) */
        nb_tensor *yn = nb_rms_norm(ctx, x, NULL, 1e-5);
        double rs = 1 / sqrt(7.5 + 1e-5);
        for (size_t i = 0; i < 4; i++)
            ck_assert_double_eq_tol(nb_get(yn, i), LN_X[i] * rs, tol);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* The node's inputs follow the weight; without one, the gradient of
 * sum(y) is rstd (1 - xhat mean(xhat)) per element, and w is x itself
 * (a 1-D x normalising its own row) matches the composed form. */
START_TEST(test_rms_norm_node_inputs_and_alias) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = leaf(ctx, NB_F64, NB_SHAPE(2, 4), LN_X);
    nb_tensor *w = leaf(ctx, NB_F64, NB_SHAPE(4), LN_W);
    nb_tensor *full = nb_rms_norm(ctx, x, w, 1e-5);
    ck_assert_int_eq(nb_node_num_inputs(full->node), 2);
    ck_assert_str_eq(nb_node_name(full->node), "rms_norm");
    ck_assert_ptr_eq(nb_node_input(full->node, 1), w);
    nb_tensor *plain = nb_rms_norm(ctx, x, NULL, 1e-5);
    ck_assert_int_eq(nb_node_num_inputs(plain->node), 1);
    ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, plain), NULL), NB_OK);
    double rs = 1 / sqrt(7.5 + 1e-5), m = 0;
    for (size_t d = 0; d < 4; d++) m += LN_X[d] * rs / 4;
    for (size_t d = 0; d < 4; d++)
        ck_assert_double_eq_tol(nb_grad_get(x, d), rs * (1 - LN_X[d] * rs * m), 1e-14);
    ck_assert_double_eq(nb_grad_get(w, 0), 0.0);
    /* x as its own weight, in both dtypes (float32 takes the fresh-buffer path) */
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        const double v0[4] = {0.5, -1, 2, 0.25};
        nb_tensor *v = leaf(ctx, dt, NB_SHAPE(4), v0), *u = leaf(ctx, dt, NB_SHAPE(4), v0);
        nb_tensor *dy = from(ctx, dt, NB_SHAPE(4), RMS_DY);
        ck_assert_int_eq(nb_backward(ctx, nb_rms_norm(ctx, v, v, 1e-3), dy), NB_OK);
        nb_tensor *ms = nb_mean_dim(ctx, nb_mul(ctx, u, u), -1, true);
        nb_tensor *r = nb_pow(ctx, nb_add_scalar(ctx, ms, 1e-3), -0.5);
        ck_assert_int_eq(nb_backward(ctx, nb_mul(ctx, nb_mul(ctx, u, r), u), dy), NB_OK);
        for (size_t d = 0; d < 4; d++)
            ck_assert_double_eq_tol(nb_grad_get(v, d), nb_grad_get(u, d),
                                    dt == NB_F32 ? 1e-5 : 1e-14);
    }
    nb_ctx_free(ctx);
}
END_TEST

/* Random rows against the definition in double: (3, 5, 37) and, in
 * float32, rows longer than the float path's buffers (5000, the double
 * path); a zero row gives 0 (rstd = 1/sqrt(eps)), with finite gradients. */
START_TEST(test_rms_norm_matches_reference) {
    static const int64_t dims[2][2] = {{15, 37}, {2, 5000}};
    for (int dt = NB_F32; dt <= NB_F64; dt++)
        for (int k = 0; k < 2; k++) {
            nb_ctx *ctx = nb_ctx_new(0);
            int64_t R = dims[k][0], D = dims[k][1];
            nb_tensor *x = rand_leaf(ctx, dt, NB_SHAPE(R, D), 61);
            nb_tensor *w = rand_leaf(ctx, dt, NB_SHAPE(D), 62);
            for (int64_t d = 0; d < D; d++) nb_set(x, (size_t)d, 0.0); /* row 0: zeros */
            nb_tensor *y = nb_rms_norm(ctx, x, w, 1e-6);
            for (size_t r = 0; r < (size_t)R; r++) {
                double s = 0;
                for (size_t d = 0; d < (size_t)D; d++) s += pow(nb_get(x, r * D + d), 2);
                double rs = 1 / sqrt(s / (double)D + 1e-6);
                for (size_t d = 0; d < (size_t)D; d++)
                    ck_assert_double_eq_tol(nb_get(y, r * D + d),
                                            nb_get(x, r * D + d) * rs * nb_get(w, d),
                                            dt == NB_F32 ? 2e-6 : 1e-13);
            }
            ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, y), NULL), NB_OK);
            /* the zero row's gradient is w / sqrt(eps) */
            ck_assert_double_eq_tol(nb_grad_get(x, 3), nb_get(w, 3) * 1e3,
                                    dt == NB_F32 ? 1e-3 : 1e-9);
            nb_ctx_free(ctx);
        }
}
END_TEST

/* Rows split over two threads, dw's columns too: the same bits as one. */
START_TEST(test_rms_norm_threads_same_bits) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x[2], *w[2], *y[2];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(nb_set_num_threads(k + 1), k + 1);
        x[k] = rand_leaf(ctx, NB_F32, NB_SHAPE(256, 192), 71);
        w[k] = rand_leaf(ctx, NB_F32, NB_SHAPE(192), 72);
        y[k] = nb_rms_norm(ctx, x[k], w[k], 1e-5);
        nb_tensor *dy = nb_uniform(ctx, NB_F32, NB_SHAPE(256, 192), -1, 1, &(nb_pcg32){0});
        ck_assert_int_eq(nb_backward(ctx, y[k], dy), NB_OK);
    }
    nb_set_num_threads(1);
    size_t n = x[0]->numel;
    ck_assert_mem_eq(y[0]->data, y[1]->data, n * sizeof(float));
    ck_assert_mem_eq(x[0]->grad, x[1]->grad, n * sizeof(float));
    ck_assert_mem_eq(w[0]->grad, w[1]->grad, 192 * sizeof(float));
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_rms_norm(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    return nb_rms_norm(ctx, in[0], user ? in[1] : NULL, 1e-4);
}

START_TEST(test_rms_norm_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[2] = {rand_leaf(ctx, NB_F64, NB_SHAPE(3, 2, 6), 81),
                        rand_leaf(ctx, NB_F64, NB_SHAPE(6), 82)};
    for (int with_w = 0; with_w < 2; with_w++) {
        nb_gradcheck_result r;
        void *u = with_w ? ctx : NULL; /* non-NULL: in[1] is the weight */
        ck_assert_int_eq(nb_gradcheck(ctx, f_rms_norm, u, 1 + with_w, in, NULL, &r), NB_OK);
        ck_assert_msg(r.passed, "weight %d: %s", with_w, r.message);
        ck_assert_int_eq(nb_gradgradcheck(ctx, f_rms_norm, u, 1 + with_w, in, NULL, &r), NB_OK);
        ck_assert_msg(r.passed, "second order, weight %d: %s", with_w, r.message);
    }
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_rms_norm_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_rms_norm(ctx, x, nb_ones(ctx, NB_F32, NB_SHAPE(4)), 1e-5));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "rms_norm: weight (4) does not fit x (2, 3): expected shape (3)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_rms_norm(ctx, x, NULL, 0.0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "rms_norm: eps = 0, expected a finite number > 0");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_rms_norm(ctx, x, NULL, INFINITY));
    ck_assert_error_has(ctx, "rms_norm: eps = inf, expected");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_rms_norm(ctx, x, nb_ones(ctx, NB_F64, NB_SHAPE(3)), 1e-5));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "rms_norm: mixed dtypes: x (2, 3) is f32 but weight (3) is f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_rms_norm(ctx, NULL, NULL, 1e-5));
    ck_assert_error_has(ctx, "rms_norm: x is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_rms_norm(ctx, nb_scalar(ctx, NB_F32, 1), NULL, 1e-5));
    ck_assert_error_has(ctx, "rms_norm: x () has 0 dims, expected at least 1");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_rms_norm(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(2, 3)), NULL, 1e-5));
    ck_assert_error_has(ctx, "rms_norm: x (2, 3) is i64, expected f32 or f64");
    nb_ctx_free(ctx);
}
END_TEST

/* ==== shared behaviour ====================================================== */

START_TEST(test_nn_ops_sticky_error) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    nb_tensor *w = nb_ones(ctx, NB_F32, NB_SHAPE(4, 3));
    nb_tensor *ids = nb_zeros(ctx, NB_I64, NB_SHAPE(2));
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_ctx_fail(ctx, NB_ERR_SHAPE, "earlier: failure");
    ck_assert_ptr_null(nb_linear(ctx, x, w, NULL));
    ck_assert_ptr_null(nb_dropout(ctx, x, 0.0, false, &rng));
    ck_assert_ptr_null(nb_embedding(ctx, w, ids));
    ck_assert_ptr_null(nb_layer_norm(ctx, x, NULL, NULL, 1e-5));
    ck_assert_str_eq(nb_ctx_error(ctx), "earlier: failure");
    nb_ctx_free(ctx);
}
END_TEST

/* With grad disabled the ops compute values and record nothing. */
START_TEST(test_nn_ops_no_grad) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = leaf(ctx, NB_F64, NB_SHAPE(2, 4), LN_X);
    nb_tensor *w =
        leaf(ctx, NB_F64, NB_SHAPE(3, 4), (double[]){1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1});
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_set_grad_enabled(ctx, false);
    nb_tensor *y = nb_linear(ctx, x, w, NULL);
    ck_assert_tensor_near(y, ((double[]){1, 2, 4, -1, 0.5, 7}), 6, 0);
    ck_assert_ptr_nonnull(nb_layer_norm(ctx, x, NULL, NULL, 1e-5));
    ck_assert_ptr_nonnull(nb_dropout(ctx, x, 0.5, true, &rng));
    ck_assert_ptr_nonnull(
        nb_embedding(ctx, w, nb_from_data(ctx, NB_I64, NB_SHAPE(1), (int64_t[]){2})));
    ck_assert_int_eq(nb_tape_len(ctx), 0);
    ck_assert(!y->requires_grad);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_nn_ops(void) {
    Suite *s = suite_create("nn_ops");
    TCase *tc = tcase_create("linear");
    tcase_add_test(tc, test_linear_values_2d_both_dtypes);
    tcase_add_test(tc, test_linear_gradients_by_hand);
    tcase_add_test(tc, test_linear_nd_matches_reference);
    tcase_add_test(tc, test_linear_backward_matches_reference);
    tcase_add_test(tc, test_linear_gradcheck);
    tcase_add_test(tc, test_linear_steady_state_no_malloc);
    tcase_add_test(tc, test_linear_grad_only_where_needed);
    tcase_add_test(tc, test_linear_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("dropout");
    tcase_add_test(tc, test_dropout_identity_cases);
    tcase_add_test(tc, test_dropout_p1_zeros_with_zero_grad);
    tcase_add_test(tc, test_dropout_half_doubles_survivors);
    tcase_add_test(tc, test_dropout_mask_rule_and_seed);
    tcase_add_test(tc, test_dropout_backward_reuses_mask);
    tcase_add_test(tc, test_dropout_gradcheck);
    tcase_add_test(tc, test_dropout_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("embedding");
    tcase_add_test(tc, test_embedding_values_both_dtypes);
    tcase_add_test(tc, test_embedding_scalar_and_3d_ids);
    tcase_add_test(tc, test_embedding_repeated_ids_accumulate);
    tcase_add_test(tc, test_embedding_gradcheck);
    tcase_add_test(tc, test_embedding_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("layer_norm");
    tcase_add_test(tc, test_layer_norm_basic_both_dtypes);
    tcase_add_test(tc, test_layer_norm_affine_values);
    tcase_add_test(tc, test_layer_norm_gradients_by_hand);
    tcase_add_test(tc, test_layer_norm_node_inputs);
    tcase_add_test(tc, test_layer_norm_matches_reference);
    tcase_add_test(tc, test_layer_norm_constant_row);
    tcase_add_test(tc, test_layer_norm_gradcheck);
    tcase_add_test(tc, test_layer_norm_errors);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);

    tc = tcase_create("rms_norm");
    tcase_add_test(tc, test_rms_norm_values_and_gradients);
    tcase_add_test(tc, test_rms_norm_node_inputs_and_alias);
    tcase_add_test(tc, test_rms_norm_matches_reference);
    tcase_add_test(tc, test_rms_norm_threads_same_bits);
    tcase_add_test(tc, test_rms_norm_gradcheck);
    tcase_add_test(tc, test_rms_norm_errors);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);

    tc = tcase_create("shared");
    tcase_add_test(tc, test_nn_ops_sticky_error);
    tcase_add_test(tc, test_nn_ops_no_grad);
    suite_add_tcase(s, tc);
    return s;
}
