/* check_tensor.c - creation, validation, element access and printing. */
#include "check_nabla.h"

START_TEST(test_create_shapes_and_fill) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *z = nb_zeros(ctx, NB_F32, NB_SHAPE(2, 3, 4, 5));
    ck_assert_int_eq(z->ndim, 4);
    ck_assert_uint_eq(z->numel, 120);
    ck_assert_double_eq(nb_get(z, 119), 0.0);
    nb_tensor *o = nb_ones(ctx, NB_F64, NB_SHAPE(3));
    ck_assert_double_eq(nb_get(o, 2), 1.0);
    nb_tensor *f = nb_full(ctx, NB_F64, NB_SHAPE(2, 2), -2.5);
    ck_assert_double_eq(nb_get(f, 3), -2.5);
    nb_tensor *s = nb_scalar(ctx, NB_F32, 4.0);
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_double_eq(nb_item(s), 4.0);
    ck_assert(isnan(nb_item(o)));
    float raw[4] = {1, 2, 3, 4};
    nb_tensor *d = nb_from_data(ctx, NB_F32, NB_SHAPE(2, 2), raw);
    raw[0] = 9; /* copied, not aliased */
    ck_assert_double_eq(nb_get(d, 0), 1.0);
    ck_assert_ptr_eq(d->owner, ctx);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    nb_ctx_free(ctx);
}
END_TEST

/* nb_empty is uninitialised, like torch.empty; a debug build fills it with
 * 0xFF bytes (NaN, -1). nb_zeros, and dropout with p = 1, give zeros even
 * where the arena last held other values. */
START_TEST(test_empty_uninitialised_zeros_zeroed) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_tensor *e = nb_empty(ctx, NB_F32, NB_SHAPE(64));
    nb_tensor *i = nb_empty(ctx, NB_I64, NB_SHAPE(8));
    ck_assert_ptr_nonnull(e);
    ck_assert_ptr_nonnull(i);
#ifdef NB_DEBUG
    for (size_t k = 0; k < 64; k++) ck_assert(isnan(nb_get(e, k)));
    for (size_t k = 0; k < 8; k++) ck_assert_double_eq(nb_get(i, k), -1);
#endif
    memset(e->data, 0x7f, 64 * sizeof(float)); /* leave the arena dirty */
    memset(i->data, 0x7f, 8 * sizeof(int64_t));
    for (int round = 0; round < 2; round++) {
        nb_ctx_reset(ctx);
        nb_tensor *z = nb_zeros(ctx, NB_F32, NB_SHAPE(64));
        nb_tensor *zi = nb_zeros(ctx, NB_I64, NB_SHAPE(8));
        nb_tensor *d = nb_dropout(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(64)), 1.0, true, &rng);
        ck_assert_ptr_nonnull(d);
        for (size_t k = 0; k < 64; k++) ck_assert_double_eq(nb_get(z, k) + nb_get(d, k), 0);
        for (size_t k = 0; k < 8; k++) ck_assert_double_eq(nb_get(zi, k), 0);
        memset(z->data, 0x7f, 64 * sizeof(float));
    }
    ck_assert_ptr_null(nb_ctx_error(ctx));
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_uniform_and_normal_from_pcg) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 r1, r2;
    nb_pcg32_seed(&r1, 42, 54);
    nb_pcg32_seed(&r2, 42, 54);
    nb_tensor *u = nb_uniform(ctx, NB_F32, NB_SHAPE(1000), -2.0, 3.0, &r1);
    double mean = 0;
    for (size_t i = 0; i < u->numel; i++) {
        double v = nb_get(u, i);
        ck_assert(v >= -2.0 && v < 3.0);
        mean += v / 1000;
    }
    ck_assert_double_eq_tol(mean, 0.5, 0.15);
    /* element 0 is the first draw, scaled */
    ck_assert_double_eq_tol(nb_get(u, 0), -2.0 + 5.0 * (0xa15c02b7u >> 8) * 0x1p-24, 1e-6);
    nb_tensor *n = nb_normal(ctx, NB_F64, NB_SHAPE(4000), 1.0, 2.0, &r2);
    double m = 0, v2 = 0;
    for (size_t i = 0; i < n->numel; i++) m += nb_get(n, i) / 4000;
    for (size_t i = 0; i < n->numel; i++) v2 += pow(nb_get(n, i) - m, 2) / 4000;
    ck_assert_double_eq_tol(m, 1.0, 0.1);
    ck_assert_double_eq_tol(sqrt(v2), 2.0, 0.1);
    ck_assert_ptr_null(nb_uniform(ctx, NB_I64, NB_SHAPE(2), 0, 1, &r1));
    ck_assert_error_has(ctx, "uniform: dtype i64");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_bad_shapes_are_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_ptr_null(nb_zeros(ctx, NB_F32, NB_SHAPE(2, -2)));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SIZE);
    ck_assert_error_has(ctx, "zeros: dim 1 has size -2, expected >= 0");
    nb_ctx_clear_error(ctx);
    nb_tensor *empty = nb_zeros(ctx, NB_F32, NB_SHAPE(2, 0)); /* as PyTorch: no elements */
    ck_assert_ptr_nonnull(empty);
    ck_assert_uint_eq(empty->numel, 0);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_ones(ctx, NB_F32, NB_SHAPE(-3)));
    ck_assert_error_has(ctx, "size -3");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_zeros(ctx, NB_F64, NB_SHAPE(1, 2, 3, 4, 5, 1, 1, 1, 2)));
    ck_assert_error_has(ctx, "9 dims requested, expected 0..8");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_zeros(ctx, NB_F64, NB_SHAPE(INT64_MAX / 2, INT64_MAX / 2)));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SIZE);
    ck_assert_error_has(ctx, "overflows size_t");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_zeros(ctx, NB_F64, 2, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_from_data(ctx, NB_F32, NB_SHAPE(2), NULL));
    ck_assert_error_has(ctx, "from_data: data is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_zeros(NULL, NB_F32, NB_SHAPE(2)));
    ck_assert_ptr_null(nb_zeros(ctx, (nb_dtype)99, NB_SHAPE(2)));
    ck_assert_error_has(ctx, "unknown dtype 99");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_huge_allocation_fails_cleanly) {
    nb_ctx *ctx = nb_ctx_new(0);
    /* 2^63 bytes: fits size_t, but no allocator can return it */
    ck_assert_ptr_null(nb_zeros(ctx, NB_F64, NB_SHAPE((int64_t)1 << 40, 1 << 20)));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_MEMORY);
    ck_assert_error_has(ctx, "9223372036854775808 bytes is more than a process can allocate");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_requires_grad_rules) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *ids = nb_zeros(ctx, NB_I64, NB_SHAPE(3));
    ck_assert_ptr_null(nb_requires_grad(ids));
    ck_assert_error_has(ctx, "only f32/f64 have gradients");
    nb_ctx_clear_error(ctx);
    nb_tensor *x = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    ck_assert_ptr_nonnull(x->grad);
    nb_tensor *y = nb_add(ctx, x, x);
    ck_assert_ptr_null(nb_requires_grad(y));
    ck_assert_error_has(ctx, "only leaves can be marked");
    ck_assert_ptr_null(nb_requires_grad(NULL));
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_copy_converts_dtype) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), (double[]){1.5, -2.25});
    nb_tensor *b = nb_copy(ctx, a, NB_F64);
    ck_assert_int_eq(b->dtype, NB_F64);
    ck_assert_double_eq(nb_get(b, 1), -2.25);
    ck_assert_ptr_null(nb_copy(ctx, NULL, NB_F64));
    ck_assert_error_has(ctx, "copy: input is NULL");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_print_like_pytorch) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_from_doubles(ctx, NB_F32, NB_SHAPE(6, 3), NB_SEED_INPUTS);
    char *s = nb_test_format(x);
    ck_assert_str_eq(s, "tensor([[0.4300, 0.1500, 0.8900],\n"
                        "        [0.5500, 0.8700, 0.6600],\n"
                        "        [0.5700, 0.8500, 0.6400],\n"
                        "        [0.2200, 0.5800, 0.3300],\n"
                        "        [0.7700, 0.2500, 0.1000],\n"
                        "        [0.0500, 0.8000, 0.5500]])");
    free(s);
    s = nb_test_format(nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), (double[]){-0.5337, 0.1051}));
    ck_assert_str_eq(s, "tensor([-0.5337,  0.1051])");
    free(s);
    s = nb_test_format(nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 3),
                                       (double[]){2, 2, 0, 0, 0, 2}));
    ck_assert_str_eq(s, "tensor([[2., 2., 0.],\n        [0., 0., 2.]])");
    free(s);
    s = nb_test_format(nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), (double[]){0.9231, -INFINITY}));
    ck_assert_str_eq(s, "tensor([0.9231,   -inf])");
    free(s);
    s = nb_test_format(nb_scalar(ctx, NB_F64, 1.8524));
    ck_assert_str_eq(s, "tensor(1.8524, dtype=torch.float64)");
    free(s);
    s = nb_test_format(nb_from_doubles(ctx, NB_I64, NB_SHAPE(6), (double[]){0, 4, 5, 2, 1, 3}));
    ck_assert_str_eq(s, "tensor([0, 4, 5, 2, 1, 3])");
    free(s);
    s = nb_test_format(nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 2, 1), (double[]){1.5, 2, 3, 4}));
    ck_assert_str_eq(s, "tensor([[[1.5000],\n         [2.0000]],\n\n        [[3.0000],\n         [4.0000]]])");
    free(s);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_print_wraps_long_rows) {
    /* the seed's 6x16 embedding prints 8 values a line */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_full(ctx, NB_F32, NB_SHAPE(1, 16), -0.1778);
    char *s = nb_test_format(x);
    ck_assert_str_eq(s, "tensor([[-0.1778, -0.1778, -0.1778, -0.1778, -0.1778, -0.1778, -0.1778, -0.1778,\n"
                        "         -0.1778, -0.1778, -0.1778, -0.1778, -0.1778, -0.1778, -0.1778, -0.1778]])");
    free(s);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_shape_str_and_names) {
    nb_ctx *ctx = nb_ctx_new(0);
    char buf[64];
    ck_assert_str_eq(nb_shape_str(nb_zeros(ctx, NB_F32, NB_SHAPE(2, 6, 3)), buf, sizeof buf), "(2, 6, 3)");
    ck_assert_str_eq(nb_shape_str(nb_scalar(ctx, NB_F32, 1), buf, sizeof buf), "()");
    ck_assert_str_eq(nb_shape_str(NULL, buf, sizeof buf), "(NULL)");
    ck_assert_str_eq(nb_dtype_name(NB_F64), "f64");
    ck_assert_uint_eq(nb_dtype_size(NB_BOOL), 1);
    ck_assert_str_eq(nb_status_str(NB_ERR_SHAPE), "shape error");
    for (int op = 0; op < NB_OP_COUNT; op++) ck_assert_str_ne(nb_op_name((nb_op)op), "?");
    ck_assert_str_eq(nb_op_name(NB_OP_MATMUL), "matmul");
    ck_assert_int_eq(nb_op_arity(NB_OP_CONCAT), -1);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_tensor(void) {
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_create_shapes_and_fill);
    tcase_add_test(tc, test_empty_uninitialised_zeros_zeroed);
    tcase_add_test(tc, test_uniform_and_normal_from_pcg);
    tcase_add_test(tc, test_bad_shapes_are_errors);
    tcase_add_test(tc, test_huge_allocation_fails_cleanly);
    tcase_add_test(tc, test_requires_grad_rules);
    tcase_add_test(tc, test_copy_converts_dtype);
    tcase_add_test(tc, test_print_like_pytorch);
    tcase_add_test(tc, test_print_wraps_long_rows);
    tcase_add_test(tc, test_shape_str_and_names);
    suite_add_tcase(s, tc);
    return s;
}
