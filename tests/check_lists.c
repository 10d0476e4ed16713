/* check_lists.c - named tensor lists of any length (nb_list_*), and every
 * library function that takes one, with 1000 tensors: well past the
 * NB_LIST_MAX entries a list keeps inside its struct.
 *
 * The optimizer test uses AdamW's closed form for its first step: with
 * m = (1-b1) g and v = (1-b2) g^2, the bias corrections cancel and
 * p1 = p0 (1 - lr wd) - lr g / (|g| + eps). */
#include "check_nabla.h"

#include <unistd.h>

#define N 1000 /* tensors in each list */
#define W 3    /* elements per tensor */

static char g_names[N][16];

static const char *pname(int i) {
    snprintf(g_names[i], sizeof g_names[i], "p%d", i);
    return g_names[i];
}

/* Value k of parameter i, and of its gradient (never 0). */
static double p0(int i, int k) { return 0.01 * (i % 97) - 0.3 + 0.1 * k; }
static double g0(int i, int k) { return ((i * 7 + k * 3) % 11 - 5.5) * 0.25; }

/* N parameters of W elements in ctx, with values p0 and gradients g0. */
static void make_params(nb_ctx *ctx, nb_tensor_list *l, bool values) {
    for (int i = 0; i < N; i++) {
        nb_tensor *t = nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(W)));
        ck_assert_ptr_nonnull(t);
        for (int k = 0; k < W && values; k++) nb_set(t, (size_t)k, p0(i, k));
        ck_assert_int_eq(nb_list_add(l, pname(i), t), NB_OK);
    }
}

static void set_grads(const nb_tensor_list *l) {
    for (int i = 0; i < l->n; i++)
        for (int k = 0; k < W; k++) ((float *)nb_list_tensor(l, i)->grad)[k] = (float)g0(i, k);
}

START_TEST(test_list_grows_past_inline_storage) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_scalar(ctx, NB_F32, 1), *b = nb_scalar(ctx, NB_F32, 2);
    nb_tensor_list l = {0};
    for (int i = 0; i < N; i++) ck_assert_int_eq(nb_list_add(&l, pname(i), i % 2 ? b : a), NB_OK);
    ck_assert_int_eq(l.n, N);
    for (int i = 0; i < N; i++) {
        ck_assert_str_eq(nb_list_name(&l, i), g_names[i]);
        ck_assert_ptr_eq(nb_list_tensor(&l, i), i % 2 ? b : a);
    }
    /* the inline arrays agree with the accessors below NB_LIST_MAX */
    ck_assert_ptr_eq(l.t[NB_LIST_MAX - 1], nb_list_tensor(&l, NB_LIST_MAX - 1));
    ck_assert_ptr_eq(nb_list_get(&l, "p256"), a);
    ck_assert_ptr_eq(nb_list_get(&l, "p999"), b);
    ck_assert_ptr_null(nb_list_get(&l, "p1000"));
    /* a name taken past the inline part is refused, the list unchanged */
    ck_assert_int_eq(nb_list_add(&l, "p700", a), NB_ERR_VALUE);
    ck_assert_int_eq(l.n, N);
    /* out-of-range indices */
    ck_assert_ptr_null(nb_list_tensor(&l, -1));
    ck_assert_ptr_null(nb_list_tensor(&l, N));
    ck_assert_ptr_null(nb_list_name(&l, N));
    ck_assert_ptr_null(nb_list_tensor(NULL, 0));
    nb_list_free(&l);
    ck_assert_int_eq(l.n, 0);
    ck_assert_ptr_null(nb_list_get(&l, "p0"));
    ck_assert_int_eq(nb_list_add(&l, "again", a), NB_OK); /* usable after free */
    nb_list_free(&l);
    nb_list_free(NULL);
    nb_ctx_free(ctx);
}
END_TEST

/* A list whose n is negative or past its storage is refused everywhere,
 * never read or written out of bounds. */
START_TEST(test_corrupt_list_is_refused) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    static const int bad_n[] = {-1, -1000, NB_LIST_MAX + 1, 1 << 30};
    for (size_t c = 0; c < sizeof bad_n / sizeof bad_n[0]; c++) {
        nb_tensor_list l = {0};
        l.n = bad_n[c];
        ck_assert_int_eq(nb_list_add(&l, "x", a), NB_ERR_VALUE);
        ck_assert_error_has(ctx, "list_add: the list is corrupt"); /* a's context */
        nb_ctx_clear_error(ctx);
        ck_assert_int_eq(l.n, bad_n[c]);
        ck_assert_ptr_null(nb_list_get(&l, "x"));
        ck_assert_ptr_null(nb_list_tensor(&l, 0));
        ck_assert(isnan(nb_clip_grad_norm(&l, 1.0)));
        nb_clip_grad_value(&l, 1.0);
        nb_params_zero_grad(&l);
        ck_assert_ptr_null(nb_adamw_new(ctx, &l, nb_adamw_defaults(0.1)));
        ck_assert_error_has(ctx, "adamw: got");
        nb_ctx_clear_error(ctx);
        char path[] = "/tmp/nb-lists-XXXXXX";
        ck_assert_int_eq(nb_save_safetensors(ctx, path, &l, 0, NULL, NULL), NB_ERR_VALUE);
        ck_assert_error_has(ctx, "list is corrupt");
        nb_ctx_clear_error(ctx);
        ck_assert_int_eq(access(path, F_OK), -1);
    }
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_clip_and_zero_grad_reach_every_tensor) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list l = {0};
    make_params(ctx, &l, true);
    set_grads(&l);
    double sumsq = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < W; k++) sumsq += g0(i, k) * g0(i, k);
    const double total = nb_clip_grad_norm(&l, 1.0);
    ck_assert_double_eq_tol(total, sqrt(sumsq), 1e-9 * sqrt(sumsq));
    /* every gradient, the last one included, is scaled to a total norm of 1 */
    const double coef = 1.0 / (sqrt(sumsq) + 1e-6);
    for (int i = 0; i < N; i += 111)
        ck_assert_double_eq_tol(nb_grad_get(nb_list_tensor(&l, i), 1), g0(i, 1) * coef, 1e-7);
    ck_assert_double_eq_tol(nb_grad_get(nb_list_tensor(&l, N - 1), 2), g0(N - 1, 2) * coef, 1e-7);
    ck_assert_double_eq_tol(nb_clip_grad_norm(&l, 10.0), 1.0, 1e-5);
    nb_clip_grad_value(&l, 1e-4);
    ck_assert_double_eq_tol(fabs(nb_grad_get(nb_list_tensor(&l, N - 1), 0)), 1e-4, 1e-9);
    nb_params_zero_grad(&l);
    for (int i = 0; i < N; i++) ck_assert_double_eq(nb_grad_get(nb_list_tensor(&l, i), 0), 0);
    nb_list_free(&l);
    nb_ctx_free(ctx);
}
END_TEST

/* AdamW over 1000 tensors, a checkpoint of it (1000 parameters + 3001
 * state entries), a load into fresh ones, and one more step on both: the
 * resumed parameters must be bit-identical. */
START_TEST(test_adamw_checkpoint_1000_tensors) {
    char dir[] = "/tmp/nb-lists-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    nb_ctx *pa = nb_ctx_new(0), *pb = nb_ctx_new(0);
    nb_tensor_list a = {0}, b = {0};
    make_params(pa, &a, true);
    make_params(pb, &b, false);
    const double lr = 0.01, wd = 0.01, eps = 1e-8;
    nb_optim *oa = nb_adamw_new(pa, &a, nb_adamw_defaults(lr));
    nb_optim *ob = nb_adamw_new(pb, &b, nb_adamw_defaults(lr));
    ck_assert_ptr_nonnull(oa);
    ck_assert_ptr_nonnull(ob);
    set_grads(&a);
    ck_assert_int_eq(nb_optim_step(oa), NB_OK);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < W; k++) {
            double g = g0(i, k);
            double want = (double)(float)p0(i, k) * (1 - lr * wd) - lr * g / (fabs(g) + eps);
            ck_assert_double_eq_tol(nb_get(nb_list_tensor(&a, i), (size_t)k), want, 2e-6);
        }
    nb_tensor_list st = {0};
    nb_ctx *sctx = nb_ctx_new(0);
    ck_assert_int_eq(nb_optim_state(sctx, oa, &st), NB_OK);
    ck_assert_int_eq(st.n, 3 * N + 1);
    ck_assert_ptr_nonnull(nb_list_get(&st, "state.p999.exp_avg_sq"));
    nb_list_free(&st);
    nb_ctx_free(sctx);

    ck_assert_int_eq(nb_save_checkpoint(pa, path, &a, oa, NULL, 0, NULL, NULL), NB_OK);
    ck_assert_int_eq(nb_load_checkpoint(pb, path, &b, ob, NULL), NB_OK);
    ck_assert_int_eq(nb_optim_step_count(ob), 1);
    set_grads(&a);
    set_grads(&b);
    ck_assert_int_eq(nb_optim_step(oa), NB_OK);
    ck_assert_int_eq(nb_optim_step(ob), NB_OK);
    for (int i = 0; i < N; i++)
        ck_assert_mem_eq(nb_list_tensor(&a, i)->data, nb_list_tensor(&b, i)->data,
                         W * sizeof(float));

    /* a plain safetensors round trip and params_copy_from, 1000 entries */
    ck_assert_int_eq(nb_save_safetensors(pa, path, &a, 0, NULL, NULL), NB_OK);
    nb_tensor_list file = {0};
    nb_ctx *fctx = nb_ctx_new(0);
    ck_assert_int_eq(nb_load_safetensors(fctx, path, &file), NB_OK);
    ck_assert_int_eq(file.n, N);
    nb_zero_grad(nb_list_tensor(&b, N - 1));
    memset(nb_list_tensor(&b, N - 1)->data, 0, W * sizeof(float));
    ck_assert_int_eq(nb_params_copy_from(&b, &file), NB_OK);
    ck_assert_mem_eq(nb_list_tensor(&b, N - 1)->data, nb_list_tensor(&a, N - 1)->data,
                     W * sizeof(float));
    nb_list_free(&file);
    nb_ctx_free(fctx);

    unlink(path);
    rmdir(dir);
    nb_optim_free(oa);
    nb_optim_free(ob);
    nb_list_free(&a);
    nb_list_free(&b);
    nb_ctx_free(pa);
    nb_ctx_free(pb);
}
END_TEST

/* params_add_prefixed builds a list longer than NB_LIST_MAX. */
START_TEST(test_params_add_prefixed_grows) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list src = {0}, dst = {0};
    make_params(ctx, &src, true);
    ck_assert_int_eq(nb_params_add_prefixed(ctx, &dst, "h", &src), NB_OK);
    ck_assert_int_eq(dst.n, N);
    ck_assert_str_eq(nb_list_name(&dst, N - 1), "h.p999");
    ck_assert_ptr_eq(nb_list_get(&dst, "h.p999"), nb_list_tensor(&src, N - 1));
    nb_list_free(&src);
    nb_list_free(&dst);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_lists(void) {
    Suite *s = suite_create("lists");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_list_grows_past_inline_storage);
    tcase_add_test(tc, test_corrupt_list_is_refused);
    tcase_add_test(tc, test_clip_and_zero_grad_reach_every_tensor);
    tcase_add_test(tc, test_adamw_checkpoint_1000_tensors);
    tcase_add_test(tc, test_params_add_prefixed_grows);
    suite_add_tcase(s, tc);
    return s;
}
