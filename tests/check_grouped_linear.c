/* check_grouped_linear.c - grouped_linear against one linear per group (the
 * same bits, forward and backward, at 1 and 2 threads), a group of no rows
 * (a zero gradient for its weight), one weight serving two groups, and its
 * errors. The gradcheck, gradgradcheck, forward-mode and PyTorch parity
 * cases come from its row in the op list. */
#include "check_nabla.h"

#include <math.h>
#include <string.h>

/* Groups of fewer rows than the micro-kernel's sliver (5), of one to two
 * slivers (13) and of many, and out_features (100) no multiple of it: the
 * threads split rows in blocks of the sliver's height, a group's last
 * block taking the rest. */
enum { N_GROUPS = 6, K = 64, N = 100 };
static const int64_t ROWS[N_GROUPS] = {150, 0, 5, 260, 13, 90}; /* 518 rows */

static nb_tensor *filled(nb_ctx *ctx, int64_t r, int64_t c, double seed) {
    nb_tensor *t = nb_empty(ctx, NB_F32, NB_SHAPE(r, c));
    float *d = t->data;
    for (int64_t i = 0; i < r * c; i++) d[i] = (float)sin(seed + 0.731 * (double)i);
    return nb_requires_grad(t);
}

static bool same_floats(const void *a, const void *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* y = grouped_linear(x, w), backward with dout = cos; then the same with
 * one nb_linear per group on copies: every output and gradient the same
 * bits, at 1 and at 2 threads. */
START_TEST(test_grouped_linear_matches_linears) {
    for (int threads = 1; threads <= 2; threads++) {
        nb_set_num_threads(threads);
        nb_ctx *ctx = nb_ctx_new(0);
        int64_t M = 0;
        for (int g = 0; g < N_GROUPS; g++) M += ROWS[g];
        nb_tensor *x = filled(ctx, M, K, 0.3), *w[N_GROUPS], *xg[N_GROUPS], *wg[N_GROUPS];
        for (int g = 0; g < N_GROUPS; g++) w[g] = filled(ctx, N, K, 1.0 + g);
        nb_tensor *y = nb_grouped_linear(ctx, x, N_GROUPS, w, ROWS);
        ck_assert_ptr_nonnull(y);
        ck_assert_int_eq(y->shape[0], M);
        ck_assert_int_eq(y->shape[1], N);
        nb_tensor *dout = filled(ctx, M, N, 2.0);
        ck_assert_int_eq(nb_backward(ctx, y, dout), NB_OK);
        for (int i = 0; i < N * K; i++) /* its group has no rows: zeros, as PyTorch */
            ck_assert_msg(((float *)w[1]->grad)[i] == 0.0f, "w[1]'s gradient %d", i);
        /* the reference: each group's rows copied out, one linear each,
         * in a context (and a tape) of its own */
        nb_ctx *rc = nb_ctx_new(0);
        int64_t r0 = 0;
        for (int g = 0; g < N_GROUPS; g++) {
            if (ROWS[g] == 0) continue;
            xg[g] = nb_requires_grad(nb_empty(rc, NB_F32, NB_SHAPE(ROWS[g], K)));
            memcpy(xg[g]->data, (float *)x->data + r0 * K, (size_t)(ROWS[g] * K) * sizeof(float));
            wg[g] = nb_requires_grad(nb_empty(rc, NB_F32, NB_SHAPE(N, K)));
            memcpy(wg[g]->data, w[g]->data, (size_t)(N * K) * sizeof(float));
            nb_tensor *yg = nb_linear(rc, xg[g], wg[g], NULL);
            ck_assert_msg(same_floats(yg->data, (float *)y->data + r0 * N,
                                      (size_t)(ROWS[g] * N)),
                          "group %d's output at %d threads", g, threads);
            nb_tensor *dg = nb_empty(rc, NB_F32, NB_SHAPE(ROWS[g], N));
            memcpy(dg->data, (float *)dout->data + r0 * N, (size_t)(ROWS[g] * N) * sizeof(float));
            ck_assert_int_eq(nb_backward(rc, yg, dg), NB_OK);
            ck_assert_msg(same_floats(xg[g]->grad, (float *)x->grad + r0 * K,
                                      (size_t)(ROWS[g] * K)),
                          "group %d's dx at %d threads", g, threads);
            ck_assert_msg(same_floats(wg[g]->grad, w[g]->grad, (size_t)(N * K)),
                          "group %d's dw at %d threads", g, threads);
            r0 += ROWS[g];
        }
        nb_ctx_free(rc);
        /* and a value by hand: y[0][0] = x[0] . w[0][0] */
        double s = 0;
        for (int k = 0; k < K; k++) s += nb_get(x, k) * nb_get(w[0], k);
        ck_assert_double_eq_tol(nb_get(y, 0), s, 1e-4);
        nb_ctx_free(ctx);
    }
    nb_set_num_threads(1);
}
END_TEST

/* One weight for two groups: its gradient is the sum of both groups' (the
 * products then run in order on one thread), as one linear over all rows. */
START_TEST(test_grouped_linear_shared_weight) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = filled(ctx, 7, 5, 0.1), *w = filled(ctx, 3, 5, 0.7);
    nb_tensor *ws[2] = {w, w};
    nb_tensor *y = nb_grouped_linear(ctx, x, 2, ws, (const int64_t[]){3, 4});
    ck_assert_int_eq(nb_backward(ctx, y, nb_ones(ctx, NB_F32, NB_SHAPE(7, 3))), NB_OK);
    nb_ctx *rc = nb_ctx_new(0); /* the reference on a tape of its own */
    nb_tensor *x2 = filled(rc, 7, 5, 0.1), *w2 = filled(rc, 3, 5, 0.7);
    nb_tensor *y2 = nb_linear(rc, x2, w2, NULL);
    ck_assert_int_eq(nb_backward(rc, y2, nb_ones(rc, NB_F32, NB_SHAPE(7, 3))), NB_OK);
    for (int i = 0; i < 21; i++) ck_assert_double_eq_tol(nb_get(y, i), nb_get(y2, i), 1e-6);
    for (int i = 0; i < 35; i++) ck_assert_double_eq_tol(nb_grad_get(x, i), nb_grad_get(x2, i), 1e-5);
    for (int i = 0; i < 15; i++) ck_assert_double_eq_tol(nb_grad_get(w, i), nb_grad_get(w2, i), 1e-5);
    nb_ctx_free(rc);
    nb_ctx_free(ctx);
}
END_TEST

/* Empty sizes: no out_features (dx zeros), no rows at all. */
START_TEST(test_grouped_linear_empty) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = filled(ctx, 3, 2, 0.5), *w = nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(0, 2)));
    nb_tensor *ws[2] = {w, w};
    nb_tensor *sq = nb_sum(ctx, nb_mul(ctx, x, x)); /* recorded first: its backward runs last */
    nb_tensor *y = nb_grouped_linear(ctx, x, 2, ws, (const int64_t[]){1, 2});
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->shape[0], 3);
    ck_assert_int_eq(y->shape[1], 0);
    /* grouped_linear's backward writes x's gradient first (zeros), x x's adds 2 x */
    nb_tensor *L = nb_add(ctx, nb_sum(ctx, y), sq);
    ck_assert_int_eq(nb_backward(ctx, L, NULL), NB_OK);
    for (int i = 0; i < 6; i++) ck_assert_double_eq_tol(nb_grad_get(x, i), 2 * nb_get(x, i), 1e-6);
    nb_tensor *x0 = nb_zeros(ctx, NB_F32, NB_SHAPE(0, 2));
    nb_tensor *w1[1] = {nb_ones(ctx, NB_F32, NB_SHAPE(4, 2))};
    nb_tensor *y0 = nb_grouped_linear(ctx, x0, 1, w1, (const int64_t[]){0});
    ck_assert_ptr_nonnull(y0);
    ck_assert_int_eq(y0->shape[0], 0);
    ck_assert_int_eq(y0->shape[1], 4);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_grouped_linear_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(5, 4)), *w = nb_ones(ctx, NB_F32, NB_SHAPE(3, 4));
    nb_tensor *w2[2] = {w, nb_ones(ctx, NB_F32, NB_SHAPE(2, 4))};
    nb_tensor *ws[2] = {w, w};
    ck_assert_ptr_null(nb_grouped_linear(ctx, x, 2, ws, (const int64_t[]){2, 2}));
    ck_assert_error_has(ctx, "grouped_linear: the 2 groups have 4 rows but x (5, 4) has 5");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_grouped_linear(ctx, x, 2, ws, (const int64_t[]){-1, 6}));
    ck_assert_error_has(ctx, "grouped_linear: group 1 has -1 rows");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_grouped_linear(ctx, x, 2, w2, (const int64_t[]){2, 3}));
    ck_assert_error_has(ctx, "grouped_linear: weight 2 (2, 4) does not fit x (5, 4) and weight 1 "
                             "(3, 4)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_grouped_linear(ctx, x, 0, ws, (const int64_t[]){5}));
    ck_assert_error_has(ctx, "grouped_linear: n < 1");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_grouped_linear(ctx, x, 2, ws, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "grouped_linear: rows is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_grouped_linear(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(5)), 1, ws,
                                         (const int64_t[]){5}));
    ck_assert_error_has(ctx, "grouped_linear: x (5) has 1 dims, expected 2");
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_grouped_linear(void) {
    Suite *s = suite_create("grouped_linear");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_grouped_linear_matches_linears);
    tcase_add_test(tc, test_grouped_linear_shared_weight);
    tcase_add_test(tc, test_grouped_linear_empty);
    tcase_add_test(tc, test_grouped_linear_errors);
    suite_add_tcase(s, tc);
    return s;
}
