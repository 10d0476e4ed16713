/* check_shape.c - transpose, permute, reshape, contiguous, concat, split:
 * values, views, gradients (by hand and by nb_gradcheck) and errors. */
#include "check_nabla.h"

static nb_tensor *iota(nb_ctx *ctx, nb_dtype dt, int nd, const int64_t *shape) {
    nb_tensor *t = nb_empty(ctx, dt, nd, shape);
    for (size_t i = 0; i < t->numel; i++) nb_set(t, i, (double)i);
    return t;
}

static void assert_shape(const nb_tensor *t, const char *want) {
    char s[64];
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(nb_shape_str(t, s, sizeof s), want);
}

/* ---- transpose and permute ----------------------------------------------------------- */

START_TEST(test_transpose_2d_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = iota(ctx, dt, NB_SHAPE(2, 3)); /* [[0,1,2],[3,4,5]] */
        nb_tensor *t = nb_transpose(ctx, a, 0, 1);
        assert_shape(t, "(3, 2)");
        ck_assert_int_eq(t->dtype, dt);
        ck_assert_tensor_near(t, ((double[]){0, 3, 1, 4, 2, 5}), 6, 0);
        ck_assert_ptr_ne(t->data, a->data); /* a copy */
        /* negative dims count from the end */
        ck_assert_tensor_near(nb_transpose(ctx, a, -1, -2), ((double[]){0, 3, 1, 4, 2, 5}), 6, 0);
        /* the same dim twice: an unchanged copy */
        ck_assert_tensor_near(nb_transpose(ctx, a, 1, 1), ((double[]){0, 1, 2, 3, 4, 5}), 6, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_transpose_4d_heads) {
    /* (B, T, H, D) -> (B, H, T, D), the split-heads step of attention */
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = iota(ctx, dt, NB_SHAPE(2, 3, 4, 5));
        nb_tensor *t = nb_transpose(ctx, a, 1, 2);
        assert_shape(t, "(2, 4, 3, 5)");
        for (int b = 0; b < 2; b++)
            for (int h = 0; h < 4; h++)
                for (int s = 0; s < 3; s++)
                    for (int d = 0; d < 5; d++) {
                        size_t o = (size_t)(((b * 4 + h) * 3 + s) * 5 + d);
                        double want = ((b * 3 + s) * 4 + h) * 5 + d;
                        ck_assert_double_eq(nb_get(t, o), want);
                    }
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_permute_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = iota(ctx, dt, NB_SHAPE(2, 3, 4));
        nb_tensor *p = nb_permute(ctx, a, (const int[]){2, 0, 1});
        assert_shape(p, "(4, 2, 3)");
        /* p[i][j][k] = a[j][k][i] */
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 2; j++)
                for (int k = 0; k < 3; k++)
                    ck_assert_double_eq(nb_get(p, (size_t)((i * 2 + j) * 3 + k)),
                                        (double)((j * 3 + k) * 4 + i));
        /* negative entries count from the end; the inverse permutation undoes it */
        nb_tensor *back = nb_permute(ctx, p, (const int[]){1, -1, 0});
        assert_shape(back, "(2, 3, 4)");
        for (size_t i = 0; i < a->numel; i++) ck_assert_double_eq(nb_get(back, i), (double)i);
        /* identity on 1 dim and on a scalar */
        ck_assert_tensor_near(nb_permute(ctx, nb_from_doubles(ctx, dt, NB_SHAPE(2), (double[]){7, 8}),
                                         (const int[]){0}),
                              ((double[]){7, 8}), 2, 0);
        ck_assert_double_eq(nb_item(nb_permute(ctx, nb_scalar(ctx, dt, 3), (const int[]){0})), 3);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_permute_grad_by_hand) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(iota(ctx, NB_F32, NB_SHAPE(2, 3)));
    nb_tensor *t = nb_transpose(ctx, a, 0, 1); /* (3, 2) */
    /* a distinct weight per output element shows where each one flows back */
    nb_tensor *g = nb_from_doubles(ctx, NB_F32, NB_SHAPE(3, 2), (double[]){10, 20, 30, 40, 50, 60});
    ck_assert_int_eq(nb_backward(ctx, t, g), NB_OK);
    ck_assert_grad_near(a, ((double[]){10, 30, 50, 20, 40, 60}), 6, 0);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_permute_3d(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    /* multiplying by a fixed tensor makes each output element's weight distinct */
    nb_tensor *p = nb_permute(ctx, in[0], (const int[]){1, 2, 0});
    return nb_mul(ctx, p, in[1]);
}

static nb_tensor *f_transpose_4d(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_transpose(ctx, nb_transpose(ctx, in[0], 0, 3), 1, 2);
}

START_TEST(test_permute_transpose_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 4);
    nb_tensor *in[2] = {nb_requires_grad(nb_uniform(ctx, NB_F64, NB_SHAPE(2, 3, 4), -1, 1, &rng)),
                        nb_uniform(ctx, NB_F64, NB_SHAPE(3, 4, 2), -1, 1, &rng)};
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_permute_3d, NULL, 2, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    nb_tensor *x[1] = {nb_uniform(ctx, NB_F64, NB_SHAPE(2, 3, 2, 2), -1, 1, &rng)};
    ck_assert_int_eq(nb_gradcheck(ctx, f_transpose_4d, NULL, 1, x, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_permute_transpose_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3, 4));
    ck_assert_ptr_null(nb_permute(ctx, a, (const int[]){0, 0, 1}));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "permute: perm (0, 0, 1) is not a permutation of the 3 dims of "
                             "(2, 3, 4), expected each of 0..2 once");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_permute(ctx, a, (const int[]){0, 1, 3}));
    ck_assert_error_has(ctx, "perm (0, 1, 3) is not a permutation");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_permute(ctx, a, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "permute: perm is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_transpose(ctx, a, 0, 3));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "transpose: dim 3 is out of range for shape (2, 3, 4) (3 dims)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_transpose(ctx, a, -4, 0));
    ck_assert_error_has(ctx, "transpose: dim -4 is out of range");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_transpose(ctx, NULL, 0, 1));
    ck_assert_error_has(ctx, "transpose: input 1 is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_permute(ctx, nb_zeros(ctx, NB_BOOL, NB_SHAPE(2, 2)), (const int[]){1, 0}));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "permute: input 1 (2, 2) is bool, expected f32 or f64");
    ck_assert_ptr_null(nb_transpose(NULL, a, 0, 1));
    nb_ctx_free(ctx);
}
END_TEST

/* ---- reshape and contiguous ------------------------------------------------------------ */

START_TEST(test_reshape_is_a_view) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = iota(ctx, dt, NB_SHAPE(2, 3, 4));
        nb_tensor *v = nb_reshape(ctx, a, NB_SHAPE(6, 4));
        assert_shape(v, "(6, 4)");
        ck_assert_ptr_eq(v->data, a->data); /* shares the data */
        ck_assert_int_eq(v->dtype, dt);
        nb_set(a, 5, 42);
        ck_assert_double_eq(nb_get(v, 5), 42);
        /* one -1 is inferred, anywhere */
        assert_shape(nb_reshape(ctx, a, NB_SHAPE(-1, 12)), "(2, 12)");
        assert_shape(nb_reshape(ctx, a, NB_SHAPE(4, -1, 2)), "(4, 3, 2)");
        assert_shape(nb_view(ctx, a, NB_SHAPE(-1)), "(24)");
        assert_shape(nb_reshape(ctx, a, NB_SHAPE(1, 2, 3, 4)), "(1, 2, 3, 4)");
        /* one element to a scalar and back */
        nb_tensor *one = nb_from_doubles(ctx, dt, NB_SHAPE(1, 1), (double[]){2.5});
        nb_tensor *s = nb_reshape(ctx, one, 0, NULL);
        assert_shape(s, "()");
        ck_assert_double_eq(nb_item(s), 2.5);
        assert_shape(nb_reshape(ctx, s, NB_SHAPE(-1)), "(1)");
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_reshape_grad) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(iota(ctx, NB_F64, NB_SHAPE(2, 3)));
    nb_tensor *v = nb_reshape(ctx, a, NB_SHAPE(3, 2));
    /* the view has its own gradient; a's arrives elementwise in order */
    ck_assert_ptr_ne(v->grad, a->grad);
    nb_tensor *g = nb_from_doubles(ctx, NB_F64, NB_SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6});
    ck_assert_int_eq(nb_backward(ctx, v, g), NB_OK);
    ck_assert_grad_near(a, ((double[]){1, 2, 3, 4, 5, 6}), 6, 0);
    ck_assert_grad_near(v, ((double[]){1, 2, 3, 4, 5, 6}), 6, 0);
    /* the view's data is a's, so a leaf's later update shows through it */
    nb_set(a, 0, -1);
    ck_assert_double_eq(nb_get(v, 0), -1);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_reshape_chain(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    /* (2, 6) -> (3, 4) @ (4, 2) -> (6) * w, reshape feeding a matmul */
    nb_tensor *r = nb_reshape(ctx, in[0], NB_SHAPE(3, 4));
    nb_tensor *m = nb_matmul(ctx, r, in[1]);
    return nb_mul(ctx, nb_reshape(ctx, m, NB_SHAPE(-1)), nb_contiguous(ctx, in[2]));
}

START_TEST(test_reshape_contiguous_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 9, 9);
    nb_tensor *in[3] = {nb_uniform(ctx, NB_F64, NB_SHAPE(2, 6), -1, 1, &rng),
                        nb_uniform(ctx, NB_F64, NB_SHAPE(4, 2), -1, 1, &rng),
                        nb_uniform(ctx, NB_F64, NB_SHAPE(6), -1, 1, &rng)};
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_reshape_chain, NULL, 3, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_reshape_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_reshape(ctx, a, NB_SHAPE(4, 2)));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "reshape: cannot view (2, 3) (6 elements) as (4, 2) (8 elements)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_reshape(ctx, a, NB_SHAPE(-1, -1)));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "reshape: shape (-1, -1) has more than one -1");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_reshape(ctx, a, NB_SHAPE(4, -1)));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "reshape: cannot view (2, 3) (6 elements) as (4, -1), expected the "
                             "sizes other than -1 to divide 6");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_reshape(ctx, a, NB_SHAPE(0, 6)));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "reshape: cannot view (2, 3) (6 elements) as (0, 6), which has 0 elements");
    nb_ctx_clear_error(ctx);
    /* huge sizes must not overflow into a false match */
    ck_assert_ptr_null(nb_reshape(ctx, a, NB_SHAPE(INT64_C(1) << 62, 4, 6)));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_reshape(ctx, a, 9, (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 2, 3}));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SIZE);
    ck_assert_error_has(ctx, "reshape: 9 dims requested, expected 0..8");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_reshape(ctx, a, 2, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_reshape(ctx, a, 0, NULL));
    ck_assert_error_has(ctx, "reshape: cannot view (2, 3) (6 elements) as () (1 elements)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_contiguous(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(2))));
    ck_assert_error_has(ctx, "contiguous: input 1 (2) is i64, expected f32 or f64");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_contiguous_copies) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(iota(ctx, dt, NB_SHAPE(2, 2)));
        nb_tensor *c = nb_contiguous(ctx, a);
        assert_shape(c, "(2, 2)");
        ck_assert_ptr_ne(c->data, a->data);
        ck_assert_tensor_near(c, ((double[]){0, 1, 2, 3}), 4, 0);
        nb_tensor *g = nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){1, -1, 2, -2});
        ck_assert_int_eq(nb_backward(ctx, c, g), NB_OK);
        ck_assert_grad_near(a, ((double[]){1, -1, 2, -2}), 4, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* ---- concat and split ----------------------------------------------------------------- */

START_TEST(test_concat_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){1, 2, 3, 4});
        nb_tensor *b = nb_from_doubles(ctx, dt, NB_SHAPE(1, 2), (double[]){5, 6});
        nb_tensor *c = nb_from_doubles(ctx, dt, NB_SHAPE(2, 1), (double[]){7, 8});
        nb_tensor *rows = nb_concat(ctx, 2, (nb_tensor *[]){a, b}, 0);
        assert_shape(rows, "(3, 2)");
        ck_assert_int_eq(rows->dtype, dt);
        ck_assert_tensor_near(rows, ((double[]){1, 2, 3, 4, 5, 6}), 6, 0);
        /* along the last dim, by a negative index, three inputs */
        nb_tensor *cols = nb_concat(ctx, 3, (nb_tensor *[]){a, c, a}, -1);
        assert_shape(cols, "(2, 5)");
        ck_assert_tensor_near(cols, ((double[]){1, 2, 7, 1, 2, 3, 4, 8, 3, 4}), 10, 0);
        /* a single input is a copy */
        nb_tensor *one = nb_concat(ctx, 1, &a, 1);
        ck_assert_ptr_ne(one->data, a->data);
        ck_assert_tensor_near(one, ((double[]){1, 2, 3, 4}), 4, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_concat_middle_dim_4d) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = iota(ctx, NB_F32, NB_SHAPE(2, 1, 2, 2));   /* 0..7 */
    nb_tensor *b = nb_full(ctx, NB_F32, NB_SHAPE(2, 2, 2, 2), -1);
    nb_tensor *c = nb_concat(ctx, 2, (nb_tensor *[]){a, b}, 1);
    assert_shape(c, "(2, 3, 2, 2)");
    const double want[24] = {0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1,
                             4, 5, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1};
    ck_assert_tensor_near(c, want, 24, 0);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_concat_weighted(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    int n = *(const int *)user;
    /* concat(in[0..n-1], dim 1) * in[n] */
    return nb_mul(ctx, nb_concat(ctx, n, in, 1), in[n]);
}

START_TEST(test_concat_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    /* 3 inputs, then 6: more than a node stores inline */
    for (int n = 3; n <= 6; n += 3) {
        nb_tensor *in[7];
        int64_t total = 0;
        for (int i = 0; i < n; i++) {
            in[i] = nb_uniform(ctx, NB_F64, NB_SHAPE(2, 1 + i % 3, 2), -1, 1, &rng);
            total += 1 + i % 3;
        }
        in[n] = nb_uniform(ctx, NB_F64, NB_SHAPE(2, total, 2), -1, 1, &rng);
        nb_gradcheck_result r;
        ck_assert_int_eq(nb_gradcheck(ctx, f_concat_weighted, &n, n + 1, in, NULL, &r), NB_OK);
        ck_assert_msg(r.passed, "n = %d: %s", n, r.message);
    }
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_concat_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(3, 3));
    nb_tensor *b = nb_ones(ctx, NB_F32, NB_SHAPE(2, 4));
    ck_assert_ptr_null(nb_concat(ctx, 2, (nb_tensor *[]){a, b}, 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "concat: input 2 (2, 4) does not match input 1 (3, 3) at dim 1 "
                             "(4 vs 3), expected equal sizes except along dim 0");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_concat(ctx, 2, (nb_tensor *[]){a, nb_ones(ctx, NB_F32, NB_SHAPE(3))}, 0));
    ck_assert_error_has(ctx, "concat: input 2 (3) has 1 dims but input 1 (3, 3) has 2");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_concat(ctx, 2, (nb_tensor *[]){a, nb_ones(ctx, NB_F64, NB_SHAPE(3, 3))}, 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "concat: mixed dtypes");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_concat(ctx, 2, (nb_tensor *[]){a, NULL}, 0));
    ck_assert_error_has(ctx, "concat: input 2 is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_concat(ctx, 2, (nb_tensor *[]){a, a}, 2));
    ck_assert_error_has(ctx, "concat: dim 2 is out of range for shape (3, 3) (2 dims)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_concat(ctx, 0, (nb_tensor *[]){a}, 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_concat(ctx, 1, NULL, 0));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_split_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = iota(ctx, dt, NB_SHAPE(2, 5)); /* [[0..4],[5..9]] */
        nb_tensor *out[3];
        ck_assert_int_eq(nb_split(ctx, a, 1, 3, (const int64_t[]){2, 1, 2}, out), NB_OK);
        assert_shape(out[0], "(2, 2)");
        assert_shape(out[1], "(2, 1)");
        assert_shape(out[2], "(2, 2)");
        ck_assert_tensor_near(out[0], ((double[]){0, 1, 5, 6}), 4, 0);
        ck_assert_tensor_near(out[1], ((double[]){2, 7}), 2, 0);
        ck_assert_tensor_near(out[2], ((double[]){3, 4, 8, 9}), 4, 0);
        ck_assert_int_eq(out[2]->dtype, dt);
        /* rows, by a negative dim: q, k, v style */
        nb_tensor *rows[2];
        ck_assert_int_eq(nb_split(ctx, a, -2, 2, (const int64_t[]){1, 1}, rows), NB_OK);
        ck_assert_tensor_near(rows[1], ((double[]){5, 6, 7, 8, 9}), 5, 0);
        /* split then concat gives the input back */
        nb_tensor *joined = nb_concat(ctx, 3, out, 1);
        for (size_t i = 0; i < a->numel; i++) ck_assert_double_eq(nb_get(joined, i), (double)i);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_split_grad) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(iota(ctx, NB_F64, NB_SHAPE(2, 4)));
    nb_tensor *out[2];
    ck_assert_int_eq(nb_split(ctx, a, 1, 2, (const int64_t[]){1, 3}, out), NB_OK);
    ck_assert_int_eq(nb_tape_len(ctx), 2); /* one node per piece */
    /* only the second piece reaches the loss: the first slab's gradient is 0 */
    nb_tensor *g = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    ck_assert_int_eq(nb_backward(ctx, out[1], g), NB_OK);
    ck_assert_grad_near(a, ((double[]){0, 1, 2, 3, 0, 4, 5, 6}), 8, 0);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_split_swap(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    /* split (3, 5) into widths 2 and 3 along dim 1, rejoin swapped, weight */
    nb_tensor *p[2];
    if (nb_split(ctx, in[0], 1, 2, (const int64_t[]){2, 3}, p) != NB_OK) return NULL;
    nb_tensor *sw = nb_concat(ctx, 2, (nb_tensor *[]){p[1], p[0]}, 1);
    return nb_mul(ctx, sw, in[1]);
}

START_TEST(test_split_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 6);
    nb_tensor *in[2] = {nb_requires_grad(nb_uniform(ctx, NB_F64, NB_SHAPE(3, 5), -1, 1, &rng)),
                        nb_uniform(ctx, NB_F64, NB_SHAPE(3, 5), -1, 1, &rng)};
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_split_swap, NULL, 2, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_split_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(3, 5));
    nb_tensor *out[2] = {a, a};
    ck_assert_int_eq(nb_split(ctx, a, 1, 2, (const int64_t[]){2, 2}, out), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "split: sizes (2, 2) do not add up to 5 (dim 1 of (3, 5)), expected "
                             "sizes >= 0 with that sum");
    ck_assert_ptr_null(out[0]); /* the outputs are cleared on failure */
    ck_assert_ptr_null(out[1]);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_split(ctx, a, 1, 2, (const int64_t[]){6, -1}, out), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "split: sizes (6, -1) do not add up to 5");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_split(ctx, a, 2, 2, (const int64_t[]){1, 2}, out), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "split: dim 2 is out of range for shape (3, 5) (2 dims)");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_split(ctx, a, 0, 2, NULL, out), NB_ERR_NULL);
    ck_assert_error_has(ctx, "split: sizes is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_split(ctx, a, 0, 1, (const int64_t[]){3}, NULL), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_split(ctx, a, 0, 0, (const int64_t[]){3}, out), NB_ERR_VALUE);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_split(ctx, NULL, 0, 1, (const int64_t[]){3}, out), NB_ERR_NULL);
    ck_assert_error_has(ctx, "split: input 1 is NULL");
    ck_assert_int_eq(nb_split(NULL, a, 0, 1, (const int64_t[]){3}, out), NB_ERR_NULL);
    /* sticky: a valid split on a failed context returns its error */
    ck_assert_int_eq(nb_split(ctx, a, 0, 1, (const int64_t[]){3}, out), NB_ERR_NULL);
    ck_assert_ptr_null(out[0]);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_shape_ops_record_nothing_without_grad) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = iota(ctx, NB_F32, NB_SHAPE(2, 3));
    nb_tensor *out[2];
    ck_assert_ptr_nonnull(nb_transpose(ctx, a, 0, 1));
    ck_assert_ptr_nonnull(nb_reshape(ctx, a, NB_SHAPE(3, 2)));
    ck_assert_ptr_nonnull(nb_concat(ctx, 2, (nb_tensor *[]){a, a}, 0));
    ck_assert_int_eq(nb_split(ctx, a, 0, 2, (const int64_t[]){1, 1}, out), NB_OK);
    ck_assert_int_eq(nb_tape_len(ctx), 0);
    ck_assert(!out[0]->requires_grad);
    nb_tensor *w = nb_requires_grad(iota(ctx, NB_F32, NB_SHAPE(2, 3)));
    ck_assert(nb_transpose(ctx, w, 0, 1)->requires_grad);
    ck_assert_int_eq(nb_tape_len(ctx), 1);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_shape(void) {
    Suite *s = suite_create("shape");
    TCase *tc = tcase_create("permute");
    tcase_add_test(tc, test_transpose_2d_values);
    tcase_add_test(tc, test_transpose_4d_heads);
    tcase_add_test(tc, test_permute_values);
    tcase_add_test(tc, test_permute_grad_by_hand);
    tcase_add_test(tc, test_permute_transpose_gradcheck);
    tcase_add_test(tc, test_permute_transpose_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("reshape");
    tcase_add_test(tc, test_reshape_is_a_view);
    tcase_add_test(tc, test_reshape_grad);
    tcase_add_test(tc, test_reshape_contiguous_gradcheck);
    tcase_add_test(tc, test_reshape_errors);
    tcase_add_test(tc, test_contiguous_copies);
    suite_add_tcase(s, tc);

    tc = tcase_create("concat_split");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_concat_values);
    tcase_add_test(tc, test_concat_middle_dim_4d);
    tcase_add_test(tc, test_concat_gradcheck);
    tcase_add_test(tc, test_concat_errors);
    tcase_add_test(tc, test_split_values);
    tcase_add_test(tc, test_split_grad);
    tcase_add_test(tc, test_split_gradcheck);
    tcase_add_test(tc, test_split_errors);
    tcase_add_test(tc, test_shape_ops_record_nothing_without_grad);
    suite_add_tcase(s, tc);
    return s;
}
