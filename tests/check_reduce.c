/* check_reduce.c - sum, mean, sum_dim, mean_dim, max_dim: values on 1- to
 * 4-D inputs with and without keepdim, negative dims, arg-max indices and
 * ties, gradients (by hand and by gradcheck), errors. */
#include "check_nabla.h"
#include "tape/tape_internal.h" /* node->i / node->saved, to check what is stored */

/* 0, 1, 2, ... as dtype dt, any shape */
static nb_tensor *arange(nb_ctx *ctx, nb_dtype dt, int nd, const int64_t *shape) {
    nb_tensor *t = nb_empty(ctx, dt, nd, shape);
    for (size_t i = 0; t && i < t->numel; i++) nb_set(t, i, (double)i);
    return t;
}

static void assert_shape(const nb_tensor *t, const char *want) {
    char s[64];
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(nb_shape_str(t, s, sizeof s), want);
}

enum { R_SUM, R_MEAN, R_MAX };

/* A straightforward reference: walks every input element, drops dim d from
 * its coordinates to find its output slot. out/arg hold numel/shape[d] entries. */
static void ref_reduce(const nb_tensor *a, int d, int mode, double *out, int64_t *arg) {
    size_t m = a->numel / (size_t)a->shape[d];
    for (size_t o = 0; o < m; o++) out[o] = mode == R_MAX ? -INFINITY : 0, arg[o] = -1;
    for (size_t i = 0; i < a->numel; i++) {
        int64_t c[NB_MAX_DIMS];
        size_t rest = i;
        for (int k = a->ndim - 1; k >= 0; k--) {
            c[k] = (int64_t)(rest % (size_t)a->shape[k]);
            rest /= (size_t)a->shape[k];
        }
        size_t o = 0;
        for (int k = 0; k < a->ndim; k++)
            if (k != d) o = o * (size_t)a->shape[k] + (size_t)c[k];
        double v = nb_get(a, i);
        if (mode == R_MAX) {
            if (arg[o] < 0 || v > out[o]) out[o] = v, arg[o] = c[d];
        } else {
            out[o] += mode == R_MEAN ? v / (double)a->shape[d] : v;
        }
    }
}

/* ---- over everything ------------------------------------------------------------ */

START_TEST(test_sum_mean_all_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6.5});
        nb_tensor *s = nb_sum(ctx, a), *m = nb_mean(ctx, a);
        ck_assert_int_eq(s->ndim, 0);
        ck_assert_int_eq(m->ndim, 0);
        ck_assert_int_eq(s->dtype, dt);
        ck_assert_double_eq(nb_item(s), 21.5);
        ck_assert_double_eq_tol(nb_item(m), 21.5 / 6, dt == NB_F32 ? 1e-6 : 1e-15);
        /* 4-D and 0-dim inputs */
        ck_assert_double_eq(nb_item(nb_sum(ctx, arange(ctx, dt, NB_SHAPE(2, 3, 4, 5)))), 7140);
        ck_assert_double_eq(nb_item(nb_mean(ctx, arange(ctx, dt, NB_SHAPE(2, 3, 4, 5)))), 59.5);
        ck_assert_double_eq(nb_item(nb_mean(ctx, nb_scalar(ctx, dt, -3))), -3);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_sum_mean_all_grad) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(arange(ctx, dt, NB_SHAPE(2, 3)));
        ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, a), NULL), NB_OK);
        ck_assert_grad_near(a, ((double[]){1, 1, 1, 1, 1, 1}), 6, 0);
        nb_zero_grad(a);
        /* upstream gradient 3 through mean: 3/6 each */
        ck_assert_int_eq(nb_backward(ctx, nb_mean(ctx, a), nb_scalar(ctx, dt, 3)), NB_OK);
        ck_assert_grad_near(a, ((double[]){0.5, 0.5, 0.5, 0.5, 0.5, 0.5}), 6, 1e-7);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_f32_sum_accumulates_in_double) {
    /* 100000 x 0.1f: a float accumulator drifts by about 1; double lands on
     * float(0.1) * 1e5 = 10000.0001490116 -> 10000 in f32. */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_full(ctx, NB_F32, NB_SHAPE(100000), 0.1);
    ck_assert_double_eq(nb_item(nb_sum(ctx, a)), 10000.0);
    ck_assert_double_eq_tol(nb_item(nb_mean(ctx, a)), 0.1, 1e-8);
    ck_assert_double_eq(nb_item(nb_sum_dim(ctx, a, 0, false)), 10000.0);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- sum_dim and mean_dim ------------------------------------------------------- */

START_TEST(test_sum_dim_3d_keepdim) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = arange(ctx, dt, NB_SHAPE(2, 3, 4));
        /* out[o,k] = sum_j (12 o + 4 j + k) = 36 o + 12 + 3 k */
        const double want[8] = {12, 15, 18, 21, 48, 51, 54, 57};
        nb_tensor *s = nb_sum_dim(ctx, a, 1, false);
        assert_shape(s, "(2, 4)");
        ck_assert_tensor_near(s, want, 8, 0);
        nb_tensor *k = nb_sum_dim(ctx, a, 1, true);
        assert_shape(k, "(2, 1, 4)");
        ck_assert_tensor_near(k, want, 8, 0);
        ck_assert_int_eq(k->dtype, dt);
        /* over the last dim: 4 b + 6 for row b */
        ck_assert_tensor_near(nb_sum_dim(ctx, a, 2, false),
                              ((double[]){6, 22, 38, 54, 70, 86}), 6, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_mean_dim_negative_dims) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = arange(ctx, dt, NB_SHAPE(2, 3, 4));
        /* -1: the mean of 4b .. 4b+3 is 4b + 1.5 */
        nb_tensor *m = nb_mean_dim(ctx, a, -1, false);
        assert_shape(m, "(2, 3)");
        ck_assert_tensor_near(m, ((double[]){1.5, 5.5, 9.5, 13.5, 17.5, 21.5}), 6, 1e-6);
        assert_shape(nb_mean_dim(ctx, a, -1, true), "(2, 3, 1)");
        /* -2 is dim 1: 12 o + 4 + k */
        nb_tensor *m2 = nb_mean_dim(ctx, a, -2, true);
        assert_shape(m2, "(2, 1, 4)");
        ck_assert_tensor_near(m2, ((double[]){4, 5, 6, 7, 16, 17, 18, 19}), 8, 1e-6);
        /* -3 is dim 0: k + 6 for k in 0..11 */
        nb_tensor *m3 = nb_mean_dim(ctx, a, -3, false);
        assert_shape(m3, "(3, 4)");
        for (size_t i = 0; i < 12; i++) ck_assert_double_eq(nb_get(m3, i), (double)i + 6);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* Every dim of a 4-D input, positive and negative, both keepdims, sum and
 * mean, against the reference. */
START_TEST(test_sum_mean_dim_4d_every_dim) {
    static const char *shapes[2][4] = {
        {"(3, 4, 5)", "(2, 4, 5)", "(2, 3, 5)", "(2, 3, 4)"},
        {"(1, 3, 4, 5)", "(2, 1, 4, 5)", "(2, 3, 1, 5)", "(2, 3, 4, 1)"},
    };
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_empty(ctx, NB_F64, NB_SHAPE(2, 3, 4, 5));
    for (size_t i = 0; i < a->numel; i++) nb_set(a, i, sin(0.7 * (double)i) * 3);
    double want[60];
    int64_t arg[60];
    for (int d = 0; d < 4; d++)
        for (int keep = 0; keep < 2; keep++)
            for (int neg = 0; neg < 2; neg++) {
                int dim = neg ? d - 4 : d;
                nb_tensor *s = nb_sum_dim(ctx, a, dim, keep);
                assert_shape(s, shapes[keep][d]);
                ref_reduce(a, d, R_SUM, want, arg);
                ck_assert_tensor_near(s, want, s->numel, 1e-12);
                nb_tensor *m = nb_mean_dim(ctx, a, dim, keep);
                assert_shape(m, shapes[keep][d]);
                ref_reduce(a, d, R_MEAN, want, arg);
                ck_assert_tensor_near(m, want, m->numel, 1e-12);
            }
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_sum_dim_wide_inner) {
    /* inner = 150 spans several of the kernel's accumulation blocks */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = arange(ctx, NB_F32, NB_SHAPE(3, 2, 150));
    nb_tensor *s = nb_sum_dim(ctx, a, 1, false);
    assert_shape(s, "(3, 150)");
    double want[450];
    int64_t arg[450];
    ref_reduce(a, 1, R_SUM, want, arg);
    ck_assert_tensor_near(s, want, 450, 0);
    ck_assert_double_eq(nb_get(s, 449), 749 + 899); /* (2,0,149) + (2,1,149) */
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_reduce_1d_and_0d) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *v = nb_from_doubles(ctx, NB_F32, NB_SHAPE(4), (double[]){2, -1, 7, 0.5});
    nb_tensor *s = nb_sum_dim(ctx, v, 0, false);
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_double_eq(nb_item(s), 8.5);
    assert_shape(nb_mean_dim(ctx, v, -1, true), "(1)");
    ck_assert_double_eq(nb_item(nb_mean_dim(ctx, v, -1, true)), 2.125);
    nb_tensor *idx;
    nb_tensor *mx = nb_max_dim(ctx, v, 0, false, &idx);
    ck_assert_int_eq(mx->ndim, 0);
    ck_assert_int_eq(idx->ndim, 0);
    ck_assert_double_eq(nb_item(mx), 7);
    ck_assert_double_eq(nb_item(idx), 2);
    /* a 0-dim tensor reduces over dim 0 or -1 to itself, as in PyTorch */
    nb_tensor *z = nb_scalar(ctx, NB_F64, 4.5);
    ck_assert_int_eq(nb_sum_dim(ctx, z, 0, false)->ndim, 0);
    ck_assert_double_eq(nb_item(nb_sum_dim(ctx, z, -1, true)), 4.5);
    ck_assert_double_eq(nb_item(nb_max_dim(ctx, z, 0, false, NULL)), 4.5);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    ck_assert_ptr_null(nb_sum_dim(ctx, z, 1, false));
    ck_assert_error_has(ctx, "sum_dim: dim 1 is out of range for shape () (0 dims)");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_sum_mean_dim_grad_by_hand) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(arange(ctx, dt, NB_SHAPE(2, 3)));
        /* sum over dim 0 with upstream (1, 2, 3): each column gets its g */
        nb_tensor *s = nb_sum_dim(ctx, a, 0, false);
        ck_assert_int_eq(nb_backward(ctx, s, nb_from_doubles(ctx, dt, NB_SHAPE(3),
                                                             (double[]){1, 2, 3})),
                         NB_OK);
        ck_assert_grad_near(a, ((double[]){1, 2, 3, 1, 2, 3}), 6, 0);
        nb_zero_grad(a);
        /* mean over dim -1, keepdim, upstream (3, -6): g / 3 along each row */
        nb_tensor *m = nb_mean_dim(ctx, a, -1, true);
        ck_assert_int_eq(nb_backward(ctx, m, nb_from_doubles(ctx, dt, NB_SHAPE(2, 1),
                                                             (double[]){3, -6})),
                         NB_OK);
        ck_assert_grad_near(a, ((double[]){1, 1, 1, -2, -2, -2}), 6, 1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* ---- max_dim ------------------------------------------------------------------------ */

START_TEST(test_max_dim_values_and_indices) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_from_doubles(ctx, dt, NB_SHAPE(2, 3), (double[]){1, 5, 3, 7, 2, 9});
        nb_tensor *idx;
        nb_tensor *m = nb_max_dim(ctx, a, 1, false, &idx);
        assert_shape(m, "(2)");
        ck_assert_tensor_near(m, ((double[]){5, 9}), 2, 0);
        ck_assert_int_eq(idx->dtype, NB_I64);
        assert_shape(idx, "(2)");
        ck_assert_int_eq(((int64_t *)idx->data)[0], 1);
        ck_assert_int_eq(((int64_t *)idx->data)[1], 2);
        m = nb_max_dim(ctx, a, 0, true, &idx);
        assert_shape(m, "(1, 3)");
        assert_shape(idx, "(1, 3)");
        ck_assert_tensor_near(m, ((double[]){7, 5, 9}), 3, 0);
        ck_assert_tensor_near(idx, ((double[]){1, 0, 1}), 3, 0);
        /* -1 is the last dim; indices are optional */
        ck_assert_tensor_near(nb_max_dim(ctx, a, -1, false, NULL), ((double[]){5, 9}), 2, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_max_dim_all_negative) {
    /* the running max starts from the first element, not from 0 */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 3),
                                   (double[]){-4, -2.5, -3, -1e30, -7, -1e-3});
    nb_tensor *idx;
    ck_assert_tensor_near(nb_max_dim(ctx, a, 1, false, &idx), ((double[]){-2.5, -1e-3}), 2,
                          1e-9);
    ck_assert_tensor_near(idx, ((double[]){1, 2}), 2, 0);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_max_dim_ties_take_first) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(
            nb_from_doubles(ctx, dt, NB_SHAPE(3, 3), (double[]){2, 2, 1, 3, 3, 3, 0, 1, 1}));
        nb_tensor *idx;
        nb_tensor *m = nb_max_dim(ctx, a, 1, false, &idx);
        ck_assert_tensor_near(m, ((double[]){2, 3, 1}), 3, 0);
        ck_assert_tensor_near(idx, ((double[]){0, 0, 1}), 3, 0);
        /* the gradient goes to the first of the tied elements only */
        ck_assert_int_eq(nb_backward(ctx, m, nb_ones(ctx, dt, NB_SHAPE(3))), NB_OK);
        ck_assert_grad_near(a, ((double[]){1, 0, 0, 1, 0, 0, 0, 1, 0}), 9, 0);
        /* over dim 0 with two equal rows: every index is 0 */
        nb_tensor *i0;
        nb_max_dim(ctx, nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){4, 1, 4, 1}), 0,
                   false, &i0);
        ck_assert_tensor_near(i0, ((double[]){0, 0}), 2, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_max_dim_grad_to_argmax) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(nb_from_doubles(
            ctx, dt, NB_SHAPE(2, 3), (double[]){0.5, -1, 2, 4, 3.5, -2}));
        /* over dim 0 (argmax rows 1, 1, 0), upstream (10, 20, 30) */
        nb_tensor *m = nb_max_dim(ctx, a, 0, false, NULL);
        ck_assert_int_eq(nb_backward(ctx, m, nb_from_doubles(ctx, dt, NB_SHAPE(3),
                                                             (double[]){10, 20, 30})),
                         NB_OK);
        ck_assert_grad_near(a, ((double[]){0, 0, 30, 10, 20, 0}), 6, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_max_dim_4d_keepdim_every_dim) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_empty(ctx, NB_F32, NB_SHAPE(2, 3, 2, 4));
    for (size_t i = 0; i < a->numel; i++) nb_set(a, i, (double)((i * 37) % 29) - 10);
    double want[48];
    int64_t arg[48];
    for (int d = 0; d < 4; d++)
        for (int keep = 0; keep < 2; keep++) {
            nb_tensor *idx;
            nb_tensor *m = nb_max_dim(ctx, a, d - 4, keep, &idx);
            ck_assert_int_eq(m->ndim, keep ? 4 : 3);
            ck_assert_int_eq(m->shape[keep ? d : 0], keep ? 1 : (d == 0 ? 3 : 2));
            ck_assert(nb_same_shape(m, idx));
            ref_reduce(a, d, R_MAX, want, arg);
            ck_assert_tensor_near(m, want, m->numel, 0);
            for (size_t o = 0; o < m->numel; o++)
                ck_assert_int_eq(((int64_t *)idx->data)[o], arg[o]);
        }
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_max_dim_nan_propagates) {
    /* as in PyTorch: NaN is the max, and the index is the first NaN */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 4),
                                   (double[]){1, NAN, 5, NAN, 3, 2, 1, 0});
    nb_tensor *idx;
    nb_tensor *m = nb_max_dim(ctx, a, 1, false, &idx);
    ck_assert(isnan(nb_get(m, 0)));
    ck_assert_double_eq(nb_get(m, 1), 3);
    ck_assert_tensor_near(idx, ((double[]){1, 0}), 2, 0);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck -------------------------------------------------------------------------- */

typedef struct red_case {
    int op; /* NB_OP_SUM ... NB_OP_MAX_DIM */
    int dim;
    bool keepdim;
} red_case;

static const red_case RCASES[] = {
    {NB_OP_SUM, 0, false},      {NB_OP_MEAN, 0, false},     {NB_OP_SUM_DIM, 0, false},
    {NB_OP_SUM_DIM, 1, true},   {NB_OP_SUM_DIM, -1, false}, {NB_OP_MEAN_DIM, 2, true},
    {NB_OP_MEAN_DIM, -2, false}, {NB_OP_MAX_DIM, 0, true},  {NB_OP_MAX_DIM, 1, false},
    {NB_OP_MAX_DIM, -1, true},
};
#define N_RCASES ((int)(sizeof RCASES / sizeof RCASES[0]))

static nb_tensor *f_reduce(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    const red_case *c = user;
    switch (c->op) {
    case NB_OP_SUM: return nb_sum(ctx, in[0]);
    case NB_OP_MEAN: return nb_mean(ctx, in[0]);
    case NB_OP_SUM_DIM: return nb_sum_dim(ctx, in[0], c->dim, c->keepdim);
    case NB_OP_MEAN_DIM: return nb_mean_dim(ctx, in[0], c->dim, c->keepdim);
    default: return nb_max_dim(ctx, in[0], c->dim, c->keepdim, NULL);
    }
}

START_TEST(test_reduce_gradcheck) {
    const red_case *c = &RCASES[_i];
    nb_ctx *ctx = nb_ctx_new(0);
    /* (2, 3, 4) of distinct values, no two closer than the gradcheck step */
    nb_tensor *x = nb_empty(ctx, NB_F64, NB_SHAPE(2, 3, 4));
    for (size_t i = 0; i < 24; i++) nb_set(x, i, (double)((i * 7) % 24) * 0.25 - 2);
    nb_tensor *in[1] = {nb_requires_grad(x)};
    nb_gradcheck_result r;
    ck_assert_msg(nb_gradcheck(ctx, f_reduce, (void *)c, 1, in, NULL, &r) == NB_OK, "%s dim %d: %s",
                  nb_op_name(c->op), c->dim, r.message);
    ck_assert(r.passed);
    ck_assert(r.max_abs_err < 1e-6);
    nb_ctx_free(ctx);
}
END_TEST

/* x used by two reductions and an elementwise op: sum_dim(x,0) + max_dim(x,0) + mean(exp(x)) */
static nb_tensor *f_reuse(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *x = in[0];
    nb_tensor *t = nb_add(ctx, nb_sum_dim(ctx, x, 0, false), nb_max_dim(ctx, x, 0, false, NULL));
    return nb_add(ctx, t, nb_mean(ctx, nb_exp(ctx, x)));
}

START_TEST(test_reduce_chain_reusing_input) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[1] = {nb_requires_grad(nb_from_doubles(
        ctx, NB_F64, NB_SHAPE(3, 2), (double[]){0.3, -1.2, 1.1, 0.4, -0.5, 0.9}))};
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_reuse, NULL, 1, in, NULL, &r), NB_OK);
    ck_assert(r.passed);
    /* by hand for column 0 (max at row 1): d/dx[i,0] = 1 + [i == 1] + 2 exp(x)/6 */
    nb_tensor *x = in[0];
    nb_tensor *y = nb_sum(ctx, f_reuse(ctx, &x, NULL));
    ck_assert_int_eq(nb_backward(ctx, y, NULL), NB_OK);
    ck_assert_double_eq_tol(nb_grad_get(x, 0), 1 + 2 * exp(0.3) / 6, 1e-14);
    ck_assert_double_eq_tol(nb_grad_get(x, 2), 2 + 2 * exp(1.1) / 6, 1e-14);
    ck_assert_double_eq_tol(nb_grad_get(x, 5), 2 + 2 * exp(0.9) / 6, 1e-14);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_reduce_recording) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(arange(ctx, NB_F64, NB_SHAPE(2, 3)));
    nb_tensor *m = nb_mean_dim(ctx, a, -1, true);
    ck_assert_str_eq(nb_node_name(m->node), "mean_dim");
    ck_assert_int_eq(m->node->i[0], 1); /* the normalised dim */
    nb_tensor *mx = nb_max_dim(ctx, a, 0, false, NULL);
    ck_assert_str_eq(nb_node_name(mx->node), "max_dim");
    const int64_t *am = mx->node->saved;
    ck_assert_ptr_nonnull(am);
    ck_assert_int_eq(am[0], 1);
    ck_assert_int_eq(am[2], 1);
    ck_assert_str_eq(nb_node_name(nb_sum(ctx, a)->node), "sum");
    ck_assert_int_eq(nb_tape_len(ctx), 3);
    /* no grad: values and indices still come back, nothing is recorded */
    nb_set_grad_enabled(ctx, false);
    nb_tensor *idx;
    nb_tensor *m2 = nb_max_dim(ctx, a, 1, false, &idx);
    ck_assert_ptr_null(m2->node);
    ck_assert(!m2->requires_grad);
    ck_assert_tensor_near(idx, ((double[]){2, 2}), 2, 0);
    ck_assert_int_eq(nb_tape_len(ctx), 3);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_reduce_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));

    ck_assert_ptr_null(nb_sum(ctx, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "sum: input 1 is NULL");
    nb_ctx_clear_error(ctx);

    nb_tensor *ids = nb_zeros(ctx, NB_I64, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_mean_dim(ctx, ids, 0, false));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "mean_dim: input 1 (2, 3) is i64, expected f32 or f64");
    nb_ctx_clear_error(ctx);

    ck_assert_ptr_null(nb_sum_dim(ctx, a, 3, false));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "sum_dim: dim 3 is out of range for shape (2, 3)");
    nb_ctx_clear_error(ctx);

    ck_assert_ptr_null(nb_mean_dim(ctx, a, -3, true));
    ck_assert_error_has(ctx, "mean_dim: dim -3 is out of range for shape (2, 3)");
    nb_ctx_clear_error(ctx);

    nb_tensor *idx = a; /* must be cleared on failure */
    ck_assert_ptr_null(nb_max_dim(ctx, a, 3, false, &idx));
    ck_assert_ptr_null(idx);
    ck_assert_error_has(ctx, "max_dim: dim 3 is out of range for shape (2, 3)");
    nb_ctx_clear_error(ctx);

    idx = a;
    ck_assert_ptr_null(nb_max_dim(ctx, NULL, 0, false, &idx));
    ck_assert_ptr_null(idx);
    ck_assert_error_has(ctx, "max_dim: input 1 is NULL");
    nb_ctx_clear_error(ctx);

    ck_assert_ptr_null(nb_mean(NULL, a));
    ck_assert_ptr_null(nb_max_dim(NULL, a, 0, false, NULL));
    /* sticky: after an error, valid calls return NULL and keep the message */
    ck_assert_ptr_null(nb_sum_dim(ctx, a, 2, false));
    ck_assert_ptr_null(nb_sum(ctx, a));
    ck_assert_error_has(ctx, "sum_dim: dim 2 is out of range for shape (2, 3)");
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_reduce(void) {
    Suite *s = suite_create("reduce");
    TCase *tc = tcase_create("values");
    tcase_add_test(tc, test_sum_mean_all_values);
    tcase_add_test(tc, test_sum_mean_all_grad);
    tcase_add_test(tc, test_f32_sum_accumulates_in_double);
    tcase_add_test(tc, test_sum_dim_3d_keepdim);
    tcase_add_test(tc, test_mean_dim_negative_dims);
    tcase_add_test(tc, test_sum_mean_dim_4d_every_dim);
    tcase_add_test(tc, test_sum_dim_wide_inner);
    tcase_add_test(tc, test_reduce_1d_and_0d);
    tcase_add_test(tc, test_sum_mean_dim_grad_by_hand);
    tcase_add_test(tc, test_max_dim_values_and_indices);
    tcase_add_test(tc, test_max_dim_all_negative);
    tcase_add_test(tc, test_max_dim_ties_take_first);
    tcase_add_test(tc, test_max_dim_grad_to_argmax);
    tcase_add_test(tc, test_max_dim_4d_keepdim_every_dim);
    tcase_add_test(tc, test_max_dim_nan_propagates);
    tcase_add_test(tc, test_reduce_recording);
    tcase_add_test(tc, test_reduce_errors);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gradients");
    tcase_set_timeout(tg, 30);
    tcase_add_loop_test(tg, test_reduce_gradcheck, 0, N_RCASES);
    tcase_add_test(tg, test_reduce_chain_reusing_input);
    suite_add_tcase(s, tg);
    return s;
}
