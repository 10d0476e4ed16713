/* check_matrix_teach.c - the bad-input matrix (see check_matrix_ops.c's top
 * comment) for nabla/teach.h, the print options of nabla/core.h, the fused
 * attention op of nabla/ops.h and nb_gradcheck_params (nabla/gradcheck.h). */
#include "check_nabla.h"

#include <math.h>

#include "matrix_util.h"

START_TEST(test_op_formula) {
    ck_assert_str_eq(nb_op_formula((nb_op)-1), "?");
    ck_assert_str_eq(nb_op_formula(NB_OP_COUNT), "?");
    ck_assert_str_eq(nb_op_formula((nb_op)1000000), "?");
    ck_assert_ptr_nonnull(strstr(nb_op_formula(NB_OP_MUL), "dout · y"));
    ck_assert_str_eq(nb_op_tangent_formula((nb_op)-1), "?");
    ck_assert_str_eq(nb_op_tangent_formula(NB_OP_COUNT), "?");
    ck_assert_ptr_nonnull(strstr(nb_op_tangent_formula(NB_OP_MUL), "tx · y + x · ty"));
}
END_TEST

START_TEST(test_scope_bad_input) {
    nb_ctx_push_scope(NULL, "a", "f.c", 1); /* NULL ctx: nothing */
    nb_ctx_pop_scope(NULL);
    ck_assert_str_eq(nb_ctx_scope(NULL), "");
    nb_ctx *ctx = nb_ctx_new(0);
    nb_ctx_pop_scope(ctx); /* a pop with no push */
    ck_assert_int_eq(nb_ctx_status(ctx), NB_OK);
    nb_ctx_push_scope(ctx, NULL, NULL, 0); /* no name, no site */
    ck_assert_str_eq(nb_ctx_scope(ctx), "");
    nb_ctx_push_scope(ctx, "", "f.c", 2);
    ck_assert_str_eq(nb_ctx_scope(ctx), "");
    nb_ctx_push_scope(ctx, "a", "f.c", 3);
    ck_assert_str_eq(nb_ctx_scope(ctx), "a");
    for (int i = 0; i < 3; i++) nb_ctx_pop_scope(ctx);
    for (int i = 0; i < NB_SCOPE_MAX + 3; i++) nb_ctx_push_scope(ctx, "m", "f.c", i);
    expect_fail(ctx, nb_ctx_status(ctx) == NB_ERR_VALUE, NB_ERR_VALUE, "push_scope");
    nb_ctx_reset(ctx); /* empties the stack */
    ck_assert_str_eq(nb_ctx_scope(ctx), "");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_diag_bad_input) {
    ck_assert_ptr_null(nb_diag_new(NULL, 1, 0));
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_ptr_null(nb_diag_new(ctx, 0, 0));
    expect_fail(ctx, true, NB_ERR_VALUE, "diag_new");
    ck_assert_ptr_null(nb_diag_new(ctx, 1, -1));
    expect_fail(ctx, true, NB_ERR_VALUE, "diag_new");
    ck_assert_ptr_null(nb_diag_new(ctx, 1, 1001));
    expect_fail(ctx, true, NB_ERR_VALUE, "diag_new");
    nb_diag *d = nb_diag_new(ctx, 1, 0);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(nb_diag_step(NULL, d, 0, 1.0, NULL), NB_ERR_NULL);
    expect_fail(ctx, nb_diag_step(ctx, NULL, 0, 1.0, NULL) == NB_ERR_NULL, NB_ERR_NULL, "diag_step");
    ck_assert_int_eq(nb_diag_step(ctx, d, 0, NAN, NULL), NB_OK); /* no params, no tape */
    ck_assert_int_eq(nb_diag_eval(NULL, d, 0, 1.0, 1.0), NB_ERR_NULL);
    expect_fail(ctx, nb_diag_eval(ctx, NULL, 0, 1.0, 1.0) == NB_ERR_NULL, NB_ERR_NULL, "diag_eval");
    ck_assert_int_eq(nb_diag_write_jsonl(NULL, d, stdout), NB_ERR_NULL);
    expect_fail(ctx, nb_diag_write_jsonl(ctx, d, NULL) == NB_ERR_NULL, NB_ERR_NULL, "diag_write_jsonl");
    ck_assert_int_eq(nb_diag_write_html(NULL, d, stdout), NB_ERR_NULL);
    expect_fail(ctx, nb_diag_write_html(ctx, NULL, stdout) == NB_ERR_NULL, NB_ERR_NULL, "diag_write_html");
    FILE *ro = fopen("/dev/null", "r"); /* writes fail */
    expect_fail(ctx, nb_diag_write_html(ctx, d, ro) == NB_ERR_IO, NB_ERR_IO, "diag_write_html");
    fclose(ro);
    nb_diag_free(d);
    nb_diag_free(NULL);
    nb_ctx_free(ctx);
}
END_TEST

/* f reads the file back: at most `cap` bytes. */
static size_t slurp(FILE *f, char *buf, size_t cap) {
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    return n;
}

START_TEST(test_tape_html_json) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){NAN, INFINITY}));
    nb_tensor *y = nb_sum(ctx, nb_mul(ctx, x, x));
    nb_backward(ctx, y, NULL);
    FILE *f = tmpfile();
    ck_assert_int_eq(nb_tape_html(NULL, y, f), NB_ERR_NULL);
    ck_assert_int_eq(nb_tape_json(NULL, y, f), NB_ERR_NULL);
    expect_fail(ctx, nb_tape_html(ctx, y, NULL) == NB_ERR_NULL, NB_ERR_NULL, "tape_html");
    expect_fail(ctx, nb_tape_json(ctx, y, NULL) == NB_ERR_NULL, NB_ERR_NULL, "tape_json");
    ck_assert_int_eq(nb_tape_html_ex(NULL, y, NULL, f), NB_ERR_NULL);
    expect_fail(ctx, nb_tape_html_ex(ctx, y, NULL, NULL) == NB_ERR_NULL, NB_ERR_NULL, "tape_html");
    nb_tape_html_opts no_forward = {.n_in = 0}; /* no layout, no checks: the plain page */
    FILE *g = tmpfile();
    ck_assert_int_eq(nb_tape_html_ex(ctx, y, &no_forward, g), NB_OK);
    fclose(g);
    /* NaN and inf values are written as JSON strings, never as bare NaN */
    ck_assert_int_eq(nb_tape_json(ctx, y, f), NB_OK);
    char buf[8192];
    slurp(f, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "\"NaN\""));
    ck_assert_ptr_nonnull(strstr(buf, "\"Infinity\""));
    ck_assert_ptr_null(strstr(buf, ": NaN"));
    fclose(f);
    /* a tensor of another context as the root */
    nb_ctx *other = nb_ctx_new(0);
    nb_tensor *z = nb_ones(other, NB_F64, NB_SHAPE(1));
    f = tmpfile();
    nb_status st = nb_tape_html(ctx, z, f);
    ck_assert(st == NB_OK || nb_ctx_error(ctx)); /* a page of nothing, or a clear error */
    nb_ctx_clear_error(ctx);
    fclose(f);
    /* a failing stream is reported */
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        expect_fail(ctx, nb_tape_html(ctx, y, full) == NB_ERR_IO, NB_ERR_IO,
                    "tape_html: a write failed");
        fclose(full);
    }
    nb_ctx_free(other);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_printoptions) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *t = nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), (double[]){1.5, 2.25});
    char buf[256];
    FILE *f = tmpfile();
    /* out-of-range values keep the current setting (PyTorch's None) */
    nb_set_printoptions(-7, -1, -1, -100, NB_SCI_AUTO);
    nb_fprint(f, t);
    slurp(f, buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor([1.5000, 2.2500])");
    nb_set_printoptions(2, 1000, 3, 80, 1);
    f = freopen(NULL, "w+", f);
    nb_fprint(f, t);
    slurp(f, buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor([1.50e+00, 2.25e+00])");
    nb_set_printoptions(100000, INT64_MAX, 1 << 30, 1 << 30, 42); /* huge: no crash */
    f = freopen(NULL, "w+", f);
    nb_fprint(f, t);
    nb_reset_printoptions();
    f = freopen(NULL, "w+", f);
    nb_fprint(f, t);
    slurp(f, buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor([1.5000, 2.2500])");
    fclose(f);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_sdpa_bad_input) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *q = nb_ones(ctx, NB_F64, NB_SHAPE(1, 3, 2, 4));
    nb_tensor *k = nb_ones(ctx, NB_F64, NB_SHAPE(1, 3, 2, 4));
    nb_tensor *v = nb_ones(ctx, NB_F64, NB_SHAPE(1, 3, 2, 4));
    ck_assert_ptr_null(nb_sdpa(NULL, q, k, v, NULL, true, 0.5, 0, 1));
    expect_fail(ctx, !nb_sdpa(ctx, NULL, k, v, NULL, true, 0.5, 0, 1), NB_ERR_NULL, "sdpa");
    expect_fail(ctx, !nb_sdpa(ctx, q, k, NULL, NULL, true, 0.5, 0, 1), NB_ERR_NULL, "sdpa");
    expect_any(ctx, !nb_sdpa(ctx, q, nb_ones(ctx, NB_F64, NB_SHAPE(1, 3, 2, 5)), v, NULL, true, 0.5, 0, 1), "sdpa");
    expect_any(ctx, !nb_sdpa(ctx, q, k, nb_ones(ctx, NB_F64, NB_SHAPE(2, 3, 2, 4)), NULL, true, 0.5, 0, 1), "sdpa");
    expect_any(ctx, !nb_sdpa(ctx, nb_ones(ctx, NB_F64, NB_SHAPE(3, 2, 4)), k, v, NULL, true, 0.5, 0, 1), "sdpa");
    expect_fail(ctx, !nb_sdpa(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(1, 3, 2, 4)), k, v, NULL, true, 0.5, 0, 1),
                NB_ERR_DTYPE, "sdpa");
    expect_any(ctx, !nb_sdpa(ctx, q, k, v, NULL, true, 0.5, 1.5, 1), "sdpa");
    expect_any(ctx, !nb_sdpa(ctx, q, k, v, NULL, true, 0.5, NAN, 1), "sdpa");
    expect_any(ctx, !nb_sdpa(ctx, q, k, v, nb_zeros(ctx, NB_BOOL, NB_SHAPE(1, 4)), false, 0.5, 0, 1), "sdpa");
    expect_any(ctx, !nb_sdpa(ctx, q, k, v, nb_zeros(ctx, NB_F64, NB_SHAPE(1, 3)), false, 0.5, 0, 1), "sdpa");
    /* NaN data: no crash, NaN out */
    nb_set(q, 0, NAN);
    nb_tensor *o = nb_sdpa(ctx, q, k, v, NULL, false, 0.5, 0, 1);
    ck_assert_ptr_nonnull(o);
    ck_assert(isnan(nb_get(o, 0)));
    /* nb_sdpa_ex: the same checks, and its window's */
    ck_assert_ptr_null(nb_sdpa_ex(NULL, q, k, v, NULL));
    expect_fail(ctx, !nb_sdpa_ex(ctx, q, NULL, v, NULL), NB_ERR_NULL, "sdpa_ex");
    expect_fail(ctx, !nb_sdpa_ex(ctx, q, nb_ones(ctx, NB_F64, NB_SHAPE(1, 3, 3, 4)),
                                 nb_ones(ctx, NB_F64, NB_SHAPE(1, 3, 3, 4)), NULL),
                NB_ERR_SHAPE, "sdpa_ex"); /* 3 key/value heads for 2 query heads */
    expect_fail(ctx, !nb_sdpa_ex(ctx, q, k, v, &(nb_sdpa_opts){.causal = true, .window = -1}),
                NB_ERR_VALUE, "sdpa_ex");
    expect_fail(ctx, !nb_sdpa_ex(ctx, q, k, v, &(nb_sdpa_opts){.window = 2}), NB_ERR_VALUE,
                "sdpa_ex");
    expect_fail(ctx, !nb_sdpa_ex(ctx, q, k, v, &(nb_sdpa_opts){.dropout_p = -1}), NB_ERR_VALUE,
                "sdpa_ex");
    expect_fail(ctx, !nb_sdpa_ex(ctx, q, k, v, &(nb_sdpa_opts){.scale = NAN}), NB_ERR_VALUE,
                "sdpa_ex");
    expect_any(ctx, !nb_sdpa_ex(ctx, q, k, v, &(nb_sdpa_opts){.key_padding_mask = q}), "sdpa_ex");
    ck_assert_ptr_nonnull(nb_sdpa_ex(ctx, q, nb_ones(ctx, NB_F64, NB_SHAPE(1, 0, 1, 4)),
                                     nb_ones(ctx, NB_F64, NB_SHAPE(1, 0, 1, 4)),
                                     &(nb_sdpa_opts){.causal = true, .window = 1}));

    ck_assert_ptr_null(nb_sdpa_dropout_mask(NULL, 1, 1, 2, 2, 0.5, 1));
    expect_any(ctx, !nb_sdpa_dropout_mask(ctx, 1, 1, 2, 2, -0.1, 1), "");
    expect_any(ctx, !nb_sdpa_dropout_mask(ctx, 1, 1, 2, 2, NAN, 1), "");
    expect_any(ctx, !nb_sdpa_dropout_mask(ctx, -2, 1, 2, 2, 0.5, 1), "");
    expect_any(ctx, !nb_sdpa_dropout_mask(ctx, 1, -1, 2, 2, 0.5, 1), "");
    expect_any(ctx, !nb_sdpa_dropout_mask(ctx, INT64_MAX, INT64_MAX, 2, 2, 0.5, 1), "");
    nb_tensor *all = nb_sdpa_dropout_mask(ctx, 1, 1, 2, 3, 0, 1);
    ck_assert_ptr_nonnull(all);
    for (size_t i = 0; i < all->numel; i++) ck_assert_double_eq(nb_get(all, i), 1);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_lin(nb_ctx *c, nb_tensor *const *in, void *layer) {
    return nb_nn_linear_forward(c, layer, in[0]);
}

START_TEST(test_gradcheck_params_bad_input) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 3);
    nb_nn_linear lin;
    ck_assert_int_eq(nb_nn_linear_init(p, &lin, 3, 2, true, NB_F32, &rng), NB_OK);
    nb_tensor *x = nb_uniform(ctx, NB_F64, NB_SHAPE(2, 3), -1, 1, &rng);
    nb_gradcheck_result r;
    expect_any(ctx, nb_gradcheck_params(ctx, NULL, &lin, &lin.params, 1, &x, NULL, &r),
               "gradcheck");
    expect_any(ctx, nb_gradcheck_params(ctx, f_lin, &lin, &lin.params, -1, &x, NULL, &r),
               "gradcheck");
    expect_any(ctx, nb_gradcheck_params(ctx, f_lin, &lin, &lin.params, 1, NULL, NULL, &r),
               "gradcheck");
    nb_tensor *null_in[1] = {NULL};
    expect_any(ctx, nb_gradcheck_params(ctx, f_lin, &lin, &lin.params, 1, null_in, NULL, &r),
               "gradcheck");
    nb_tensor_list holey = {0};
    nb_list_add(&holey, "w", lin.weight);
    holey.n = -4; /* a corrupt list */
    expect_any(ctx, nb_gradcheck_params(ctx, f_lin, &lin, &holey, 1, &x, NULL, &r), "gradcheck");
    /* the module is untouched by the failed calls and a good one passes */
    ck_assert_int_eq(lin.weight->dtype, NB_F32);
    ck_assert_int_eq(nb_gradcheck_params(ctx, f_lin, &lin, &lin.params, 1, &x, NULL, &r), NB_OK);
    ck_assert(r.passed);
    ck_assert_int_eq(lin.weight->dtype, NB_F32);
    nb_ctx_free(ctx), nb_ctx_free(p);
}
END_TEST

Suite *suite_matrix_teach(void) {
    Suite *s = suite_create("matrix_teach");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_op_formula);
    tcase_add_test(tc, test_tape_html_json);
    tcase_add_test(tc, test_scope_bad_input);
    tcase_add_test(tc, test_diag_bad_input);
    tcase_add_test(tc, test_printoptions);
    tcase_add_test(tc, test_sdpa_bad_input);
    tcase_add_test(tc, test_gradcheck_params_bad_input);
    suite_add_tcase(s, tc);
    return s;
}
