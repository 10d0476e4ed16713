/* check_anomaly.c - anomaly mode in the forward pass: a NaN or inf that an
 * op makes from finite inputs is reported with the op, its creation site and
 * the input shapes (backward's checks are in check_tape.c). */
#include "check_nabla.h"

START_TEST(test_forward_anomaly_log_of_negative) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2), (double[]){1, 2, -2, 4}));
    /* off: NaN flows on silently, as in PyTorch */
    nb_tensor *y = nb_log(ctx, x);
    ck_assert(isnan(nb_get(y, 2)));
    ck_assert_ptr_null(nb_ctx_error(ctx));
    nb_set_detect_anomaly(ctx, true);
    nb_tensor *ok = nb_exp(ctx, y); /* y's NaN is passed on, not made here */
    ck_assert_ptr_nonnull(ok);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    NB_HERE(ctx);
    nb_log(ctx, x);
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "anomaly: forward of op #2 'log' (created at ");
    ck_assert_error_has(ctx, "check_anomaly.c:");
    ck_assert_error_has(ctx, "produced nan at element 2 of its output (2, 2) from finite inputs (2, 2)");
    ck_assert_int_eq(nb_tape_len(ctx), 2); /* the bad node was not recorded */
    nb_ctx_free(ctx);
}
END_TEST

/* a / b computed by hand: 0/0 in element 0 */
static void ratio_backward(nb_ctx *ctx, nb_node *n) {
    (void)ctx;
    (void)n;
}

START_TEST(test_forward_anomaly_in_custom_op) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_set_detect_anomaly(ctx, true);
    nb_tensor *a = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){0, 1, 2}));
    nb_tensor *b = nb_from_doubles(ctx, NB_F64, NB_SHAPE(1, 3), (double[]){0, 2, 4});
    nb_tensor *out = nb_empty(ctx, NB_F64, NB_SHAPE(3));
    for (int i = 0; i < 3; i++)
        ((double *)out->data)[i] = ((double *)a->data)[i] / ((double *)b->data)[i];
    NB_HERE(ctx);
    ck_assert_ptr_null(nb_record(ctx, "ratio", out, 2, (nb_tensor *[]){a, b}, ratio_backward, NULL));
    ck_assert_error_has(ctx, "anomaly: forward of op #0 'ratio' (created at ");
    ck_assert_error_has(ctx, "produced nan at element 0 of its output (3) from finite inputs (3), (1, 3)");
    nb_ctx_free(ctx);
}
END_TEST

/* Causal attention fills -inf on purpose: no false alarm, forward or back. */
START_TEST(test_forward_anomaly_spares_masks) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_set_detect_anomaly(ctx, true);
    nb_tensor *s = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2), (double[]){1, 2, 3, 4}));
    nb_tensor *p = nb_softmax(ctx, nb_causal_fill(ctx, s, -INFINITY));
    ck_assert_ptr_nonnull(p);
    ck_assert_double_eq(nb_get(p, 1), 0.0);
    ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, nb_mul(ctx, p, p)), NULL), NB_OK);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_anomaly(void) {
    Suite *s = suite_create("anomaly");
    TCase *tc = tcase_create("forward");
    tcase_add_test(tc, test_forward_anomaly_log_of_negative);
    tcase_add_test(tc, test_forward_anomaly_in_custom_op);
    tcase_add_test(tc, test_forward_anomaly_spares_masks);
    suite_add_tcase(s, tc);
    return s;
}
