/* check_teach.c - the teaching views: the Graphviz dump of the tape, and the
 * teach_backprop walkthrough (its gradients checked against PyTorch 1.13:
 * W.grad = [[0.1786, -0.1534], [0.0540, -0.0919], [-0.0951, 0.1714]],
 * L = 0.5708862293275434). */
#include "check_nabla.h"

static char *dot_of(const nb_ctx *ctx, const nb_tensor *root) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(nb_tape_dot(ctx, root, f), NB_OK);
    fclose(f);
    return buf;
}

START_TEST(test_tape_dot_draws_ops_tensors_and_grads) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){1, -2}));
    x->name = "x";
    NB_HERE(ctx);
    nb_tensor *y = nb_mul(ctx, x, x);
    nb_tensor *s = nb_sum(ctx, y);
    ck_assert_int_eq(nb_backward(ctx, s, NULL), NB_OK);
    char *dot = dot_of(ctx, s);
    ck_assert_ptr_nonnull(strstr(dot, "digraph tape {"));
    ck_assert_ptr_nonnull(strstr(dot, "#0 mul\\ncheck_teach.c:"));
    ck_assert_ptr_nonnull(strstr(dot, "#1 sum"));
    ck_assert_ptr_nonnull(strstr(dot, "x | (2) f64 | data [1.0000, -2.0000] | grad [2.0000, -4.0000]"));
    ck_assert_ptr_nonnull(strstr(dot, "() f64 | data [5.0000] | grad [1.0000]"));
    /* x feeds mul twice: two edges from one box */
    char edge[64];
    snprintf(edge, sizeof edge, "t%p -> op0;", (void *)x);
    char *first = strstr(dot, edge);
    ck_assert_ptr_nonnull(first);
    ck_assert_ptr_nonnull(strstr(first + 1, edge));
    free(dot);
    /* root limits the picture to the ops it depends on */
    dot = dot_of(ctx, y);
    ck_assert_ptr_null(strstr(dot, "#1 sum"));
    free(dot);
    ck_assert_int_eq(nb_tape_dot(NULL, NULL, stdout), NB_ERR_NULL);
    ck_assert_int_eq(nb_tape_dot(ctx, NULL, NULL), NB_ERR_NULL);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_teach_backprop_prints_every_step) {
    const char *dir = getenv("NB_BUILD_DIR");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/examples/teach_backprop --dot /dev/null 2>&1",
             dir ? dir : NB_SOURCE_DIR "/build");
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    static char out[16384];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_ptr_nonnull(strstr(out, "#0   matmul        (2, 3), (3, 2)* -> (2, 2)  at examples/teach_backprop.c:"));
    ck_assert_ptr_nonnull(strstr(out, "#3   mse_loss"));
    ck_assert_ptr_nonnull(strstr(out, "L = tensor(0.5709, dtype=torch.float64)"));
    ck_assert_ptr_nonnull(strstr(out, "grad sent to W:\ntensor([[ 0.1786, -0.1534],\n"
                                      "        [ 0.0540, -0.0919],\n"
                                      "        [-0.0951,  0.1714]], dtype=torch.float64)"));
    ck_assert_ptr_nonnull(strstr(out, "grad sent to h:\ntensor([[-0.1198,  0.1198],\n"
                                      "        [ 0.1479, -0.1479]], dtype=torch.float64)"));
}
END_TEST

Suite *suite_teach(void) {
    Suite *s = suite_create("teach");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_tape_dot_draws_ops_tensors_and_grads);
    tcase_add_test(tc, test_teach_backprop_prints_every_step);
    suite_add_tcase(s, tc);
    return s;
}
