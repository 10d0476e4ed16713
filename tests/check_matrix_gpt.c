/* check_matrix_gpt.c - the bad-input matrix (see tests/check_matrix_ops.c)
 * for nabla/gpt.h and the training pieces of nabla/optim.h (AdamW groups,
 * nb_lr_at, nb_train_step_run): NULL for each pointer, out-of-range
 * configs and token ids, wrong dtypes and shapes, a cache for another model,
 * NaN options. Each case asserts the status and a message naming the
 * function, or the documented result. */
#include "check_nabla.h"

#include <unistd.h>

static nb_gpt_config small(nb_gpt_arch arch) {
    nb_gpt_config c = nb_gpt_config_default(arch);
    c.vocab_size = 7, c.block_size = 4, c.n_layer = 1, c.n_head = 2, c.n_embd = 4;
    c.dropout = 0;
    return c;
}

START_TEST(test_matrix_gpt_config_and_init) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(NULL, &m, NULL, &rng), NB_ERR_NULL);
    ck_assert_int_eq(nb_gpt_init(p, NULL, NULL, &rng), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt: model is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_init(p, &m, NULL, &rng), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt: config is NULL");
    nb_gpt_config c = small(NB_GPT_NANOGPT);
    const char *msgs[] = {"vocab_size 0 must be positive", "block_size -1 must be positive",
                          "n_head 0 must be positive", "n_embd 5 is not divisible by n_head 2",
                          "dropout nan is outside [0, 1)", "dropout 1 is outside [0, 1)",
                          "dtype i64", "unknown arch 7", "config too large"};
    for (int k = 0; k < 9; k++) {
        nb_ctx_clear_error(p);
        c = small(NB_GPT_NANOGPT);
        switch (k) {
        case 0: c.vocab_size = 0; break;
        case 1: c.block_size = -1; break;
        case 2: c.n_head = 0; break;
        case 3: c.n_embd = 5; break;
        case 4: c.dropout = NAN; break;
        case 5: c.dropout = 1.0; break;
        case 6: c.dtype = NB_I64; break;
        case 7: c.arch = (nb_gpt_arch)7; break;
        default: c.n_embd = INT64_C(1) << 40; c.n_head = 1; break;
        }
        ck_assert_int_ne(nb_gpt_init(p, &m, &c, &rng), NB_OK);
        ck_assert_error_has(p, msgs[k]);
    }
    /* a sticky error on pctx: init does nothing */
    c = small(NB_GPT_GPTMODEL);
    ck_assert_int_ne(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    nb_gpt_train(NULL, false); /* no-ops */
    nb_gpt_free(NULL);
    nb_gpt_free(&m);
    ck_assert_int_eq(nb_gpt_config_default(NB_GPT_GPTMODEL).vocab_size, 50257);
    ck_assert_int_eq(nb_gpt_config_default(NB_GPT_NANOGPT).vocab_size, 50304);
    ck_assert_int_eq(nb_gpt_num_params(NULL, false), 0);
    nb_gpt_summary(NULL, stdout);
    nb_gpt_summary(&m, NULL);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_matrix_gpt_state_dict) {
    nb_ctx *p = nb_ctx_new(0), *f = nb_ctx_new(0);
    nb_gpt_config c;
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_config_from_state_dict(p, NULL, 2, &c), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_config_from_state_dict: sd is NULL");
    nb_tensor_list sd = {0};
    ck_assert_int_eq(nb_gpt_config_from_state_dict(NULL, &sd, 2, NULL), NB_ERR_NULL);
    /* embeddings of the wrong rank, dtype, or widths that disagree */
    nb_ctx_clear_error(p);
    nb_list_add(&sd, "tok_emb.weight", nb_zeros(f, NB_F32, NB_SHAPE(7, 4)));
    nb_list_add(&sd, "pos_emb.weight", nb_zeros(f, NB_F32, NB_SHAPE(4, 6)));
    ck_assert_int_eq(nb_gpt_config_from_state_dict(p, &sd, 2, &c), NB_ERR_FORMAT);
    ck_assert_error_has(p, "do not fit (V, C) and (block_size, C)");
    nb_tensor_list sd2 = {0};
    nb_list_add(&sd2, "tok_emb.weight", nb_zeros(f, NB_I64, NB_SHAPE(7, 4)));
    nb_list_add(&sd2, "pos_emb.weight", nb_zeros(f, NB_F32, NB_SHAPE(4, 4)));
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_config_from_state_dict(p, &sd2, 2, &c), NB_ERR_FORMAT);
    /* no blocks */
    nb_tensor_list sd3 = {0};
    nb_list_add(&sd3, "tok_emb.weight", nb_zeros(f, NB_F32, NB_SHAPE(7, 4)));
    nb_list_add(&sd3, "pos_emb.weight", nb_zeros(f, NB_F32, NB_SHAPE(4, 4)));
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_from_state_dict(p, &m, &sd3, 2, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "no transformer block (trf_blocks.0.norm1.scale)");
    ck_assert_int_eq(nb_gpt_from_state_dict(NULL, &m, &sd3, 2, 0.0, NB_F32, NULL), NB_ERR_NULL);
    /* a state_dict missing a tensor, or with a wrong shape */
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt_config sc = small(NB_GPT_GPTMODEL);
    nb_gpt src;
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_init(f, &src, &sc, &rng), NB_OK);
    ck_assert_int_eq(nb_gpt_init(p, &m, &sc, &rng), NB_OK);
    ck_assert_int_eq(nb_gpt_load_state_dict(NULL, &src.state_dict), NB_ERR_NULL);
    /* no context argument: the model's parameter context takes the message */
    ck_assert_int_eq(nb_gpt_load_state_dict(&m, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_load_state_dict: sd is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_load_state_dict(&m, &sd3), NB_ERR_VALUE);
    ck_assert_error_has(p, "no tensor named 'trf_blocks.0.att.W_query.weight'");
    nb_ctx_clear_error(p);
    sc.n_embd = 6;
    ck_assert_int_eq(nb_gpt_init(f, &src, &sc, &rng), NB_OK);
    ck_assert_int_eq(nb_gpt_load_state_dict(&m, &src.state_dict), NB_ERR_SHAPE);
    ck_assert_error_has(p, "'tok_emb.weight' has shape (7, 4) here but (7, 6) in the source");
    nb_ctx_free(f);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_matrix_gpt_forward) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt_config c = small(NB_GPT_NANOGPT);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    const int64_t v[4] = {0, 1, 2, 3};
    nb_tensor *ids = nb_from_data(s, NB_I64, NB_SHAPE(1, 4), v);
    ck_assert_ptr_null(nb_gpt_forward(NULL, &m, ids));
    ck_assert_ptr_null(nb_gpt_infer(NULL, &m, ids));
    ck_assert_ptr_null(nb_gpt_loss(NULL, &m, ids, ids, NULL));
    /* float ids, 1-D ids, negative ids */
    nb_tensor *fl = nb_zeros(s, NB_F32, NB_SHAPE(1, 4));
    ck_assert_ptr_null(nb_gpt_forward(s, &m, fl));
    ck_assert_error_has(s, "gpt: ids is f32 (1, 4)");
    nb_ctx_reset(s);
    ids = nb_from_data(s, NB_I64, NB_SHAPE(4), v);
    ck_assert_ptr_null(nb_gpt_infer(s, &m, ids));
    ck_assert_error_has(s, "gpt: ids is i64 (4)");
    nb_ctx_reset(s);
    ids = nb_from_data(s, NB_I64, NB_SHAPE(1, 4), ((const int64_t[]){0, -1, 2, 3}));
    ck_assert_ptr_null(nb_gpt_forward(s, &m, ids));
    ck_assert_error_has(s, "ids[1] = -1 is outside [0, vocab_size 7)");
    /* targets of another shape, or NULL */
    nb_ctx_reset(s);
    ids = nb_from_data(s, NB_I64, NB_SHAPE(1, 4), v);
    nb_tensor *t3 = nb_from_data(s, NB_I64, NB_SHAPE(1, 3), v);
    nb_tensor *lg = (nb_tensor *)1;
    ck_assert_ptr_null(nb_gpt_loss(s, &m, ids, t3, &lg));
    ck_assert_ptr_null(lg);
    ck_assert_error_has(s, "targets (1, 3) do not match ids (1, 4)");
    nb_ctx_reset(s);
    ids = nb_from_data(s, NB_I64, NB_SHAPE(1, 4), v);
    ck_assert_ptr_null(nb_gpt_loss(s, &m, ids, NULL, NULL));
    ck_assert_error_has(s, "targets is NULL");
    /* an uninitialised model */
    nb_ctx_reset(s);
    nb_gpt zero;
    memset(&zero, 0, sizeof zero);
    ids = nb_from_data(s, NB_I64, NB_SHAPE(1, 4), v);
    ck_assert_ptr_null(nb_gpt_forward(s, &zero, ids));
    ck_assert_error_has(s, "model is not initialised");
    /* NaN weights propagate, nothing crashes */
    nb_ctx_reset(s);
    nb_set(m.wte, 0, NAN);
    ids = nb_from_data(s, NB_I64, NB_SHAPE(1, 4), v);
    nb_tensor *y = nb_gpt_infer(s, &m, ids);
    ck_assert_ptr_nonnull(y);
    ck_assert(isnan(nb_get(y, 0)));
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_matrix_gpt_cache_and_generate) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt_config c = small(NB_GPT_GPTMODEL);
    nb_gpt m, other;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    c.n_layer = 2;
    ck_assert_int_eq(nb_gpt_init(p, &other, &c, &rng), NB_OK);
    ck_assert_ptr_null(nb_gpt_cache_new(s, NULL, 1));
    ck_assert_error_has(s, "gpt_cache_new: model is NULL");
    nb_ctx_reset(s);
    ck_assert_ptr_null(nb_gpt_cache_new(s, &m, -3));
    ck_assert_error_has(s, "batch -3 is outside [1, 2^20]");
    nb_ctx_reset(s);
    ck_assert_ptr_null(nb_gpt_cache_new(NULL, &m, 1)); /* a context is required */
    nb_ctx_fail(s, NB_ERR_IO, "an earlier failure");  /* and must hold no error */
    ck_assert_ptr_null(nb_gpt_cache_new(s, &m, 1));
    ck_assert_str_eq(nb_ctx_error(s), "an earlier failure");
    nb_ctx_reset(s);
    nb_gpt_cache *kv = nb_gpt_cache_new(s, &m, 1);
    ck_assert_ptr_nonnull(kv);
    const int64_t v[4] = {0, 1, 2, 3};
    nb_tensor *two = nb_from_data(s, NB_I64, NB_SHAPE(1, 2), v);
    ck_assert_ptr_null(nb_gpt_forward_cached(s, &m, NULL, two));
    ck_assert_error_has(s, "gpt_forward_cached: cache is NULL");
    nb_ctx_reset(s);
    /* a cache made for a model with another layer count */
    two = nb_from_data(s, NB_I64, NB_SHAPE(1, 2), v);
    ck_assert_ptr_null(nb_gpt_forward_cached(s, &other, kv, two));
    ck_assert_error_has(s, "the cache must be made for this model");
    ck_assert_int_eq(nb_gpt_cache_len(kv), 0);
    ck_assert_int_eq(nb_gpt_cache_len(NULL), 0);
    nb_gpt_cache_reset(NULL);
    nb_gpt_cache_free(NULL);
    nb_gpt_cache_free(kv);
    /* generate: NULLs, bad counts, bad options, prompt out of range */
    int64_t out[16], n = -1;
    nb_gpt_sample_opts o = nb_gpt_sample_defaults();
    o.max_new_tokens = 3;
    ck_assert_int_eq(nb_gpt_generate(p, &m, NULL, 1, &o, out, &n), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_generate: prompt is NULL");
    ck_assert_int_eq(n, 0);
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_generate(p, &m, v, 1, NULL, out, &n), NB_ERR_NULL);
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_generate(p, &m, v, 1, &o, NULL, &n), NB_ERR_NULL);
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_generate(p, &m, v, 0, &o, out, &n), NB_ERR_VALUE);
    nb_ctx_clear_error(p);
    o.temperature = NAN;
    ck_assert_int_eq(nb_gpt_generate(p, &m, v, 1, &o, out, &n), NB_ERR_VALUE);
    ck_assert_error_has(p, "temperature nan");
    nb_ctx_clear_error(p);
    o.temperature = 1, o.top_k = -1;
    ck_assert_int_eq(nb_gpt_generate(p, &m, v, 1, &o, out, &n), NB_ERR_VALUE);
    nb_ctx_clear_error(p);
    o.top_k = 0;
    const int64_t badp[2] = {1, 7};
    ck_assert_int_eq(nb_gpt_generate(p, &m, badp, 2, &o, out, &n), NB_ERR_VALUE);
    ck_assert_error_has(p, "prompt[1] = 7 is outside [0, 7)");
    nb_ctx_clear_error(p);
    /* zero new tokens: the prompt comes back; a huge top_k keeps everything */
    o.max_new_tokens = 0;
    ck_assert_int_eq(nb_gpt_generate(p, &m, v, 4, &o, out, &n), NB_OK);
    ck_assert_int_eq(n, 4);
    o.max_new_tokens = 9, o.top_k = 1000;
    ck_assert_int_eq(nb_gpt_generate(p, &m, v, 4, &o, out, &n), NB_OK);
    ck_assert_int_eq(n, 13);
    /* a NULL context, or one holding an error: nothing generated */
    ck_assert_int_eq(nb_gpt_generate(NULL, &m, v, 4, &o, out, &n), NB_ERR_NULL);
    ck_assert_int_eq(n, 0);
    nb_ctx_fail(p, NB_ERR_IO, "an earlier failure");
    ck_assert_int_eq(nb_gpt_generate(p, &m, v, 4, &o, out, &n), NB_ERR_IO);
    ck_assert_str_eq(nb_ctx_error(p), "an earlier failure");
    nb_ctx_clear_error(p);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

static nb_tensor *zero_loss(nb_ctx *ctx, int micro, void *user) {
    (void)micro;
    return nb_sum(ctx, nb_mul(ctx, user, nb_scalar(ctx, NB_F32, 0.0)));
}

START_TEST(test_matrix_train_pieces) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    /* AdamW groups: the constructor's checks */
    ck_assert_ptr_null(nb_adamw_new_groups(p, NULL, nb_adamw_defaults(1e-3), false));
    ck_assert_error_has(p, "adamw: params list is NULL");
    nb_ctx_clear_error(p);
    nb_tensor *w = nb_requires_grad(nb_ones(p, NB_F32, NB_SHAPE(2, 2)));
    nb_tensor_list l = {0};
    nb_list_add(&l, "w", w);
    nb_adam_opts o = nb_adamw_defaults(1e-3);
    o.beta1 = 1.0;
    ck_assert_ptr_null(nb_adamw_new_groups(p, &l, o, true));
    ck_assert_error_has(p, "beta1 = 1 is outside [0, 1)");
    nb_ctx_clear_error(p);
    nb_optim *opt = nb_adamw_new_groups(p, &l, nb_adamw_defaults(1e-3), false);
    ck_assert_ptr_nonnull(opt);
    /* the schedule: NULL, and degenerate iterations */
    ck_assert(isnan(nb_lr_at(NULL, 3)));
    nb_lr_schedule sch = {1e-3, true, 0, 0, 1e-4};
    ck_assert_double_eq(nb_lr_at(&sch, 0), 1e-4); /* lr_decay_iters == warmup_iters */
    ck_assert(isnan(nb_lr_at(&sch, -5)));
    ck_assert(isnan(nb_lr_at_fraction(NULL, 3, 0.5)) && isnan(nb_lr_at_fraction(&sch, -1, 0.5)));
    ck_assert(isnan(nb_lr_at_fraction(&sch, 3, NAN)));
    ck_assert_double_eq(nb_lr_at_fraction(&sch, 3, INFINITY), 1e-4);
    ck_assert_double_eq(nb_lr_at_fraction(&sch, 3, -INFINITY), 1e-3);
    /* the step: NULLs, bad counts, bad lr */
    nb_train_step st = {opt, &l, 1, 0, 1e-3, zero_loss, w, NULL, NULL};
    ck_assert_int_eq(nb_train_step_run(NULL, &st, NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_train_step_run(s, NULL, NULL), NB_ERR_NULL);
    ck_assert_error_has(s, "train_step: step is NULL");
    nb_ctx_clear_error(s);
    nb_train_step bad = st;
    bad.opt = NULL;
    ck_assert_int_eq(nb_train_step_run(s, &bad, NULL), NB_ERR_NULL);
    ck_assert_error_has(s, "train_step: opt is NULL");
    nb_ctx_clear_error(s);
    bad = st, bad.accum_steps = -1;
    ck_assert_int_eq(nb_train_step_run(s, &bad, NULL), NB_ERR_VALUE);
    nb_ctx_clear_error(s);
    bad = st, bad.lr = NAN;
    nb_step_result r = {1, 1};
    ck_assert_int_eq(nb_train_step_run(s, &bad, &r), NB_ERR_VALUE);
    ck_assert_error_has(s, "train_step: lr nan must be >= 0");
    ck_assert(isnan(r.loss));
    nb_ctx_clear_error(s);
    ck_assert_int_eq(nb_train_step_run(s, &st, &r), NB_OK);
    ck_assert_double_eq(r.loss, 0.0);
    ck_assert_double_eq(r.grad_norm, 0.0);
    /* zero gradient: only the decay of the 2-D weight moves it */
    ck_assert_double_eq(nb_get(w, 0), (float)(1.0f * (float)(1.0 - 1e-3 * 0.01)));
    nb_optim_free(opt);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* The Hugging Face loader (src/nn/gpt_hf.c): NULLs, a sticky error, a
 * negative n_head, config.json's bad fields, an unknown gelu. */
START_TEST(test_matrix_gpt_hf) {
    nb_ctx *p = nb_ctx_new(0), *f = nb_ctx_new(0);
    nb_gpt m;
    nb_gpt_config c;
    nb_gpt_hf_config hc;
    nb_tensor_list sd = {0};
    nb_list_add(&sd, "wte.weight", nb_zeros(f, NB_F32, NB_SHAPE(7, 4)));
    nb_list_add(&sd, "wpe.weight", nb_zeros(f, NB_F32, NB_SHAPE(4, 4)));
    /* NULL context: NB_ERR_NULL, nothing recorded */
    ck_assert_int_eq(nb_gpt_hf_config_read(NULL, "x", &hc), NB_ERR_NULL);
    ck_assert_int_eq(nb_gpt_config_from_hf(NULL, &sd, 2, &c), NB_ERR_NULL);
    ck_assert_int_eq(nb_gpt_from_hf(NULL, &m, &sd, 2, 0.0, NB_F32, NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_gpt_load_hf(NULL, &m, "x", 2, 0.0, NB_F32, NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_gpt_save_hf(NULL, &m, "x"), NB_ERR_NULL);
    /* NULL arguments */
    ck_assert_int_eq(nb_gpt_hf_config_read(p, NULL, &hc), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_hf_config_read: path is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_hf_config_read(p, "x", NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_hf_config_read: out is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_config_from_hf(p, NULL, 2, &c), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_from_hf: sd is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_config_from_hf(p, &sd, 2, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_from_hf: out is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_from_hf(p, NULL, &sd, 2, 0.0, NB_F32, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_from_hf: model is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_from_hf(p, &m, NULL, 2, 0.0, NB_F32, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_from_hf: sd is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_load_hf(p, NULL, "x", 2, 0.0, NB_F32, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_from_hf: model is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, NULL, 2, 0.0, NB_F32, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_from_hf: path is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_save_hf(p, NULL, "x"), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_save_hf: model is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_save_hf(p, &m, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_save_hf: path is NULL");
    nb_ctx_clear_error(p);
    memset(&m, 0, sizeof m); /* a model never built */
    ck_assert_int_eq(nb_gpt_save_hf(p, &m, "x"), NB_ERR_VALUE);
    ck_assert_error_has(p, "gpt_save_hf: the model is not built");
    nb_ctx_clear_error(p);
    /* negative n_head; no block; a 1-D wte */
    ck_assert_int_eq(nb_gpt_config_from_hf(p, &sd, -1, &c), NB_ERR_VALUE);
    ck_assert_error_has(p, "n_head -1 is negative");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, "x", -2, 0.0, NB_F32, NULL), NB_ERR_VALUE);
    ck_assert_error_has(p, "n_head -2 is negative");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_config_from_hf(p, &sd, 2, &c), NB_ERR_FORMAT);
    ck_assert_error_has(p, "no transformer block: h.0.ln_1.weight is missing");
    nb_ctx_clear_error(p);
    nb_tensor_list sd1 = {0};
    nb_list_add(&sd1, "transformer.wte.weight", nb_zeros(f, NB_F32, NB_SHAPE(7)));
    ck_assert_int_eq(nb_gpt_config_from_hf(p, &sd1, 2, &c), NB_ERR_FORMAT);
    ck_assert_error_has(p, "transformer.wte.weight is (7); expected (vocab_size, n_embd)");
    nb_ctx_clear_error(p);
    nb_list_add(&sd, "h.0.ln_1.weight", nb_zeros(f, NB_F32, NB_SHAPE(4)));
    ck_assert_int_eq(nb_gpt_config_from_hf(p, &sd, 2, &c), NB_OK);
    /* the dropout needs an rng, as in nb_gpt_init; the rest is missing */
    ck_assert_int_eq(nb_gpt_from_hf(p, &m, &sd, 2, 0.1, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "gpt_from_hf: h.0.ln_1.bias is missing");
    /* a sticky error: nothing done */
    ck_assert_int_eq(nb_gpt_config_from_hf(p, &sd, 2, &c), NB_ERR_FORMAT);
    ck_assert_int_eq(nb_gpt_hf_config_read(p, "x", &hc), NB_ERR_FORMAT);
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, "x", 2, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_int_eq(nb_gpt_save_hf(p, &m, "x"), NB_ERR_FORMAT);
    nb_ctx_clear_error(p);
    /* config.json: unreadable, wrong types */
    ck_assert_int_eq(nb_gpt_hf_config_read(p, "/nonexistent/config.json", &hc), NB_ERR_IO);
    ck_assert_error_has(p, "gpt_hf_config_read: /nonexistent/config.json");
    nb_ctx_clear_error(p);
    char path[] = "/tmp/nb-hf-config-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *bad[] = {"{\"n_head\": 2.5}", "{\"n_layer\": \"12\"}", "{\"n_embd\": -768}",
                         "{\"activation_function\": 3}", "{\"layer_norm_epsilon\": 0}",
                         "not json", "{\"activation_function\": \"swish\"}"};
    const char *msg[] = {"\"n_head\" is not a positive integer", "\"n_layer\" is not",
                         "\"n_embd\" is not", "\"activation_function\" is not a string",
                         "\"layer_norm_epsilon\" is not a positive number", "not a JSON object",
                         "activation_function \"swish\" is not supported"};
    for (int k = 0; k < 7; k++) {
        FILE *fp = fopen(path, "w");
        ck_assert_ptr_nonnull(fp);
        fputs(bad[k], fp);
        fclose(fp);
        ck_assert_int_eq(nb_gpt_hf_config_read(p, path, &hc), k == 6 ? NB_ERR_VALUE
                                                                    : NB_ERR_FORMAT);
        ck_assert_error_has(p, msg[k]);
        nb_ctx_clear_error(p);
    }
    /* n_ctx stands for n_positions; null fields are absent; "gelu" is exact */
    FILE *fp = fopen(path, "w");
    fputs("{\"n_ctx\": 64, \"n_head\": null, \"activation_function\": \"gelu\"}", fp);
    fclose(fp);
    ck_assert_int_eq(nb_gpt_hf_config_read(p, path, &hc), NB_OK);
    ck_assert_int_eq(hc.n_positions, 64);
    ck_assert_int_eq(hc.n_head, 0);
    ck_assert_int_eq(hc.gelu, NB_GELU_NONE);
    unlink(path);
    close(fd);
    /* a gelu that is neither: refused by init */
    c = small(NB_GPT_NANOGPT);
    c.gelu = (nb_gelu_approx)5;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, NULL), NB_ERR_VALUE);
    ck_assert_error_has(p, "gpt: unknown gelu 5");
    ck_assert_int_eq(nb_gpt_hf_n_head(0), 0);
    ck_assert(!nb_gpt_state_dict_is_hf(NULL));
    ck_assert(!nb_gpt_state_dict_is_hf(&sd1)); /* a 1-D transformer.wte.weight, no block */
    ck_assert(nb_gpt_state_dict_is_hf(&sd));
    ck_assert_int_eq(nb_gpt_hf_n_head(-768), 0);
    nb_ctx_free(p);
    nb_ctx_free(f);
}
END_TEST

Suite *suite_matrix_gpt(void) {
    Suite *s = suite_create("matrix_gpt");
    TCase *tc = tcase_create("gpt");
    tcase_add_test(tc, test_matrix_gpt_config_and_init);
    tcase_add_test(tc, test_matrix_gpt_state_dict);
    tcase_add_test(tc, test_matrix_gpt_hf);
    tcase_add_test(tc, test_matrix_gpt_forward);
    tcase_add_test(tc, test_matrix_gpt_cache_and_generate);
    tcase_add_test(tc, test_matrix_train_pieces);
    suite_add_tcase(s, tc);
    return s;
}
