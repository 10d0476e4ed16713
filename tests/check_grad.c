/* check_grad.c - gradients as tensors and gradients of gradients: nb_grad
 * (first order and create_graph), nb_hvp, nb_jvp, nb_gradgradcheck.
 * Expected values come from calculus (closed forms), from PyTorch
 * (tests/fixtures/grad/hessian.safetensors, tools/ref/gen_grad_fixtures.py)
 * and from the first-order path itself. Every op's second order against
 * PyTorch is the parity suite's (grad2.* in tests/fixtures/parity). */
#include "check_nabla.h"

static nb_tensor *vec(nb_ctx *c, int n, const double *v) {
    return nb_requires_grad(nb_from_doubles(c, NB_F64, 1, (int64_t[]){n}, v));
}

/* y = sum(x^3): dy/dx = 3x^2, d/dx sum(3x^2) = 6x, d/dx sum(6x) = 6. */
START_TEST(test_derivatives_of_a_cube_to_third_order) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = vec(c, 3, (double[]){1, 2, -0.5});
    nb_tensor *y = nb_sum(c, nb_pow(c, x, 3)), *g1, *g2, *g3;
    nb_grad_opts o = {.create_graph = true};
    ck_assert_int_eq(nb_grad(c, 1, &y, NULL, 1, &x, &o, &g1), NB_OK);
    ck_assert_tensor_near(g1, ((double[]){3, 12, 0.75}), 3, 1e-12);
    ck_assert(g1->requires_grad);
    nb_tensor *s1 = nb_sum(c, g1);
    ck_assert_int_eq(nb_grad(c, 1, &s1, NULL, 1, &x, &o, &g2), NB_OK);
    ck_assert_tensor_near(g2, ((double[]){6, 12, -3}), 3, 1e-12);
    nb_tensor *s2 = nb_sum(c, g2);
    ck_assert_int_eq(nb_grad(c, 1, &s2, NULL, 1, &x, NULL, &g3), NB_OK);
    ck_assert_tensor_near(g3, ((double[]){6, 6, 6}), 3, 1e-12);
    ck_assert(!g3->requires_grad); /* no create_graph: a plain tensor */
    nb_ctx_free(c);
}
END_TEST

/* The fourth derivative of exp is exp: four nested nb_grad calls. */
START_TEST(test_exp_to_fourth_order) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = vec(c, 2, (double[]){0.3, -1.1}), *g = nb_sum(c, nb_exp(c, x));
    nb_grad_opts o = {.create_graph = true};
    for (int k = 0; k < 4; k++) {
        nb_tensor *s = k ? nb_sum(c, g) : g;
        ck_assert_int_eq(nb_grad(c, 1, &s, NULL, 1, &x, &o, &g), NB_OK);
    }
    ck_assert_tensor_near(g, ((double[]){exp(0.3), exp(-1.1)}), 2, 1e-12);
    nb_ctx_free(c);
}
END_TEST

/* Without create_graph nb_grad gives what nb_backward puts in .grad, and
 * leaves every .grad as it was. */
START_TEST(test_first_order_matches_backward_and_keeps_grads) {
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 4);
    nb_tensor *w = nb_requires_grad(nb_normal(p, NB_F32, NB_SHAPE(4, 3), 0, 1, &rng));
    nb_tensor *b = nb_requires_grad(nb_normal(p, NB_F32, NB_SHAPE(4), 0, 1, &rng));
    nb_tensor *x = nb_normal(c, NB_F32, NB_SHAPE(5, 3), 0, 1, &rng);
    for (size_t i = 0; i < w->numel; i++) ((float *)w->grad)[i] = 7.0f; /* a stale gradient */
    nb_tensor *y = nb_sum(c, nb_gelu(c, nb_linear(c, x, w, b), NB_GELU_NONE));
    nb_tensor *in[2] = {w, b}, *g[2];
    ck_assert_int_eq(nb_grad(c, 1, &y, NULL, 2, in, NULL, g), NB_OK);
    for (size_t i = 0; i < w->numel; i++) ck_assert_float_eq(((float *)w->grad)[i], 7.0f);
    nb_zero_grad(w), nb_zero_grad(b);
    ck_assert_int_eq(nb_backward(c, y, NULL), NB_OK);
    for (size_t i = 0; i < w->numel; i++) ck_assert_float_eq(nb_get(g[0], i), nb_grad_get(w, i));
    for (size_t i = 0; i < b->numel; i++) ck_assert_float_eq(nb_get(g[1], i), nb_grad_get(b, i));
    ck_assert_ptr_eq(g[0]->owner, c); /* the results live in the call's context */
    nb_ctx_free(c), nb_ctx_free(p);
}
END_TEST

/* Several outputs with grad_outputs, and an intermediate tensor as input. */
START_TEST(test_grad_outputs_and_intermediate_inputs) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = vec(c, 2, (double[]){1.5, -2});
    nb_tensor *h = nb_mul(c, x, x);              /* x^2 */
    nb_tensor *y1 = nb_scale(c, h, 3), *y2 = nb_exp(c, x);
    nb_tensor *v1 = nb_from_doubles(c, NB_F64, NB_SHAPE(2), (double[]){1, 2});
    nb_tensor *v2 = nb_from_doubles(c, NB_F64, NB_SHAPE(2), (double[]){-1, 0.5});
    nb_tensor *ys[2] = {y1, y2}, *vs[2] = {v1, v2}, *in[2] = {x, h}, *g[2];
    ck_assert_int_eq(nb_grad(c, 2, ys, vs, 2, in, NULL, g), NB_OK);
    /* d/dx: 3 * 2x * v1 + e^x * v2 (through h and directly); d/dh: 3 v1 */
    double want_x[2] = {6 * 1.5 * 1 - exp(1.5), 6 * -2 * 2 + 0.5 * exp(-2)};
    ck_assert_tensor_near(g[0], want_x, 2, 1e-12);
    ck_assert_tensor_near(g[1], ((double[]){3, 6}), 2, 1e-12);
    nb_ctx_free(c);
}
END_TEST

START_TEST(test_allow_unused_and_errors) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = vec(c, 2, (double[]){1, 2}), *z = vec(c, 2, (double[]){3, 4});
    nb_tensor *y = nb_sum(c, nb_exp(c, x)), *in[2] = {x, z}, *g[2];
    ck_assert_int_eq(nb_grad(c, 1, &y, NULL, 2, in, &(nb_grad_opts){.allow_unused = true}, g),
                     NB_OK);
    ck_assert_ptr_nonnull(g[0]);
    ck_assert_ptr_null(g[1]);
    ck_assert_int_eq(nb_grad(c, 1, &y, NULL, 2, in, NULL, g), NB_ERR_VALUE);
    ck_assert_error_has(c, "input 1 is not reached");
    ck_assert_ptr_null(g[0]);
    nb_ctx_clear_error(c);
    nb_tensor *v = nb_exp(c, x); /* not a scalar */
    ck_assert_int_eq(nb_grad(c, 1, &v, NULL, 1, &x, NULL, g), NB_ERR_SHAPE);
    ck_assert_error_has(c, "is not a scalar");
    nb_ctx_clear_error(c);
    nb_tensor *bad = nb_ones(c, NB_F64, NB_SHAPE(3));
    ck_assert_int_eq(nb_grad(c, 1, &v, &bad, 1, &x, NULL, g), NB_ERR_SHAPE);
    ck_assert_error_has(c, "grad_outputs[0] (3)");
    nb_ctx_clear_error(c);
    nb_tensor *k = nb_ones(c, NB_F64, NB_SHAPE(2)); /* requires no grad */
    ck_assert_int_eq(nb_grad(c, 1, &y, NULL, 1, &k, NULL, g), NB_ERR_STATE);
    ck_assert_error_has(c, "input 0 (2) does not require grad");
    nb_ctx_clear_error(c);
    nb_tensor *s = nb_sum(c, k);
    ck_assert_int_eq(nb_grad(c, 1, &s, NULL, 1, &x, NULL, g), NB_ERR_STATE);
    ck_assert_error_has(c, "output 0 () does not require grad");
    nb_ctx_free(c);
}
END_TEST

/* ---- a custom op: cube(x) = x^3, backward 3x^2 dout --------------------- */
static void cube_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = nb_node_input(n, 0), *y = nb_node_output(n);
    double *gx = nb_grad_buffer(ctx, x);
    const double *gy = y->grad, *xs = x->data;
    for (size_t i = 0; gx && i < x->numel; i++) gx[i] += 3 * xs[i] * xs[i] * gy[i];
}

static void cube_graph_right(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = nb_node_input(n, 0);
    din[0] = nb_mul(ctx, dout, nb_scale(ctx, nb_mul(ctx, x, x), 3));
}

/* the planted mistake: 2x^2 instead of 3x^2 */
static void cube_graph_wrong(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = nb_node_input(n, 0);
    din[0] = nb_mul(ctx, dout, nb_scale(ctx, nb_mul(ctx, x, x), 2));
}

static nb_graph_backward_fn cube_graph;

static nb_tensor *cube(nb_ctx *ctx, nb_tensor *x) {
    nb_tensor *y = nb_zeros(ctx, x->dtype, x->ndim, x->shape);
    for (size_t i = 0; i < x->numel; i++) nb_set(y, i, pow(nb_get(x, i), 3));
    nb_node *n = nb_record(ctx, "cube", y, 1, &x, cube_backward, NULL);
    nb_node_set_graph_backward(n, cube_graph);
    return y;
}

static nb_tensor *f_cube_sum(nb_ctx *ctx, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_sum(ctx, nb_tanh(ctx, cube(ctx, in[0])));
}

START_TEST(test_gradgradcheck_names_a_wrong_second_order_rule) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = vec(c, 4, (double[]){0.3, -0.7, 0.9, 0.1});
    nb_gradcheck_result r;
    cube_graph = cube_graph_wrong;
    nb_ctx *k1 = nb_ctx_new(0), *k2 = nb_ctx_new(0), *k3 = nb_ctx_new(0);
    ck_assert_int_eq(nb_gradcheck(k1, f_cube_sum, NULL, 1, &x, NULL, &r), NB_OK); /* first order is right */
    ck_assert_int_eq(nb_gradgradcheck(k2, f_cube_sum, NULL, 1, &x, NULL, &r), NB_ERR_VALUE);
    ck_assert_error_has(k2, "'cube'"); /* the outcome is on the context too */
    ck_assert(!r.passed);
    ck_assert_str_eq(r.blame_op, "cube");
    ck_assert_int_eq(r.blame_index, 0);
    ck_assert_int_eq(r.blame_input, 0);
    ck_assert_ptr_nonnull(strstr(r.message, "the graph backward of op #0 'cube'"));
    cube_graph = cube_graph_right;
    ck_assert_int_eq(nb_gradgradcheck(k3, f_cube_sum, NULL, 1, &x, NULL, &r), NB_OK);
    ck_assert(r.passed);
    nb_ctx_free(k1), nb_ctx_free(k2), nb_ctx_free(k3);
    ck_assert_double_lt(r.max_abs_err, 1e-7);
    cube_graph = NULL; /* no graph backward: create_graph names the op */
    nb_tensor *y = f_cube_sum(c, &x, NULL), *g;
    ck_assert_int_eq(nb_grad(c, 1, &y, NULL, 1, &x, &(nb_grad_opts){.create_graph = true}, &g),
                     NB_ERR_STATE);
    ck_assert_error_has(c, "custom op 'cube' (#");
    ck_assert_error_has(c, "nb_node_set_graph_backward");
    nb_ctx_free(c);
}
END_TEST

/* One status for one cause, whichever call meets it: a custom op without a
 * second-order rule is NB_ERR_STATE from nb_grad, nb_hvp and
 * nb_gradgradcheck alike; a vector of the right shape but another dtype is
 * NB_ERR_DTYPE, one of another shape NB_ERR_SHAPE. */
START_TEST(test_one_status_for_one_cause) {
    nb_ctx *c = nb_ctx_new(0), *k = nb_ctx_new(0);
    nb_tensor *x = vec(c, 4, (double[]){0.3, -0.7, 0.9, 0.1}), *g[1], *hv[1];
    cube_graph = NULL;
    nb_tensor *y = f_cube_sum(c, &x, NULL);
    nb_tensor *v = vec(c, 4, (double[]){1, 0, 0, 0});
    ck_assert_int_eq(nb_grad(c, 1, &y, NULL, 1, &x, &(nb_grad_opts){.create_graph = true}, g),
                     NB_ERR_STATE);
    nb_ctx_clear_error(c);
    ck_assert_int_eq(nb_hvp(c, y, 1, &x, &v, NULL, hv), NB_ERR_STATE);
    ck_assert_error_has(c, "custom op 'cube' (#");
    ck_assert_ptr_null(hv[0]);
    nb_ctx_clear_error(c);
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradgradcheck(k, f_cube_sum, NULL, 1, &x, NULL, &r), NB_ERR_STATE);
    ck_assert_error_has(k, "custom op 'cube' (#");
    ck_assert(!r.passed);
    cube_graph = cube_graph_right;

    /* v against x: f32 against f64 is a dtype error, (3) against (4) a shape error */
    nb_tensor *v32 = nb_ones(c, NB_F32, NB_SHAPE(4)), *v3 = nb_ones(c, NB_F64, NB_SHAPE(3));
    nb_tensor *s = nb_sum(c, nb_mul(c, x, x));
    ck_assert_int_eq(nb_hvp(c, s, 1, &x, &v32, NULL, hv), NB_ERR_DTYPE);
    ck_assert_error_has(c, "hvp: vector 0 (4) f32 does not match (4) f64");
    nb_ctx_clear_error(c);
    ck_assert_int_eq(nb_hvp(c, s, 1, &x, &v3, NULL, hv), NB_ERR_SHAPE);
    nb_ctx_clear_error(c);
    nb_tensor *e = nb_exp(c, x);
    ck_assert_int_eq(nb_jvp(c, 1, &e, 1, &x, &v32, NULL, hv), NB_ERR_DTYPE);
    nb_ctx_clear_error(c);
    ck_assert_int_eq(nb_grad(c, 1, &e, &v32, 1, &x, NULL, g), NB_ERR_DTYPE);
    ck_assert_error_has(c, "grad_outputs[0] (4) f32 does not match output (4) f64");
    nb_ctx_clear_error(c);
    ck_assert_int_eq(nb_grad(c, 1, &e, &v3, 1, &x, NULL, g), NB_ERR_SHAPE);
    nb_ctx_clear_error(c);
    ck_assert_int_eq(nb_backward(c, e, v32), NB_ERR_DTYPE);
    nb_ctx_clear_error(c);
    ck_assert_int_eq(nb_backward(c, e, v3), NB_ERR_SHAPE);
    nb_ctx_free(c), nb_ctx_free(k);
}
END_TEST

/* A gradient penalty: loss = (|d critic / dx| - 1)^2, differentiated
 * with nb_backward into the critic's weight. For critic(x) = sum(tanh(w x))
 * the closed form is checked against central differences of the penalty. */
static double penalty_at(double w0, const double *xs, int n) {
    double g2 = 0;
    for (int i = 0; i < n; i++) {
        double t = tanh(w0 * xs[i]), d = w0 * (1 - t * t);
        g2 += d * d;
    }
    double e = sqrt(g2) - 1;
    return e * e;
}

START_TEST(test_gradient_penalty_backward) {
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    double xs[3] = {0.5, -1.0, 0.25}, w0 = 0.8;
    nb_tensor *w = nb_requires_grad(nb_scalar(p, NB_F64, w0));
    nb_tensor *x = vec(c, 3, xs), *g;
    nb_tensor *critic = nb_sum(c, nb_tanh(c, nb_mul(c, x, w)));
    ck_assert_int_eq(nb_grad(c, 1, &critic, NULL, 1, &x, &(nb_grad_opts){.create_graph = true},
                             &g), NB_OK);
    nb_tensor *norm = nb_sqrt(c, nb_sum(c, nb_mul(c, g, g)));
    nb_tensor *pen = nb_pow(c, nb_add_scalar(c, norm, -1), 2);
    ck_assert_double_eq_tol(nb_item(pen), penalty_at(w0, xs, 3), 1e-14);
    ck_assert_int_eq(nb_backward(c, pen, NULL), NB_OK);
    double h = 1e-6;
    double num = (penalty_at(w0 + h, xs, 3) - penalty_at(w0 - h, xs, 3)) / (2 * h);
    ck_assert_double_eq_tol(nb_grad_get(w, 0), num, 1e-8);
    nb_ctx_free(c), nb_ctx_free(p);
}
END_TEST

/* The Hessian of an MLP's loss (186 parameters) from nb_hvp with unit
 * vectors, against torch.autograd.functional.hessian. */
START_TEST(test_hessian_from_hvp_matches_pytorch) {
    nb_ctx *f = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_tensor_list fx = {0};
    ck_assert_int_eq(nb_load_safetensors(f, NB_SOURCE_DIR "/tests/fixtures/grad/hessian.safetensors",
                                         &fx), NB_OK);
    nb_tensor *x = nb_list_get(&fx, "x"), *t = nb_list_get(&fx, "t"), *H = nb_list_get(&fx, "H");
    const char *names[4] = {"W1", "b1", "W2", "b2"};
    nb_tensor *p[4], *v[4], *hv[4];
    int64_t n = 0;
    for (int k = 0; k < 4; k++) {
        p[k] = nb_requires_grad(nb_list_get(&fx, names[k]));
        n += (int64_t)p[k]->numel;
    }
    ck_assert_int_eq(n, 186);
    ck_assert_int_eq(H->shape[0], n);
    double worst = 0;
    for (int64_t col = 0; col < n; col++) {
        nb_ctx_reset(c);
        int64_t at = 0;
        for (int k = 0; k < 4; k++) {
            v[k] = nb_zeros(c, NB_F64, p[k]->ndim, p[k]->shape);
            if (col >= at && col < at + (int64_t)p[k]->numel) nb_set(v[k], (size_t)(col - at), 1);
            at += (int64_t)p[k]->numel;
        }
        nb_tensor *h1 = nb_tanh(c, nb_linear(c, x, p[0], p[1]));
        nb_tensor *loss = nb_cross_entropy(c, nb_linear(c, h1, p[2], p[3]), t);
        if (col == 0)
            ck_assert_double_eq_tol(nb_item(loss), nb_item(nb_list_get(&fx, "loss")), 1e-14);
        ck_assert_int_eq(nb_hvp(c, loss, 4, p, v, NULL, hv), NB_OK);
        int64_t row = 0;
        for (int k = 0; k < 4; k++)
            for (size_t i = 0; i < hv[k]->numel; i++, row++) {
                double want = nb_get(H, (size_t)(row * n + col));
                worst = fmax(worst, fabs(nb_get(hv[k], i) - want));
            }
    }
    ck_assert_msg(worst <= 1e-10, "max |H - torch's| = %g", worst);
    nb_ctx_free(c), nb_ctx_free(f);
}
END_TEST

/* jvp through the double-backward trick: J u for y = (x0 x1, sin-free
 * polynomial) checked against the Jacobian by hand. */
START_TEST(test_jvp) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = vec(c, 2, (double[]){2, -3});
    nb_tensor *y = nb_mul(c, nb_pow(c, x, 2), nb_from_doubles(c, NB_F64, NB_SHAPE(2),
                                                               (double[]){1, 4}));
    nb_tensor *u = nb_from_doubles(c, NB_F64, NB_SHAPE(2), (double[]){0.5, 1}), *ju, *hv;
    ck_assert_int_eq(nb_jvp(c, 1, &y, 1, &x, &u, NULL, &ju), NB_OK);
    /* y = (x0^2, 4 x1^2): J = diag(2 x0, 8 x1) */
    ck_assert_tensor_near(ju, ((double[]){2 * 2 * 0.5, 8 * -3 * 1}), 2, 1e-12);
    nb_tensor *s = nb_sum(c, y);
    ck_assert_int_eq(nb_hvp(c, s, 1, &x, &u, NULL, &hv), NB_OK);
    ck_assert_tensor_near(hv, ((double[]){2 * 0.5, 8 * 1}), 2, 1e-12);
    nb_tensor *bad = nb_ones(c, NB_F64, NB_SHAPE(3));
    ck_assert_int_eq(nb_jvp(c, 1, &y, 1, &x, &bad, NULL, &ju), NB_ERR_SHAPE);
    ck_assert_error_has(c, "jvp: vector 0 (3)");
    nb_ctx_free(c);
}
END_TEST

Suite *suite_grad(void) {
    Suite *s = suite_create("grad");
    TCase *tc = tcase_create("grad");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_derivatives_of_a_cube_to_third_order);
    tcase_add_test(tc, test_exp_to_fourth_order);
    tcase_add_test(tc, test_first_order_matches_backward_and_keeps_grads);
    tcase_add_test(tc, test_grad_outputs_and_intermediate_inputs);
    tcase_add_test(tc, test_allow_unused_and_errors);
    tcase_add_test(tc, test_gradgradcheck_names_a_wrong_second_order_rule);
    tcase_add_test(tc, test_one_status_for_one_cause);
    tcase_add_test(tc, test_gradient_penalty_backward);
    tcase_add_test(tc, test_hessian_from_hvp_matches_pytorch);
    tcase_add_test(tc, test_jvp);
    suite_add_tcase(s, tc);
    return s;
}
