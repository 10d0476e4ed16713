/* check_rope.c - rope and rope_tables: values worked out from the
 * definition, the tables against PyTorch's (tests/fixtures/rope, written by
 * tools/ref/gen_rope_fixtures.py), the interleaved pairing and the (T, H, hd)
 * layout against the plain op on rearranged data, pos0 as a KV cache uses
 * it, the backward as the inverse rotation (first and second order), threads,
 * and the error messages. */
#include "check_nabla.h"

#define ROPE_FIXTURE NB_SOURCE_DIR "/tests/fixtures/rope/tables.safetensors"

/* x (1, 2, 4) at positions 1 and 2 with theta 100: f = (1, 0.1), so pair
 * (x0, x2) turns by p and pair (x1, x3) by p / 10. */
START_TEST(test_rope_values_by_hand) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *tc, *ts;
    ck_assert_int_eq(nb_rope_tables(ctx, 4, 3, 100.0, NULL, NB_F64, &tc, &ts), NB_OK);
    ck_assert_int_eq(tc->ndim, 2);
    ck_assert_int_eq(tc->shape[0], 3);
    ck_assert_int_eq(tc->shape[1], 4);
    const double xs[8] = {1, 2, 3, 4, -0.5, 0.25, 2, -1};
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(1, 2, 4), xs));
    nb_tensor *y = nb_rope(ctx, x, tc, ts, 1, 0);
    ck_assert_ptr_nonnull(y);
    double want[8], dwant[8];
    for (int t = 0; t < 2; t++) {
        const double *v = xs + 4 * t;
        double a0 = t + 1.0, a1 = (t + 1.0) / 10; /* the angles of the two pairs */
        double *w = want + 4 * t, *d = dwant + 4 * t;
        w[0] = v[0] * cos(a0) - v[2] * sin(a0);
        w[2] = v[2] * cos(a0) + v[0] * sin(a0);
        w[1] = v[1] * cos(a1) - v[3] * sin(a1);
        w[3] = v[3] * cos(a1) + v[1] * sin(a1);
        /* d sum(y * g) / dx with g = (1, 2, 3, 4): g turned back by the angles */
        d[0] = 1 * cos(a0) + 3 * sin(a0);
        d[2] = 3 * cos(a0) - 1 * sin(a0);
        d[1] = 2 * cos(a1) + 4 * sin(a1);
        d[3] = 4 * cos(a1) - 2 * sin(a1);
    }
    const double gs[8] = {1, 2, 3, 4, 1, 2, 3, 4};
    nb_tensor *g = nb_from_doubles(ctx, NB_F64, NB_SHAPE(1, 2, 4), gs);
    ck_assert_int_eq(nb_backward(ctx, y, g), NB_OK);
    for (int i = 0; i < 8; i++) {
        ck_assert_double_eq_tol(nb_get(y, i), want[i], 1e-15);
        ck_assert_double_eq_tol(nb_grad_get(x, i), dwant[i], 1e-15);
    }
    /* position 0 is the identity */
    nb_tensor *y0 = nb_rope(ctx, x, tc, ts, 0, 0);
    for (int i = 0; i < 4; i++) ck_assert_double_eq(nb_get(y0, i), xs[i]);
    nb_ctx_free(ctx);
}
END_TEST

/* The largest |a - b| over n entries of two tensors. */
static double max_diff(const nb_tensor *a, size_t a0, const nb_tensor *b, size_t b0, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(nb_get(a, a0 + i) - nb_get(b, b0 + i)));
    return m;
}

/* Plain RoPE and Llama 3.2 1B's scaled tables against PyTorch's, computed in
 * float64; float32 tables are those values rounded once. */
START_TEST(test_rope_tables_match_pytorch) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list fx = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, ROPE_FIXTURE, &fx), NB_OK);
    nb_tensor *tc, *ts, *cos32, *sin32;
    ck_assert_int_eq(nb_rope_tables(ctx, 16, 32, 10000, NULL, NB_F64, &tc, &ts), NB_OK);
    ck_assert_double_le(max_diff(tc, 0, nb_list_get(&fx, "plain.cos"), 0, 32 * 16), 1e-15);
    ck_assert_double_le(max_diff(ts, 0, nb_list_get(&fx, "plain.sin"), 0, 32 * 16), 1e-15);
    const nb_rope_scaling llama32 = {32, 1, 4, 8192};
    ck_assert_int_eq(nb_rope_tables(ctx, 64, 8192, 500000, &llama32, NB_F64, &tc, &ts), NB_OK);
    ck_assert_int_eq(nb_rope_tables(ctx, 64, 8192, 500000, &llama32, NB_F32, &cos32, &sin32),
                     NB_OK);
    const nb_tensor *rows = nb_list_get(&fx, "llama3.rows");
    const nb_tensor *want_c = nb_list_get(&fx, "llama3.cos"), *want_s = nb_list_get(&fx, "llama3.sin");
    ck_assert_ptr_nonnull(rows);
    ck_assert_int_eq((int)rows->numel, 8);
    for (size_t k = 0; k < rows->numel; k++) {
        size_t p = (size_t)nb_get(rows, k);
        /* torch's pow differs from the C library's in one f_i's last bit,
         * which position p multiplies: 1.7e-15 at most */
        ck_assert_double_le(max_diff(tc, p * 64, want_c, k * 64, 64), 1e-14);
        ck_assert_double_le(max_diff(ts, p * 64, want_s, k * 64, 64), 1e-14);
        for (size_t i = 0; i < 64; i++) {
            ck_assert(nb_get(cos32, p * 64 + i) == (double)(float)nb_get(tc, p * 64 + i));
            ck_assert(nb_get(sin32, p * 64 + i) == (double)(float)nb_get(ts, p * 64 + i));
        }
    }
    /* the scaling: position 1's angles are the frequencies; the highest 15
     * stay theta^(-2i/64), the lowest 14 are divided by 32, three blend */
    const nb_tensor *f = nb_list_get(&fx, "llama3.inv_freq");
    for (int i = 0; i < 32; i++) {
        double angle = atan2(nb_get(ts, 64 + i), nb_get(tc, 64 + i));
        double plain = 1.0 / pow(500000.0, 2.0 * i / 64);
        ck_assert_double_eq_tol(angle, nb_get(f, i), 1e-15);
        if (i < 15) ck_assert_double_eq_tol(angle, plain, 1e-15);
        if (i >= 18) ck_assert_double_eq_tol(angle, plain / 32, 1e-16);
        if (i >= 15 && i < 18) ck_assert(angle < plain && angle > plain / 32);
    }
    nb_list_free(&fx);
    nb_ctx_free(ctx);
}
END_TEST

/* x of the given shape, filled with values in [-7.7, 8.2] that repeat only
 * every 23 x 61 entries */
static nb_tensor *ramp(nb_ctx *ctx, nb_dtype dt, int nd, const int64_t *shape) {
    nb_tensor *x = nb_empty(ctx, dt, nd, shape);
    for (size_t i = 0; x && i < x->numel; i++) nb_set(x, i, 0.1 + 0.37 * (double)(i % 23) - 0.13 * (double)(i % 61));
    return x;
}

/* Interleaved pairs (2i, 2i + 1) are the halves' rotation of x's even then
 * odd entries, in both dtypes, values and gradients, bit for bit. */
START_TEST(test_rope_interleaved_is_halves_permuted) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *tc, *ts;
        ck_assert_int_eq(nb_rope_tables(ctx, 8, 10, 10000, NULL, dt, &tc, &ts), NB_OK);
        nb_tensor *x = nb_requires_grad(ramp(ctx, dt, NB_SHAPE(2, 3, 8)));
        nb_tensor *xp = nb_requires_grad(nb_zeros(ctx, dt, NB_SHAPE(2, 3, 8)));
        for (size_t r = 0; r < 6; r++)
            for (size_t i = 0; i < 4; i++) {
                nb_set(xp, r * 8 + i, nb_get(x, r * 8 + 2 * i));
                nb_set(xp, r * 8 + 4 + i, nb_get(x, r * 8 + 2 * i + 1));
            }
        nb_tensor *y = nb_rope(ctx, x, tc, ts, 4, NB_ROPE_INTERLEAVED);
        nb_tensor *yp = nb_rope(ctx, xp, tc, ts, 4, 0);
        nb_tensor *g = ramp(ctx, dt, NB_SHAPE(2, 3, 8)), *gp = nb_zeros(ctx, dt, NB_SHAPE(2, 3, 8));
        for (size_t r = 0; r < 6; r++)
            for (size_t i = 0; i < 4; i++) {
                ck_assert(nb_get(y, r * 8 + 2 * i) == nb_get(yp, r * 8 + i));
                ck_assert(nb_get(y, r * 8 + 2 * i + 1) == nb_get(yp, r * 8 + 4 + i));
                nb_set(gp, r * 8 + i, nb_get(g, r * 8 + 2 * i));
                nb_set(gp, r * 8 + 4 + i, nb_get(g, r * 8 + 2 * i + 1));
            }
        ck_assert_int_eq(nb_backward(ctx, y, g), NB_OK);
        ck_assert_int_eq(nb_backward(ctx, yp, gp), NB_OK);
        for (size_t r = 0; r < 6; r++)
            for (size_t i = 0; i < 4; i++) {
                ck_assert(nb_grad_get(x, r * 8 + 2 * i) == nb_grad_get(xp, r * 8 + i));
                ck_assert(nb_grad_get(x, r * 8 + 2 * i + 1) == nb_grad_get(xp, r * 8 + 4 + i));
            }
        nb_ctx_free(ctx);
    }
}
END_TEST

/* NB_ROPE_THD on (B, T, H, hd) equals the plain op on (B, H, T, hd), values
 * and gradients, bit for bit; and it is what the projections feed nb_sdpa. */
START_TEST(test_rope_thd_is_plain_transposed) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *tc, *ts;
    ck_assert_int_eq(nb_rope_tables(ctx, 6, 9, 500, NULL, NB_F32, &tc, &ts), NB_OK);
    nb_tensor *x = nb_requires_grad(ramp(ctx, NB_F32, NB_SHAPE(2, 5, 3, 6)));
    nb_tensor *y = nb_rope(ctx, x, tc, ts, 2, NB_ROPE_THD);
    nb_tensor *xt = nb_transpose(ctx, x, 1, 2); /* (2, 3, 5, 6) */
    nb_tensor *yt = nb_transpose(ctx, nb_rope(ctx, xt, tc, ts, 2, 0), 1, 2);
    ck_assert_int_eq(y->ndim, 4);
    for (size_t i = 0; i < y->numel; i++) ck_assert(nb_get(y, i) == nb_get(yt, i));
    nb_tensor *g = ramp(ctx, NB_F32, NB_SHAPE(2, 5, 3, 6)), *dx[2];
    nb_tensor *outs[2] = {y, yt}, *gouts[2] = {g, g};
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(nb_grad(ctx, 1, &outs[k], &gouts[k], 1, &x, NULL, &dx[k]), NB_OK);
    for (size_t i = 0; i < x->numel; i++) ck_assert(nb_get(dx[0], i) == nb_get(dx[1], i));
    /* straight into the fused attention */
    nb_tensor *q = nb_rope(ctx, x, tc, ts, 0, NB_ROPE_THD);
    ck_assert_ptr_nonnull(nb_sdpa(ctx, q, q, x, NULL, true, 0.4, 0, 0));
    nb_ctx_free(ctx);
}
END_TEST

/* pos0: a chunk of positions from pos0 on is the same rows of the whole
 * sequence's result (a KV cache's new tokens); and a query at m against a
 * key at n depends only on m - n. */
START_TEST(test_rope_pos0_and_relative_positions) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *tc, *ts;
    const nb_rope_scaling llama3 = {8, 1, 4, 64};
    ck_assert_int_eq(nb_rope_tables(ctx, 8, 40, 10000, &llama3, NB_F64, &tc, &ts), NB_OK);
    nb_tensor *x = ramp(ctx, NB_F64, NB_SHAPE(2, 7, 8));
    nb_tensor *all = nb_rope(ctx, x, tc, ts, 0, 0);
    nb_tensor *parts[2];
    ck_assert_int_eq(nb_split(ctx, x, 1, 2, (const int64_t[]){3, 4}, parts), NB_OK);
    nb_tensor *tail = nb_rope(ctx, parts[1], tc, ts, 3, 0); /* positions 3..6 */
    for (size_t b = 0; b < 2; b++)
        for (size_t i = 0; i < 4 * 8; i++)
            ck_assert(nb_get(tail, b * 32 + i) == nb_get(all, b * 56 + 3 * 8 + i));
    nb_tensor *q = ramp(ctx, NB_F64, NB_SHAPE(1, 8)), *k = nb_scale(ctx, ramp(ctx, NB_F64, NB_SHAPE(1, 8)), -0.7);
    const int64_t at[3][2] = {{5, 2}, {13, 10}, {39, 36}};
    double dot[3];
    for (int c = 0; c < 3; c++) {
        nb_tensor *qr = nb_rope(ctx, q, tc, ts, at[c][0], 0), *kr = nb_rope(ctx, k, tc, ts, at[c][1], 0);
        dot[c] = nb_get(nb_sum(ctx, nb_mul(ctx, qr, kr)), 0);
    }
    ck_assert_double_eq_tol(dot[1], dot[0], 1e-13);
    ck_assert_double_eq_tol(dot[2], dot[0], 1e-13);
    nb_ctx_free(ctx);
}
END_TEST

/* With tables of one angle per pair the backward is the inverse rotation:
 * rope(dx) gives dout back, and dx is rope of dout with sin negated. The
 * graph backward (create_graph) gives the same bits and is itself a rope
 * node, so gradients of gradients go through it. */
START_TEST(test_rope_backward_is_inverse_rotation) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *tc, *ts;
        ck_assert_int_eq(nb_rope_tables(ctx, 6, 12, 10000, NULL, dt, &tc, &ts), NB_OK);
        nb_tensor *x = nb_requires_grad(ramp(ctx, dt, NB_SHAPE(2, 5, 6)));
        /* g requires grad, so that its gradient (the graph backward) is recorded */
        nb_tensor *g = nb_requires_grad(nb_scale(ctx, ramp(ctx, dt, NB_SHAPE(2, 5, 6)), 0.5));
        nb_tensor *y = nb_rope(ctx, x, tc, ts, 7, NB_ROPE_INTERLEAVED), *dx, *dxg;
        ck_assert_int_eq(nb_grad(ctx, 1, &y, &g, 1, &x, NULL, &dx), NB_OK);
        nb_grad_opts cg = {.create_graph = true};
        ck_assert_int_eq(nb_grad(ctx, 1, &y, &g, 1, &x, &cg, &dxg), NB_OK);
        ck_assert_ptr_nonnull(dxg->node);
        ck_assert_str_eq(nb_node_name(dxg->node), "rope");
        nb_tensor *back = nb_rope(ctx, dx, tc, ts, 7, NB_ROPE_INTERLEAVED);
        nb_tensor *neg = nb_rope(ctx, g, tc, nb_neg(ctx, ts), 7, NB_ROPE_INTERLEAVED);
        double tol = dt == NB_F32 ? 1e-6 : 1e-15;
        for (size_t i = 0; i < x->numel; i++) {
            ck_assert(nb_get(dxg, i) == nb_get(dx, i));
            ck_assert_double_eq_tol(nb_get(back, i), nb_get(g, i), tol);
            ck_assert(nb_get(neg, i) == nb_get(dx, i));
        }
        nb_ctx_free(ctx);
    }
}
END_TEST

/* float32 follows float64 to rounding; an (8, 64, 4, 64) input splits over
 * the threads with the same bits as on one, forward and backward. */
START_TEST(test_rope_f32_and_threads) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *c64, *s64, *c32, *s32;
    ck_assert_int_eq(nb_rope_tables(ctx, 64, 100, 500000, NULL, NB_F64, &c64, &s64), NB_OK);
    ck_assert_int_eq(nb_rope_tables(ctx, 64, 100, 500000, NULL, NB_F32, &c32, &s32), NB_OK);
    nb_tensor *x64 = ramp(ctx, NB_F64, NB_SHAPE(8, 64, 4, 64));
    nb_tensor *x32 = nb_requires_grad(nb_copy(ctx, x64, NB_F32));
    nb_tensor *y64 = nb_rope(ctx, x64, c64, s64, 30, NB_ROPE_THD);
    int was = nb_set_num_threads(1);
    nb_tensor *y1 = nb_rope(ctx, x32, c32, s32, 30, NB_ROPE_THD), *d1, *d2;
    ck_assert_int_eq(nb_grad(ctx, 1, &y1, &y1, 1, &x32, NULL, &d1), NB_OK);
    ck_assert_int_eq(nb_set_num_threads(2), 2);
    nb_tensor *y2 = nb_rope(ctx, x32, c32, s32, 30, NB_ROPE_THD);
    ck_assert_int_eq(nb_grad(ctx, 1, &y2, &y2, 1, &x32, NULL, &d2), NB_OK);
    nb_set_num_threads(was);
    ck_assert_int_eq(memcmp(y1->data, y2->data, y1->numel * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(d1->data, d2->data, d1->numel * sizeof(float)), 0);
    double err = 0;
    for (size_t i = 0; i < x64->numel; i++)
        err = fmax(err, fabs(nb_get(y1, i) - nb_get(y64, i)) / (1 + fabs(nb_get(y64, i))));
    ck_assert_double_le(err, 1e-6);
    nb_ctx_free(ctx);
}
END_TEST

/* The messages say what is wrong, with the numbers. */
START_TEST(test_rope_error_messages) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *tc, *ts;
    ck_assert_int_eq(nb_rope_tables(ctx, 4, 6, 10000, NULL, NB_F32, &tc, &ts), NB_OK);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(2, 4, 4));
    ck_assert_ptr_null(nb_rope(ctx, x, tc, ts, 3, 0));
    ck_assert_error_has(ctx, "rope: x (2, 4, 4) has T = 4 positions from pos0 = 3");
    ck_assert_error_has(ctx, "hold 6");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_rope(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(4, 3)), tc, ts, 0, 0));
    ck_assert_error_has(ctx, "head_dim 3, odd");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_rope(ctx, x, tc, ts, -2, 0));
    ck_assert_error_has(ctx, "pos0 = -2");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_rope_tables(ctx, 5, 6, 10000, NULL, NB_F32, &tc, &ts), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "rope_tables: head_dim = 5");
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_rope(void) {
    Suite *s = suite_create("rope");
    TCase *t = tcase_create("rope");
    tcase_add_test(t, test_rope_values_by_hand);
    tcase_add_test(t, test_rope_tables_match_pytorch);
    tcase_add_test(t, test_rope_interleaved_is_halves_permuted);
    tcase_add_test(t, test_rope_thd_is_plain_transposed);
    tcase_add_test(t, test_rope_pos0_and_relative_positions);
    tcase_add_test(t, test_rope_backward_is_inverse_rotation);
    tcase_add_test(t, test_rope_f32_and_threads);
    tcase_add_test(t, test_rope_error_messages);
    suite_add_tcase(s, t);
    return s;
}
