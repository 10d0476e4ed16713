/* check_binary.c - add, sub, mul, div: values, broadcasting, gradients. */
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

Suite *suite_binary(void) {
    Suite *s = suite_create("binary");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_binary_values_both_dtypes);
    tcase_add_test(tc, test_broadcast_row_and_column);
    tcase_add_test(tc, test_broadcast_4d_batch);
    tcase_add_test(tc, test_mul_div_gradients);
    tcase_add_test(tc, test_binary_errors);
    suite_add_tcase(s, tc);
    return s;
}
