/* check_tape.c - contexts, the tape, backward, grad modes, custom ops,
 * anomaly mode and the no-malloc steady state. */
#include "check_nabla.h"

START_TEST(test_backward_reused_node) {
    /* y = x*x + x, used twice: dy/dx = 2x + 1 */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){1, -2, 0.5}));
    nb_tensor *sq = nb_mul(ctx, x, x);
    nb_tensor *y = nb_add(ctx, sq, x);
    nb_tensor *z = nb_mul(ctx, y, y); /* reuse y */
    nb_tensor *g = nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){1, 1, 1});
    ck_assert_int_eq(nb_backward(ctx, z, g), NB_OK);
    /* dz/dx = 2y (2x+1) */
    double want[3];
    double xs[3] = {1, -2, 0.5};
    for (int i = 0; i < 3; i++) want[i] = 2 * (xs[i] * xs[i] + xs[i]) * (2 * xs[i] + 1);
    ck_assert_grad_near(x, want, 3, 1e-12);
    ck_assert_int_eq(nb_tape_len(ctx), 3);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_backward_accumulates_and_zero_grad) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_tensor *w = nb_requires_grad(nb_from_doubles(p, NB_F32, NB_SHAPE(2), (double[]){3, 4}));
    for (int step = 1; step <= 2; step++) {
        nb_ctx_reset(ctx);
        nb_tensor *y = nb_mul(ctx, w, w);
        nb_tensor *g = nb_ones(ctx, NB_F32, NB_SHAPE(2));
        ck_assert_int_eq(nb_backward(ctx, y, g), NB_OK);
        double want[2] = {6.0 * step, 8.0 * step};
        ck_assert_grad_near(w, want, 2, 1e-6);
    }
    nb_zero_grad(w);
    ck_assert_double_eq(nb_grad_get(w, 0), 0.0);
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_second_backward_adds_once_more) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(1), (double[]){2}));
    nb_tensor *y = nb_mul(ctx, nb_mul(ctx, x, x), x); /* x^3, grad 12 */
    ck_assert_int_eq(nb_backward(ctx, y, NULL), NB_OK);
    ck_assert_double_eq_tol(nb_grad_get(x, 0), 12.0, 1e-12);
    ck_assert_int_eq(nb_backward(ctx, y, NULL), NB_OK);
    ck_assert_double_eq_tol(nb_grad_get(x, 0), 24.0, 1e-12);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_no_grad_records_nothing) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2, 2)));
    ck_assert(nb_set_grad_enabled(ctx, false));
    nb_tensor *y = nb_add(ctx, x, x);
    ck_assert_ptr_nonnull(y);
    ck_assert(!y->requires_grad);
    ck_assert_int_eq(nb_tape_len(ctx), 0);
    ck_assert_int_eq(nb_backward(ctx, y, NULL), NB_ERR_STATE);
    ck_assert_error_has(ctx, "does not require grad");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_backward_needs_scalar_or_grad) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2, 3)));
    nb_tensor *y = nb_add(ctx, x, x);
    ck_assert_int_eq(nb_backward(ctx, y, NULL), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "(2, 3) is not a scalar");
    nb_ctx_clear_error(ctx);
    nb_tensor *bad = nb_ones(ctx, NB_F32, NB_SHAPE(3, 2));
    ck_assert_int_eq(nb_backward(ctx, y, bad), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "grad_out (3, 2)");
    ck_assert_int_eq(nb_backward(NULL, y, NULL), NB_ERR_NULL);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_sticky_error_and_reset) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    nb_tensor *b = nb_ones(ctx, NB_F32, NB_SHAPE(4, 3));
    ck_assert_ptr_null(nb_add(ctx, a, b));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "add: shapes (2, 3) and (4, 3) do not broadcast");
    /* later ops are no-ops, the first message stays */
    ck_assert_ptr_null(nb_mul(ctx, a, a));
    ck_assert_ptr_null(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    ck_assert_error_has(ctx, "add:");
    nb_ctx_reset(ctx);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    ck_assert_ptr_nonnull(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_steady_state_makes_no_malloc) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(4096); /* small: forces growth */
    nb_tensor *w = nb_requires_grad(nb_ones(p, NB_F32, NB_SHAPE(64, 64)));
    size_t after_warmup = 0;
    for (int step = 0; step < 5; step++) {
        nb_ctx_reset(ctx);
        if (step == 2) after_warmup = nb_ctx_mallocs(ctx);
        nb_tensor *y = w;
        for (int k = 0; k < 10; k++) y = nb_mul(ctx, y, w);
        ck_assert_int_eq(nb_backward(ctx, y, nb_ones(ctx, NB_F32, NB_SHAPE(64, 64))), NB_OK);
    }
    ck_assert_uint_gt(after_warmup, 0);
    ck_assert_uint_eq(nb_ctx_mallocs(ctx), after_warmup);
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

/* A custom op through the public API: y = x^3 with a hand-written rule. */
static void cube_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = nb_node_input(n, 0), *y = nb_node_output(n);
    double *gx = nb_grad_buffer(ctx, x);
    const double *gy = y->grad, *xd = x->data;
    double scale = *(double *)nb_node_userdata(n);
    for (size_t i = 0; i < x->numel; i++) gx[i] += scale * gy[i] * 3 * xd[i] * xd[i];
}

static nb_tensor *cube(nb_ctx *ctx, nb_tensor *x, double *scale) {
    nb_tensor *y = nb_empty(ctx, NB_F64, x->ndim, x->shape);
    if (!y) return NULL;
    for (size_t i = 0; i < x->numel; i++) {
        double v = ((double *)x->data)[i];
        ((double *)y->data)[i] = v * v * v;
    }
    nb_record(ctx, "cube", y, 1, &x, cube_backward, scale);
    return y;
}

START_TEST(test_custom_op) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){2, -1}));
    double scale = 1.0;
    nb_tensor *y = cube(ctx, x, &scale);
    ck_assert_int_eq(nb_backward(ctx, y, nb_ones(ctx, NB_F64, NB_SHAPE(2))), NB_OK);
    ck_assert_double_eq_tol(nb_grad_get(x, 0), 12.0, 1e-12);
    ck_assert_double_eq_tol(nb_grad_get(x, 1), 3.0, 1e-12);
    ck_assert_str_eq(nb_node_name(y->node), "cube");
    ck_assert_int_eq(nb_node_num_inputs(y->node), 1);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_tape_print_names_ops_and_sites) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2, 3)));
    NB_HERE(ctx);
    nb_tensor *y = nb_mul(ctx, x, x);
    nb_add(ctx, y, x);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    nb_tape_print(ctx, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "tape: 2 nodes"));
    ck_assert_ptr_nonnull(strstr(buf, "#0   mul"));
    ck_assert_ptr_nonnull(strstr(buf, "#1   add"));
    ck_assert_ptr_nonnull(strstr(buf, "(2, 3)* -> (2, 3)"));
    ck_assert_ptr_nonnull(strstr(buf, "check_tape.c:"));
    free(buf);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_anomaly_names_op_and_site) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){1, 0}));
    nb_tensor *one = nb_ones(ctx, NB_F64, NB_SHAPE(2));
    NB_HERE(ctx);
    nb_tensor *y = nb_div(ctx, one, x); /* 1/0 -> inf gradient */
    nb_tensor *s = nb_mul(ctx, y, one);
    nb_set_detect_anomaly(ctx, true); /* after the forward, whose inf it would report */
    nb_tensor *g = nb_ones(ctx, NB_F64, NB_SHAPE(2));
    ck_assert_int_eq(nb_backward(ctx, s, g), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "backward of op #0 'div'");
    ck_assert_error_has(ctx, "check_tape.c:");
    /* inputs numbered from 0, as in gradcheck's messages: x is div's input 1 */
    ck_assert_error_has(ctx, "produced a non-finite gradient for its input 1 (2)");
    nb_ctx_free(ctx);
}
END_TEST

/* Gradients of intermediates are made by the first backward that reaches
 * them and, where that backward writes them whole (add, a view, linear's
 * dx, sdpa), stored without first being cleared. y is used four ways (both
 * operands of an add, x and weight of a linear, reshaped): float32, whose
 * kernels take that path, must agree with float64 step by step. */
static void fresh_graph(nb_dtype dt, double *grad) {
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 9, 9);
    nb_tensor *x = nb_requires_grad(nb_normal(p, dt, NB_SHAPE(5, 5), 0, 1, &rng));
    nb_tensor *w = nb_normal(p, dt, NB_SHAPE(5, 5), 0, 1, &rng);
    nb_tensor *y = nb_mul(c, x, w);                  /* an intermediate */
    nb_tensor *a = nb_add(c, y, y);                  /* ga fresh, gb the same buffer */
    nb_tensor *l = nb_linear(c, y, y, NULL);         /* dx then dw into one buffer */
    nb_tensor *r = nb_reshape(c, y, NB_SHAPE(25));   /* a view */
    nb_tensor *s = nb_add(c, nb_sum(c, nb_mul(c, a, l)), nb_sum(c, nb_mul(c, r, r)));
    ck_assert_int_eq(nb_backward(c, s, NULL), NB_OK);
    for (int i = 0; i < 25; i++) grad[i] = nb_grad_get(x, (size_t)i);
    nb_ctx_free(c);
    nb_ctx_free(p);
}

START_TEST(test_fresh_gradients_agree_f32_f64) {
    double g32[25], g64[25];
    fresh_graph(NB_F32, g32);
    fresh_graph(NB_F64, g64);
    for (int i = 0; i < 25; i++)
        ck_assert_msg(fabs(g32[i] - g64[i]) <= 1e-4 * (1 + fabs(g64[i])), "x.grad[%d]: f32 %g, f64 %g",
                      i, g32[i], g64[i]);
}
END_TEST

Suite *suite_tape(void) {
    Suite *s = suite_create("tape");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_backward_reused_node);
    tcase_add_test(tc, test_backward_accumulates_and_zero_grad);
    tcase_add_test(tc, test_second_backward_adds_once_more);
    tcase_add_test(tc, test_no_grad_records_nothing);
    tcase_add_test(tc, test_backward_needs_scalar_or_grad);
    tcase_add_test(tc, test_sticky_error_and_reset);
    tcase_add_test(tc, test_steady_state_makes_no_malloc);
    tcase_add_test(tc, test_custom_op);
    tcase_add_test(tc, test_tape_print_names_ops_and_sites);
    tcase_add_test(tc, test_anomaly_names_op_and_site);
    tcase_add_test(tc, test_fresh_gradients_agree_f32_f64);
    suite_add_tcase(s, tc);
    return s;
}
