/* check_nn.c - the basic modules (Linear, Dropout, Embedding, LayerNorm,
 * GELU) and the parameter-list helpers: PyTorch's names and order, init
 * draws, values, gradients (nb_gradcheck, also w.r.t. parameters) and the
 * error messages. */
#include "check_nn_util.h"

/* ---- Linear ------------------------------------------------------------------ */

START_TEST(test_linear_init_names_and_draws) {
    nb_ctx *p = nb_ctx_new(0), *tmp = nb_ctx_new(0);
    nb_pcg32 rng, ref;
    nb_pcg32_seed(&rng, 123, 1);
    nb_pcg32_seed(&ref, 123, 1);
    nb_nn_linear m;
    ck_assert_int_eq(nb_nn_linear_init(p, &m, 4, 3, true, NB_F32, &rng), NB_OK);
    nn_assert_names(&m.params, 2, (const char *const[]){"weight", "bias"});
    char s[64];
    ck_assert_str_eq(nb_shape_str(m.weight, s, sizeof s), "(3, 4)");
    ck_assert_str_eq(nb_shape_str(m.bias, s, sizeof s), "(3)");
    ck_assert(m.weight->requires_grad && m.bias->requires_grad);
    ck_assert(m.training);
    ck_assert_ptr_eq(m.params.t[0], m.weight);
    ck_assert_ptr_eq(m.weight->owner, p);
    /* U(-1/sqrt(4), 1/sqrt(4)) = U(-0.5, 0.5), weight drawn first, then bias */
    nb_tensor *w = nb_uniform(tmp, NB_F32, NB_SHAPE(3, 4), -0.5, 0.5, &ref);
    nb_tensor *b = nb_uniform(tmp, NB_F32, NB_SHAPE(3), -0.5, 0.5, &ref);
    for (size_t i = 0; i < 12; i++) {
        ck_assert_double_eq(nb_get(m.weight, i), nb_get(w, i));
        ck_assert(fabs(nb_get(m.weight, i)) <= 0.5);
    }
    for (size_t i = 0; i < 3; i++) ck_assert_double_eq(nb_get(m.bias, i), nb_get(b, i));
    ck_assert_uint_eq(rng.state, ref.state); /* nothing else was drawn */
    nb_nn_linear nb;
    ck_assert_int_eq(nb_nn_linear_init(p, &nb, 4, 3, false, NB_F64, &rng), NB_OK);
    nn_assert_names(&nb.params, 1, (const char *const[]){"weight"});
    ck_assert_ptr_null(nb.bias);
    ck_assert_int_eq(nb.weight->dtype, NB_F64);
    nb_ctx_free(tmp);
    nb_ctx_free(p);
}
END_TEST

static void linear_values(nb_dtype dt) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_nn_linear m;
    ck_assert_int_eq(nb_nn_linear_init(p, &m, 3, 2, true, dt, &rng), NB_OK);
    nn_load(&m.params, 2, (const char *const[]){"weight", "bias"},
            (const double *const[]){(double[]){1, 2, 3, -1, 0, 1}, (double[]){0.5, -0.5}});
    /* x (2, 2, 3): y = x W^T + b */
    nb_tensor *x = nb_from_doubles(ctx, dt, NB_SHAPE(2, 2, 3),
                                   (double[]){1, 0, -1, 2, 1, 0, 0, 0, 0, 0.5, 0.5, 0.5});
    nb_tensor *y = nb_nn_linear_forward(ctx, &m, x);
    char s[64];
    ck_assert_str_eq(nb_shape_str(y, s, sizeof s), "(2, 2, 2)");
    double want[8] = {-1.5, -2.5, 4.5, -2.5, 0.5, -0.5, 3.5, -0.5};
    ck_assert_tensor_near(y, want, 8, 1e-6);
    ck_assert_int_eq(y->dtype, dt);
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}

START_TEST(test_linear_forward_values_f32_f64) {
    linear_values(NB_F32);
    linear_values(NB_F64);
}
END_TEST

typedef struct linear_case {
    nb_nn_linear *m;
    nn_binding b;
} linear_case;

static nb_tensor *f_linear(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    linear_case *c = user;
    nn_bind(&c->b, in + 1);
    return nb_nn_linear_forward(ctx, c->m, in[0]);
}

START_TEST(test_linear_gradcheck_with_and_without_bias) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 3);
    for (int bias = 0; bias < 2; bias++) {
        nb_nn_linear m;
        ck_assert_int_eq(nb_nn_linear_init(p, &m, 3, 4, bias, NB_F64, &rng), NB_OK);
        nb_tensor *x = nb_requires_grad(nb_normal(p, NB_F64, NB_SHAPE(2, 3, 3), 0, 1, &rng));
        linear_case c = {&m, {0}};
        nn_bind_init(&c.b, &m.params);
        nb_tensor *in[3] = {x, m.weight, m.bias};
        nn_gradcheck(f_linear, &c, 1 + m.params.n, in);
        nn_unbind(&c.b);
        ck_assert_ptr_eq(m.weight->owner, p); /* restored */
    }
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_linear_errors) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_nn_linear m;
    ck_assert_int_eq(nb_nn_linear_init(NULL, &m, 3, 2, true, NB_F32, &rng), NB_ERR_NULL);
    ck_assert_int_eq(nb_nn_linear_init(p, NULL, 3, 2, true, NB_F32, &rng), NB_ERR_NULL);
    ck_assert_error_has(p, "Linear: module is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_nn_linear_init(p, &m, 0, 2, true, NB_F32, &rng), NB_ERR_VALUE);
    ck_assert_error_has(p, "Linear: in_features 0 must be positive");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_nn_linear_init(p, &m, 3, 2, true, NB_I64, &rng), NB_ERR_DTYPE);
    ck_assert_error_has(p, "Linear: dtype i64, parameters must be f32 or f64");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_nn_linear_init(p, &m, 3, 2, true, NB_F32, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "Linear: rng is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_nn_linear_init(p, &m, 3, 2, true, NB_F32, &rng), NB_OK);

    nb_tensor *x4 = nb_ones(ctx, NB_F32, NB_SHAPE(2, 4));
    ck_assert_ptr_null(nb_nn_linear_forward(ctx, &m, x4));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "Linear: x has shape (2, 4), expected (..., 3) (in_features 3)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_nn_linear_forward(ctx, &m, NULL));
    ck_assert_error_has(ctx, "Linear: x is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_nn_linear_forward(ctx, &m, nb_ones(ctx, NB_F64, NB_SHAPE(2, 3))));
    ck_assert_error_has(ctx, "Linear: x is f64 but the parameters are f32");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_nn_linear_forward(ctx, NULL, x4));
    ck_assert_error_has(ctx, "Linear: module is NULL");
    nb_ctx_clear_error(ctx);
    nb_nn_linear blank;
    memset(&blank, 0, sizeof blank);
    ck_assert_ptr_null(nb_nn_linear_forward(ctx, &blank, x4));
    ck_assert_error_has(ctx, "Linear: module is not initialised (call nb_nn_linear_init)");
    ck_assert_ptr_null(nb_nn_linear_forward(NULL, &m, x4));
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

/* ---- Dropout ----------------------------------------------------------------- */

START_TEST(test_dropout_train_eval_and_replay) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 123, 5);
    nb_nn_dropout d;
    ck_assert_int_eq(nb_nn_dropout_init(p, &d, 0.5, &rng), NB_OK);
    ck_assert(d.training);
    ck_assert_int_eq(d.params.n, 0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(10, 20));
    nb_tensor *y = nb_nn_dropout_forward(ctx, &d, x);
    ck_assert_ptr_nonnull(y);
    int zeros = 0;
    for (size_t i = 0; i < 200; i++) {
        double v = nb_get(y, i);
        ck_assert(v == 0.0 || v == 2.0); /* survivors scaled by 1/(1-p) */
        zeros += v == 0.0;
    }
    ck_assert_int_gt(zeros, 60);
    ck_assert_int_lt(zeros, 140);
    /* the same rng state replays the same mask */
    nb_pcg32_seed(&rng, 123, 5);
    nb_tensor *y2 = nb_nn_dropout_forward(ctx, &d, x);
    for (size_t i = 0; i < 200; i++) ck_assert_double_eq(nb_get(y2, i), nb_get(y, i));
    /* eval: the identity, and no draws */
    nb_nn_dropout_train(&d, false);
    ck_assert(!d.training);
    uint64_t before = rng.state;
    ck_assert_ptr_eq(nb_nn_dropout_forward(ctx, &d, x), x);
    ck_assert_uint_eq(rng.state, before);
    nb_nn_dropout_train(&d, true);
    ck_assert_ptr_ne(nb_nn_dropout_forward(ctx, &d, x), x);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_dropout_errors) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_nn_dropout d;
    ck_assert_int_eq(nb_nn_dropout_init(p, &d, 1.5, &rng), NB_ERR_VALUE);
    ck_assert_error_has(p, "Dropout: p 1.5 is outside [0, 1]");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_nn_dropout_init(p, &d, NAN, &rng), NB_ERR_VALUE);
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_nn_dropout_init(p, &d, 0.1, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "Dropout: rng is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_nn_dropout_init(p, &d, 0.0, NULL), NB_OK); /* p 0 draws nothing */
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(3));
    ck_assert_ptr_eq(nb_nn_dropout_forward(ctx, &d, x), x);
    ck_assert_ptr_null(nb_nn_dropout_forward(ctx, &d, NULL));
    ck_assert_error_has(ctx, "Dropout: x is NULL");
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

/* ---- Embedding --------------------------------------------------------------- */

START_TEST(test_embedding_init_lookup_and_grad) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0), *tmp = nb_ctx_new(0);
    nb_pcg32 rng, ref;
    nb_pcg32_seed(&rng, 9, 2);
    nb_pcg32_seed(&ref, 9, 2);
    nb_nn_embedding e;
    ck_assert_int_eq(nb_nn_embedding_init(p, &e, 4, 3, NB_F64, &rng), NB_OK);
    nn_assert_names(&e.params, 1, (const char *const[]){"weight"});
    nb_tensor *w = nb_normal(tmp, NB_F64, NB_SHAPE(4, 3), 0.0, 1.0, &ref); /* N(0, 1) */
    for (size_t i = 0; i < 12; i++) ck_assert_double_eq(nb_get(e.weight, i), nb_get(w, i));
    int64_t ids_v[3] = {1, 1, 3};
    nb_tensor *ids = nb_from_data(ctx, NB_I64, NB_SHAPE(3), ids_v);
    nb_tensor *y = nb_nn_embedding_forward(ctx, &e, ids);
    char s[64];
    ck_assert_str_eq(nb_shape_str(y, s, sizeof s), "(3, 3)");
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            ck_assert_double_eq(nb_get(y, (size_t)(r * 3 + c)),
                                nb_get(e.weight, (size_t)(ids_v[r] * 3 + c)));
    /* d sum / d weight counts how often each row was picked: 0, 2, 0, 1 */
    ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, y), NULL), NB_OK);
    double want[12] = {0, 0, 0, 2, 2, 2, 0, 0, 0, 1, 1, 1};
    ck_assert_grad_near(e.weight, want, 12, 0);
    nb_params_zero_grad(&e.params);
    ck_assert_double_eq(nb_grad_get(e.weight, 3), 0.0);
    ck_assert_ptr_null(nb_nn_embedding_forward(ctx, &e, NULL));
    ck_assert_error_has(ctx, "Embedding: ids is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_nn_embedding_init(p, &e, 0, 3, NB_F64, &rng), NB_ERR_VALUE);
    ck_assert_error_has(p, "Embedding: num_embeddings 0 must be positive");
    nb_ctx_free(tmp);
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

typedef struct emb_case {
    nb_nn_embedding *m;
    const nb_tensor *ids;
    nn_binding b;
} emb_case;

static nb_tensor *f_embedding(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    emb_case *c = user;
    nn_bind(&c->b, in);
    /* a nonlinear use of the rows, so the check sees more than a copy */
    nb_tensor *y = nb_nn_embedding_forward(ctx, c->m, c->ids);
    return nb_mul(ctx, y, y);
}

START_TEST(test_embedding_gradcheck) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 4, 4);
    nb_nn_embedding e;
    ck_assert_int_eq(nb_nn_embedding_init(p, &e, 5, 2, NB_F64, &rng), NB_OK);
    nb_tensor *ids = nb_from_data(p, NB_I64, NB_SHAPE(2, 3), (int64_t[]){0, 4, 4, 2, 0, 1});
    emb_case c = {&e, ids, {0}};
    nn_bind_init(&c.b, &e.params);
    nn_gradcheck(f_embedding, &c, 1, &e.weight);
    nn_unbind(&c.b);
    nb_ctx_free(p);
}
END_TEST

/* ---- LayerNorm --------------------------------------------------------------- */

START_TEST(test_layer_norm_init_and_values) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F64 : NB_F32;
        nb_nn_layer_norm ln;
        ck_assert_int_eq(nb_nn_layer_norm_init(p, &ln, 4, 1e-5, true, dt), NB_OK);
        nn_assert_names(&ln.params, 2, (const char *const[]){"weight", "bias"});
        for (size_t i = 0; i < 4; i++) {
            ck_assert_double_eq(nb_get(ln.weight, i), 1.0);
            ck_assert_double_eq(nb_get(ln.bias, i), 0.0);
        }
        /* row [1, 2, 3, 4]: mean 2.5, biased var 1.25; row of 7s: all 0 */
        nb_tensor *x = nb_from_doubles(ctx, dt, NB_SHAPE(2, 4), (double[]){1, 2, 3, 4, 7, 7, 7, 7});
        nb_tensor *y = nb_nn_layer_norm_forward(ctx, &ln, x);
        double r = 1.0 / sqrt(1.25 + 1e-5);
        double want[8] = {-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r, 0, 0, 0, 0};
        ck_assert_tensor_near(y, want, 8, 1e-5);
        /* an affine transform after normalising */
        nn_load(&ln.params, 2, (const char *const[]){"weight", "bias"},
                (const double *const[]){(double[]){2, 2, 2, 2}, (double[]){0, 1, 0, 1}});
        y = nb_nn_layer_norm_forward(ctx, &ln, x);
        double want2[8] = {-3 * r, -r + 1, r, 3 * r + 1, 0, 1, 0, 1};
        ck_assert_tensor_near(y, want2, 8, 1e-5);
        nb_nn_layer_norm plain;
        ck_assert_int_eq(nb_nn_layer_norm_init(p, &plain, 4, 1e-5, false, dt), NB_OK);
        ck_assert_int_eq(plain.params.n, 0);
        ck_assert_ptr_null(plain.weight);
        ck_assert_tensor_near(nb_nn_layer_norm_forward(ctx, &plain, x), want, 8, 1e-5);
        ck_assert_ptr_null(nb_nn_layer_norm_forward(ctx, &ln, nb_ones(ctx, dt, NB_SHAPE(2, 3))));
        ck_assert_error_has(ctx, "LayerNorm: x has shape (2, 3), expected (..., 4)");
        nb_ctx_clear_error(ctx);
    }
    nb_nn_layer_norm ln;
    ck_assert_int_eq(nb_nn_layer_norm_init(p, &ln, 4, -1.0, true, NB_F32), NB_ERR_VALUE);
    ck_assert_error_has(p, "LayerNorm: eps -1 must be finite and >= 0");
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

typedef struct ln_case {
    nb_nn_layer_norm *m;
    nn_binding b;
} ln_case;

static nb_tensor *f_layer_norm(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    ln_case *c = user;
    nn_bind(&c->b, in + 1);
    return nb_nn_layer_norm_forward(ctx, c->m, in[0]);
}

START_TEST(test_layer_norm_gradcheck) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 11, 1);
    nb_nn_layer_norm ln;
    ck_assert_int_eq(nb_nn_layer_norm_init(p, &ln, 5, 1e-5, true, NB_F64), NB_OK);
    nn_load(&ln.params, 2, (const char *const[]){"weight", "bias"},
            (const double *const[]){(double[]){0.5, -1, 2, 1.5, 0.3},
                                    (double[]){0.1, 0.2, -0.3, 0, 1}});
    nb_tensor *x = nb_requires_grad(nb_normal(p, NB_F64, NB_SHAPE(3, 5), 0, 1, &rng));
    ln_case c = {&ln, {0}};
    nn_bind_init(&c.b, &ln.params);
    nb_tensor *in[3] = {x, ln.weight, ln.bias};
    nn_gradcheck(f_layer_norm, &c, 3, in);
    nn_unbind(&c.b);
    nb_ctx_free(p);
}
END_TEST

/* ---- RMSNorm ------------------------------------------------------------------ */

START_TEST(test_rms_norm_init_and_values) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F64 : NB_F32;
        nb_nn_rms_norm rn;
        ck_assert_int_eq(nb_nn_rms_norm_init(p, &rn, 4, 1e-6, true, dt), NB_OK);
        nn_assert_names(&rn.params, 1, (const char *const[]){"weight"});
        for (size_t i = 0; i < 4; i++) ck_assert_double_eq(nb_get(rn.weight, i), 1.0);
        /* row [1, 2, 3, 4]: mean square 7.5; row of -2s: all -1 (up to eps) */
        nb_tensor *x =
            nb_from_doubles(ctx, dt, NB_SHAPE(2, 4), (double[]){1, 2, 3, 4, -2, -2, -2, -2});
        double r = 1.0 / sqrt(7.5 + 1e-6), r2 = 2.0 / sqrt(4 + 1e-6);
        double want[8] = {r, 2 * r, 3 * r, 4 * r, -r2, -r2, -r2, -r2};
        ck_assert_tensor_near(nb_nn_rms_norm_forward(ctx, &rn, x), want, 8, 1e-6);
        nn_load(&rn.params, 1, (const char *const[]){"weight"},
                (const double *const[]){(double[]){2, -1, 0.5, 0}});
        double want2[8] = {2 * r, -2 * r, 1.5 * r, 0, -2 * r2, r2, -0.5 * r2, 0};
        ck_assert_tensor_near(nb_nn_rms_norm_forward(ctx, &rn, x), want2, 8, 1e-6);
        nb_nn_rms_norm plain;
        ck_assert_int_eq(nb_nn_rms_norm_init(p, &plain, 4, 1e-6, false, dt), NB_OK);
        ck_assert_int_eq(plain.params.n, 0);
        ck_assert_ptr_null(plain.weight);
        ck_assert_tensor_near(nb_nn_rms_norm_forward(ctx, &plain, x), want, 8, 1e-6);
        ck_assert_ptr_null(nb_nn_rms_norm_forward(ctx, &rn, nb_ones(ctx, dt, NB_SHAPE(2, 3))));
        ck_assert_error_has(ctx, "RMSNorm: x has shape (2, 3), expected (..., 4)");
        nb_ctx_clear_error(ctx);
    }
    nb_nn_rms_norm rn;
    ck_assert_int_eq(nb_nn_rms_norm_init(p, &rn, 4, 0.0, true, NB_F32), NB_ERR_VALUE);
    ck_assert_error_has(p, "RMSNorm: eps 0 must be finite and > 0");
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

/* ---- GELU -------------------------------------------------------------------- */

START_TEST(test_gelu_module) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_nn_gelu g, gt;
    ck_assert_int_eq(nb_nn_gelu_init(p, &g, NB_GELU_NONE), NB_OK);
    ck_assert_int_eq(nb_nn_gelu_init(p, &gt, NB_GELU_TANH), NB_OK);
    ck_assert_int_eq(g.params.n, 0);
    ck_assert(g.training);
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){-1, 0, 1});
    /* x * Phi(x): Phi(1) = 0.841344746; tanh form at 1: 0.841191990 */
    ck_assert_tensor_near(nb_nn_gelu_forward(ctx, &g, x),
                          ((double[]){-0.158655254, 0, 0.841344746}), 3, 1e-8);
    ck_assert_tensor_near(nb_nn_gelu_forward(ctx, &gt, x),
                          ((double[]){-0.158808010, 0, 0.841191990}), 3, 1e-8);
    nb_nn_gelu_train(&g, false);
    ck_assert(!g.training);
    ck_assert_int_eq(nb_nn_gelu_init(p, &g, (nb_gelu_approx)7), NB_ERR_VALUE);
    ck_assert_error_has(p, "GELU: approximate 7 is neither NB_GELU_NONE nor NB_GELU_TANH");
    ck_assert_ptr_null(nb_nn_gelu_forward(ctx, &gt, NULL));
    ck_assert_error_has(ctx, "GELU: x is NULL");
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

/* ---- parameter lists --------------------------------------------------------- */

START_TEST(test_params_copy_from_checks_names_and_shapes) {
    nb_ctx *p = nb_ctx_new(0), *tmp = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 2, 2);
    nb_nn_linear m;
    ck_assert_int_eq(nb_nn_linear_init(p, &m, 3, 2, true, NB_F32, &rng), NB_OK);
    double w0 = nb_get(m.weight, 0), b1 = nb_get(m.bias, 1);
    nb_tensor_list src = {0};
    /* extra names (a state_dict's buffers) are ignored; f64 converts to f32 */
    nb_list_add(&src, "mask", nb_ones(tmp, NB_F32, NB_SHAPE(6, 6)));
    nb_list_add(&src, "bias", nb_from_doubles(tmp, NB_F64, NB_SHAPE(2), (double[]){0.25, -4}));
    ck_assert_int_eq(nb_params_copy_from(&m.params, &src), NB_ERR_VALUE);
    ck_assert_error_has(p, "params_copy_from: no tensor named 'weight' in the source");
    ck_assert_double_eq(nb_get(m.bias, 1), b1); /* untouched: all names are checked first */
    nb_ctx_clear_error(p);
    nb_list_add(&src, "weight", nb_ones(tmp, NB_F32, NB_SHAPE(3, 2)));
    ck_assert_int_eq(nb_params_copy_from(&m.params, &src), NB_ERR_SHAPE);
    ck_assert_error_has(p, "params_copy_from: 'weight' has shape (2, 3) here but (3, 2) in the "
                           "source");
    ck_assert_double_eq(nb_get(m.weight, 0), w0);
    nb_ctx_clear_error(p);
    nb_tensor_list ok = {0};
    nb_list_add(&ok, "weight", nb_full(tmp, NB_F64, NB_SHAPE(2, 3), 0.5));
    nb_list_add(&ok, "bias", nb_from_doubles(tmp, NB_F64, NB_SHAPE(2), (double[]){0.25, -4}));
    ck_assert_int_eq(nb_params_copy_from(&m.params, &ok), NB_OK);
    ck_assert_double_eq(nb_get(m.weight, 5), 0.5);
    ck_assert_double_eq(nb_get(m.bias, 0), 0.25);
    ck_assert_double_eq(nb_get(m.bias, 1), -4.0);
    nb_tensor_list ints = {0};
    nb_list_add(&ints, "weight", nb_zeros(tmp, NB_I64, NB_SHAPE(2, 3)));
    nb_list_add(&ints, "bias", nb_zeros(tmp, NB_F32, NB_SHAPE(2)));
    ck_assert_int_eq(nb_params_copy_from(&m.params, &ints), NB_ERR_DTYPE);
    ck_assert_error_has(p, "params_copy_from: 'weight' is f32 here but i64 in the source");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_params_copy_from(&m.params, NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_params_copy_from(NULL, &ok), NB_ERR_NULL);
    nb_ctx_free(tmp);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_params_zero_grad_and_prefix) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 3);
    nb_nn_linear m;
    ck_assert_int_eq(nb_nn_linear_init(p, &m, 2, 2, true, NB_F64, &rng), NB_OK);
    nb_tensor *x = nb_ones(ctx, NB_F64, NB_SHAPE(3, 2));
    ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, nb_nn_linear_forward(ctx, &m, x)), NULL),
                     NB_OK);
    /* d sum / d bias = 3 rows; d sum / d weight[o][i] = sum of x[:, i] = 3 */
    ck_assert_double_eq(nb_grad_get(m.bias, 1), 3.0);
    ck_assert_double_eq(nb_grad_get(m.weight, 2), 3.0);
    nb_params_zero_grad(&m.params);
    for (int k = 0; k < m.params.n; k++)
        for (size_t i = 0; i < m.params.t[k]->numel; i++)
            ck_assert_double_eq(nb_grad_get(m.params.t[k], i), 0.0);
    nb_params_zero_grad(NULL);
    nb_tensor_list all = {0};
    ck_assert_int_eq(nb_params_add_prefixed(p, &all, "blocks.0.ff", &m.params), NB_OK);
    nn_assert_names(&all, 2, (const char *const[]){"blocks.0.ff.weight", "blocks.0.ff.bias"});
    ck_assert_ptr_eq(all.t[1], m.bias);
    ck_assert_int_eq(nb_params_add_prefixed(p, &all, "blocks.0.ff", &m.params), NB_ERR_VALUE);
    ck_assert_error_has(p, "'blocks.0.ff.weight' is already in the list");
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

Suite *suite_nn(void) {
    Suite *s = suite_create("nn");
    TCase *tc = tcase_create("layers");
    tcase_add_test(tc, test_linear_init_names_and_draws);
    tcase_add_test(tc, test_linear_forward_values_f32_f64);
    tcase_add_test(tc, test_linear_errors);
    tcase_add_test(tc, test_dropout_train_eval_and_replay);
    tcase_add_test(tc, test_dropout_errors);
    tcase_add_test(tc, test_embedding_init_lookup_and_grad);
    tcase_add_test(tc, test_layer_norm_init_and_values);
    tcase_add_test(tc, test_rms_norm_init_and_values);
    tcase_add_test(tc, test_gelu_module);
    tcase_add_test(tc, test_params_copy_from_checks_names_and_shapes);
    tcase_add_test(tc, test_params_zero_grad_and_prefix);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gradients");
    tcase_set_timeout(tg, 60);
    tcase_add_test(tg, test_linear_gradcheck_with_and_without_bias);
    tcase_add_test(tg, test_embedding_gradcheck);
    tcase_add_test(tg, test_layer_norm_gradcheck);
    suite_add_tcase(s, tg);
    return s;
}
