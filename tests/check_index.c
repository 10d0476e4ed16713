/* check_index.c - topk, index_select and index_add: values and indices by
 * hand (ties, NaN, every dim, both selection paths), gradients by hand,
 * repeated ids, the saved copy of idx, the same bits on any thread count,
 * and a top-2 mixture-of-experts layer composed from them (gradcheck and
 * gradgradcheck in float64; an expert no token chose does not run: it
 * records nothing and its weights get no gradient). */
#include "check_nabla.h"

#include "moe_layer.h"

static nb_tensor *ids(nb_ctx *ctx, int64_t n, const int64_t *v) {
    return nb_from_data(ctx, NB_I64, 1, (const int64_t[]){n}, v);
}

static void assert_ids(const nb_tensor *t, const int64_t *want, size_t n) {
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, NB_I64);
    ck_assert_uint_eq(t->numel, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(((const int64_t *)t->data)[i] == want[i], "index %zu: got %lld, want %lld",
                      i, (long long)((const int64_t *)t->data)[i], (long long)want[i]);
}

/* ---- topk ------------------------------------------------------------------------ */

START_TEST(test_topk_last_dim) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = nb_from_doubles(ctx, dt, NB_SHAPE(2, 5),
                                       (double[]){0.5, -1, 2.25, 7, 0, -3, -2, -8, -2.5, -0.5});
        nb_tensor *idx;
        nb_tensor *v = nb_topk(ctx, x, 3, -1, &idx);
        ck_assert_int_eq(v->ndim, 2);
        ck_assert_int_eq(v->shape[1], 3);
        ck_assert_tensor_near(v, ((double[]){7, 2.25, 0.5, -0.5, -2, -2.5}), 6, 0);
        assert_ids(idx, (const int64_t[]){3, 2, 0, 4, 1, 3}, 6);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* dim 1 of (2, 3, 2): lanes run across the middle dim */
START_TEST(test_topk_middle_and_first_dim) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 3, 2),
                                   (double[]){1, 6, 5, 2, 3, 4, /**/ -1, 0, -3, 9, -2, 8});
    nb_tensor *idx;
    nb_tensor *v = nb_topk(ctx, x, 2, 1, &idx);
    ck_assert_tensor_near(v, ((double[]){5, 6, 3, 4, -1, 9, -2, 8}), 8, 0);
    assert_ids(idx, (const int64_t[]){1, 0, 2, 2, 0, 1, 2, 2}, 8);
    v = nb_topk(ctx, x, 1, 0, &idx); /* (1, 3, 2) */
    ck_assert_tensor_near(v, ((double[]){1, 6, 5, 9, 3, 8}), 6, 0);
    assert_ids(idx, (const int64_t[]){0, 0, 0, 1, 0, 1}, 6);
    nb_ctx_free(ctx);
}
END_TEST

/* Equal values come lower index first, a NaN above everything (NaNs by
 * index), on both paths: insertion (k <= 16) and the full sort (k > 16). */
START_TEST(test_topk_ties_and_nan) {
    nb_ctx *ctx = nb_ctx_new(0);
    double row[40];
    for (int i = 0; i < 40; i++) row[i] = (double)((i * 7) % 3); /* 0, 1, 2 repeated */
    row[11] = NAN, row[5] = NAN;
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(1, 40), row);
    nb_tensor *i_small, *i_big;
    nb_tensor *v_small = nb_topk(ctx, x, 16, 1, &i_small);
    nb_tensor *v_big = nb_topk(ctx, x, 40, 1, &i_big);
    const int64_t *a = i_small->data, *b = i_big->data;
    ck_assert_int_eq(a[0], 5);
    ck_assert_int_eq(a[1], 11);
    ck_assert(isnan(nb_get(v_small, 0)) && isnan(nb_get(v_big, 1)));
    for (int j = 0; j < 16; j++) ck_assert_int_eq(a[j], b[j]); /* the paths agree */
    for (int j = 2; j < 40; j++) {
        double prev = nb_get(v_big, (size_t)j - 1), cur = nb_get(v_big, (size_t)j);
        ck_assert_double_eq(cur, row[b[j]]);
        ck_assert(prev > cur || (prev == cur && b[j - 1] < b[j]) || j == 2);
    }
    /* all equal: 0, 1, 2, ... */
    nb_tensor *ones = nb_ones(ctx, NB_F32, NB_SHAPE(3, 5));
    nb_tensor *idx;
    nb_topk(ctx, ones, 4, 1, &idx);
    assert_ids(idx, (const int64_t[]){0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, 12);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_topk_k_edges) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 3), (double[]){3, 1, 2, 4, 6, 5});
    nb_tensor *idx;
    nb_tensor *v = nb_topk(ctx, x, 0, 1, &idx); /* (2, 0), as PyTorch */
    ck_assert_int_eq(v->shape[1], 0);
    ck_assert_uint_eq(idx->numel, 0);
    v = nb_topk(ctx, x, 3, 1, &idx); /* k = n: a descending sort */
    ck_assert_tensor_near(v, ((double[]){3, 2, 1, 6, 5, 4}), 6, 0);
    assert_ids(idx, (const int64_t[]){0, 2, 1, 1, 2, 0}, 6);
    v = nb_topk(ctx, nb_scalar(ctx, NB_F64, 2.5), 1, 0, &idx); /* 0-dim */
    ck_assert_int_eq(v->ndim, 0);
    ck_assert_double_eq(nb_item(v), 2.5);
    assert_ids(idx, (const int64_t[]){0}, 1);
    ck_assert_ptr_null(nb_topk(ctx, x, 4, 1, NULL));
    ck_assert_error_has(ctx, "topk: k = 4 is out of range for x (2, 3) along dim 1");
    nb_ctx_free(ctx);
}
END_TEST

/* d/dx sum(w * topk(x)): w at the chosen positions, 0 elsewhere */
START_TEST(test_topk_grad_by_hand) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, dt, NB_SHAPE(2, 4),
                                                        (double[]){1, 4, 2, 3, 8, 5, 7, 6}));
        nb_tensor *w = nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){10, 20, 30, 40});
        ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, nb_mul(ctx, nb_topk(ctx, x, 2, 1, NULL),
                                                             w)), NULL), NB_OK);
        const double want[8] = {0, 10, 0, 20, 30, 0, 40, 0};
        for (size_t i = 0; i < 8; i++) ck_assert_double_eq(nb_grad_get(x, i), want[i]);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* ---- index_select and index_add ------------------------------------------------------ */

START_TEST(test_index_select_values_and_grad) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, dt, NB_SHAPE(3, 2),
                                                        (double[]){1, 2, 3, 4, 5, 6}));
        int64_t v[4] = {2, 0, 2, 2};
        nb_tensor *idx = ids(ctx, 4, v);
        nb_tensor *y = nb_index_select(ctx, x, idx);
        ck_assert_int_eq(y->shape[0], 4);
        ck_assert_tensor_near(y, ((double[]){5, 6, 1, 2, 5, 6, 5, 6}), 8, 0);
        ((int64_t *)idx->data)[0] = 1; /* the op kept its own copy */
        nb_tensor *w = nb_from_doubles(ctx, dt, NB_SHAPE(4, 2), (double[]){1, 2, 3, 4, 5, 6, 7, 8});
        ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, nb_mul(ctx, y, w)), NULL), NB_OK);
        /* row 0 gets w's row 1; row 2 gets rows 0, 2 and 3 added; row 1 nothing */
        const double want[6] = {3, 4, 0, 0, 13, 16};
        for (size_t i = 0; i < 6; i++) ck_assert_double_eq(nb_grad_get(x, i), want[i]);
        /* no ids: (0, 2) */
        nb_tensor *e = nb_index_select(ctx, x, nb_zeros(ctx, NB_I64, NB_SHAPE(0)));
        ck_assert_int_eq(e->ndim, 2);
        ck_assert_int_eq(e->shape[0], 0);
        ck_assert_int_eq(e->shape[1], 2);
        /* rows of no elements: x (3, 0) gives (2, 0); index_add with no ids is base */
        nb_tensor *z = nb_index_select(ctx, nb_zeros(ctx, dt, NB_SHAPE(3, 0)), ids(ctx, 2, v));
        ck_assert_int_eq(z->shape[0], 2);
        ck_assert_uint_eq(z->numel, 0);
        nb_tensor *none = nb_zeros(ctx, NB_I64, NB_SHAPE(0));
        nb_tensor *same = nb_index_add(ctx, x, none, nb_zeros(ctx, dt, NB_SHAPE(0, 2)));
        ck_assert_tensor_near(same, ((double[]){1, 2, 3, 4, 5, 6}), 6, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_index_add_values_and_grad) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *base = nb_requires_grad(nb_from_doubles(ctx, dt, NB_SHAPE(3, 2),
                                                           (double[]){1, 1, 1, 1, 1, 1}));
        nb_tensor *src = nb_requires_grad(nb_from_doubles(ctx, dt, NB_SHAPE(4, 2),
                                                          (double[]){1, 2, 3, 4, 5, 6, 7, 8}));
        nb_tensor *idx = ids(ctx, 4, (const int64_t[]){2, 0, 2, 2});
        nb_tensor *y = nb_index_add(ctx, base, idx, src);
        ck_assert_tensor_near(y, ((double[]){4, 5, 1, 1, 14, 17}), 6, 0);
        ck_assert_double_eq(nb_get(base, 0), 1); /* base untouched */
        nb_tensor *w = nb_from_doubles(ctx, dt, NB_SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6});
        ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, nb_mul(ctx, y, w)), NULL), NB_OK);
        for (size_t i = 0; i < 6; i++) ck_assert_double_eq(nb_grad_get(base, i), (double)i + 1);
        const double dsrc[8] = {5, 6, 1, 2, 5, 6, 5, 6}; /* w's rows 2, 0, 2, 2 */
        for (size_t i = 0; i < 8; i++) ck_assert_double_eq(nb_grad_get(src, i), dsrc[i]);
        /* a constant base (zeros): only src gets a gradient */
        nb_tensor *z = nb_zeros(ctx, dt, NB_SHAPE(3, 2));
        nb_zero_grad(src);
        ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, nb_index_add(ctx, z, idx, src)), NULL),
                         NB_OK);
        ck_assert_ptr_null(z->grad);
        ck_assert_double_eq(nb_grad_get(src, 7), 1);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* Many ids on few rows, wide rows: the scatter-add gives the same bits on
 * 1 and 2 threads, equal to a plain serial sum in the order of idx. */
START_TEST(test_index_add_same_bits_any_threads) {
    const int64_t P = 3000, N = 7, D = 300;
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 1);
    nb_tensor *src = nb_requires_grad(nb_normal(ctx, NB_F32, NB_SHAPE(P, D), 0, 1, &rng));
    nb_tensor *base = nb_normal(ctx, NB_F32, NB_SHAPE(N, D), 0, 1, &rng);
    nb_tensor *idx = nb_empty(ctx, NB_I64, NB_SHAPE(P));
    int64_t *id = idx->data;
    for (int64_t p = 0; p < P; p++) id[p] = (p * 5 + p / 7) % N;
    float *want = malloc((size_t)(N * D) * sizeof *want);
    memcpy(want, base->data, (size_t)(N * D) * sizeof *want);
    const float *s = src->data;
    for (int64_t p = 0; p < P; p++)
        for (int64_t c = 0; c < D; c++) want[id[p] * D + c] += s[p * D + c];
    nb_tensor *gx[2];
    for (int th = 1; th <= 2; th++) {
        nb_set_num_threads(th);
        nb_tensor *y = nb_index_add(ctx, base, idx, src);
        ck_assert_int_eq(memcmp(y->data, want, (size_t)(N * D) * sizeof *want), 0);
        /* and index_select's backward, the same scatter */
        nb_tensor *x = nb_requires_grad(nb_normal(ctx, NB_F32, NB_SHAPE(N, D), 0, 1, &rng));
        ck_assert_int_eq(nb_backward(ctx, nb_index_select(ctx, x, idx), src), NB_OK);
        gx[th - 1] = x;
    }
    nb_set_num_threads(1);
    ck_assert_int_eq(memcmp(gx[0]->grad, gx[1]->grad, (size_t)(N * D) * sizeof(float)), 0);
    /* from zeros, in the order of idx */
    memset(want, 0, (size_t)(N * D) * sizeof *want);
    for (int64_t p = 0; p < P; p++)
        for (int64_t c = 0; c < D; c++) want[id[p] * D + c] += s[p * D + c];
    ck_assert_int_eq(memcmp(gx[0]->grad, want, (size_t)(N * D) * sizeof *want), 0);
    free(want);
    nb_ctx_free(ctx);
}
END_TEST

/* The row gathers on 1 and 2 threads (rows split between the threads):
 * index_select's rows x[idx[p]], and index_add's gradient for src,
 * dout[idx[p]] added to what src's gradient held. */
START_TEST(test_index_gathers_any_threads) {
    const int64_t P = 3000, N = 7, D = 300;
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 6, 1);
    nb_tensor *x = nb_normal(ctx, NB_F32, NB_SHAPE(N, D), 0, 1, &rng);
    nb_tensor *dout = nb_normal(ctx, NB_F32, NB_SHAPE(N, D), 0, 1, &rng);
    nb_tensor *idx = nb_empty(ctx, NB_I64, NB_SHAPE(P));
    int64_t *id = idx->data;
    for (int64_t p = 0; p < P; p++) id[p] = (p * 3 + p / 5) % N;
    const float *xs = x->data, *ds = dout->data;
    for (int th = 1; th <= 2; th++) {
        nb_set_num_threads(th);
        nb_tensor *y = nb_index_select(ctx, x, idx);
        int64_t wrong = 0;
        for (int64_t p = 0; p < P; p++)
            wrong += memcmp((float *)y->data + p * D, xs + id[p] * D, (size_t)D * sizeof(float)) != 0;
        ck_assert_msg(wrong == 0, "index_select: %lld rows wrong at %d threads", (long long)wrong,
                      th);
        nb_tensor *src = nb_requires_grad(nb_normal(ctx, NB_F32, NB_SHAPE(P, D), 0, 1, &rng));
        nb_tensor *base = nb_zeros(ctx, NB_F32, NB_SHAPE(N, D));
        /* twice: the second backward adds to the gradient the first stored */
        for (int rep = 1; rep <= 2; rep++) {
            ck_assert_int_eq(nb_backward(ctx, nb_index_add(ctx, base, idx, src), dout), NB_OK);
            const float *g = src->grad;
            int64_t wrong = 0;
            for (int64_t p = 0; p < P; p++)
                for (int64_t c = 0; c < D; c++)
                    wrong += g[p * D + c] != (float)rep * ds[id[p] * D + c];
            ck_assert_msg(wrong == 0, "index_add's dsrc: %lld elements wrong at %d threads, "
                          "backward %d", (long long)wrong, th, rep);
        }
    }
    nb_set_num_threads(1);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- a top-2 mixture-of-experts layer ------------------------------------------------
 * x (6, 4), router (4, 4), 4 experts of hidden 3 with biases: inputs x,
 * router, then w1, b1, w2, b2 of each expert. */
enum { MOE_T = 6, MOE_D = 4, MOE_E = 4, MOE_H = 3, MOE_K = 2, MOE_N_IN = 2 + 4 * MOE_E };

static nb_tensor *f_moe(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    moe_expert ex[MOE_E];
    for (int e = 0; e < MOE_E; e++)
        ex[e] = (moe_expert){in[2 + 4 * e], in[3 + 4 * e], in[4 + 4 * e], in[5 + 4 * e]};
    return moe_layer(ctx, in[0], in[1], MOE_E, ex, MOE_K);
}

static void moe_inputs(nb_ctx *ctx, nb_dtype dt, nb_tensor **in) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 34, 2);
    in[0] = nb_normal(ctx, dt, NB_SHAPE(MOE_T, MOE_D), 0, 1, &rng);
    in[1] = nb_normal(ctx, dt, NB_SHAPE(MOE_E, MOE_D), 0, 1, &rng);
    for (int e = 0; e < MOE_E; e++) {
        in[2 + 4 * e] = nb_normal(ctx, dt, NB_SHAPE(MOE_H, MOE_D), 0, 0.5, &rng);
        in[3 + 4 * e] = nb_normal(ctx, dt, NB_SHAPE(MOE_H), 0, 0.5, &rng);
        in[4 + 4 * e] = nb_normal(ctx, dt, NB_SHAPE(MOE_D, MOE_H), 0, 0.5, &rng);
        in[5 + 4 * e] = nb_normal(ctx, dt, NB_SHAPE(MOE_D), 0, 0.5, &rng);
    }
    for (int i = 0; i < MOE_N_IN; i++) nb_requires_grad(in[i]);
}

START_TEST(test_moe_gradcheck) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[MOE_N_IN];
    moe_inputs(ctx, NB_F64, in);
    nb_gradcheck_result r;
    ck_assert_msg(nb_gradcheck(ctx, f_moe, NULL, MOE_N_IN, in, NULL, &r) == NB_OK, "%s",
                  r.message);
    ck_assert(r.passed && r.max_abs_err < 1e-7);
    ck_assert_msg(nb_gradgradcheck(ctx, f_moe, NULL, MOE_N_IN, in, NULL, &r) == NB_OK, "%s",
                  r.message);
    ck_assert(r.passed && r.max_abs_err < 1e-7);
    nb_ctx_free(ctx);
}
END_TEST

/* The layer's output against a plain loop over tokens: each token's two
 * experts (the largest router probabilities), gates renormalised. */
START_TEST(test_moe_values) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[MOE_N_IN];
    moe_inputs(ctx, NB_F64, in);
    nb_tensor *probs = nb_softmax(ctx, nb_linear(ctx, in[0], in[1], NULL));
    nb_tensor *y = f_moe(ctx, in, NULL);
    ck_assert_ptr_nonnull(y);
    moe_expert ex[MOE_E];
    for (int e = 0; e < MOE_E; e++)
        ex[e] = (moe_expert){in[2 + 4 * e], in[3 + 4 * e], in[4 + 4 * e], in[5 + 4 * e]};
    for (int t = 0; t < MOE_T; t++) {
        int a = -1, b = -1; /* the two largest probabilities */
        for (int e = 0; e < MOE_E; e++) {
            double p = nb_get(probs, (size_t)(t * MOE_E + e));
            if (a < 0 || p > nb_get(probs, (size_t)(t * MOE_E + a))) b = a, a = e;
            else if (b < 0 || p > nb_get(probs, (size_t)(t * MOE_E + b))) b = e;
        }
        double pa = nb_get(probs, (size_t)(t * MOE_E + a));
        double pb = nb_get(probs, (size_t)(t * MOE_E + b));
        nb_tensor *xt = nb_from_data(ctx, NB_F64, NB_SHAPE(1, MOE_D),
                                     (const double *)in[0]->data + t * MOE_D); /* token t */
        nb_tensor *ya = moe_expert_mlp(ctx, &ex[a], xt), *yb = moe_expert_mlp(ctx, &ex[b], xt);
        for (int d = 0; d < MOE_D; d++) {
            double want = (pa * nb_get(ya, (size_t)d) + pb * nb_get(yb, (size_t)d)) / (pa + pb);
            ck_assert_double_eq_tol(nb_get(y, (size_t)(t * MOE_D + d)), want, 1e-14);
        }
    }
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_moe_unused_expert_does_not_run) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[MOE_N_IN];
    moe_inputs(ctx, NB_F64, in);
    /* x's first column is 1 for every token; the router reads only it:
     * logits 3, 2, 1, -30 for every token, so experts 0 and 1 take all. */
    for (int t = 0; t < MOE_T; t++) nb_set(in[0], (size_t)(t * MOE_D), 1);
    const double logit[MOE_E] = {3, 2, 1, -30};
    for (int e = 0; e < MOE_E; e++)
        for (int d = 0; d < MOE_D; d++)
            nb_set(in[1], (size_t)(e * MOE_D + d), d == 0 ? logit[e] : 0);
    ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, f_moe(ctx, in, NULL)), NULL), NB_OK);
    /* the tape: router linear, softmax, topk, sum_dim, div, reshape; per
     * expert that ran index_select, linear, silu, linear; then concat,
     * index_select (the gates), mul, index_add and the sum: two experts ran */
    ck_assert_int_eq(nb_tape_len(ctx), 6 + 4 * 2 + 5);
    for (int e = 0; e < MOE_E; e++)
        for (int j = 0; j < 4; j++) {
            const nb_tensor *w = in[2 + 4 * e + j];
            bool nonzero = false;
            for (size_t i = 0; i < w->numel; i++) nonzero = nonzero || nb_grad_get(w, i) != 0;
            ck_assert_msg(nonzero == (e < 2), "expert %d's tensor %d: gradient %s", e, j,
                          nonzero ? "non-zero" : "zero");
        }
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_index(void) {
    Suite *s = suite_create("index");
    TCase *tc = tcase_create("values");
    tcase_add_test(tc, test_topk_last_dim);
    tcase_add_test(tc, test_topk_middle_and_first_dim);
    tcase_add_test(tc, test_topk_ties_and_nan);
    tcase_add_test(tc, test_topk_k_edges);
    tcase_add_test(tc, test_topk_grad_by_hand);
    tcase_add_test(tc, test_index_select_values_and_grad);
    tcase_add_test(tc, test_index_add_values_and_grad);
    tcase_add_test(tc, test_index_add_same_bits_any_threads);
    tcase_add_test(tc, test_index_gathers_any_threads);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("moe");
    tcase_set_timeout(tm, 60);
    tcase_add_test(tm, test_moe_gradcheck);
    tcase_add_test(tm, test_moe_values);
    tcase_add_test(tm, test_moe_unused_expert_does_not_run);
    suite_add_tcase(s, tm);
    return s;
}
