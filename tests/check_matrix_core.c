/* check_matrix_core.c - the bad-input matrix for nabla/core.h and
 * nabla/random.h: contexts, tensor creation, element access, lists, the
 * tape and custom ops, the rng. See check_matrix_ops.c's top comment for the
 * matrix's rules and how to add a case for a new public function. */
#include "check_nabla.h"

#include <stdatomic.h>

#include "matrix_util.h"

START_TEST(test_status_and_dtype_names) {
    ck_assert_str_eq(nb_status_str(NB_OK), "ok");
    ck_assert_ptr_nonnull(nb_status_str((nb_status)-1));
    ck_assert_ptr_nonnull(nb_status_str(NB_STATUS_COUNT));
    ck_assert_ptr_nonnull(nb_status_str((nb_status)1000));
    ck_assert_uint_eq(nb_dtype_size(NB_F64), 8);
    ck_assert_uint_eq(nb_dtype_size((nb_dtype)99), 0);
    ck_assert_uint_eq(nb_dtype_size((nb_dtype)-1), 0);
    ck_assert_str_eq(nb_dtype_name(NB_BOOL), "bool");
    ck_assert_ptr_nonnull(nb_dtype_name((nb_dtype)99));
}
END_TEST

/* Every context function with a NULL context: a no-op or a neutral value. */
START_TEST(test_null_context) {
    nb_ctx_free(NULL);
    nb_ctx_reset(NULL);
    nb_ctx_clear_error(NULL);
    ck_assert_int_eq(nb_ctx_status(NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_ctx_fail(NULL, NB_ERR_VALUE, "x %d", 1), NB_ERR_VALUE);
    ck_assert_ptr_null(nb_pcg32_tensor(NULL, NULL));
    ck_assert_ptr_nonnull(nb_ctx_error(NULL)); /* "NULL context" */
    ck_assert(!nb_set_grad_enabled(NULL, true));
    ck_assert(!nb_is_grad_enabled(NULL));
    nb_ctx_set_site(NULL, "f.c", 1);
    ck_assert_uint_eq(nb_ctx_mem_used(NULL), 0);
    ck_assert_uint_eq(nb_ctx_mem_reserved(NULL), 0);
    ck_assert_uint_eq(nb_ctx_mallocs(NULL), 0);
    ck_assert_ptr_null(nb_ctx_alloc(NULL, 16));
    ck_assert(!nb_set_detect_anomaly(NULL, true));
    ck_assert_int_eq(nb_tape_len(NULL), 0);
    nb_tape_print(NULL, stdout);
    ck_assert_int_eq(nb_tape_dot(NULL, NULL, stdout), NB_ERR_NULL);
    ck_assert_int_eq(nb_backward(NULL, NULL, NULL), NB_ERR_NULL);
    ck_assert_ptr_null(nb_empty(NULL, NB_F32, NB_SHAPE(2)));
    ck_assert_ptr_null(nb_zeros(NULL, NB_F32, NB_SHAPE(2)));
    ck_assert_ptr_null(nb_ones(NULL, NB_F32, NB_SHAPE(2)));
    ck_assert_ptr_null(nb_full(NULL, NB_F32, NB_SHAPE(2), 1));
    ck_assert_ptr_null(nb_from_data(NULL, NB_F32, NB_SHAPE(1), (const float[]){1}));
    ck_assert_ptr_null(nb_from_doubles(NULL, NB_F32, NB_SHAPE(1), (const double[]){1}));
    ck_assert_ptr_null(nb_scalar(NULL, NB_F32, 1));
    ck_assert_ptr_null(nb_copy(NULL, NULL, NB_F32));
    ck_assert_ptr_null(nb_record(NULL, "x", NULL, 0, NULL, NULL, NULL));
    ck_assert_ptr_null(nb_grad_buffer(NULL, NULL));
}
END_TEST

START_TEST(test_ctx_misuse) {
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_ptr_nonnull(ctx);
    ck_assert_ptr_null(nb_ctx_new(SIZE_MAX)); /* cannot be had */
    ck_assert_ptr_null(nb_ctx_alloc(ctx, SIZE_MAX));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_MEMORY);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_nonnull(nb_ctx_alloc(ctx, 0));
    /* The first error is kept; a long message is cut, not overflowed. */
    char big[4096];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ck_assert_int_eq(nb_ctx_fail(ctx, NB_ERR_VALUE, "%s", big), NB_ERR_VALUE);
    ck_assert_int_eq(nb_ctx_fail(ctx, NB_ERR_SHAPE, "second"), NB_ERR_SHAPE);
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_uint_lt(strlen(nb_ctx_error(ctx)), sizeof big);
    nb_ctx_reset(ctx);
    ck_assert_int_eq(nb_ctx_status(ctx), NB_OK);
    nb_ctx_set_site(ctx, NULL, -5);
    ck_assert(nb_set_grad_enabled(ctx, false));
    ck_assert(!nb_is_grad_enabled(ctx));
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_creation_bad_shapes) {
    nb_ctx *ctx = nb_ctx_new(0);
    const int64_t big = (int64_t)1 << 40;
    expect_fail(ctx, !nb_empty(ctx, NB_F32, 2, NULL), NB_ERR_NULL, "empty");
    expect_any(ctx, !nb_zeros(ctx, NB_F32, -1, (const int64_t[]){1}), "zeros");
    expect_any(ctx, !nb_ones(ctx, NB_F32, 9, (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}), "ones");
    expect_fail(ctx, !nb_full(ctx, NB_F32, NB_SHAPE(2, -1), 1), NB_ERR_SIZE, "full");
    expect_fail(ctx, !nb_empty(ctx, NB_F32, NB_SHAPE(-3)), NB_ERR_SIZE, "empty");
    expect_fail(ctx, !nb_empty(ctx, NB_F64, NB_SHAPE(big, big)), NB_ERR_SIZE, "empty");
    expect_fail(ctx, !nb_empty(ctx, NB_F64, NB_SHAPE(INT64_MAX)), NB_ERR_SIZE, "empty");
    expect_fail(ctx, !nb_empty(ctx, NB_F64, NB_SHAPE(big, 1 << 21)), NB_ERR_SIZE, "empty");
    expect_fail(ctx, !nb_empty(ctx, (nb_dtype)7, NB_SHAPE(2)), NB_ERR_DTYPE, "empty");
    expect_fail(ctx, !nb_from_data(ctx, NB_F32, NB_SHAPE(2), NULL), NB_ERR_NULL, "from_data");
    expect_fail(ctx, !nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), NULL), NB_ERR_NULL, "from_doubles");
    expect_fail(ctx, !nb_scalar(ctx, (nb_dtype)-2, 1), NB_ERR_DTYPE, "scalar");
    /* NaN and Inf are valid float data. */
    nb_tensor *t = nb_full(ctx, NB_F64, NB_SHAPE(2), NAN);
    ck_assert(isnan(nb_get(t, 1)));
    t = nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), (const double[]){INFINITY, -INFINITY});
    ck_assert(isinf(nb_get(t, 0)) && nb_get(t, 1) < 0);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_random_creation) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 4);
    ck_assert_ptr_nonnull(nb_uniform(ctx, NB_F32, NB_SHAPE(3), -1, 1, &rng));
    ck_assert_ptr_nonnull(nb_normal(ctx, NB_F64, NB_SHAPE(3), 0, 1, &rng));
    expect_fail(ctx, !nb_uniform(ctx, NB_F32, NB_SHAPE(3), 0, 1, NULL), NB_ERR_NULL, "uniform");
    expect_fail(ctx, !nb_normal(ctx, NB_F32, NB_SHAPE(3), 0, 1, NULL), NB_ERR_NULL, "normal");
    expect_fail(ctx, !nb_uniform(ctx, NB_F32, NB_SHAPE(3), 2, 1, &rng), NB_ERR_VALUE, "uniform");
    expect_fail(ctx, !nb_uniform(ctx, NB_F32, NB_SHAPE(3), 0, INFINITY, &rng), NB_ERR_VALUE,
                "uniform");
    expect_fail(ctx, !nb_uniform(ctx, NB_F32, NB_SHAPE(3), NAN, 1, &rng), NB_ERR_VALUE, "uniform");
    expect_fail(ctx, !nb_normal(ctx, NB_F32, NB_SHAPE(3), 0, -1, &rng), NB_ERR_VALUE, "normal");
    expect_fail(ctx, !nb_normal(ctx, NB_F32, NB_SHAPE(3), 0, NAN, &rng), NB_ERR_VALUE, "normal");
    expect_any(ctx, !nb_uniform(ctx, NB_I64, NB_SHAPE(3), 0, 1, &rng), "uniform");
    expect_any(ctx, !nb_normal(ctx, NB_F32, 2, NULL, 0, 1, &rng), "normal");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_copy_and_grad) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *f = nb_from_doubles(ctx, NB_F32, NB_SHAPE(3), (const double[]){1.5, NAN, -2});
    expect_fail(ctx, !nb_copy(ctx, NULL, NB_F32), NB_ERR_NULL, "copy");
    expect_any(ctx, !nb_copy(ctx, f, (nb_dtype)9), "copy");
    nb_tensor *c = nb_copy(ctx, f, NB_F64);
    ck_assert_double_eq(nb_get(c, 0), 1.5);
    ck_assert_ptr_null(nb_requires_grad(NULL));
    nb_tensor *i = nb_zeros(ctx, NB_I64, NB_SHAPE(2));
    expect_any(ctx, !nb_requires_grad(i), "requires_grad");
    nb_zero_grad(NULL);
    nb_zero_grad(i);
    nb_tensor *g = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    ck_assert_ptr_nonnull(g);
    ck_assert_double_eq(nb_grad_get(g, 0), 0);
    ck_assert(isnan(nb_grad_get(g, 2)) || nb_grad_get(g, 2) == 0);
    ck_assert_double_eq(nb_grad_get(NULL, 0), 0);
    nb_zero_grad(g);
    /* Not a leaf. */
    nb_tensor *y = nb_scale(ctx, g, 2);
    expect_any(ctx, !nb_requires_grad(y), "requires_grad");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_element_access) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *t = nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), (const double[]){1, 2});
    ck_assert(isnan(nb_get(NULL, 0)));
    ck_assert(isnan(nb_get(t, 2)));
    ck_assert(isnan(nb_get(t, SIZE_MAX)));
    nb_set(NULL, 0, 1);
    nb_set(t, 2, 5);
    nb_set(t, SIZE_MAX, 5);
    ck_assert_double_eq(nb_get(t, 1), 2);
    nb_set(t, 0, NAN);
    ck_assert(isnan(nb_get(t, 0)));
    ck_assert(isnan(nb_item(NULL)));
    ck_assert(isnan(nb_item(t))); /* two elements */
    ck_assert_double_eq(nb_item(nb_scalar(ctx, NB_I64, 7)), 7);
    nb_tensor *b = nb_zeros(ctx, NB_BOOL, NB_SHAPE(2));
    nb_set(b, 0, 3);
    ck_assert_double_eq(nb_get(b, 0), 1);
    /* I64: integral values store, NaN / Inf / out of range store nothing
     * or record an error, never undefined behaviour (UBSan). */
    nb_tensor *i = nb_zeros(ctx, NB_I64, NB_SHAPE(1));
    nb_set(i, 0, -3);
    ck_assert_double_eq(nb_get(i, 0), -3);
    const double bad[] = {1e300, NAN, -INFINITY, 9223372036854775808.0};
    for (int k = 0; k < 4; k++) {
        nb_set(i, 0, bad[k]);
        ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
        ck_assert_double_eq(nb_get(i, 0), -3);
        nb_ctx_clear_error(ctx);
    }
    expect_fail(ctx, !nb_full(ctx, NB_I64, NB_SHAPE(2), NAN), NB_ERR_VALUE, "full");
    expect_fail(ctx, !nb_from_doubles(ctx, NB_I64, NB_SHAPE(1), (const double[]){INFINITY}),
                NB_ERR_VALUE, "");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_shapes_and_printing) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3)), *b = nb_ones(ctx, NB_F32, NB_SHAPE(3, 2));
    ck_assert(!nb_same_shape(a, b));
    ck_assert(!nb_same_shape(a, NULL));
    ck_assert(!nb_same_shape(NULL, NULL));
    char buf[8];
    ck_assert_str_eq(nb_shape_str(NULL, buf, sizeof buf), "(NULL)");
    ck_assert_str_eq(nb_shape_str(a, buf, sizeof buf), "(2, 3)");
    ck_assert_ptr_eq(nb_shape_str(a, buf, 1), buf);
    ck_assert_str_eq(buf, "");
    ck_assert_ptr_null(nb_shape_str(a, NULL, 0));
    FILE *f = tmpfile();
    nb_fprint(f, NULL);
    nb_fprint(NULL, a);
    nb_set(a, 0, NAN);
    nb_set(a, 1, INFINITY);
    nb_fprint(f, a);
    fclose(f);
    nb_print(NULL);
    nb_print_grad(NULL);
    nb_print_grad(a); /* "None" */
    nb_ctx_free(ctx);
}
END_TEST

/* Print options out of range: huge precision is capped, negative values
 * keep the current ones, any nonzero sci_mode means on, linewidth 0 gives
 * one element a line, threshold 0 summarizes; nothing overflows. */
START_TEST(test_printoptions_bad_values) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_from_doubles(ctx, NB_F64, NB_SHAPE(8), (const double[]){1e300, -1e-300, NAN, INFINITY, 0, -0.0, 1, 2});
    char *s;
    nb_set_printoptions(1000, -5, -5, -5, 7);
    s = nb_test_format(a);
    ck_assert_ptr_nonnull(strstr(s, "e+300"));
    ck_assert_ptr_nonnull(strstr(s, "nan"));
    free(s);
    nb_set_printoptions(2, 0, 1, 0, 0);
    s = nb_test_format(a);
    ck_assert_ptr_nonnull(strstr(s, "..."));
    ck_assert_ptr_nonnull(strstr(s, ",\n"));
    free(s);
    nb_set_printoptions(-1, 0, 0, -1, NB_SCI_AUTO);
    s = nb_test_format(a);
    ck_assert_ptr_nonnull(strstr(s, "..."));
    free(s);
    nb_reset_printoptions();
    s = nb_test_format(nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), (const double[]){1e-10, 1}));
    ck_assert_str_eq(s, "tensor([1.0000e-10, 1.0000e+00])");
    free(s);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_lists) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *t = nb_ones(ctx, NB_F32, NB_SHAPE(1));
    nb_tensor_list l = {0};
    /* A list has no context: t's own context takes the message. */
    expect_fail(ctx, nb_list_add(NULL, "a", t) == NB_ERR_NULL, NB_ERR_NULL, "list_add");
    expect_fail(ctx, nb_list_add(&l, NULL, t) == NB_ERR_NULL, NB_ERR_NULL, "list_add");
    ck_assert_int_eq(nb_list_add(&l, "a", NULL), NB_ERR_NULL); /* nowhere to record */
    ck_assert_int_eq(nb_list_add(&l, "a", t), NB_OK);
    expect_fail(ctx, nb_list_add(&l, "a", t) == NB_ERR_VALUE, NB_ERR_VALUE,
                "list_add: 'a' is already in the list");
    ck_assert_ptr_eq(nb_list_get(&l, "a"), t);
    ck_assert_ptr_null(nb_list_get(&l, "b"));
    ck_assert_ptr_null(nb_list_get(NULL, "a"));
    ck_assert_ptr_null(nb_list_get(&l, NULL));
    ck_assert_ptr_null(nb_list_name(&l, 1));
    ck_assert_ptr_null(nb_list_name(&l, -1));
    ck_assert_ptr_null(nb_list_tensor(&l, INT32_MAX));
    ck_assert_ptr_null(nb_list_tensor(NULL, 0));
    ck_assert_str_eq(nb_list_name(&l, 0), "a");
    /* Past the in-struct entries, into heap storage. */
    static char names[NB_LIST_MAX + 10][8];
    for (int i = 1; i < NB_LIST_MAX + 10; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        ck_assert_int_eq(nb_list_add(&l, names[i], t), NB_OK);
    }
    ck_assert_str_eq(nb_list_name(&l, NB_LIST_MAX + 5), "t261");
    /* A corrupt count is refused, not followed. */
    nb_tensor_list bad = {0};
    bad.n = -4;
    expect_fail(ctx, nb_list_add(&bad, "x", t) == NB_ERR_VALUE, NB_ERR_VALUE,
                "list_add: the list is corrupt");
    ck_assert_ptr_null(nb_list_get(&bad, "x"));
    bad.n = NB_LIST_MAX + 1;
    ck_assert_ptr_null(nb_list_tensor(&bad, NB_LIST_MAX));
    nb_list_free(&l);
    ck_assert_int_eq(l.n, 0);
    nb_list_free(NULL);
    nb_ctx_free(ctx);
}
END_TEST

static void noop_backward(nb_ctx *ctx, nb_node *n) {
    (void)ctx;
    (void)n;
}

START_TEST(test_tape_and_custom_ops) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    nb_tensor *out = nb_zeros(ctx, NB_F32, NB_SHAPE(2)); /* the op never writes it */
    expect_any(ctx, !nb_record(ctx, "myop", NULL, 1, &x, noop_backward, NULL), "record");
    expect_any(ctx, !nb_record(ctx, "myop", out, 1, NULL, noop_backward, NULL), "record");
    expect_any(ctx, !nb_record(ctx, "myop", out, -1, &x, noop_backward, NULL), "record");
    expect_any(ctx, !nb_record(ctx, "myop", out, 1, &x, NULL, NULL), "record");
    nb_node *n = nb_record(ctx, "myop", out, 1, &x, noop_backward, (void *)&ctx);
    ck_assert_ptr_nonnull(n);
    ck_assert_ptr_eq(nb_node_input(n, 0), x);
    ck_assert_ptr_null(nb_node_input(n, 1));
    ck_assert_ptr_null(nb_node_input(n, -1));
    ck_assert_ptr_null(nb_node_input(NULL, 0));
    ck_assert_int_eq(nb_node_num_inputs(n), 1);
    ck_assert_int_eq(nb_node_num_inputs(NULL), 0);
    ck_assert_ptr_eq(nb_node_output(n), out);
    ck_assert_ptr_null(nb_node_output(NULL));
    ck_assert_ptr_eq(nb_node_userdata(n), &ctx);
    ck_assert_ptr_null(nb_node_userdata(NULL));
    ck_assert_str_eq(nb_node_name(n), "myop");
    ck_assert_ptr_null(nb_node_name(NULL));
    ck_assert_ptr_null(nb_grad_buffer(ctx, NULL));
    ck_assert_ptr_null(nb_grad_buffer(ctx, nb_ones(ctx, NB_F32, NB_SHAPE(1)))); /* no grad */
    /* backward: NULL out, grad_out of the wrong shape or dtype, a non-scalar
     * without grad_out. */
    expect_fail(ctx, nb_backward(ctx, NULL, NULL) != NB_OK, NB_ERR_NULL, "backward");
    expect_any(ctx, nb_backward(ctx, out, NULL) != NB_OK, "backward");
    expect_any(ctx, nb_backward(ctx, out, nb_ones(ctx, NB_F32, NB_SHAPE(3))) != NB_OK, "backward");
    expect_any(ctx, nb_backward(ctx, out, nb_ones(ctx, NB_F64, NB_SHAPE(2))) != NB_OK, "backward");
    ck_assert(!nb_set_detect_anomaly(ctx, true));
    ck_assert_int_eq(nb_backward(ctx, out, nb_ones(ctx, NB_F32, NB_SHAPE(2))), NB_OK);
    ck_assert_int_eq(nb_tape_len(ctx), 1);
    FILE *f = tmpfile();
    ck_assert_int_eq(nb_tape_print(ctx, f), NB_OK);
    expect_fail(ctx, nb_tape_print(ctx, NULL) == NB_ERR_NULL, NB_ERR_NULL, "tape_print");
    ck_assert_int_eq(nb_tape_dot(ctx, out, f), NB_OK);
    expect_fail(ctx, nb_tape_dot(ctx, NULL, NULL) == NB_ERR_NULL, NB_ERR_NULL, "tape_dot");
    fclose(f);
    FILE *full = fopen("/dev/full", "w");
    if (full) { /* every write fails: reported, not ignored */
        expect_fail(ctx, nb_tape_dot(ctx, out, full) == NB_ERR_IO, NB_ERR_IO,
                    "tape_dot: a write failed");
        expect_fail(ctx, nb_tape_print(ctx, full) == NB_ERR_IO, NB_ERR_IO,
                    "tape_print: a write failed");
        fclose(full);
    }
    /* the views work on a context holding an error, which they keep */
    nb_ctx_fail(ctx, NB_ERR_SHAPE, "an earlier failure");
    f = tmpfile();
    ck_assert_int_eq(nb_tape_print(ctx, f), NB_OK);
    ck_assert_int_eq(nb_tape_dot(ctx, out, f), NB_OK);
    ck_assert_int_eq(nb_tape_print(ctx, NULL), NB_ERR_NULL);
    ck_assert_str_eq(nb_ctx_error(ctx), "an earlier failure");
    fclose(f);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_threads) {
    ck_assert_int_eq(nb_set_num_threads(0), 1);
    ck_assert_int_eq(nb_set_num_threads(-5), 1);
    ck_assert_int_ge(nb_set_num_threads(INT32_MAX), 1);
    ck_assert_int_ge(nb_get_num_threads(), 1);
    ck_assert_int_eq(nb_set_num_threads(1), 1);
    ck_assert_int_eq(nb_get_num_threads(), 1);
    /* guest threads: counts clamped; serving returns at once without a slot,
     * with a NULL or cleared flag; jobs split for many absent guests (more
     * shares than the pool holds, once threads grow) still run whole */
    ck_assert_int_eq(nb_set_guest_threads(-3), 0);
    _Atomic int go = 1;
    nb_guest_serve(0, &go); /* no slots */
    int most = nb_set_guest_threads(INT32_MAX);
    ck_assert(most >= 1 && most <= 63);
    nb_guest_serve(-1, &go);
    nb_guest_serve(most, &go);
    nb_guest_serve(0, NULL);
    go = 0;
    nb_guest_serve(0, &go);
    ck_assert_int_eq(nb_set_num_threads(2), 2);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(300, 64));
    nb_tensor *w = nb_full(ctx, NB_F32, NB_SHAPE(48, 64), 0.5);
    nb_tensor *y = nb_linear(ctx, x, w, NULL);
    ck_assert_ptr_nonnull(y);
    for (size_t i = 0; i < y->numel; i += 97) ck_assert_double_eq(nb_get(y, i), 32.0);
    nb_ctx_free(ctx);
    ck_assert_int_eq(nb_set_guest_threads(0), 0);
    ck_assert_int_eq(nb_set_num_threads(1), 1);
}
END_TEST

START_TEST(test_pcg32) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, UINT64_MAX, UINT64_MAX);
    ck_assert_uint_lt(nb_pcg32_bounded(&rng, 7), 7);
    ck_assert_uint_eq(nb_pcg32_bounded(&rng, 1), 0);
    (void)nb_pcg32_bounded(&rng, 0); /* no division by zero */
    float f = nb_pcg32_float(&rng);
    ck_assert(f >= 0 && f < 1);
    double d = nb_pcg32_double(&rng);
    ck_assert(d >= 0 && d < 1);
    ck_assert(isfinite(nb_pcg32_normal(&rng)));
    (void)nb_pcg32_next(&rng);
    /* A NULL generator: 0 or NaN, no crash. */
    nb_pcg32_seed(NULL, 1, 2);
    ck_assert_uint_eq(nb_pcg32_next(NULL), 0);
    ck_assert_uint_eq(nb_pcg32_bounded(NULL, 5), 0);
    ck_assert(isnan(nb_pcg32_float(NULL)));
    ck_assert(isnan(nb_pcg32_double(NULL)));
    ck_assert(isnan(nb_pcg32_normal(NULL)));
}
END_TEST

Suite *suite_matrix_core(void) {
    Suite *s = suite_create("matrix_core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_status_and_dtype_names);
    tcase_add_test(tc, test_null_context);
    tcase_add_test(tc, test_ctx_misuse);
    tcase_add_test(tc, test_creation_bad_shapes);
    tcase_add_test(tc, test_random_creation);
    tcase_add_test(tc, test_copy_and_grad);
    tcase_add_test(tc, test_element_access);
    tcase_add_test(tc, test_shapes_and_printing);
    tcase_add_test(tc, test_lists);
    tcase_add_test(tc, test_tape_and_custom_ops);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_pcg32);
    tcase_add_test(tc, test_printoptions_bad_values);
    suite_add_tcase(s, tc);
    return s;
}
