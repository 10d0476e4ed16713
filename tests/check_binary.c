/* check_binary.c - add, sub, mul, div: values, broadcasting, gradients. */
#include <math.h>

#include "check_nabla.h"

static nb_tensor *t_of(nb_ctx *ctx, nb_dtype dt, int nd, const int64_t *sh, const double *v) {
    return nb_requires_grad(nb_from_doubles(ctx, dt, nd, sh, v));
}

START_TEST(test_binary_values_both_dtypes) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_from_doubles(ctx, dt, NB_SHAPE(3), (double[]){1, 2, 3});
        nb_tensor *b = nb_from_doubles(ctx, dt, NB_SHAPE(3), (double[]){4, -5, 0.5});
        ck_assert_tensor_near(nb_add(ctx, a, b), ((double[]){5, -3, 3.5}), 3, 1e-6);
        ck_assert_tensor_near(nb_sub(ctx, a, b), ((double[]){-3, 7, 2.5}), 3, 1e-6);
        ck_assert_tensor_near(nb_mul(ctx, a, b), ((double[]){4, -10, 1.5}), 3, 1e-6);
        ck_assert_tensor_near(nb_div(ctx, a, b), ((double[]){0.25, -0.4, 6}), 3, 1e-6);
        ck_assert_int_eq(nb_add(ctx, a, b)->dtype, dt);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_broadcast_row_and_column) {
    nb_ctx *ctx = nb_ctx_new(0);
    /* (2,1) + (3) -> (2,3) */
    nb_tensor *a = t_of(ctx, NB_F64, NB_SHAPE(2, 1), (double[]){10, 20});
    nb_tensor *b = t_of(ctx, NB_F64, NB_SHAPE(3), (double[]){1, 2, 3});
    nb_tensor *c = nb_mul(ctx, a, b);
    ck_assert_int_eq(c->ndim, 2);
    ck_assert_int_eq(c->shape[0], 2);
    ck_assert_int_eq(c->shape[1], 3);
    ck_assert_tensor_near(c, ((double[]){10, 20, 30, 20, 40, 60}), 6, 1e-12);
    ck_assert_int_eq(nb_backward(ctx, c, nb_ones(ctx, NB_F64, NB_SHAPE(2, 3))), NB_OK);
    /* da = sum over the broadcast dim of b; db = sum of a */
    ck_assert_grad_near(a, ((double[]){6, 6}), 2, 1e-12);
    ck_assert_grad_near(b, ((double[]){30, 30, 30}), 3, 1e-12);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_broadcast_4d_batch) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2, 1, 3, 1)));
    nb_tensor *b = nb_requires_grad(nb_full(ctx, NB_F32, NB_SHAPE(4, 1, 5), 2.0));
    nb_tensor *c = nb_sub(ctx, a, b);
    char s[64];
    ck_assert_str_eq(nb_shape_str(c, s, sizeof s), "(2, 4, 3, 5)");
    ck_assert_double_eq_tol(nb_get(c, 119), -1.0, 1e-6);
    ck_assert_int_eq(nb_backward(ctx, c, nb_ones(ctx, NB_F32, NB_SHAPE(2, 4, 3, 5))), NB_OK);
    ck_assert_double_eq_tol(nb_grad_get(a, 0), 20.0, 1e-5);  /* 4*5 per element */
    ck_assert_double_eq_tol(nb_grad_get(b, 0), -6.0, 1e-5);  /* -(2*3) */
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_mul_div_gradients) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = t_of(ctx, NB_F64, NB_SHAPE(2), (double[]){3, -1});
    nb_tensor *b = t_of(ctx, NB_F64, NB_SHAPE(2), (double[]){2, 4});
    nb_tensor *q = nb_div(ctx, a, b);
    ck_assert_int_eq(nb_backward(ctx, q, nb_ones(ctx, NB_F64, NB_SHAPE(2))), NB_OK);
    ck_assert_grad_near(a, ((double[]){0.5, 0.25}), 2, 1e-12);
    ck_assert_grad_near(b, ((double[]){-0.75, 1.0 / 16}), 2, 1e-12);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_binary_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    nb_tensor *d = nb_ones(ctx, NB_F64, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_add(ctx, a, d));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "add: mixed dtypes: input 1 (2, 3) is f32 but input 2 (2, 3) is f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_mul(ctx, a, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "mul: input 2 is NULL");
    nb_ctx_clear_error(ctx);
    nb_tensor *ids = nb_zeros(ctx, NB_I64, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_div(ctx, ids, a));
    ck_assert_error_has(ctx, "div: input 1 (2, 3) is i64, expected f32 or f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_sub(ctx, a, nb_ones(ctx, NB_F32, NB_SHAPE(3, 2))));
    ck_assert_error_has(ctx, "sub: shapes (2, 3) and (3, 2) do not broadcast");
    ck_assert_ptr_null(nb_add(NULL, a, a));
    nb_ctx_free(ctx);
}
END_TEST

/* The float32 fast paths of mul (same shape; a row scale (R, 1) against
 * (R, D), either way round) split rows among the threads and write a
 * fresh gradient rather than add to a cleared one: z = x s + x s2 sends
 * x two gradients (the second adds to the first), at 1 and 2 threads
 * (recorded in the other order), against the same sums in double. */
START_TEST(test_mul_fast_paths_f32) {
    enum { R = 64, D = 300 }; /* 19200 elements: split at 2 threads */
    static double xv[R * D], sv[R * D], cv[R], gx[R * D], gs[R * D], gc[R];
    for (int i = 0; i < R * D; i++) xv[i] = sin(0.37 * i), sv[i] = cos(0.11 * i);
    for (int r = 0; r < R; r++) cv[r] = 0.5 + 0.01 * r;
    for (int threads = 1; threads <= 2; threads++) {
        nb_set_num_threads(threads);
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = t_of(ctx, NB_F32, NB_SHAPE(R, D), xv);
        nb_tensor *s = t_of(ctx, NB_F32, NB_SHAPE(R, D), sv);
        nb_tensor *c = t_of(ctx, NB_F32, NB_SHAPE(R, 1), cv);
        /* recorded in both orders, so each path both writes x's gradient
         * fresh and adds to it */
        nb_tensor *p = threads == 1 ? nb_mul(ctx, x, s) : nb_mul(ctx, c, x);
        nb_tensor *q = threads == 1 ? nb_mul(ctx, c, x) : nb_mul(ctx, x, s);
        nb_tensor *z = nb_add(ctx, p, q); /* x s + c x */
        ck_assert_ptr_nonnull(z);
        for (int i = 0; i < R * D; i += 97)
            ck_assert_double_eq_tol(nb_get(z, i), xv[i] * sv[i] + cv[i / D] * xv[i], 1e-5);
        nb_tensor *g = nb_from_doubles(ctx, NB_F32, NB_SHAPE(R, D), sv); /* dout = s */
        ck_assert_int_eq(nb_backward(ctx, z, g), NB_OK);
        for (int r = 0; r < R; r++) {
            gc[r] = 0;
            for (int d = 0; d < D; d++) {
                int i = r * D + d;
                gx[i] = sv[i] * sv[i] + sv[i] * cv[r], gs[i] = sv[i] * xv[i];
                gc[r] += sv[i] * xv[i];
            }
        }
        for (int i = 0; i < R * D; i += 89) {
            ck_assert_double_eq_tol(nb_grad_get(x, i), gx[i], 1e-5);
            ck_assert_double_eq_tol(nb_grad_get(s, i), gs[i], 1e-5);
        }
        for (int r = 0; r < R; r++) ck_assert_double_eq_tol(nb_grad_get(c, r), gc[r], 1e-3);
        nb_ctx_free(ctx);
    }
    nb_set_num_threads(1);
}
END_TEST

Suite *suite_binary(void) {
    Suite *s = suite_create("binary");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_binary_values_both_dtypes);
    tcase_add_test(tc, test_broadcast_row_and_column);
    tcase_add_test(tc, test_broadcast_4d_batch);
    tcase_add_test(tc, test_mul_div_gradients);
    tcase_add_test(tc, test_binary_errors);
    tcase_add_test(tc, test_mul_fast_paths_f32);
    suite_add_tcase(s, tc);
    return s;
}
