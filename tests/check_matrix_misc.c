/* check_matrix_misc.c - the bad-input matrix for nabla/nn.h, nabla/optim.h,
 * nabla/io.h and nabla/gradcheck.h: modules, optimizers, files, gradient
 * checks. See check_matrix_ops.c's top comment for the matrix's rules and
 * how to add a case for a new public function. */
#include "check_nabla.h"

#include <unistd.h>

#include "matrix_util.h"

/* ---- modules ------------------------------------------------------------- */
/* Each module: NULL module / context / rng at init, sizes 0, negative and
 * overflowing, a bad dtype; at forward NULL x and x of the wrong width. */
START_TEST(test_linear_dropout_embedding) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_nn_linear lin;
    ck_assert_int_ne(nb_nn_linear_init(p, NULL, 3, 2, true, NB_F32, &rng), NB_OK);
    ck_assert_int_ne(nb_nn_linear_init(NULL, &lin, 3, 2, true, NB_F32, &rng), NB_OK);
    expect_any(p, nb_nn_linear_init(p, &lin, 0, 2, true, NB_F32, &rng) != NB_OK, "Linear");
    expect_any(p, nb_nn_linear_init(p, &lin, 3, -2, true, NB_F32, &rng) != NB_OK, "Linear");
    /* An overflowing weight is reported by its creation ("uniform: ..."). */
    expect_any(p, nb_nn_linear_init(p, &lin, INT64_MAX, INT64_MAX, true, NB_F32, &rng) != NB_OK,
               "overflows");
    expect_any(p, nb_nn_linear_init(p, &lin, 3, 2, true, NB_I64, &rng) != NB_OK, "Linear");
    ck_assert_int_eq(nb_nn_linear_init(p, &lin, 3, 2, true, NB_F32, &rng), NB_OK);
    nb_nn_linear_train(&lin, false);
    nb_nn_linear_train(NULL, true);
    ck_assert_ptr_null(nb_nn_linear_forward(ctx, NULL, nb_ones(ctx, NB_F32, NB_SHAPE(1, 3))));
    nb_ctx_clear_error(ctx);
    expect_fail(ctx, !nb_nn_linear_forward(ctx, &lin, NULL), NB_ERR_NULL, "Linear");
    expect_fail(ctx, !nb_nn_linear_forward(ctx, &lin, nb_ones(ctx, NB_F32, NB_SHAPE(1, 4))),
                NB_ERR_SHAPE, "Linear");
    expect_fail(ctx, !nb_nn_linear_forward(ctx, &lin, nb_ones(ctx, NB_F64, NB_SHAPE(1, 3))),
                NB_ERR_DTYPE, "Linear");

    nb_nn_dropout d;
    expect_any(p, nb_nn_dropout_init(p, &d, 1.5, &rng) != NB_OK, "Dropout");
    expect_any(p, nb_nn_dropout_init(p, &d, NAN, &rng) != NB_OK, "Dropout");
    ck_assert_int_eq(nb_nn_dropout_init(p, &d, 0.5, &rng), NB_OK);
    nb_nn_dropout_train(&d, false);
    nb_nn_dropout_train(NULL, false);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    ck_assert_double_eq(nb_get(nb_nn_dropout_forward(ctx, &d, x), 5), 1); /* eval: identity */
    expect_any(ctx, !nb_nn_dropout_forward(ctx, &d, NULL), "Dropout");

    nb_nn_embedding e;
    expect_any(p, nb_nn_embedding_init(p, &e, 0, 3, NB_F32, &rng) != NB_OK, "Embedding");
    expect_any(p, nb_nn_embedding_init(p, &e, 5, -3, NB_F32, &rng) != NB_OK, "Embedding");
    ck_assert_int_eq(nb_nn_embedding_init(p, &e, 5, 3, NB_F32, &rng), NB_OK);
    nb_nn_embedding_train(&e, true);
    nb_nn_embedding_train(NULL, true);
    nb_tensor *ids = nb_from_doubles(ctx, NB_I64, NB_SHAPE(2), (const double[]){4, 5});
    expect_fail(ctx, !nb_nn_embedding_forward(ctx, &e, ids), NB_ERR_VALUE, "embedding");
    expect_any(ctx, !nb_nn_embedding_forward(ctx, &e, NULL), "Embedding");
    expect_fail(ctx, !nb_nn_embedding_forward(ctx, &e, x), NB_ERR_DTYPE, "embedding");
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_norm_gelu) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_nn_layer_norm ln;
    expect_any(p, nb_nn_layer_norm_init(p, &ln, 0, 1e-5, true, NB_F32) != NB_OK, "LayerNorm");
    expect_any(p, nb_nn_layer_norm_init(p, &ln, 3, -1, true, NB_F32) != NB_OK, "LayerNorm");
    expect_any(p, nb_nn_layer_norm_init(p, &ln, 3, 1e-5, true, (nb_dtype)42) != NB_OK, "LayerNorm");
    ck_assert_int_eq(nb_nn_layer_norm_init(p, &ln, 3, 1e-5, true, NB_F32), NB_OK);
    nb_nn_layer_norm_train(&ln, true);
    nb_nn_layer_norm_train(NULL, true);
    expect_fail(ctx, !nb_nn_layer_norm_forward(ctx, &ln, NULL), NB_ERR_NULL, "LayerNorm");
    expect_any(ctx, !nb_nn_layer_norm_forward(ctx, &ln, nb_ones(ctx, NB_F32, NB_SHAPE(2, 4))),
               "LayerNorm");
    nb_nn_rms_norm rn;
    expect_any(p, nb_nn_rms_norm_init(p, &rn, 0, 1e-5, true, NB_F32) != NB_OK, "RMSNorm");
    expect_fail(p, nb_nn_rms_norm_init(p, &rn, 3, 0, true, NB_F32) != NB_OK, NB_ERR_VALUE,
                "RMSNorm");
    expect_fail(p, nb_nn_rms_norm_init(p, &rn, 3, NAN, true, NB_F32) != NB_OK, NB_ERR_VALUE,
                "RMSNorm");
    expect_any(p, nb_nn_rms_norm_init(p, &rn, 3, 1e-5, true, (nb_dtype)42) != NB_OK, "RMSNorm");
    /* a module whose init failed is refused, not run */
    expect_any(ctx, !nb_nn_rms_norm_forward(ctx, &rn, nb_ones(ctx, NB_F32, NB_SHAPE(2, 3))),
               "RMSNorm");
    ck_assert_int_eq(nb_nn_rms_norm_init(p, &rn, 3, 1e-5, true, NB_F32), NB_OK);
    nb_nn_rms_norm_train(&rn, true);
    nb_nn_rms_norm_train(NULL, true);
    expect_fail(ctx, !nb_nn_rms_norm_forward(ctx, &rn, NULL), NB_ERR_NULL, "RMSNorm");
    expect_any(ctx, !nb_nn_rms_norm_forward(ctx, &rn, nb_ones(ctx, NB_F32, NB_SHAPE(2, 4))),
               "RMSNorm");
    expect_any(ctx, !nb_nn_rms_norm_forward(ctx, NULL, nb_ones(ctx, NB_F32, NB_SHAPE(2, 3))),
               "RMSNorm");
    nb_nn_gelu g;
    expect_any(p, nb_nn_gelu_init(p, &g, (nb_gelu_approx)7) != NB_OK, "GELU");
    ck_assert_int_eq(nb_nn_gelu_init(p, &g, NB_GELU_TANH), NB_OK);
    nb_nn_gelu_train(&g, false);
    nb_nn_gelu_train(NULL, false);
    expect_any(ctx, !nb_nn_gelu_forward(ctx, &g, NULL), "GELU");
    ck_assert_ptr_nonnull(nb_nn_gelu_forward(ctx, &g, nb_ones(ctx, NB_F32, NB_SHAPE(2))));
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_attention_modules) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 5);
    nb_tensor *x2 = nb_ones(ctx, NB_F32, NB_SHAPE(4, 3)),
              *x3 = nb_ones(ctx, NB_F32, NB_SHAPE(1, 4, 3));
    nb_tensor *wide = nb_ones(ctx, NB_F32, NB_SHAPE(1, 4, 5)),
              *long3 = nb_ones(ctx, NB_F32, NB_SHAPE(1, 9, 3));

    nb_nn_self_attention_v1 v1;
    expect_any(p, nb_nn_self_attention_v1_init(p, &v1, 0, 2, NB_F32, &rng) != NB_OK,
               "SelfAttention_v1");
    ck_assert_int_eq(nb_nn_self_attention_v1_init(p, &v1, 3, 2, NB_F32, &rng), NB_OK);
    nb_nn_self_attention_v1_train(&v1, false);
    nb_nn_self_attention_v1_train(NULL, false);
    ck_assert_ptr_nonnull(nb_nn_self_attention_v1_forward(ctx, &v1, x2));
    expect_any(ctx, !nb_nn_self_attention_v1_forward(ctx, &v1, NULL), "SelfAttention_v1");
    expect_any(ctx, !nb_nn_self_attention_v1_forward(ctx, &v1, x3), "SelfAttention_v1");

    nb_nn_self_attention_v2 v2;
    expect_any(p, nb_nn_self_attention_v2_init(p, &v2, 3, -1, false, NB_F32, &rng) != NB_OK,
               "SelfAttention_v2");
    ck_assert_int_eq(nb_nn_self_attention_v2_init(p, &v2, 3, 2, true, NB_F32, &rng), NB_OK);
    nb_nn_self_attention_v2_train(&v2, true);
    nb_nn_self_attention_v2_train(NULL, true);
    ck_assert_ptr_nonnull(nb_nn_self_attention_v2_forward(ctx, &v2, x2));
    expect_any(ctx, !nb_nn_self_attention_v2_forward(ctx, &v2, NULL), "SelfAttention_v2");

    nb_nn_causal_attention ca;
    expect_any(p, nb_nn_causal_attention_init(p, &ca, 3, 2, 0, 0.0, false, NB_F32, &rng) != NB_OK,
               "CausalAttention");
    expect_any(p, nb_nn_causal_attention_init(p, &ca, 3, 2, 4, 2.0, false, NB_F32, &rng) != NB_OK,
               "CausalAttention");
    ck_assert_int_eq(nb_nn_causal_attention_init(p, &ca, 3, 2, 4, 0.1, false, NB_F32, &rng), NB_OK);
    nb_nn_causal_attention_train(&ca, false);
    nb_nn_causal_attention_train(NULL, false);
    ck_assert_ptr_nonnull(nb_nn_causal_attention_forward(ctx, &ca, x3));
    expect_any(ctx, !nb_nn_causal_attention_forward(ctx, &ca, long3), ""); /* T > context */
    expect_any(ctx, !nb_nn_causal_attention_forward(ctx, &ca, wide), "CausalAttention");
    nb_tensor *badmask = nb_ones(ctx, NB_F32, NB_SHAPE(1, 4));
    expect_any(ctx, !nb_nn_causal_attention_forward_masked(ctx, &ca, x3, badmask, NULL),
               "CausalAttention");

    nb_nn_mha_wrapper w;
    expect_any(p, nb_nn_mha_wrapper_init(p, &w, 3, 2, 4, 0.0, 0, false, NB_F32, &rng) != NB_OK,
               "MultiHeadAttentionWrapper");
    expect_any(p, nb_nn_mha_wrapper_init(p, &w, 3, 2, 4, 0.0, -3, false, NB_F32, &rng) != NB_OK,
               "MultiHeadAttentionWrapper");
    ck_assert_int_eq(nb_nn_mha_wrapper_init(p, &w, 3, 2, 4, 0.0, 2, false, NB_F32, &rng), NB_OK);
    nb_nn_mha_wrapper_train(&w, false);
    nb_nn_mha_wrapper_train(NULL, false);
    ck_assert_ptr_nonnull(nb_nn_mha_wrapper_forward(ctx, &w, x3));
    expect_any(ctx, !nb_nn_mha_wrapper_forward(ctx, &w, NULL), "MultiHeadAttentionWrapper");

    nb_nn_mha m;
    expect_any(p, nb_nn_mha_init(p, &m, 3, 3, 4, 0.0, 2, false, NB_F32, &rng) != NB_OK,
               ""); /* 3 % 2 */
    expect_any(p, nb_nn_mha_init(p, &m, 3, 4, 4, 0.0, INT32_MAX, false, NB_F32, &rng) != NB_OK,
               "MultiHeadAttention");
    ck_assert_int_eq(nb_nn_mha_init(p, &m, 3, 4, 4, 0.0, 2, false, NB_F32, &rng), NB_OK);
    nb_nn_mha_train(&m, false);
    nb_nn_mha_train(NULL, false);
    ck_assert_ptr_nonnull(nb_nn_mha_forward(ctx, &m, x3));
    expect_any(ctx, !nb_nn_mha_forward(ctx, &m, long3), "MultiHeadAttention");
    expect_any(ctx, !nb_nn_mha_forward_masked(ctx, &m, x3, badmask, NULL), "MultiHeadAttention");
    nb_tensor *weights = NULL;
    ck_assert_ptr_nonnull(nb_nn_mha_forward_masked(ctx, &m, x3, NULL, &weights));
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_param_lists) {
    nb_ctx *p = nb_ctx_new(0);
    nb_tensor_list a = {0}, b = {0}, dst = {0};
    nb_list_add(&a, "w", nb_requires_grad(nb_ones(p, NB_F32, NB_SHAPE(2, 3))));
    nb_list_add(&b, "w", nb_ones(p, NB_F32, NB_SHAPE(3, 2)));
    nb_params_zero_grad(NULL);
    nb_params_zero_grad(&a);
    /* no context argument: the destination's context takes the message
     * (none for a NULL destination) */
    ck_assert_int_eq(nb_params_copy_from(NULL, &b), NB_ERR_NULL);
    expect_fail(p, nb_params_copy_from(&a, NULL) == NB_ERR_NULL, NB_ERR_NULL, "params_copy_from");
    expect_fail(p, nb_params_copy_from(&a, &b) == NB_ERR_SHAPE, NB_ERR_SHAPE, "params_copy_from");
    ck_assert_int_eq(nb_params_add_prefixed(NULL, &dst, "x", &a), NB_ERR_NULL);
    expect_fail(p, nb_params_add_prefixed(p, NULL, "x", &a) != NB_OK, NB_ERR_NULL,
                "params_add_prefixed");
    expect_fail(p, nb_params_add_prefixed(p, &dst, NULL, &a) != NB_OK, NB_ERR_NULL,
                "params_add_prefixed");
    expect_fail(p, nb_params_add_prefixed(p, &dst, "x", NULL) != NB_OK, NB_ERR_NULL,
                "params_add_prefixed");
    ck_assert_int_eq(nb_params_add_prefixed(p, &dst, "x", &a), NB_OK);
    expect_fail(p, nb_params_add_prefixed(p, &dst, "x", &a) != NB_OK, NB_ERR_VALUE,
                "params_add_prefixed: 'x.w' is already in the list"); /* duplicate */
    nb_ctx_fail(p, NB_ERR_IO, "an earlier failure"); /* a context holding an error: refused */
    ck_assert_int_eq(nb_params_add_prefixed(p, &dst, "y", &a), NB_ERR_IO);
    ck_assert_int_eq(dst.n, 1);
    nb_ctx_clear_error(p);
    ck_assert_str_eq(nb_list_name(&dst, 0), "x.w");
    nb_ctx_free(p);
}
END_TEST

/* ---- optimizers ------------------------------------------------------------ */
START_TEST(test_optimizers) {
    nb_ctx *p = nb_ctx_new(0);
    nb_tensor_list params = {0};
    nb_tensor *w = nb_requires_grad(nb_ones(p, NB_F32, NB_SHAPE(2)));
    nb_list_add(&params, "w", w);
    nb_sgd_opts so = nb_sgd_defaults(0.1);
    nb_adam_opts ao = nb_adam_defaults(0.1), awo = nb_adamw_defaults(0.1);
    expect_fail(p, !nb_sgd_new(p, NULL, so), NB_ERR_NULL, "sgd");
    /* A NULL context: NULL, with nowhere to record. */
    ck_assert_ptr_null(nb_sgd_new(NULL, &params, so));
    ck_assert_ptr_null(nb_adam_new(NULL, &params, ao));
    ck_assert_ptr_null(nb_adamw_new(NULL, &params, awo));
    ck_assert_ptr_null(nb_adamw_new_groups(NULL, &params, awo, false));
    /* A context already holding an error: NULL, that error kept. */
    nb_ctx_fail(p, NB_ERR_STATE, "an earlier failure");
    ck_assert_ptr_null(nb_adamw_new(p, &params, awo));
    ck_assert_str_eq(nb_ctx_error(p), "an earlier failure");
    nb_ctx_clear_error(p);
    so.lr = -1;
    expect_any(p, !nb_sgd_new(p, &params, so), "sgd");
    so = nb_sgd_defaults(0.1);
    so.nesterov = true; /* needs momentum */
    expect_any(p, !nb_sgd_new(p, &params, so), "sgd");
    ao.beta1 = 1.0;
    expect_any(p, !nb_adam_new(p, &params, ao), "adam");
    awo.eps = NAN;
    expect_any(p, !nb_adamw_new(p, &params, awo), "adamw");
    nb_tensor_list ints = {0};
    nb_list_add(&ints, "i", nb_zeros(p, NB_I64, NB_SHAPE(2)));
    expect_any(p, !nb_sgd_new(p, &ints, nb_sgd_defaults(0.1)), "sgd");

    nb_optim *o = nb_adamw_new(p, &params, nb_adamw_defaults(0.1));
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(nb_optim_kind(o), "adamw");
    ck_assert_ptr_null(nb_optim_kind(NULL));
    nb_sgd_opts got_s;
    nb_adam_opts got_a;
    ck_assert(!nb_optim_sgd_options(o, &got_s));
    ck_assert(nb_optim_adam_options(o, &got_a));
    ck_assert(!nb_optim_adam_options(NULL, &got_a));
    ck_assert(!nb_optim_adam_options(o, NULL));
    /* NaN learning rate: refused, the old one kept, the reason on p (the
     * optimizer's context). */
    nb_optim_set_lr(o, NAN);
    expect_fail(p, nb_optim_get_lr(o) == 0.1, NB_ERR_VALUE, "set_lr");
    nb_optim_set_lr(NULL, 1);
    ck_assert(isnan(nb_optim_get_lr(NULL)));
    /* a parameter's own rate: index and scale checked, NULL refused */
    ck_assert_int_eq(nb_optim_set_lr_scale(NULL, 0, 1), NB_ERR_NULL);
    expect_fail(p, nb_optim_set_lr_scale(o, 1000, 1) != NB_OK, NB_ERR_VALUE, "set_lr_scale");
    expect_fail(p, nb_optim_set_lr_scale(o, 0, NAN) != NB_OK, NB_ERR_VALUE, "invalid scale");
    ck_assert_double_eq(nb_optim_lr_scale_of(o, 0), 1);
    ck_assert(isnan(nb_optim_lr_scale_of(NULL, 0)) && isnan(nb_optim_lr_scale_of(o, -1)));
    ck_assert_int_eq(nb_optim_step(NULL), NB_ERR_NULL);
    ((float *)w->grad)[0] = NAN;
    ck_assert_int_eq(nb_optim_step(o), NB_OK); /* NaN propagates, as in PyTorch */
    ck_assert(isnan(nb_get(w, 0)));
    ck_assert_int_eq(nb_optim_step_count(o), 1);
    ck_assert_int_eq(nb_optim_step_count(NULL), 0);
    nb_optim_zero_grad(o);
    nb_optim_zero_grad(NULL);
    nb_tensor_list st = {0};
    ck_assert_int_eq(nb_optim_state(NULL, o, &st), NB_ERR_NULL);
    expect_fail(p, nb_optim_state(p, o, NULL) != NB_OK, NB_ERR_NULL, "optim state");
    ck_assert_int_eq(nb_optim_state(p, o, &st), NB_OK);
    expect_fail(p, nb_optim_load_state(o, NULL) != NB_OK, NB_ERR_NULL, "load_state");
    ck_assert_int_eq(nb_optim_load_state(NULL, &st), NB_ERR_NULL);
    nb_tensor_list wrong = {0};
    nb_list_add(&wrong, "state.w.exp_avg", nb_ones(p, NB_F32, NB_SHAPE(3)));
    nb_list_add(&wrong, "state.step", nb_scalar(p, NB_F64, 1));
    expect_fail(p, nb_optim_load_state(o, &wrong) != NB_OK, NB_ERR_SHAPE, "'state.w.exp_avg'");
    nb_optim_free(o);
    nb_optim_free(NULL);

    nb_optim *s = nb_sgd_new(p, &params, nb_sgd_defaults(0.1));
    ck_assert(nb_optim_sgd_options(s, &got_s));
    nb_optim_free(s);
    nb_optim *a = nb_adam_new(p, &params, nb_adam_defaults(0.1));
    nb_optim_free(a);

    ((float *)w->grad)[0] = INFINITY;
    ck_assert(isnan(nb_clip_grad_norm(NULL, 1.0)) || nb_clip_grad_norm(NULL, 1.0) == 0);
    double n = nb_clip_grad_norm(&params, 1.0);
    ck_assert(isinf(n) || isnan(n));
    ck_assert(isnan(nb_clip_grad_norm(&params, -1.0)) || nb_clip_grad_norm(&params, -1.0) >= 0);
    nb_clip_grad_value(NULL, 1.0);
    nb_clip_grad_value(&params, NAN);
    ((float *)w->grad)[0] = 5;
    nb_clip_grad_value(&params, 1.0);
    ck_assert_double_eq(nb_grad_get(w, 0), 1.0);
    nb_ctx_free(p);
}
END_TEST

/* ---- files ------------------------------------------------------------------ */
START_TEST(test_files) {
    nb_ctx *ctx = nb_ctx_new(0);
    char dir[] = "/tmp/nb-mx-XXXXXX", path[64], pathb[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    snprintf(pathb, sizeof pathb, "%s/missing/b", dir);
    nb_tensor_list l = {0}, out = {0};
    nb_list_add(&l, "x", nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    expect_fail(ctx, nb_save_safetensors(ctx, NULL, &l, 0, NULL, NULL), NB_ERR_NULL,
                "save_safetensors");
    expect_fail(ctx, nb_save_safetensors(ctx, path, NULL, 0, NULL, NULL), NB_ERR_NULL,
                "save_safetensors");
    expect_any(ctx, nb_save_safetensors(ctx, path, &l, -1, NULL, NULL), "save_safetensors");
    expect_any(ctx, nb_save_safetensors(ctx, path, &l, 1, NULL, NULL), "save_safetensors");
    expect_fail(ctx, nb_save_safetensors(ctx, pathb, &l, 0, NULL, NULL), NB_ERR_IO,
                "save_safetensors");
    ck_assert_int_eq(nb_save_safetensors(NULL, path, &l, 0, NULL, NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_save_safetensors(ctx, path, &l, 0, NULL, NULL), NB_OK);
    expect_fail(ctx, nb_load_safetensors(ctx, path, NULL), NB_ERR_NULL, "load_safetensors");
    expect_fail(ctx, nb_load_safetensors(ctx, NULL, &out), NB_ERR_NULL, "load_safetensors");
    expect_fail(ctx, nb_load_safetensors(ctx, pathb, &out), NB_ERR_IO, "load_safetensors");
    expect_fail(ctx, nb_load_safetensors(ctx, dir, &out), NB_ERR_IO, "load_safetensors");
    expect_fail(ctx, nb_load_safetensors(ctx, "/dev/zero", &out), NB_ERR_IO, "load_safetensors");
    int n_meta = 7;
    expect_any(ctx, nb_load_safetensors_meta(ctx, path, &out, -1, &n_meta, NULL, NULL),
               "load_safetensors");
    ck_assert_int_eq(n_meta, 0);
    expect_any(ctx, nb_load_safetensors_meta(ctx, path, &out, 2, NULL, NULL, NULL),
               "load_safetensors");
    ck_assert_int_eq(nb_load_safetensors_meta(ctx, path, &out, 0, NULL, NULL, NULL), NB_OK);
    ck_assert_int_eq(nb_load_safetensors_each(NULL, path, NULL, NULL, NULL), NB_ERR_NULL);
    expect_fail(ctx, nb_load_safetensors_each(ctx, path, NULL, NULL, NULL), NB_ERR_NULL,
                "load_safetensors");
    expect_fail(ctx, nb_load_safetensors_each(ctx, NULL, NULL, NULL, NULL), NB_ERR_NULL,
                "load_safetensors");
    /* Loading the same names again into `out`: refused, out unchanged. */
    expect_fail(ctx, nb_load_safetensors(ctx, path, &out), NB_ERR_VALUE, "load_safetensors");
    ck_assert_int_eq(out.n, 1);

    nb_tensor_list params = {0};
    nb_tensor *w = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    nb_list_add(&params, "w", w);
    expect_fail(ctx, nb_save_checkpoint(ctx, NULL, &params, NULL, NULL, 0, NULL, NULL), NB_ERR_NULL,
                "save_checkpoint");
    expect_fail(ctx, nb_save_checkpoint(ctx, path, NULL, NULL, NULL, 0, NULL, NULL), NB_ERR_NULL,
                "save_checkpoint");
    const char *k[] = {"format"}, *v[] = {"mine"};
    expect_fail(ctx, nb_save_checkpoint(ctx, path, &params, NULL, NULL, 1, k, v), NB_ERR_VALUE,
                "save_checkpoint");
    ck_assert_int_eq(nb_save_checkpoint(ctx, path, &params, NULL, NULL, 0, NULL, NULL), NB_OK);
    expect_fail(ctx, nb_load_checkpoint(ctx, path, NULL, NULL, NULL), NB_ERR_NULL,
                "load_checkpoint");
    expect_fail(ctx, nb_load_checkpoint(ctx, NULL, &params, NULL, NULL), NB_ERR_NULL,
                "load_checkpoint");
    nb_optim *o = nb_sgd_new(ctx, &params, nb_sgd_defaults(0.1));
    expect_fail(ctx, nb_load_checkpoint(ctx, path, &params, o, NULL), NB_ERR_VALUE,
                "load_checkpoint");
    nb_optim_free(o);
    ck_assert_int_eq(nb_load_checkpoint(ctx, path, &params, NULL, NULL), NB_OK);
    ck_assert_ptr_null(nb_pcg32_tensor(NULL, NULL));
    expect_any(ctx, !nb_pcg32_tensor(ctx, NULL), "pcg32_tensor");
    unlink(path);
    rmdir(dir);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- gradcheck ---------------------------------------------------------------- */
static nb_tensor *f_square_sum(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_sum(ctx, nb_mul(ctx, in[0], in[0]));
}

static nb_tensor *f_fails(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)in;
    (void)user;
    nb_ctx_fail(ctx, NB_ERR_SHAPE, "user function failed");
    return NULL;
}

START_TEST(test_gradcheck_args) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x =
        nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (const double[]){1, 2}));
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_square_sum, NULL, 1, &x, &o, &r), NB_OK);
    /* A NULL context runs nothing (NB_ERR_NULL, said in res only); every
     * other failure is recorded on ctx. */
    ck_assert_int_eq(nb_gradcheck(NULL, f_square_sum, NULL, 1, &x, NULL, &r), NB_ERR_NULL);
    ck_assert_ptr_nonnull(strstr(r.message, "NULL context"));
    expect_fail(ctx, nb_gradcheck(ctx, NULL, NULL, 1, &x, NULL, NULL), NB_ERR_NULL, "gradcheck");
    expect_fail(ctx, nb_gradcheck(ctx, f_square_sum, NULL, 1, NULL, NULL, NULL), NB_ERR_NULL,
                "gradcheck");
    expect_fail(ctx, nb_gradcheck(ctx, f_square_sum, NULL, -1, &x, NULL, NULL), NB_ERR_NULL,
                "gradcheck");
    expect_fail(ctx, nb_gradcheck(ctx, f_fails, NULL, 1, &x, NULL, &r), NB_ERR_SHAPE,
                "user function failed");
    nb_set(x, 0, NAN);
    expect_any(ctx, nb_gradcheck(ctx, f_square_sum, NULL, 1, &x, NULL, NULL), "gradcheck");
    /* a context already holding an error: nothing runs, that error kept */
    nb_ctx_fail(ctx, NB_ERR_IO, "an earlier failure");
    ck_assert_int_eq(nb_gradcheck(ctx, f_square_sum, NULL, 1, &x, NULL, &r), NB_ERR_IO);
    ck_assert_str_eq(nb_ctx_error(ctx), "an earlier failure");
    nb_ctx_free(ctx);
}
END_TEST

/* nb_gradcheck_params: NULL and corrupt lists, a NULL parameter, a failing
 * f; the parameter's struct is restored whatever happens. */
static nb_tensor_list *g_params;
static nb_tensor *f_param_sum(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)in, (void)user;
    return nb_sum(ctx, nb_mul(ctx, g_params->t[0], g_params->t[0]));
}

START_TEST(test_gradcheck_params_args) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *w = nb_requires_grad(nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), (const double[]){1, 2}));
    nb_tensor_list l = {0}, bad = {0};
    nb_list_add(&l, "w", w);
    g_params = &l;
    nb_tensor before = *w;
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck_params(ctx, f_param_sum, NULL, &l, 0, NULL, NULL, &r), NB_OK);
    ck_assert(memcmp(w, &before, sizeof before) == 0);
    ck_assert_int_eq(nb_gradcheck_params(NULL, f_param_sum, NULL, &l, 0, NULL, NULL, &r),
                     NB_ERR_NULL);
    expect_fail(ctx, nb_gradcheck_params(ctx, NULL, NULL, &l, 0, NULL, NULL, &r), NB_ERR_NULL,
                "gradcheck");
    expect_fail(ctx, nb_gradcheck_params(ctx, f_fails, NULL, &l, 0, NULL, NULL, &r),
                NB_ERR_SHAPE, "gradcheck");
    ck_assert(memcmp(w, &before, sizeof before) == 0);
    bad.n = 1; /* names[0] and t[0] NULL */
    expect_fail(ctx, nb_gradcheck_params(ctx, f_param_sum, NULL, &bad, 0, NULL, NULL, &r),
                NB_ERR_NULL, "parameter 0");
    bad.n = -3;
    expect_fail(ctx, nb_gradcheck_params(ctx, f_param_sum, NULL, &bad, 0, NULL, NULL, &r),
                NB_ERR_SIZE, "gradcheck");
    bad.n = NB_LIST_MAX + 1;
    expect_fail(ctx, nb_gradcheck_params(ctx, f_param_sum, NULL, &bad, 0, NULL, NULL, &r),
                NB_ERR_SIZE, "gradcheck");
    /* NULL params is nb_gradcheck */
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (const double[]){1, 2}));
    ck_assert_int_eq(nb_gradcheck_params(ctx, f_square_sum, NULL, NULL, 1, &x, NULL, NULL), NB_OK);
    nb_ctx_free(ctx);
}
END_TEST

/* nb_grad, nb_hvp, nb_jvp, nb_node_set_graph_backward, nb_gradgradcheck
 * and its _params form: NULL and out-of-range arguments, vectors of the
 * wrong shape, a context already in error; none crashes. */
START_TEST(test_grad_args) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (const double[]){1, 2}));
    nb_tensor *y = nb_sum(ctx, nb_mul(ctx, x, x)), *g = NULL, *two = nb_ones(ctx, NB_F64, NB_SHAPE(3));
    ck_assert_int_eq(nb_grad(NULL, 1, &y, NULL, 1, &x, NULL, &g), NB_ERR_NULL);
    ck_assert_int_eq(nb_grad(ctx, 0, &y, NULL, 1, &x, NULL, &g), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_grad(ctx, 1, NULL, NULL, 1, &x, NULL, &g), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_grad(ctx, 1, &y, NULL, 1, &x, NULL, NULL), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    nb_tensor *none = NULL;
    ck_assert_int_eq(nb_grad(ctx, 1, &y, NULL, 1, &none, NULL, &g), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_hvp(ctx, y, 1, &x, &two, NULL, &g), NB_ERR_SHAPE);
    ck_assert_ptr_null(g);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_hvp(ctx, y, 1, &x, NULL, NULL, &g), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jvp(ctx, 1, &y, 1, &x, NULL, NULL, &g), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jvp(ctx, 1, NULL, 1, &x, &x, NULL, &g), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_hvp(NULL, y, 1, &x, &x, NULL, &g), NB_ERR_NULL);
    ck_assert_int_eq(nb_jvp(NULL, 1, &y, 1, &x, &x, NULL, &g), NB_ERR_NULL);
    nb_node_set_graph_backward(NULL, NULL); /* a no-op */
    /* hvp_mode out of the enum; nb_hvp_last_method on NULL, before and after */
    ck_assert_int_eq(nb_hvp_last_method(NULL), NB_HVP_AUTO);
    ck_assert_int_eq(nb_hvp_last_method(ctx), NB_HVP_AUTO);
    ck_assert_int_eq(nb_hvp(ctx, y, 1, &x, &x, &(nb_grad_opts){.hvp_mode = (nb_hvp_mode)-1}, &g),
                     NB_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(nb_ctx_error(ctx), "hvp: opts->hvp_mode -1"));
    ck_assert_int_eq(nb_hvp_last_method(ctx), NB_HVP_AUTO); /* nothing ran */
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_hvp(ctx, y, 1, &x, &x, NULL, &g), NB_OK); /* H = 2 I */
    ck_assert_int_eq(nb_hvp_last_method(ctx), NB_HVP_FWD_REV);
    ck_assert_double_eq(nb_get(g, 1), 4.0);
    /* a context in error: nothing runs */
    nb_ctx_fail(ctx, NB_ERR_VALUE, "earlier");
    ck_assert_int_eq(nb_grad(ctx, 1, &y, NULL, 1, &x, NULL, &g), NB_ERR_VALUE);
    ck_assert_int_eq(nb_hvp(ctx, y, 1, &x, &x, NULL, &g), NB_ERR_VALUE);
    nb_ctx_clear_error(ctx);
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradgradcheck(NULL, f_square_sum, NULL, 1, &x, NULL, &r), NB_ERR_NULL);
    ck_assert_int_eq(nb_gradgradcheck(ctx, NULL, NULL, 1, &x, NULL, &r), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_gradgradcheck(ctx, f_square_sum, NULL, -1, &x, NULL, &r), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_gradgradcheck(ctx, f_fails, NULL, 1, &x, NULL, &r), NB_ERR_VALUE);
    ck_assert_int_eq(nb_gradgradcheck(ctx, f_square_sum, NULL, 1, &x, NULL, NULL), NB_ERR_VALUE);
    nb_ctx_clear_error(ctx); /* a context in error runs nothing; a clean one passes */
    ck_assert_int_eq(nb_gradgradcheck(ctx, f_square_sum, NULL, 1, &x, NULL, NULL), NB_OK);
    ck_assert_int_eq(nb_gradgradcheck_params(ctx, NULL, NULL, NULL, 1, &x, NULL, &r), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_gradgradcheck_params(ctx, f_square_sum, NULL, NULL, 1, &x, NULL, &r), NB_OK);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *f_elementwise(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_mul(ctx, in[0], in[0]);
}
static nb_tensor *f_returns_null(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)ctx, (void)in, (void)user;
    return NULL;
}
static nb_tensor *f_param_dot_sample(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_sum(ctx, nb_mul(ctx, in[0], in[1]));
}

/* nb_jacobian, nb_hessian, nb_per_sample_grads: NULLs, n_in < 1, a bad
 * mode, integer inputs, a non-scalar f for the Hessian or loss, data whose
 * dim 0 differ, f failing or returning NULL, a context in error. Each is
 * named, the results stay NULL, nothing crashes. */
START_TEST(test_transform_args) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (const double[]){1, 2});
    nb_tensor *ids = nb_zeros(ctx, NB_I64, NB_SHAPE(2)), *none = NULL, *r[4] = {x, x, x, x};
    ck_assert_int_eq(nb_jacobian(NULL, f_square_sum, NULL, 1, &x, NULL, r), NB_ERR_NULL);
    ck_assert_int_eq(nb_jacobian(ctx, NULL, NULL, 1, &x, NULL, r), NB_ERR_NULL);
    ck_assert_error_has(ctx, "jacobian: the function, the inputs and the results are required");
    ck_assert_ptr_null(r[0]);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jacobian(ctx, f_square_sum, NULL, 1, NULL, NULL, r), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jacobian(ctx, f_square_sum, NULL, 1, &x, NULL, NULL), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jacobian(ctx, f_square_sum, NULL, 1, &none, NULL, r), NB_ERR_NULL);
    ck_assert_error_has(ctx, "jacobian: input 0 is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jacobian(ctx, f_square_sum, NULL, 0, &x, NULL, r), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "jacobian: n_in is 0, expected at least 1");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jacobian(ctx, f_square_sum, NULL, 1, &ids, NULL, r), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "jacobian: input 0 is i64, expected f32 or f64");
    nb_ctx_clear_error(ctx);
    nb_jacobian_opts bad = {(nb_jac_mode)7, false};
    ck_assert_int_eq(nb_jacobian(ctx, f_square_sum, NULL, 1, &x, &bad, r), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "jacobian: mode 7 is not");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jacobian(ctx, f_returns_null, NULL, 1, &x, NULL, r), NB_ERR_NULL);
    ck_assert_error_has(ctx, "jacobian: the function returned NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jacobian(ctx, f_fails, NULL, 1, &x, NULL, r), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "user function failed");
    ck_assert_ptr_null(r[0]);
    nb_ctx_clear_error(ctx);

    ck_assert_int_eq(nb_hessian(NULL, f_square_sum, NULL, 1, &x, r), NB_ERR_NULL);
    ck_assert_int_eq(nb_hessian(ctx, f_square_sum, NULL, -1, &x, r), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "hessian: n_in is -1");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_hessian(ctx, f_square_sum, NULL, 1, &x, NULL), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    r[0] = r[1] = x;
    ck_assert_int_eq(nb_hessian(ctx, f_elementwise, NULL, 1, &x, r), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "hessian: the function returned (2), expected a scalar");
    ck_assert_ptr_null(r[0]);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_hessian(ctx, f_square_sum, NULL, 1, &x, r), NB_OK);
    ck_assert_double_eq(nb_get(r[0], 0), 2.0); /* d^2 sum(x^2) = 2 I */
    ck_assert_double_eq(nb_get(r[0], 1), 0.0);

    nb_tensor *p = nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (const double[]){1, 2, 3});
    nb_tensor *d2 = nb_ones(ctx, NB_F64, NB_SHAPE(2, 3)), *d4 = nb_ones(ctx, NB_F64, NB_SHAPE(4, 3));
    nb_tensor *data[2] = {d2, d4}, *s0 = nb_scalar(ctx, NB_F64, 1);
    ck_assert_int_eq(nb_per_sample_grads(NULL, f_param_dot_sample, NULL, 1, &p, 1, &d2, r),
                     NB_ERR_NULL);
    ck_assert_int_eq(nb_per_sample_grads(ctx, f_param_dot_sample, NULL, 0, &p, 1, &d2, r),
                     NB_ERR_VALUE);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_per_sample_grads(ctx, f_param_dot_sample, NULL, 1, &p, 0, &d2, r),
                     NB_ERR_VALUE);
    ck_assert_error_has(ctx, "per_sample_grads: n_data is 0");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_per_sample_grads(ctx, f_param_dot_sample, NULL, 1, &p, 1, NULL, r),
                     NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_per_sample_grads(ctx, f_param_dot_sample, NULL, 1, &p, 1, &none, r),
                     NB_ERR_NULL);
    ck_assert_error_has(ctx, "per_sample_grads: data 0 is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_per_sample_grads(ctx, f_param_dot_sample, NULL, 1, &p, 2, data, r),
                     NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "per_sample_grads: data 1 is (4, 3), its dim 0 is not the batch "
                             "size 2 of data 0");
    ck_assert_ptr_null(r[0]);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_per_sample_grads(ctx, f_param_dot_sample, NULL, 1, &p, 1, &s0, r),
                     NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "per_sample_grads: data 0 is a scalar");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_per_sample_grads(ctx, f_elementwise, NULL, 1, &p, 1, &d2, r),
                     NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "per_sample_grads: the loss of sample 0 is (3), expected a scalar");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_per_sample_grads(ctx, f_param_dot_sample, NULL, 1, &p, 1, &d2, r), NB_OK);
    ck_assert_int_eq(r[0]->ndim, 2);
    ck_assert_int_eq(r[0]->shape[0], 2);
    ck_assert_double_eq(nb_get(r[0], 5), 1.0);
    /* a context in error runs nothing */
    nb_ctx_fail(ctx, NB_ERR_VALUE, "earlier");
    ck_assert_int_eq(nb_jacobian(ctx, f_square_sum, NULL, 1, &x, NULL, r), NB_ERR_VALUE);
    ck_assert_int_eq(nb_hessian(ctx, f_square_sum, NULL, 1, &x, r), NB_ERR_VALUE);
    ck_assert_int_eq(nb_per_sample_grads(ctx, f_param_dot_sample, NULL, 1, &p, 1, &d2, r),
                     NB_ERR_VALUE);
    ck_assert_ptr_null(r[0]);
    ck_assert_error_has(ctx, "earlier");
    nb_ctx_free(ctx);
}
END_TEST

/* nb_make_dual, nb_tangent, nb_jvp_fwd, nb_node_set_forward_rule: NULLs,
 * a tangent of another shape or dtype, an integer primal, a context
 * already in error, f returning NULL; each names the call, none crashes. */
START_TEST(test_forward_mode_args) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (const double[]){1, 2});
    nb_tensor *three = nb_ones(ctx, NB_F64, NB_SHAPE(3)), *f32 = nb_ones(ctx, NB_F32, NB_SHAPE(2));
    nb_tensor *ids = nb_zeros(ctx, NB_I64, NB_SHAPE(2)), *y, *t;
    ck_assert_ptr_null(nb_make_dual(NULL, x, x));
    ck_assert_ptr_null(nb_make_dual(ctx, NULL, x));
    ck_assert_error_has(ctx, "make_dual: primal is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_make_dual(ctx, x, NULL));
    ck_assert_error_has(ctx, "make_dual: tangent is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_make_dual(ctx, x, three));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "make_dual: tangent (3) f64 does not match primal (2) f64");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_make_dual(ctx, x, f32));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_make_dual(ctx, ids, ids));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_tangent(NULL));
    ck_assert_ptr_null(nb_tangent(x)); /* not a dual */
    ck_assert_int_eq(nb_jvp_fwd(NULL, f_square_sum, NULL, 1, &x, &x, &y, &t), NB_ERR_NULL);
    ck_assert_int_eq(nb_jvp_fwd(ctx, NULL, NULL, 1, &x, &x, &y, &t), NB_ERR_NULL);
    ck_assert_error_has(ctx, "jvp_fwd:");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jvp_fwd(ctx, f_square_sum, NULL, 0, &x, &x, &y, &t), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jvp_fwd(ctx, f_square_sum, NULL, 1, &x, &x, NULL, &t), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jvp_fwd(ctx, f_square_sum, NULL, 1, &x, &three, &y, &t), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "jvp_fwd: input 0's tangent (3)");
    ck_assert_ptr_null(y);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_jvp_fwd(ctx, f_fails, NULL, 1, &x, &x, &y, &t), NB_ERR_SHAPE);
    ck_assert_error_has(ctx, "user function failed");
    nb_ctx_clear_error(ctx);
    nb_node_set_forward_rule(NULL, NULL); /* a no-op */
    nb_ctx_fail(ctx, NB_ERR_VALUE, "earlier"); /* a context in error: nothing runs */
    ck_assert_ptr_null(nb_make_dual(ctx, x, x));
    ck_assert_int_eq(nb_jvp_fwd(ctx, f_square_sum, NULL, 1, &x, &x, &y, &t), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "earlier");
    nb_ctx_clear_error(ctx); /* and a clean one works: d/dx sum(x^2) . x = 2 |x|^2 */
    ck_assert_int_eq(nb_jvp_fwd(ctx, f_square_sum, NULL, 1, &x, &x, &y, &t), NB_OK);
    ck_assert_double_eq_tol(nb_item(t), 10.0, 1e-12);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_matrix_misc(void) {
    Suite *s = suite_create("matrix_misc");
    TCase *tc = tcase_create("misc");
    tcase_add_test(tc, test_linear_dropout_embedding);
    tcase_add_test(tc, test_norm_gelu);
    tcase_add_test(tc, test_attention_modules);
    tcase_add_test(tc, test_param_lists);
    tcase_add_test(tc, test_optimizers);
    tcase_add_test(tc, test_files);
    tcase_add_test(tc, test_gradcheck_args);
    tcase_add_test(tc, test_gradcheck_params_args);
    tcase_add_test(tc, test_grad_args);
    tcase_add_test(tc, test_transform_args);
    tcase_add_test(tc, test_forward_mode_args);
    suite_add_tcase(s, tc);
    return s;
}
