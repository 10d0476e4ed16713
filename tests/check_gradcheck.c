/* check_gradcheck.c - the checker passes right gradients and catches a
 * deliberately wrong backward, naming the worst element. */
#include "check_nabla.h"

static nb_tensor *f_mul_div(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_div(ctx, nb_mul(ctx, in[0], in[1]), in[1 + 1]);
}

START_TEST(test_gradcheck_passes_broadcast_ops) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[3] = {
        nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 3), (double[]){1, 2, 3, -1, 0.5, 2}),
        nb_from_doubles(ctx, NB_F32, NB_SHAPE(3), (double[]){0.3, -0.7, 1.1}),
        nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 1), (double[]){1.5, -2.5}),
    };
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(f_mul_div, NULL, 3, in, NULL, &r), NB_OK);
    ck_assert(r.passed);
    ck_assert(r.max_abs_err < 1e-7);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = true;
    ck_assert_int_eq(nb_gradcheck(f_mul_div, NULL, 3, in, &o, &r), NB_OK);
    ck_assert(r.passed);
    nb_ctx_free(ctx);
}
END_TEST

/* square with a wrong rule: 3x instead of 2x */
static void bad_square_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = nb_node_input(n, 0), *y = nb_node_output(n);
    double *gx = nb_grad_buffer(ctx, x);
    for (size_t i = 0; i < x->numel; i++)
        gx[i] += ((double *)y->grad)[i] * 3 * ((double *)x->data)[i];
}

static nb_tensor *f_bad_square(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *x = in[0];
    nb_tensor *y = nb_empty(ctx, NB_F64, x->ndim, x->shape);
    if (!y) return NULL;
    for (size_t i = 0; i < x->numel; i++)
        ((double *)y->data)[i] = ((double *)x->data)[i] * ((double *)x->data)[i];
    nb_record(ctx, "bad_square", y, 1, &x, bad_square_backward, NULL);
    return nb_add(ctx, y, in[1]);
}

START_TEST(test_gradcheck_catches_wrong_backward) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[2] = {
        nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){0.5, -2, 1})),
        nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){1, 1, 1}),
    };
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(f_bad_square, NULL, 2, in, NULL, &r), NB_ERR_VALUE);
    ck_assert(!r.passed);
    /* worst entry: x = -2, analytic 3x = -6, numeric 2x = -4 */
    ck_assert_int_eq(r.worst_input, 0);
    ck_assert_uint_eq(r.worst_index, 1);
    ck_assert_uint_eq(r.worst_output, 1);
    ck_assert_double_eq_tol(r.analytic, -6.0, 1e-9);
    ck_assert_double_eq_tol(r.numeric, -4.0, 1e-6);
    ck_assert_ptr_nonnull(strstr(r.message, "d out[1] / d input 1 [1]: analytic -6"));
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = true;
    ck_assert_int_eq(nb_gradcheck(f_bad_square, NULL, 2, in, &o, &r), NB_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(r.message, "v^T J u"));
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_shape_error(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_add(ctx, in[0], in[1]);
}

START_TEST(test_gradcheck_reports_function_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[2] = {nb_ones(ctx, NB_F64, NB_SHAPE(2)), nb_ones(ctx, NB_F64, NB_SHAPE(3))};
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(f_shape_error, NULL, 2, in, NULL, &r), NB_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(r.message, "add: shapes (2) and (3) do not broadcast"));
    ck_assert_int_eq(nb_gradcheck(NULL, NULL, 2, in, NULL, &r), NB_ERR_NULL);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_gradcheck(void) {
    Suite *s = suite_create("gradcheck");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_gradcheck_passes_broadcast_ops);
    tcase_add_test(tc, test_gradcheck_catches_wrong_backward);
    tcase_add_test(tc, test_gradcheck_reports_function_errors);
    suite_add_tcase(s, tc);
    return s;
}
