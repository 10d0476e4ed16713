/* check_forward_fused.c - the forward-mode rules' fused kernels (sdpa's
 * one pass per head, matmul's and linear's products into one buffer), used
 * when nothing records the tangent, against the same rules' recorded ops
 * (used when an input requires grad), with tangents on every input and on
 * some. The recorded ops are themselves checked against the backward
 * kernels by check_forward.c. */
#include "check_nabla.h"

/* case k on x (with duals where tangents are asked for) */
static nb_tensor *fused_op(nb_ctx *c, int k, nb_tensor *const *x) {
    switch (k) {
    case 0: return nb_sdpa(c, x[0], x[1], x[2], NULL, true, 0.4, 0, 0); /* causal */
    case 1: /* grouped-query (4 heads, 2 kv heads), causal, a window of 2 */
        return nb_sdpa_ex(c, x[0], x[1], x[2], &(nb_sdpa_opts){.causal = true, .window = 2});
    case 2: return nb_sdpa(c, x[0], x[1], x[2], NULL, false, 0.6, 0, 0); /* Tk 5 > Tq 3 */
    case 3: return nb_matmul(c, x[0], x[1]);                         /* broadcast batch */
    default: return nb_linear(c, x[0], x[1], x[2]);                  /* with a bias */
    }
}

static const struct {
    nb_dtype dt;
    int64_t shape[3][4];
    int ndim[3];
    double tol; /* relative to the largest element */
} fused_cases[6] = {
    {NB_F64, {{2, 4, 2, 3}, {2, 4, 2, 3}, {2, 4, 2, 5}}, {4, 4, 4}, 1e-12},
    {NB_F64, {{1, 5, 4, 3}, {1, 5, 2, 3}, {1, 5, 2, 2}}, {4, 4, 4}, 1e-12},
    {NB_F64, {{2, 3, 1, 4}, {2, 5, 1, 4}, {2, 5, 1, 3}}, {4, 4, 4}, 1e-12},
    {NB_F64, {{2, 1, 3, 4}, {3, 4, 5}, {1}}, {4, 3, 1}, 1e-12},
    {NB_F32, {{2, 3, 6}, {5, 6}, {5}}, {3, 2, 1}, 1e-5},
    {NB_F64, {{4, 6}, {5, 6}, {5}}, {2, 2, 1}, 1e-12},
};

START_TEST(test_fused_tangents) {
    int k = _i;
    nb_ctx *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 36, 11 + (uint64_t)k);
    int n_in = k == 3 ? 2 : 3;
    nb_tensor *x[3], *v[3];
    for (int i = 0; i < n_in; i++) {
        x[i] = nb_normal(c, fused_cases[k].dt, fused_cases[k].ndim[i], fused_cases[k].shape[i],
                         0, 1, &rng);
        v[i] = nb_normal(c, fused_cases[k].dt, x[i]->ndim, x[i]->shape, 0, 1, &rng);
    }
    for (int mask = 1; mask < 1 << n_in; mask++) { /* which inputs carry a tangent */
        nb_tensor *t[2];
        for (int rec = 0; rec < 2; rec++) {
            nb_set_grad_enabled(c, rec);
            nb_tensor *d[3];
            for (int i = 0; i < n_in; i++) {
                nb_tensor *p = rec ? nb_requires_grad(nb_copy(c, x[i], x[i]->dtype)) : x[i];
                d[i] = mask >> i & 1 ? nb_make_dual(c, p, v[i]) : p;
            }
            int len = nb_tape_len(c);
            t[rec] = nb_tangent(fused_op(c, k, d));
            ck_assert_msg(!nb_ctx_error(c), "case %d: %s", k, nb_ctx_error(c));
            ck_assert(rec ? nb_tape_len(c) > len : nb_tape_len(c) == len);
        }
        nb_set_grad_enabled(c, true);
        ck_assert_msg(t[0] && t[1], "case %d mask %d: no tangent", k, mask);
        ck_assert(!t[0]->requires_grad); /* a bias tangent alone is not recorded either */
        ck_assert(t[1]->requires_grad || (k >= 4 && mask == 4));
        ck_assert(nb_same_shape(t[0], t[1]));
        double scale = 0;
        for (size_t e = 0; e < t[1]->numel; e++) scale = fmax(scale, fabs(nb_get(t[1], e)));
        ck_assert_double_gt(scale, 1e-3);
        for (size_t e = 0; e < t[1]->numel; e++)
            ck_assert_msg(fabs(nb_get(t[0], e) - nb_get(t[1], e)) <= fused_cases[k].tol * scale,
                          "case %d mask %d element %zu: fused %.17g rule %.17g", k, mask, e,
                          nb_get(t[0], e), nb_get(t[1], e));
    }
    nb_ctx_free(c);
}
END_TEST

Suite *suite_forward_fused(void) {
    Suite *s = suite_create("forward_fused");
    TCase *tc = tcase_create("forward_fused");
    tcase_add_loop_test(tc, test_fused_tangents, 0, 6);
    suite_add_tcase(s, tc);
    return s;
}
