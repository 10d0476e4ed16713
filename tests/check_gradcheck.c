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
    ck_assert_int_eq(nb_gradcheck(ctx, f_mul_div, NULL, 3, in, NULL, &r), NB_OK);
    ck_assert(r.passed);
    ck_assert(r.max_abs_err < 1e-7);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = true;
    ck_assert_int_eq(nb_gradcheck(ctx, f_mul_div, NULL, 3, in, &o, &r), NB_OK);
    ck_assert(r.passed);
    nb_ctx_free(ctx);
}
END_TEST

/* eps <= 0, negative tolerances and NaN options are refused, nothing run */
START_TEST(test_gradcheck_refuses_bad_options) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[3] = {
        nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){1, 2}),
        nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){3, 4}),
        nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){5, 6}),
    };
    for (int i = 0; i < 3; i++) nb_requires_grad(in[i]);
    const double bad[][3] = {{0, 1e-5, 1e-3}, {-1e-6, 1e-5, 1e-3}, {NAN, 1e-5, 1e-3},
                             {INFINITY, 1e-5, 1e-3}, {1e-6, -1, 1e-3}, {1e-6, 1e-5, -1e-3},
                             {1e-6, NAN, 1e-3}, {1e-6, 1e-5, NAN}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        nb_gradcheck_opts o = nb_gradcheck_defaults();
        o.eps = bad[k][0], o.atol = bad[k][1], o.rtol = bad[k][2];
        nb_gradcheck_result r;
        ck_assert_int_eq(nb_gradcheck(ctx, f_mul_div, NULL, 3, in, &o, &r), NB_ERR_VALUE);
        ck_assert(!r.passed);
        ck_assert_msg(strstr(r.message, "eps must be finite and > 0, the tolerances >= 0"), "%s",
                      r.message);
        ck_assert_ptr_nonnull(strstr(nb_ctx_error(ctx), "gradcheck: options eps"));
        nb_ctx_clear_error(ctx);
    }
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

/* y = x^2 (f64) recorded as the custom op 'bad_square' */
static nb_tensor *bad_square(nb_ctx *ctx, nb_tensor *x) {
    nb_tensor *y = x ? nb_empty(ctx, NB_F64, x->ndim, x->shape) : NULL;
    if (!y) return NULL;
    for (size_t i = 0; i < x->numel; i++)
        ((double *)y->data)[i] = ((double *)x->data)[i] * ((double *)x->data)[i];
    nb_record(ctx, "bad_square", y, 1, &x, bad_square_backward, NULL);
    return y;
}

static nb_tensor *f_bad_square(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_add(ctx, bad_square(ctx, in[0]), in[1]);
}

START_TEST(test_gradcheck_catches_wrong_backward) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[2] = {
        nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){0.5, -2, 1})),
        nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){1, 1, 1}),
    };
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_bad_square, NULL, 2, in, NULL, &r), NB_ERR_VALUE);
    ck_assert(!r.passed);
    /* worst entry: x = -2, analytic 3x = -6, numeric 2x = -4 */
    ck_assert_int_eq(r.worst_input, 0);
    ck_assert_uint_eq(r.worst_index, 1);
    ck_assert_uint_eq(r.worst_output, 1);
    ck_assert_double_eq_tol(r.analytic, -6.0, 1e-9);
    ck_assert_double_eq_tol(r.numeric, -4.0, 1e-6);
    ck_assert_ptr_nonnull(strstr(r.message, "d out[1] / d input 0 [1]: analytic -6"));
    /* a failed check is an error like any other: its message is on ctx */
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_str_eq(nb_ctx_error(ctx), r.message);
    nb_ctx_clear_error(ctx);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = true;
    ck_assert_int_eq(nb_gradcheck(ctx, f_bad_square, NULL, 2, in, &o, &r), NB_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(r.message, "v^T J u"));
    ck_assert_str_eq(nb_ctx_error(ctx), r.message);
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
    ck_assert_int_eq(nb_gradcheck(ctx, f_shape_error, NULL, 2, in, NULL, &r), NB_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(r.message, "add: shapes (2) and (3) do not broadcast"));
    ck_assert_error_has(ctx, "add: shapes (2) and (3) do not broadcast");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_gradcheck(ctx, NULL, NULL, 2, in, NULL, &r), NB_ERR_NULL);
    ck_assert_error_has(ctx, "gradcheck: f and inputs are required");
    nb_ctx_free(ctx);
}
END_TEST

/* ---- blame: naming the op whose backward is wrong ------------------------- */
/* y = a * b (same shapes, f64), 'bad_mul': right rule for a, wrong for b
 * (b instead of a) */
static void bad_mul_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = nb_node_input(n, 0), *b = nb_node_input(n, 1), *y = nb_node_output(n);
    double *ga = nb_grad_buffer(ctx, a), *gb = nb_grad_buffer(ctx, b);
    const double *gy = y->grad, *bd = b->data;
    for (size_t i = 0; i < y->numel; i++) {
        if (ga) ga[i] += gy[i] * bd[i];
        if (gb) gb[i] += gy[i] * bd[i];
    }
}

static nb_tensor *bad_mul(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    nb_tensor *y = a && b ? nb_empty(ctx, NB_F64, a->ndim, a->shape) : NULL;
    if (!y) return NULL;
    for (size_t i = 0; i < y->numel; i++)
        ((double *)y->data)[i] = ((double *)a->data)[i] * ((double *)b->data)[i];
    nb_tensor *ab[2] = {a, b};
    nb_record(ctx, "bad_mul", y, 2, ab, bad_mul_backward, NULL);
    return y;
}

/* x (2, 3) and W (3, 2), away from kinks */
static nb_tensor **blame_inputs(nb_ctx *ctx, nb_tensor **in) {
    in[0] = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 3),
                            (double[]){0.5, -0.3, 0.8, -0.6, 0.2, 0.9});
    in[1] = nb_from_doubles(ctx, NB_F64, NB_SHAPE(3, 2),
                            (double[]){0.4, -0.7, 0.1, 0.6, -0.5, 0.3});
    return in;
}

/* The line of the NB_HERE before the wrong op, set by the function under
 * test. */
static int wrong_line;

/* (2, 2) -> softmax -> weighted sum (a plain sum of softmax is constant) */
static nb_tensor *softmax_loss(nb_ctx *ctx, nb_tensor *m) {
    nb_tensor *c = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2), (double[]){1.0, -2.0, 0.5, 3.0});
    return nb_sum(ctx, nb_mul(ctx, nb_softmax(ctx, m), c));
}

/* x -> tanh #0 -> bad_square #1 -> matmul W #2 -> softmax #3 -> mul #4 -> sum #5 */
static nb_tensor *f_chain_middle(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *t = nb_tanh(ctx, in[0]);
    NB_HERE(ctx); wrong_line = __LINE__;
    nb_tensor *h = bad_square(ctx, t);
    NB_HERE(ctx);
    return softmax_loss(ctx, nb_matmul(ctx, h, in[1]));
}

/* bad_square #0 on the leaf x -> tanh -> matmul -> softmax -> mul -> sum */
static nb_tensor *f_chain_start(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    NB_HERE(ctx); wrong_line = __LINE__;
    nb_tensor *h = bad_square(ctx, in[0]);
    NB_HERE(ctx);
    return softmax_loss(ctx, nb_matmul(ctx, nb_tanh(ctx, h), in[1]));
}

/* tanh #0 -> matmul #1 -> exp #2 -> bad_square #3, the output (2, 2) */
static nb_tensor *f_chain_end(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *e = nb_exp(ctx, nb_matmul(ctx, nb_tanh(ctx, in[0]), in[1]));
    NB_HERE(ctx); wrong_line = __LINE__;
    return bad_square(ctx, e);
}

/* bad_square's output feeds both a matmul and an exp: h (2, 3) */
static nb_tensor *f_used_twice(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *t = nb_tanh(ctx, in[0]);
    NB_HERE(ctx); wrong_line = __LINE__;
    nb_tensor *h = bad_square(ctx, t);
    NB_HERE(ctx);
    nb_tensor *a = nb_sum(ctx, nb_matmul(ctx, h, in[1]));
    return nb_add(ctx, a, nb_sum(ctx, nb_exp(ctx, h)));
}

/* bad_square's input t is shared with a correct sigmoid recorded after it:
 * t's gradient is wrong, yet sigmoid is not to blame. */
static nb_tensor *f_shared_input(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *t = nb_tanh(ctx, in[0]);
    NB_HERE(ctx); wrong_line = __LINE__;
    nb_tensor *h = bad_square(ctx, t);
    NB_HERE(ctx);
    nb_tensor *s = nb_sigmoid(ctx, t);
    return nb_sum(ctx, nb_mul(ctx, nb_add(ctx, h, s), nb_exp(ctx, t)));
}

/* bad_square #1 -> reshape #2 (a view of its output) -> matmul #3 -> sum */
static nb_tensor *f_view_after(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *t = nb_tanh(ctx, in[0]);
    NB_HERE(ctx); wrong_line = __LINE__;
    nb_tensor *h = bad_square(ctx, t);
    NB_HERE(ctx);
    nb_tensor *r = nb_reshape(ctx, h, NB_SHAPE(3, 2));
    return nb_sum(ctx, nb_exp(ctx, nb_matmul(ctx, in[0], r)));
}

/* bad_mul #2 (wrong for its second input) between two correct branches */
static nb_tensor *f_bad_mul(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *a = nb_tanh(ctx, in[0]);
    nb_tensor *b = nb_sigmoid(ctx, in[0]);
    NB_HERE(ctx); wrong_line = __LINE__;
    nb_tensor *y = bad_mul(ctx, a, b);
    NB_HERE(ctx);
    return softmax_loss(ctx, nb_matmul(ctx, y, in[1]));
}

/* every op right: tanh, matmul, reshape, softmax, mul, sum */
static nb_tensor *f_chain_right(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *h = nb_mul(ctx, nb_tanh(ctx, in[0]), in[0]);
    nb_tensor *r = nb_reshape(ctx, nb_matmul(ctx, h, in[1]), NB_SHAPE(2, 2));
    return softmax_loss(ctx, r);
}

/* Checks f on (x, W), full or fast: fails, and names `op` at tape index
 * `index`, created at this file's wrong_line, with input `input`. */
static void assert_blames(nb_gradcheck_fn f, bool fast, const char *op, int index, int input) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[2];
    blame_inputs(ctx, in);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = fast;
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f, NULL, 2, in, &o, &r), NB_ERR_VALUE);
    ck_assert(!r.passed);
    ck_assert_msg(r.blame_index == index, "blamed #%d, expected #%d: %s", r.blame_index, index,
                  r.message);
    ck_assert_str_eq(r.blame_op, op);
    ck_assert_ptr_nonnull(r.blame_file);
    ck_assert_str_eq(r.blame_file, __FILE__);
    ck_assert_int_eq(r.blame_line, wrong_line);
    ck_assert_int_eq(r.blame_input, input);
    ck_assert(!r.blame_untracked);
    ck_assert_int_eq(r.blame_count, 1);
    ck_assert(fabs(r.blame_analytic - r.blame_numeric) > 1e-3);
    char want[160];
    snprintf(want, sizeof want,
             "gradcheck: backward of op #%d '%s' (created at %s:%d) disagrees with finite "
             "differences for its input %d",
             index, op, __FILE__, wrong_line, input);
    ck_assert_msg(strncmp(r.message, want, strlen(want)) == 0, "message: %s", r.message);
    ck_assert_ptr_nonnull(strstr(r.message, fast ? "; worst element v^T J u along direction "
                                                 : "; worst element d out["));
    nb_ctx_free(ctx);
}

START_TEST(test_gradcheck_blames_op_in_the_middle) {
    assert_blames(f_chain_middle, false, "bad_square", 1, 0);
    assert_blames(f_chain_middle, true, "bad_square", 1, 0);
}
END_TEST

START_TEST(test_gradcheck_blames_op_on_a_leaf) {
    assert_blames(f_chain_start, false, "bad_square", 0, 0);
    assert_blames(f_chain_start, true, "bad_square", 0, 0);
}
END_TEST

START_TEST(test_gradcheck_blames_op_at_the_end) {
    assert_blames(f_chain_end, false, "bad_square", 3, 0);
    assert_blames(f_chain_end, true, "bad_square", 3, 0);
}
END_TEST

START_TEST(test_gradcheck_blames_op_used_twice) {
    assert_blames(f_used_twice, false, "bad_square", 1, 0);
    assert_blames(f_used_twice, true, "bad_square", 1, 0);
}
END_TEST

START_TEST(test_gradcheck_blames_op_not_its_input_sharer) {
    assert_blames(f_shared_input, false, "bad_square", 1, 0);
    assert_blames(f_shared_input, true, "bad_square", 1, 0);
}
END_TEST

START_TEST(test_gradcheck_blames_op_before_a_view) {
    assert_blames(f_view_after, false, "bad_square", 1, 0);
    assert_blames(f_view_after, true, "bad_square", 1, 0);
}
END_TEST

START_TEST(test_gradcheck_blames_the_wrong_input) {
    assert_blames(f_bad_mul, false, "bad_mul", 2, 1);
    assert_blames(f_bad_mul, true, "bad_mul", 2, 1);
}
END_TEST

START_TEST(test_gradcheck_right_chain_blames_nothing) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[2];
    blame_inputs(ctx, in);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.blame = true;
    for (int fast = 0; fast < 2; fast++) {
        o.fast = fast;
        nb_gradcheck_result r;
        ck_assert_int_eq(nb_gradcheck(ctx, f_chain_right, NULL, 2, in, &o, &r), NB_OK);
        ck_assert(r.passed);
        ck_assert_int_eq(r.blame_index, -1);
        ck_assert_int_eq(r.blame_input, -1);
        ck_assert_ptr_null(r.blame_file);
        ck_assert_str_eq(r.blame_op, "");
        ck_assert_msg(strncmp(r.message, "gradcheck: passed, max |error| ", 31) == 0 &&
                          !strchr(r.message, ';') && !strstr(r.message, "but"),
                      "message: %s", r.message);
    }
    nb_ctx_free(ctx);
}
END_TEST

/* x^2 computed by hand and never recorded: no gradient flows through it */
static nb_tensor *unrecorded_square(nb_ctx *ctx, nb_tensor *x) {
    nb_tensor *y = x ? nb_empty(ctx, NB_F64, x->ndim, x->shape) : NULL;
    if (!y) return NULL;
    for (size_t i = 0; i < x->numel; i++)
        ((double *)y->data)[i] = ((double *)x->data)[i] * ((double *)x->data)[i];
    return y;
}

/* tanh #0 -> (unrecorded square) -> add #1 (its input 1 is off the tape) -> sum */
static nb_tensor *f_untracked_input(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *t = nb_tanh(ctx, in[0]);
    NB_HERE(ctx); wrong_line = __LINE__;
    return nb_sum(ctx, nb_add(ctx, unrecorded_square(ctx, t), t));
}

static nb_tensor *f_untracked_output(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return unrecorded_square(ctx, nb_tanh(ctx, in[0]));
}

START_TEST(test_gradcheck_blames_ops_off_the_tape) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[2];
    blame_inputs(ctx, in);
    for (int fast = 0; fast < 2; fast++) {
        nb_gradcheck_opts o = nb_gradcheck_defaults();
        o.fast = fast;
        nb_gradcheck_result r;
        ck_assert_int_eq(nb_gradcheck(ctx, f_untracked_input, NULL, 1, in, &o, &r), NB_ERR_VALUE);
        ck_assert_int_eq(r.blame_index, 1);
        ck_assert_str_eq(r.blame_op, "add");
        ck_assert_int_eq(r.blame_line, wrong_line);
        ck_assert_int_eq(r.blame_input, 0);
        ck_assert(r.blame_untracked);
        char want[160];
        snprintf(want, sizeof want,
                 "gradcheck: input 0 of op #1 'add' (created at %s:%d) changes with the checked "
                 "inputs but is not on the tape",
                 __FILE__, wrong_line);
        ck_assert_msg(strncmp(r.message, want, strlen(want)) == 0, "message: %s", r.message);
        nb_ctx_clear_error(ctx);

        ck_assert_int_eq(nb_gradcheck(ctx, f_untracked_output, NULL, 1, in, &o, &r), NB_ERR_VALUE);
        ck_assert_int_eq(r.blame_index, -1);
        ck_assert_msg(strncmp(r.message, "gradcheck: the output is not on the tape", 40) == 0,
                      "message: %s", r.message);
        nb_ctx_clear_error(ctx);
    }
    nb_ctx_free(ctx);
}
END_TEST

/* A module's parameter is a copy of the checked input's header (same data
 * and grad), as nabla-gradcheck binds them; bad_square #0 acts on it. */
static nb_tensor bound_w;
static nb_tensor *f_bound_param(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    bound_w = *in[1];
    NB_HERE(ctx); wrong_line = __LINE__;
    nb_tensor *w = bad_square(ctx, &bound_w);
    NB_HERE(ctx);
    return nb_sum(ctx, nb_tanh(ctx, nb_matmul(ctx, in[0], w)));
}

START_TEST(test_gradcheck_blames_op_on_a_bound_parameter) {
    assert_blames(f_bound_param, false, "bad_square", 0, 0);
    assert_blames(f_bound_param, true, "bad_square", 0, 0);
}
END_TEST

/* Two wrong ops whose errors cancel: out = bad_square(t) - bad_square(t)
 * has the right (zero) gradient, so the check passes; opts.blame still
 * finds them and names the later one (#2). */
static nb_tensor *f_errors_cancel(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *t = nb_tanh(ctx, in[0]);
    nb_tensor *a = bad_square(ctx, t);
    NB_HERE(ctx); wrong_line = __LINE__;
    nb_tensor *b = bad_square(ctx, t);
    NB_HERE(ctx);
    return nb_sub(ctx, a, b);
}

START_TEST(test_gradcheck_blame_on_request_when_passing) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[2];
    blame_inputs(ctx, in);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_errors_cancel, NULL, 1, in, &o, &r), NB_OK);
    ck_assert_int_eq(r.blame_index, -1);
    o.blame = true;
    for (int fast = 0; fast < 2; fast++) {
        o.fast = fast;
        ck_assert_int_eq(nb_gradcheck(ctx, f_errors_cancel, NULL, 1, in, &o, &r), NB_OK);
        ck_assert(r.passed);
        ck_assert_int_eq(r.blame_index, 2);
        ck_assert_str_eq(r.blame_op, "bad_square");
        ck_assert_int_eq(r.blame_line, wrong_line);
        ck_assert_int_eq(r.blame_input, 0);
        ck_assert_int_eq(r.blame_count, 2);
        ck_assert_msg(strstr(r.message, "; 1 more op disagrees)") &&
                          strstr(r.message, ", but backward of op #2 'bad_square'") &&
                          !strncmp(r.message, "gradcheck: passed, max |error| ", 31),
                      "message: %s", r.message);
    }
    nb_ctx_free(ctx);
}
END_TEST

/* ---- defects from issue 11 ------------------------------------------------ */
/* tanh of a (300, 300) f64 input: a non-scalar output big enough that one
 * evaluation outgrows the arena, so the reset before the next one frees it.
 * Fast mode read the output's numel after that reset (a crash, or "out of
 * memory"). */
static nb_tensor *f_tanh(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_tanh(ctx, in[0]);
}

START_TEST(test_gradcheck_fast_non_scalar_output) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 2);
    nb_tensor *x = nb_uniform(ctx, NB_F64, NB_SHAPE(300, 300), -1, 1, &rng);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = true;
    nb_gradcheck_result r;
    ck_assert_msg(nb_gradcheck(ctx, f_tanh, NULL, 1, &x, &o, &r) == NB_OK, "%s", r.message);
    ck_assert(r.passed);
    ck_assert(r.max_abs_err > 0 && r.max_abs_err < 1e-5);
    ck_assert(!strncmp(r.message, "gradcheck: passed, max |error| ", 31));
    nb_ctx_free(ctx);
}
END_TEST

/* gradcheck(layer, params + inputs): an f32 Linear(3 -> 2) and its input */
static nb_tensor *f_linear_layer(nb_ctx *ctx, nb_tensor *const *in, void *layer) {
    return nb_sum(ctx, nb_tanh(ctx, nb_nn_linear_forward(ctx, layer, in[0])));
}

START_TEST(test_gradcheck_module_params) {
    nb_ctx *pctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, 54);
    nb_nn_linear layer;
    ck_assert_int_eq(nb_nn_linear_init(pctx, &layer, 3, 2, true, NB_F32, &rng), NB_OK);
    nb_tensor *x = nb_requires_grad(nb_normal(pctx, NB_F32, NB_SHAPE(4, 3), 0, 1, &rng));
    nb_tensor *w = layer.weight, before = *w;
    float w0 = ((float *)w->data)[0];
    nb_gradcheck_result r;
    ck_assert_msg(nb_gradcheck_params(pctx, f_linear_layer, &layer, &layer.params, 1, &x, NULL, &r) ==
                      NB_OK, "%s", r.message);
    ck_assert(r.passed);
    ck_assert(r.max_abs_err > 0 && r.max_abs_err < 1e-8);
    /* the module is as it was: same struct, f32, same buffers and values */
    ck_assert_ptr_eq(layer.weight, w);
    ck_assert(memcmp(w, &before, sizeof before) == 0);
    ck_assert_int_eq(w->dtype, NB_F32);
    ck_assert(((float *)w->data)[0] == w0);
    ck_assert_int_eq(nb_ctx_status(pctx), NB_OK);
    /* the fast mode too, and NULL params is plain nb_gradcheck */
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = true;
    ck_assert_int_eq(nb_gradcheck_params(pctx, f_linear_layer, &layer, &layer.params, 1, &x, &o, &r),
                     NB_OK);
    ck_assert(memcmp(w, &before, sizeof before) == 0);
    nb_ctx_free(pctx);
}
END_TEST

/* 70 parameters p0..p69 (more than the 64 directions fast mode once
 * kept); only p69 goes through the wrong bad_square. */
static nb_tensor_list many;
static nb_tensor *f_many_params(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)in, (void)user;
    nb_tensor *acc = nb_sum(ctx, bad_square(ctx, many.t[69]));
    for (int k = 0; k < 69; k++) acc = nb_add(ctx, acc, nb_sum(ctx, nb_tanh(ctx, many.t[k])));
    return acc;
}

START_TEST(test_gradcheck_names_the_wrong_parameter) {
    static char names[70][8];
    nb_ctx *pctx = nb_ctx_new(0);
    memset(&many, 0, sizeof many);
    for (int k = 0; k < 70; k++) {
        snprintf(names[k], sizeof names[k], "p%d", k);
        nb_list_add(&many, names[k],
                    nb_requires_grad(nb_from_doubles(pctx, NB_F64, NB_SHAPE(2),
                                                     (double[]){0.5 + 0.01 * k, -0.4})));
    }
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck_params(pctx, f_many_params, NULL, &many, 0, NULL, NULL, &r),
                     NB_ERR_VALUE);
    ck_assert_int_eq(r.worst_input, 69);
    ck_assert_msg(strstr(r.message, "worst element d out[0] / d input 69 (parameter 'p69') [0]:"),
                  "%s", r.message);
    ck_assert_str_eq(r.blame_op, "bad_square");
    nb_ctx_clear_error(pctx);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = true;
    ck_assert_int_eq(nb_gradcheck_params(pctx, f_many_params, NULL, &many, 0, NULL, &o, &r),
                     NB_ERR_VALUE);
    ck_assert_str_eq(r.blame_op, "bad_square");
    ck_assert_int_eq(many.t[69]->dtype, NB_F64);
    nb_ctx_free(pctx);
}
END_TEST

/* A custom op written for f32 only: its output is f32 whatever its input. */
static void square32_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = nb_node_input(n, 0), *y = nb_node_output(n);
    float *gx = nb_grad_buffer(ctx, x);
    for (size_t i = 0; gx && i < x->numel; i++)
        gx[i] += ((float *)y->grad)[i] * 2 * ((float *)x->data)[i];
}

static nb_tensor *f_square32(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *x = in[0], *y = nb_empty(ctx, NB_F32, x->ndim, x->shape);
    for (size_t i = 0; y && i < y->numel; i++) ((float *)y->data)[i] = (float)(nb_get(x, i) * nb_get(x, i));
    nb_record(ctx, "square32", y, 1, &x, square32_backward, NULL);
    return nb_sum(ctx, y);
}

START_TEST(test_gradcheck_custom_op_without_f64) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F32, NB_SHAPE(3), (double[]){1, 2, 3}));
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_square32, NULL, 1, &x, NULL, &r), NB_ERR_DTYPE);
    ck_assert_msg(strstr(r.message, "square32: custom op does not implement f64: given f64 "
                                    "inputs it returned f32"),
                  "%s", r.message);
    ck_assert_ptr_null(strstr(r.message, "mixed dtypes"));
    /* in f32 the same op records fine */
    nb_ctx *step = nb_ctx_new(0);
    ck_assert_ptr_nonnull(f_square32(step, &x, NULL));
    ck_assert_int_eq(nb_ctx_status(step), NB_OK);
    nb_ctx_free(step);
    nb_ctx_free(ctx);
}
END_TEST

/* nabla-gradcheck's output for `args`; the test fails unless it exits with
 * `want`. */
static char *gradcheck_tool(const char *args, int want) {
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s/bin/nabla-gradcheck' %s 2>&1", nb_test_build_dir(), args);
    int st = nb_test_run(cmd, &out);
    ck_assert_msg(st == want, "%s exited %d, not %d:\n%s", cmd, st, want, out);
    return out;
}

/* The case lines of its output: every line but the header and the total. */
static int case_lines(char *out, char **lines, int cap) {
    int n = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "op ", 3) != 0 && !strstr(line, " passed, ")) {
            ck_assert_int_lt(n, cap);
            lines[n++] = line;
        }
    return n;
}

/* --shard K/N: the N runs check every case once between them, each on the
 * inputs of the whole run (the same errors to the last digit), and a shard
 * out of range is refused. */
START_TEST(test_gradcheck_tool_shards_split_the_cases) {
    char *all = gradcheck_tool("sdpa", 0), *whole[32];
    int n = case_lines(all, whole, 32), seen = 0;
    ck_assert_int_ge(n, 3);
    for (int k = 0; k < 3; k++) {
        char args[64], *part[32];
        snprintf(args, sizeof args, "--shard %d/3 sdpa", k);
        char *out = gradcheck_tool(args, 0);
        int m = case_lines(out, part, 32);
        ck_assert_int_ge(m, 1);
        for (int i = 0; i < m; i++) {
            ck_assert_int_lt(seen + i, n);
            ck_assert_str_eq(part[i], whole[k + 3 * i]); /* case k, k + 3, ... of the run */
        }
        seen += m;
        free(out);
    }
    ck_assert_int_eq(seen, n);
    free(all);
    char *bad = gradcheck_tool("--shard 3/3", 2);
    ck_assert_msg(strstr(bad, "--shard wants K/N with 0 <= K < N, not '3/3'"), "%s", bad);
    free(bad);
}
END_TEST

Suite *suite_gradcheck(void) {
    Suite *s = suite_create("gradcheck");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_gradcheck_passes_broadcast_ops);
    tcase_add_test(tc, test_gradcheck_refuses_bad_options);
    tcase_add_test(tc, test_gradcheck_catches_wrong_backward);
    tcase_add_test(tc, test_gradcheck_reports_function_errors);
    suite_add_tcase(s, tc);
    TCase *tb = tcase_create("blame");
    tcase_set_timeout(tb, 60);
    tcase_add_test(tb, test_gradcheck_blames_op_in_the_middle);
    tcase_add_test(tb, test_gradcheck_blames_op_on_a_leaf);
    tcase_add_test(tb, test_gradcheck_blames_op_at_the_end);
    tcase_add_test(tb, test_gradcheck_blames_op_used_twice);
    tcase_add_test(tb, test_gradcheck_blames_op_not_its_input_sharer);
    tcase_add_test(tb, test_gradcheck_blames_op_before_a_view);
    tcase_add_test(tb, test_gradcheck_blames_the_wrong_input);
    tcase_add_test(tb, test_gradcheck_right_chain_blames_nothing);
    tcase_add_test(tb, test_gradcheck_blames_ops_off_the_tape);
    tcase_add_test(tb, test_gradcheck_blames_op_on_a_bound_parameter);
    tcase_add_test(tb, test_gradcheck_blame_on_request_when_passing);
    tcase_add_test(tb, test_gradcheck_fast_non_scalar_output);
    tcase_add_test(tb, test_gradcheck_module_params);
    tcase_add_test(tb, test_gradcheck_names_the_wrong_parameter);
    tcase_add_test(tb, test_gradcheck_custom_op_without_f64);
    suite_add_tcase(s, tb);
    TCase *tt = tcase_create("tool");
    tcase_set_timeout(tt, 60);
    tcase_add_test(tt, test_gradcheck_tool_shards_split_the_cases);
    suite_add_tcase(s, tt);
    return s;
}
