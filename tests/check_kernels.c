/* check_kernels.c - internal kernels that ops share (kernels_internal.h):
 * nb_pcg32_fill gives nb_pcg32_next's bits, dropout's integer form of its
 * mask rule, nb_gemm_<T>'s overwrite mode (C is not read, across the inner
 * blocks too), and uninitialised op outputs never leaking into results. */
#include "check_nabla.h"

#include "kernels/kernels_internal.h"

/* ---- nb_pcg32_fill ----------------------------------------------------------------- */

/* Every length from 0 to 13 (the 4-draw steps and each tail) and a long
 * one: the same draws as nb_pcg32_next, and the same state afterwards. */
START_TEST(test_pcg32_fill_matches_next) {
    uint32_t got[1003];
    size_t lens[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 1003};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        nb_pcg32 a, b;
        nb_pcg32_seed(&a, 42 + k, 54);
        nb_pcg32_seed(&b, 42 + k, 54);
        nb_pcg32_next(&a); /* start off the seed's position */
        nb_pcg32_next(&b);
        nb_pcg32_fill(&a, got, lens[k]);
        for (size_t i = 0; i < lens[k]; i++)
            ck_assert_msg(got[i] == nb_pcg32_next(&b), "length %zu, draw %zu", lens[k], i);
        ck_assert(a.state == b.state);
        ck_assert(a.inc == b.inc);
    }
}
END_TEST

/* The reference pcg32 demo's first outputs for seed (42, 54), as in
 * check_pcg32, through fill. */
START_TEST(test_pcg32_fill_reference_values) {
    nb_pcg32 r;
    nb_pcg32_seed(&r, 42, 54);
    uint32_t got[6];
    nb_pcg32_fill(&r, got, 6);
    const uint32_t want[6] = {0xa15c02b7, 0x7b47f409, 0xba1d3330,
                              0x83d2f293, 0xbfa4784b, 0xcbed606e};
    for (int i = 0; i < 6; i++) ck_assert_uint_eq(got[i], want[i]);
}
END_TEST

/* ---- dropout's mask rule ----------------------------------------------------------- */

/* 7 x 37 = 259 elements (a 256-draw chunk and a 3-draw tail), f32 and
 * f64, for p near the edges and at exact multiples of 2^-24: element i is
 * kept exactly when (double)nb_pcg32_float >= p for the i-th draw, kept
 * values are x / (1 - p), dropped ones +0, and dx gains dy / (1 - p) where
 * kept and stays as it was (0.25) where dropped. */
START_TEST(test_dropout_mask_rule_at_edges) {
    const double ps[] = {1e-9, 0.1, 0.5, 0x1p-24, 1.0 - 0x1p-24, 0.75 + 0x1p-24, 0.999999};
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
            double p = ps[k];
            nb_ctx *ctx = nb_ctx_new(0);
            nb_tensor *x = nb_requires_grad(nb_full(ctx, dt, NB_SHAPE(7, 37), -2.0));
            nb_pcg32 r, ref;
            nb_pcg32_seed(&r, 7 + k, 3);
            nb_pcg32_seed(&ref, 7 + k, 3);
            nb_tensor *y = nb_dropout(ctx, x, p, true, &r);
            ck_assert_ptr_nonnull(y);
            for (size_t i = 0; i < x->numel; i++) { /* dx starts at 0.25 */
                if (dt == NB_F32) ((float *)x->grad)[i] = 0.25f;
                else ((double *)x->grad)[i] = 0.25;
            }
            nb_tensor *dy = nb_full(ctx, dt, NB_SHAPE(7, 37), 1.0);
            ck_assert_int_eq(nb_backward(ctx, y, dy), NB_OK);
            double scale = dt == NB_F32 ? (double)(float)(1.0 / (1.0 - p)) : 1.0 / (1.0 - p);
            for (size_t i = 0; i < x->numel; i++) {
                bool keep = (double)nb_pcg32_float(&ref) >= p;
                double v = nb_get(y, i);
                if (keep) {
                    ck_assert_double_eq_tol(v, -2.0 * scale, 1e-6 * scale);
                    ck_assert_double_eq_tol(nb_grad_get(x, i), 0.25 + scale, 1e-6 * scale);
                } else {
                    ck_assert_msg(v == 0.0 && !signbit(v), "p %g element %zu: got %g", p, i, v);
                    ck_assert(nb_grad_get(x, i) == 0.25);
                }
            }
            ck_assert(r.state == ref.state);
            nb_ctx_free(ctx);
        }
    }
}
END_TEST

/* ---- nb_gemm overwrite mode -------------------------------------------------------- */

/* c (rows, cols) = a (rows, inner) @ b (inner, cols) with c full of NaN
 * before: the NaN never shows, so c is not read. inner 300 spans two inner
 * blocks (the second adds to the first). Compared with add mode on zeros,
 * bit for bit, and with a double reference. */
START_TEST(test_gemm_overwrite_does_not_read_c) {
    enum { ROWS = 13, INNER = 300, COLS = 19 };
    static float a[ROWS * INNER], b[INNER * COLS], c1[ROWS * COLS], c2[ROWS * COLS];
    static double ad[ROWS * INNER], bd[INNER * COLS], d1[ROWS * COLS], d2[ROWS * COLS];
    nb_pcg32 r;
    nb_pcg32_seed(&r, 5, 5);
    for (int i = 0; i < ROWS * INNER; i++) ad[i] = a[i] = nb_pcg32_float(&r) - 0.5f;
    for (int i = 0; i < INNER * COLS; i++) bd[i] = b[i] = nb_pcg32_float(&r) - 0.5f;
    for (int i = 0; i < ROWS * COLS; i++) {
        c1[i] = NAN, c2[i] = 0;
        d1[i] = NAN, d2[i] = 0;
    }
    nb_gemm_float(c1, a, INNER, 1, b, COLS, 1, ROWS, INNER, COLS, false);
    nb_gemm_float(c2, a, INNER, 1, b, COLS, 1, ROWS, INNER, COLS, true);
    nb_gemm_double(d1, ad, INNER, 1, bd, COLS, 1, ROWS, INNER, COLS, false);
    nb_gemm_double(d2, ad, INNER, 1, bd, COLS, 1, ROWS, INNER, COLS, true);
    ck_assert(memcmp(c1, c2, sizeof c1) == 0);
    ck_assert(memcmp(d1, d2, sizeof d1) == 0);
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) {
            double want = 0;
            for (int p = 0; p < INNER; p++) want += ad[i * INNER + p] * bd[p * COLS + j];
            ck_assert_double_eq_tol(c1[i * COLS + j], want, 1e-4);
            ck_assert_double_eq_tol(d1[i * COLS + j], want, 1e-12);
        }
}
END_TEST

/* ---- outputs allocated without the zero fill ---------------------------------------- */

/* An arena whose memory is dirty (a previous step filled it with NaN) gives
 * the same results as a fresh one for the ops whose outputs skip the
 * zero fill, and their gradients start from zero. */
START_TEST(test_raw_outputs_after_dirty_arena) {
    nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(1 << 16), *fresh = nb_ctx_new(1 << 16);
    nb_pcg32 r;
    nb_pcg32_seed(&r, 1, 1);
    nb_tensor *x = nb_requires_grad(nb_uniform(params, NB_F32, NB_SHAPE(2, 5, 8), -1, 1, &r));
    nb_tensor *w = nb_requires_grad(nb_uniform(params, NB_F32, NB_SHAPE(6, 8), -1, 1, &r));
    nb_tensor *bias = nb_requires_grad(nb_uniform(params, NB_F32, NB_SHAPE(6), -1, 1, &r));
    /* dirty the step arena */
    nb_tensor *junk = nb_full(step, NB_F32, NB_SHAPE(16000), NAN);
    ck_assert_ptr_nonnull(junk);
    nb_ctx_reset(step);
    double got[2][3];
    nb_ctx *ctxs[2] = {step, fresh};
    for (int k = 0; k < 2; k++) {
        nb_ctx *c = ctxs[k];
        nb_zero_grad(x), nb_zero_grad(w), nb_zero_grad(bias);
        nb_tensor *y = nb_linear(c, x, w, bias);                       /* (2, 5, 6) */
        nb_tensor *s = nb_softmax(c, nb_causal_fill(c, nb_matmul(c, y, nb_transpose(c, y, 1, 2)),
                                                    -INFINITY));       /* (2, 5, 5) */
        nb_tensor *z = nb_layer_norm(c, nb_mul(c, nb_matmul(c, s, y), nb_tanh(c, y)), NULL, NULL,
                                     1e-5);
        nb_tensor *loss = nb_sum(c, nb_mul(c, z, z));
        ck_assert_int_eq(nb_backward(c, loss, NULL), NB_OK);
        got[k][0] = nb_item(loss);
        got[k][1] = nb_grad_get(w, 7);
        got[k][2] = nb_grad_get(x, 11);
        for (int i = 0; i < 3; i++) ck_assert(isfinite(got[k][i]));
    }
    for (int i = 0; i < 3; i++) ck_assert(got[0][i] == got[1][i]);
    nb_ctx_free(fresh);
    nb_ctx_free(step);
    nb_ctx_free(params);
}
END_TEST

Suite *suite_kernels(void) {
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("kernels");
    tcase_add_test(tc, test_pcg32_fill_matches_next);
    tcase_add_test(tc, test_pcg32_fill_reference_values);
    tcase_add_test(tc, test_dropout_mask_rule_at_edges);
    tcase_add_test(tc, test_gemm_overwrite_does_not_read_c);
    tcase_add_test(tc, test_raw_outputs_after_dirty_arena);
    suite_add_tcase(s, tc);
    return s;
}
