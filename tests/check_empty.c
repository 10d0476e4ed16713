/* check_empty.c - tensors with a zero-size dim, as PyTorch 1.13 has them:
 * created, broadcast, reduced (a sum over nothing is 0, a mean NaN, a max
 * an error), multiplied (an empty inner dim gives zeros), reshaped,
 * printed, saved and loaded, and differentiated. The expected values and
 * texts are PyTorch's (printed by /usr/bin/python3 with torch; see the
 * comments). */
#include "check_nabla.h"

#include <unistd.h>

static char *printed(const nb_tensor *t) {
    static char buf[256];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    nb_fprint(f, t);
    fclose(f);
    return buf;
}

START_TEST(test_empty_values_and_printing) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *e = nb_requires_grad(nb_zeros(c, NB_F64, NB_SHAPE(0, 3)));
    nb_tensor *e2 = nb_zeros(c, NB_F64, NB_SHAPE(2, 0));
    ck_assert_uint_eq(e->numel, 0);
    /* torch: repr(torch.zeros(0, 3, dtype=torch.float64)) etc. */
    ck_assert_str_eq(printed(e), "tensor([], size=(0, 3), dtype=torch.float64)");
    ck_assert_str_eq(printed(nb_zeros(c, NB_F32, NB_SHAPE(0))), "tensor([])");
    ck_assert_str_eq(printed(e2), "tensor([], size=(2, 0), dtype=torch.float64)");
    /* (0, 3) + (3) broadcasts to (0, 3) */
    nb_tensor *s = nb_add(c, e, nb_ones(c, NB_F64, NB_SHAPE(3)));
    ck_assert_int_eq(s->ndim, 2);
    ck_assert_int_eq(s->shape[0], 0);
    ck_assert_int_eq(s->shape[1], 3);
    ck_assert_double_eq(nb_item(nb_sum(c, e)), 0.0);
    ck_assert(isnan(nb_item(nb_mean(c, e))));
    ck_assert_str_eq(printed(nb_sum_dim(c, e, 0, false)), "tensor([0., 0., 0.], dtype=torch.float64)");
    ck_assert_str_eq(printed(nb_mean_dim(c, e, 0, true)),
                     "tensor([[nan, nan, nan]], dtype=torch.float64)");
    ck_assert_str_eq(printed(nb_max_dim(c, e, 1, false, NULL)), "tensor([], dtype=torch.float64)");
    ck_assert_ptr_null(nb_max_dim(c, e, 0, false, NULL)); /* torch: "Expected reduction dim 0 to have non-zero size" */
    ck_assert_error_has(c, "max_dim: input (0, 3) has no elements along dim 0");
    nb_ctx_clear_error(c);
    /* an empty inner dim: zeros, as torch.zeros(2, 0) @ torch.ones(0, 4) */
    nb_tensor *z = nb_matmul(c, e2, nb_ones(c, NB_F64, NB_SHAPE(0, 4)));
    ck_assert_uint_eq(z->numel, 8);
    for (size_t i = 0; i < z->numel; i++) ck_assert_double_eq(nb_get(z, i), 0.0);
    ck_assert_str_eq(printed(nb_matmul(c, e, nb_ones(c, NB_F64, NB_SHAPE(3, 2)))),
                     "tensor([], size=(0, 2), dtype=torch.float64)");
    ck_assert_str_eq(printed(nb_softmax(c, e2)), "tensor([], size=(2, 0), dtype=torch.float64)");
    ck_assert(isnan(nb_item(nb_mse_loss(c, e, e))));
    ck_assert(isnan(nb_item(nb_cross_entropy(c, e, nb_zeros(c, NB_I64, NB_SHAPE(0))))));
    ck_assert_str_eq(printed(nb_reshape(c, e, NB_SHAPE(3, 0))),
                     "tensor([], size=(3, 0), dtype=torch.float64)");
    ck_assert_str_eq(printed(nb_reshape(c, e, NB_SHAPE(-1, 3))),
                     "tensor([], size=(0, 3), dtype=torch.float64)");
    /* a linear with no input features is its bias, as F.linear(torch.zeros(2, 0), ...) */
    nb_tensor *b = nb_from_doubles(c, NB_F64, NB_SHAPE(2), (double[]){0.5, -1});
    ck_assert_str_eq(printed(nb_linear(c, e2, nb_ones(c, NB_F64, NB_SHAPE(2, 0)), b)),
                     "tensor([[ 0.5000, -1.0000],\n        [ 0.5000, -1.0000]], dtype=torch.float64)");
    ck_assert_str_eq(printed(nb_layer_norm(c, e2, NULL, NULL, 1e-5)),
                     "tensor([], size=(2, 0), dtype=torch.float64)");
    /* backward through an empty product: an empty gradient, no error */
    nb_tensor *w = nb_requires_grad(nb_ones(c, NB_F64, NB_SHAPE(3, 2)));
    nb_tensor *loss = nb_sum(c, nb_matmul(c, e, w));
    ck_assert_int_eq(nb_backward(c, loss, NULL), NB_OK);
    for (size_t i = 0; i < w->numel; i++) ck_assert_double_eq(nb_grad_get(w, i), 0.0);
    ck_assert_ptr_null(nb_ctx_error(c));
    nb_ctx_free(c);
}
END_TEST

START_TEST(test_empty_tensors_save_and_load) {
    nb_ctx *c = nb_ctx_new(0);
    char dir[] = "/tmp/nb_empty_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/e.safetensors", dir);
    nb_tensor_list l = {0}, back = {0};
    nb_list_add(&l, "e", nb_zeros(c, NB_F32, NB_SHAPE(2, 0, 3)));
    nb_list_add(&l, "x", nb_ones(c, NB_F64, NB_SHAPE(2)));
    ck_assert_int_eq(nb_save_safetensors(c, path, &l, 0, NULL, NULL), NB_OK);
    ck_assert_int_eq(nb_load_safetensors(c, path, &back), NB_OK);
    nb_tensor *e = nb_list_get(&back, "e");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->ndim, 3);
    ck_assert_int_eq(e->shape[1], 0);
    ck_assert_uint_eq(e->numel, 0);
    ck_assert_double_eq(nb_get(nb_list_get(&back, "x"), 1), 1.0);
    remove(path), rmdir(dir);
    nb_ctx_free(c);
}
END_TEST

Suite *suite_empty(void) {
    Suite *s = suite_create("empty");
    TCase *tc = tcase_create("empty");
    tcase_add_test(tc, test_empty_values_and_printing);
    tcase_add_test(tc, test_empty_tensors_save_and_load);
    suite_add_tcase(s, tc);
    return s;
}
