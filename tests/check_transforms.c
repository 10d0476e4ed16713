/* check_transforms.c - nb_jacobian, nb_hessian and nb_per_sample_grads (and
 * nb_jvp, nb_jvp_fwd) against functorch's jacrev, jacfwd, hessian, jvp and vmap(grad)
 * in float64 within 1e-10 (tests/fixtures/functorch/transforms.safetensors,
 * written by tools/ref/gen_functorch_fixtures.py, which describes each
 * case), then what the fixtures cannot show: create_graph, inputs that
 * do or do not require grad, functions that ignore their inputs. Bad input
 * is in the matrix (tests/check_matrix_misc.c). */
#include "check_nabla.h"

#define FIXTURE NB_SOURCE_DIR "/tests/fixtures/functorch/transforms.safetensors"
#define TOL 1e-10

typedef struct fx {
    nb_ctx *ctx; /* holds the fixture's tensors */
    nb_tensor_list l;
} fx;

static void fx_open(fx *f) {
    f->ctx = nb_ctx_new(0);
    memset(&f->l, 0, sizeof f->l);
    ck_assert_int_eq(nb_load_safetensors(f->ctx, FIXTURE, &f->l), NB_OK);
}

static void fx_close(fx *f) {
    nb_list_free(&f->l);
    nb_ctx_free(f->ctx);
}

static nb_tensor *get(fx *f, const char *name) {
    nb_tensor *t = nb_list_get(&f->l, name);
    ck_assert_msg(t != NULL, "fixture has no %s", name);
    return t;
}

/* got has want's shape and every element within TOL of it. */
static void near(const nb_tensor *got, const nb_tensor *want, const char *what) {
    ck_assert_msg(got != NULL, "%s: NULL", what);
    char s1[64], s2[64];
    ck_assert_msg(nb_same_shape(got, want), "%s: shape %s, want %s", what,
                  nb_shape_str(got, s1, sizeof s1), nb_shape_str(want, s2, sizeof s2));
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < want->numel; i++) {
        double d = fabs(nb_get(got, i) - nb_get(want, i));
        if (!(d <= worst)) worst = d, at = i;
    }
    ck_assert_msg(worst <= TOL, "%s: element %zu off by %.3g (got %.17g, want %.17g)", what, at,
                  worst, nb_get(got, at), nb_get(want, at));
}

/* Loads "<prefix>.0" .. "<prefix>.<n-1>". */
static void get_n(fx *f, const char *prefix, int n, nb_tensor **out) {
    char name[64];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s.%d", prefix, i);
        out[i] = get(f, name);
    }
}

/* ---- the functions, as gen_functorch_fixtures.py writes them ------------- */
static nb_tensor *mlp(nb_ctx *c, nb_tensor *x, nb_tensor *const *p) {
    return nb_linear(c, nb_tanh(c, nb_linear(c, x, p[0], p[1])), p[2], p[3]);
}
static nb_tensor *f_mlp(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return mlp(c, in[0], in + 1);
}
static nb_tensor *f_softmax(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_softmax(c, in[0]);
}
static nb_tensor *f_ln(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_layer_norm(c, in[0], in[1], in[2], 1e-5);
}
static nb_tensor *f_gelu(nb_ctx *c, nb_tensor *const *in, void *u) {
    return nb_gelu(c, in[0], *(nb_gelu_approx *)u);
}
static nb_tensor *f_gelu_cubed_sum(nb_ctx *c, nb_tensor *const *in, void *u) {
    return nb_sum(c, nb_pow(c, f_gelu(c, in, u), 3));
}
static nb_tensor *f_ce(nb_ctx *c, nb_tensor *const *in, void *targets) {
    return nb_cross_entropy(c, in[0], targets);
}
static nb_tensor *f_bmm(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_matmul(c, in[0], in[1]);
}
static nb_tensor *f_sdpa(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    /* nb_sdpa reads (B, T, H, hd) and merges the heads, (B, T, H * hd);
     * the fixture's q, k, v and output are (B, H, T, hd) */
    nb_tensor *q = nb_transpose(c, in[0], 1, 2), *k = nb_transpose(c, in[1], 1, 2);
    nb_tensor *o = nb_sdpa(c, q, k, nb_transpose(c, in[2], 1, 2), NULL, true, 0.5, 0, 0);
    return nb_transpose(c, nb_reshape(c, o, NB_SHAPE(1, 3, 2, 4)), 1, 2);
}
static nb_tensor *f_bcast(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_sum_dim(c, nb_sum_dim(c, nb_mul(c, in[0], in[1]), 4, false), 3, false);
}
typedef struct mlp_loss_user {
    nb_tensor *x, *t;
} mlp_loss_user;
static nb_tensor *f_mlp_loss(nb_ctx *c, nb_tensor *const *in, void *u) {
    mlp_loss_user *m = u;
    return nb_cross_entropy(c, mlp(c, m->x, in), m->t);
}

/* One sample's losses for vmap(grad): params, then the sample's data. */
static nb_tensor *psg_mlp(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    nb_tensor *x = nb_reshape(c, in[4], NB_SHAPE(1, 4));
    nb_tensor *t = nb_from_data(c, NB_I64, NB_SHAPE(1), in[5]->data); /* ids do not reshape */
    return nb_cross_entropy(c, mlp(c, x, in), t);
}
static nb_tensor *psg_mha(nb_ctx *c, nb_tensor *const *in, void *module) {
    nb_nn_mha m = *(nb_nn_mha *)module; /* the module with in[]'s parameters */
    m.W_query.weight = in[0], m.W_key.weight = in[1], m.W_value.weight = in[2];
    m.out_proj.weight = in[3], m.out_proj.bias = in[4];
    nb_tensor *x = nb_reshape(c, in[5], NB_SHAPE(1, 3, 4));
    nb_tensor *y = nb_reshape(c, in[6], NB_SHAPE(1, 3, 4));
    return nb_mse_loss(c, nb_nn_mha_forward(c, &m, x), y);
}
static nb_tensor *psg_lm(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    nb_tensor *h = nb_layer_norm(c, nb_embedding(c, in[0], in[6]), in[1], in[2], 1e-5);
    h = nb_rms_norm(c, h, in[3], 1e-6);
    return nb_cross_entropy(c, nb_linear(c, h, in[4], in[5]), in[7]);
}

/* ---- against functorch ------------------------------------------------------ */
static void jac_case(fx *f, nb_gradcheck_fn fn, void *user, int n, nb_tensor *const *in,
                     const char *want_prefix, nb_jac_mode mode, bool graph) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *jac[8], *want[8];
    nb_jacobian_opts o = {mode, graph};
    ck_assert_int_eq(nb_jacobian(c, fn, user, n, in, &o, jac), NB_OK);
    if (n == 1) {
        want[0] = get(f, want_prefix);
    } else {
        get_n(f, want_prefix, n, want);
    }
    char what[96];
    for (int j = 0; j < n; j++) {
        snprintf(what, sizeof what, "%s (mode %d, graph %d) input %d", want_prefix, (int)mode,
                 (int)graph, j);
        near(jac[j], want[j], what);
        if (!graph) ck_assert(!jac[j]->requires_grad); /* with it: unless J is constant */
    }
    nb_ctx_free(c);
}

START_TEST(test_jacobian_matches_functorch) {
    fx f;
    fx_open(&f);
    nb_tensor *in[5];
    get_n(&f, "mlp.in", 5, in);
    /* every mode against both of functorch's (which agree to rounding) */
    for (int mode = NB_JAC_AUTO; mode <= NB_JAC_FWD; mode++) {
        jac_case(&f, f_mlp, NULL, 5, in, "mlp.jacrev", mode, false);
        jac_case(&f, f_mlp, NULL, 5, in, "mlp.jacfwd", mode, mode == NB_JAC_FWD);
    }
    nb_tensor *x = get(&f, "softmax.x");
    jac_case(&f, f_softmax, NULL, 1, &x, "softmax.jac", NB_JAC_AUTO, false);
    jac_case(&f, f_softmax, NULL, 1, &x, "softmax.jac", NB_JAC_FWD, false);
    get_n(&f, "ln.in", 3, in);
    jac_case(&f, f_ln, NULL, 3, in, "ln.jac", NB_JAC_AUTO, false);
    jac_case(&f, f_ln, NULL, 3, in, "ln.jac", NB_JAC_FWD, true);
    x = get(&f, "gelu.x");
    nb_gelu_approx none = NB_GELU_NONE, tanh_form = NB_GELU_TANH;
    jac_case(&f, f_gelu, &none, 1, &x, "gelu.jac", NB_JAC_FWD, false);
    jac_case(&f, f_gelu, &tanh_form, 1, &x, "gelu_tanh.jac", NB_JAC_REV, true);
    x = get(&f, "ce.logits");
    jac_case(&f, f_ce, get(&f, "ce.t"), 1, &x, "ce.jac", NB_JAC_AUTO, false);
    jac_case(&f, f_ce, get(&f, "ce.t"), 1, &x, "ce.jac", NB_JAC_FWD, false);
    get_n(&f, "bmm.in", 2, in);
    jac_case(&f, f_bmm, NULL, 2, in, "bmm.jac", NB_JAC_AUTO, false);
    jac_case(&f, f_bmm, NULL, 2, in, "bmm.jac", NB_JAC_FWD, false);
    get_n(&f, "sdpa.in", 3, in);
    jac_case(&f, f_sdpa, NULL, 3, in, "sdpa.jac", NB_JAC_REV, false);
    jac_case(&f, f_sdpa, NULL, 3, in, "sdpa.jac", NB_JAC_FWD, false);
    get_n(&f, "bcast.in", 2, in);
    jac_case(&f, f_bcast, NULL, 2, in, "bcast.jac", NB_JAC_AUTO, false);
    jac_case(&f, f_bcast, NULL, 2, in, "bcast.jac", NB_JAC_FWD, true);
    fx_close(&f);
}
END_TEST

START_TEST(test_hessian_matches_functorch) {
    fx f;
    fx_open(&f);
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = get(&f, "gelu.x"), *h[16];
    nb_gelu_approx approx[2] = {NB_GELU_NONE, NB_GELU_TANH};
    const char *name[2] = {"gelu.hess", "gelu_tanh.hess"};
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(nb_hessian(c, f_gelu_cubed_sum, &approx[k], 1, &x, h), NB_OK);
        near(h[0], get(&f, name[k]), name[k]);
    }
    x = get(&f, "ce.logits");
    ck_assert_int_eq(nb_hessian(c, f_ce, get(&f, "ce.t"), 1, &x, h), NB_OK);
    near(h[0], get(&f, "ce.hess"), "ce.hess");
    /* four inputs: hess[i * 4 + j] is d^2 / d p_i d p_j */
    nb_tensor *in[5];
    get_n(&f, "mlp.in", 5, in);
    mlp_loss_user u = {in[0], get(&f, "hess.t")};
    ck_assert_int_eq(nb_hessian(c, f_mlp_loss, &u, 4, in + 1, h), NB_OK);
    char nm[32];
    for (int i = 0; i < 16; i++) {
        snprintf(nm, sizeof nm, "hess.%d.%d", i / 4, i % 4);
        near(h[i], get(&f, nm), nm);
    }
    nb_ctx_free(c);
    fx_close(&f);
}
END_TEST

/* functorch.jvp against nb_jvp (the double-backward JVP) and nb_jvp_fwd. */
START_TEST(test_jvp_matches_functorch) {
    fx f;
    fx_open(&f);
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *in[5], *u[5], *x[5], *ju;
    get_n(&f, "mlp.in", 5, in);
    get_n(&f, "mlp.u", 5, u);
    for (int j = 0; j < 5; j++) x[j] = nb_requires_grad(nb_copy(c, in[j], NB_F64));
    nb_tensor *y = f_mlp(c, x, NULL);
    ck_assert_int_eq(nb_jvp(c, 1, &y, 5, x, u, NULL, &ju), NB_OK);
    near(ju, get(&f, "mlp.jvp"), "mlp.jvp");
    /* forward mode proper: one dual forward pass */
    ck_assert_int_eq(nb_jvp_fwd(c, f_mlp, NULL, 5, in, u, &y, &ju), NB_OK);
    near(ju, get(&f, "mlp.jvp"), "mlp.jvp (nb_jvp_fwd)");
    nb_gelu_approx approx[2] = {NB_GELU_NONE, NB_GELU_TANH};
    const char *name[2] = {"gelu.jvp", "gelu_tanh.jvp"};
    nb_tensor *g = nb_requires_grad(nb_copy(c, get(&f, "gelu.x"), NB_F64)), *ug = get(&f, "gelu.u");
    for (int k = 0; k < 2; k++) {
        y = f_gelu(c, &g, &approx[k]);
        ck_assert_int_eq(nb_jvp(c, 1, &y, 1, &g, &ug, NULL, &ju), NB_OK);
        near(ju, get(&f, name[k]), name[k]);
        ck_assert_int_eq(nb_jvp_fwd(c, f_gelu, &approx[k], 1, &g, &ug, &y, &ju), NB_OK);
        near(ju, get(&f, name[k]), name[k]);
    }
    nb_ctx_free(c);
    fx_close(&f);
}
END_TEST

START_TEST(test_per_sample_grads_match_functorch) {
    fx f;
    fx_open(&f);
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *p[6], *g[6], *want[6];
    get_n(&f, "mlp.in", 5, p);
    nb_tensor *data[2] = {get(&f, "psg_mlp.x"), get(&f, "psg_mlp.t")};
    ck_assert_msg(nb_per_sample_grads(c, psg_mlp, NULL, 4, p + 1, 2, data, g) == NB_OK, "%s",
                  nb_ctx_error(c));
    get_n(&f, "psg_mlp.grad", 4, want);
    for (int j = 0; j < 4; j++) near(g[j], want[j], "psg_mlp");

    /* the seeds' MultiHeadAttention, parameters in its state_dict order */
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_nn_mha mha;
    ck_assert_int_eq(nb_nn_mha_init(c, &mha, 4, 4, 3, 0.0, 2, false, NB_F64, &rng), NB_OK);
    ck_assert_int_eq(mha.params.n, 5);
    char name[96];
    for (int j = 0; j < 5; j++) {
        snprintf(name, sizeof name, "psg_mha.param.%s", nb_list_name(&mha.params, j));
        p[j] = get(&f, name);
    }
    data[0] = get(&f, "psg_mha.x"), data[1] = get(&f, "psg_mha.y");
    ck_assert_int_eq(nb_per_sample_grads(c, psg_mha, &mha, 5, p, 2, data, g), NB_OK);
    get_n(&f, "psg_mha.grad", 5, want);
    for (int j = 0; j < 5; j++) near(g[j], want[j], nb_list_name(&mha.params, j));

    /* embedding, layer_norm, rms_norm, linear and cross-entropy over tokens */
    get_n(&f, "psg_lm.param", 6, p);
    data[0] = get(&f, "psg_lm.ids"), data[1] = get(&f, "psg_lm.tg");
    ck_assert_int_eq(nb_per_sample_grads(c, psg_lm, NULL, 6, p, 2, data, g), NB_OK);
    get_n(&f, "psg_lm.grad", 6, want);
    for (int j = 0; j < 6; j++) near(g[j], want[j], "psg_lm");
    for (int j = 0; j < 6; j++) ck_assert(!p[j]->requires_grad && !p[j]->grad);
    nb_ctx_free(c);
    fx_close(&f);
}
END_TEST

/* ---- what the fixtures cannot show ----------------------------------------- */
static nb_tensor *f_cube(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_pow(c, in[0], 3);
}

/* f = x^3: J = diag(3x^2); with create_graph, d sum(J) / dx = 6x, in every
 * mode, through the caller's own x (it requires grad, so it is used as is). */
START_TEST(test_jacobian_create_graph_differentiates) {
    nb_ctx *c = nb_ctx_new(0);
    double xv[3] = {1, -2, 0.5};
    for (int mode = NB_JAC_AUTO; mode <= NB_JAC_FWD; mode++) {
        nb_tensor *x = nb_requires_grad(nb_from_doubles(c, NB_F64, 1, (int64_t[]){3}, xv)), *j,
                  *g;
        nb_jacobian_opts o = {mode, true};
        ck_assert_int_eq(nb_jacobian(c, f_cube, NULL, 1, &x, &o, &j), NB_OK);
        ck_assert_int_eq(j->ndim, 2);
        ck_assert_tensor_near(j, ((double[]){3, 0, 0, 0, 12, 0, 0, 0, 0.75}), 9, 1e-14);
        nb_tensor *s = nb_sum(c, j);
        ck_assert_int_eq(nb_grad(c, 1, &s, NULL, 1, &x, NULL, &g), NB_OK);
        ck_assert_tensor_near(g, ((double[]){6, -12, 3}), 3, 1e-14);
        /* and the Hessian of sum(x^3) is diag(6x) */
        nb_tensor *h;
        ck_assert_int_eq(nb_hessian(c, f_cube, NULL, 1, &x, &h),
                         NB_ERR_SHAPE);
        ck_assert_error_has(c, "hessian: the function returned (3), expected a scalar");
        ck_assert_ptr_null(h);
        nb_ctx_clear_error(c);
    }
    nb_ctx_free(c);
}
END_TEST

static nb_tensor *f_sum_cube(nb_ctx *c, nb_tensor *const *in, void *u) {
    return nb_sum(c, f_cube(c, in, u));
}
static nb_tensor *f_ignores(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)in, (void)u;
    return nb_full(c, NB_F64, NB_SHAPE(2), 7.0);
}
static nb_tensor *f_linear_in_x(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_sum(c, nb_scale(c, in[0], 2.0));
}

/* Inputs that do not require grad (even f32 ones), and f that ignores its
 * inputs or is linear in them: zeros where functorch gives zeros. */
START_TEST(test_plain_inputs_and_zero_derivatives) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = nb_from_doubles(c, NB_F32, 1, (int64_t[]){2}, (double[]){2, -1}), *r[1];
    ck_assert_int_eq(nb_hessian(c, f_sum_cube, NULL, 1, &x, r), NB_OK);
    ck_assert_int_eq(r[0]->dtype, NB_F32);
    ck_assert_tensor_near(r[0], ((double[]){12, 0, 0, -6}), 4, 1e-5);
    ck_assert(!x->requires_grad && !x->grad);
    for (int mode = NB_JAC_AUTO; mode <= NB_JAC_FWD; mode++) {
        nb_jacobian_opts o = {mode, false};
        ck_assert_int_eq(nb_jacobian(c, f_ignores, NULL, 1, &x, &o, r), NB_OK);
        ck_assert_int_eq(r[0]->ndim, 2);
        ck_assert_tensor_near(r[0], ((double[]){0, 0, 0, 0}), 4, 0);
    }
    ck_assert_int_eq(nb_hessian(c, f_linear_in_x, NULL, 1, &x, r), NB_OK);
    ck_assert_tensor_near(r[0], ((double[]){0, 0, 0, 0}), 4, 0);
    /* recording off in the caller: the transforms switch it on and back */
    nb_set_grad_enabled(c, false);
    ck_assert_int_eq(nb_hessian(c, f_sum_cube, NULL, 1, &x, r), NB_OK);
    ck_assert_tensor_near(r[0], ((double[]){12, 0, 0, -6}), 4, 1e-5);
    ck_assert(!nb_is_grad_enabled(c));
    nb_ctx_free(c);
}
END_TEST

static nb_tensor *f_weighted(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u; /* sum(w * x^2): per sample, d / dw = x^2 */
    return nb_sum(c, nb_mul(c, in[0], nb_mul(c, in[1], in[1])));
}

/* Parameters that require grad (as a module's do) are read through views:
 * their values and .grad stay as they were, f32 gives f32 rows. */
START_TEST(test_per_sample_grads_leave_params_alone) {
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_tensor *w = nb_requires_grad(nb_from_doubles(p, NB_F32, NB_SHAPE(2), (double[]){3, 4}));
    nb_tensor *x = nb_from_doubles(c, NB_F32, NB_SHAPE(3, 2), (double[]){1, 2, -1, 0.5, 0, 3});
    nb_tensor *g;
    ck_assert_int_eq(nb_per_sample_grads(c, f_weighted, NULL, 1, &w, 1, &x, &g), NB_OK);
    ck_assert_int_eq(g->dtype, NB_F32);
    ck_assert_int_eq(g->ndim, 2);
    ck_assert_tensor_near(g, ((double[]){1, 4, 1, 0.25, 0, 9}), 6, 0);
    ck_assert_tensor_near(w, ((double[]){3, 4}), 2, 0);
    ck_assert_double_eq(nb_grad_get(w, 0), 0);
    ck_assert_double_eq(nb_grad_get(w, 1), 0);
    ck_assert_int_eq(nb_tape_len(p), 0);
    nb_ctx_free(c);
    nb_ctx_free(p);
}
END_TEST

/* A custom op, y = x^2, with a backward and a graph backward but no
 * forward-mode rule: the forward Jacobian goes by the recorded backward. */
static void square_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = nb_node_input(n, 0), *y = nb_node_output(n);
    double *gx = nb_grad_buffer(ctx, x);
    for (size_t i = 0; gx && i < x->numel; i++) gx[i] += 2 * nb_get(x, i) * nb_grad_get(y, i);
}
static void square_graph_backward(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_mul(ctx, dout, nb_scale(ctx, nb_node_input(n, 0), 2));
}
static nb_tensor *f_custom_square(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    nb_tensor *x = in[0], *y = nb_empty(c, NB_F64, x->ndim, x->shape);
    for (size_t i = 0; y && i < x->numel; i++) nb_set(y, i, nb_get(x, i) * nb_get(x, i));
    nb_node_set_graph_backward(nb_record(c, "square", y, 1, &x, square_backward, NULL),
                               square_graph_backward);
    return nb_tanh(c, y);
}

START_TEST(test_forward_jacobian_without_a_forward_rule) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = nb_from_doubles(c, NB_F64, NB_SHAPE(2), (double[]){0.5, -1}), *j[1], *r[1];
    for (int graph = 0; graph < 2; graph++) {
        ck_assert_int_eq(nb_jacobian(c, f_custom_square, NULL, 1, &x,
                                     &(nb_jacobian_opts){NB_JAC_FWD, graph}, j), NB_OK);
        ck_assert_int_eq(nb_jacobian(c, f_custom_square, NULL, 1, &x,
                                     &(nb_jacobian_opts){NB_JAC_REV, false}, r), NB_OK);
        double d0 = 2 * 0.5 * (1 - pow(tanh(0.25), 2)), d1 = -2 * (1 - pow(tanh(1.0), 2));
        ck_assert_tensor_near(j[0], ((double[]){d0, 0, 0, d1}), 4, 1e-14);
        ck_assert_tensor_near(r[0], ((double[]){d0, 0, 0, d1}), 4, 1e-14);
    }
    nb_ctx_free(c);
}
END_TEST

Suite *suite_transforms(void) {
    Suite *s = suite_create("transforms");
    TCase *tc = tcase_create("transforms");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_jacobian_matches_functorch);
    tcase_add_test(tc, test_hessian_matches_functorch);
    tcase_add_test(tc, test_jvp_matches_functorch);
    tcase_add_test(tc, test_per_sample_grads_match_functorch);
    tcase_add_test(tc, test_jacobian_create_graph_differentiates);
    tcase_add_test(tc, test_plain_inputs_and_zero_derivatives);
    tcase_add_test(tc, test_per_sample_grads_leave_params_alone);
    tcase_add_test(tc, test_forward_jacobian_without_a_forward_rule);
    suite_add_tcase(s, tc);
    return s;
}
