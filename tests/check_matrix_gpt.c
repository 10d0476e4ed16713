/* check_matrix_gpt.c - the bad-input matrix (see check_matrix_ops.c's top
 * comment) for nabla/gpt.h, nabla/data.h and the GPT training pieces of
 * nabla/optim.h (parameter groups, the schedule, the training step). */
#include "check_nabla.h"

#include <math.h>

#include "matrix_util.h"

/* A tiny nanoGPT-layout model in f64: V 7, block 4, 1 layer, 2 heads, C 4. */
static nb_status tiny(nb_gpt *m, nb_ctx *p, nb_pcg32 *rng) {
    nb_gpt_config c = nb_gpt_config_default(NB_GPT_NANOGPT);
    c.vocab_size = 7, c.block_size = 4, c.n_layer = 1, c.n_head = 2, c.n_embd = 4;
    c.dtype = NB_F64;
    return nb_gpt_init(m, p, &c, rng);
}

START_TEST(test_gpt_config_and_init) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt m;
    nb_gpt_config c = nb_gpt_config_default(NB_GPT_GPTMODEL);
    ck_assert_int_eq(c.vocab_size, 50257); /* the documented defaults */
    ck_assert_int_eq(nb_gpt_config_default(NB_GPT_NANOGPT).vocab_size, 50304);
    c.vocab_size = 7, c.block_size = 4, c.n_layer = 1, c.n_head = 3, c.n_embd = 4;
    expect_fail(p, nb_gpt_init(&m, p, &c, &rng) != NB_OK, NB_ERR_VALUE, "not divisible");
    nb_gpt_free(&m);
    c.n_head = 2, c.n_layer = 0;
    expect_any(p, nb_gpt_init(&m, p, &c, &rng) != NB_OK, "gpt");
    nb_gpt_free(&m);
    c.n_layer = 1, c.vocab_size = -1;
    expect_any(p, nb_gpt_init(&m, p, &c, &rng) != NB_OK, "gpt");
    nb_gpt_free(&m);
    c.vocab_size = INT64_MAX, c.n_embd = INT64_MAX / 2 + 1; /* V*C overflows */
    c.n_head = 1;
    expect_any(p, nb_gpt_init(&m, p, &c, &rng) != NB_OK, "gpt");
    nb_gpt_free(&m);
    c = nb_gpt_config_default(NB_GPT_GPTMODEL);
    c.vocab_size = 7, c.block_size = 4, c.n_layer = 1, c.n_head = 2, c.n_embd = 4;
    c.dropout = 1.5;
    expect_any(p, nb_gpt_init(&m, p, &c, &rng) != NB_OK, "gpt");
    nb_gpt_free(&m);
    c.dropout = 0, c.dtype = NB_I64;
    expect_any(p, nb_gpt_init(&m, p, &c, &rng) != NB_OK, "gpt");
    nb_gpt_free(&m);
    ck_assert_int_ne(nb_gpt_init(NULL, p, &c, &rng), NB_OK);
    ck_assert_int_ne(nb_gpt_init(&m, NULL, &c, &rng), NB_OK);
    ck_assert_int_ne(nb_gpt_init(&m, p, NULL, &rng), NB_OK);
    nb_ctx_clear_error(p);
    nb_gpt_free(NULL);
    nb_gpt_train(NULL, true);
    ck_assert_int_eq(nb_gpt_num_params(NULL, false), 0);
    nb_gpt_summary(NULL, stdout); /* no crash */
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_gpt_state_dict) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt m, m2;
    ck_assert_int_eq(tiny(&m, p, &rng), NB_OK);
    nb_gpt_config c;
    nb_tensor_list empty = {0};
    expect_any(p, nb_gpt_config_from_state_dict(&empty, 2, &c, p) != NB_OK, "");
    ck_assert_int_ne(nb_gpt_config_from_state_dict(NULL, 2, &c, NULL), NB_OK);
    ck_assert_int_ne(nb_gpt_config_from_state_dict(&m.state_dict, 2, NULL, NULL), NB_OK);
    ck_assert_int_ne(nb_gpt_config_from_state_dict(&m.state_dict, 0, &c, NULL), NB_OK);
    ck_assert_int_eq(nb_gpt_config_from_state_dict(&m.state_dict, 2, &c, p), NB_OK);
    ck_assert_int_eq(c.vocab_size, 7);
    ck_assert_int_eq(c.n_embd, 4);
    /* n_head that does not divide n_embd */
    expect_any(p, nb_gpt_from_state_dict(&m2, p, &m.state_dict, 3, 0, NB_F64, NULL) != NB_OK, "");
    nb_gpt_free(&m2);
    expect_any(p, nb_gpt_from_state_dict(&m2, p, &empty, 2, 0, NB_F64, NULL) != NB_OK, "");
    nb_gpt_free(&m2);
    ck_assert_int_ne(nb_gpt_from_state_dict(&m2, p, NULL, 2, 0, NB_F64, NULL), NB_OK);
    nb_ctx_clear_error(p);
    nb_gpt_free(&m2);
    /* a state_dict whose token embedding has the wrong shape */
    nb_tensor_list bad = {0};
    nb_list_add(&bad, "transformer.wte.weight", nb_zeros(p, NB_F64, NB_SHAPE(7, 5)));
    expect_any(p, nb_gpt_load_state_dict(&m, &bad) != NB_OK, "");
    ck_assert_int_ne(nb_gpt_load_state_dict(NULL, &m.state_dict), NB_OK);
    ck_assert_int_ne(nb_gpt_load_state_dict(&m, NULL), NB_OK);
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_load_state_dict(&m, &m.state_dict), NB_OK);
    nb_gpt_free(&m);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_gpt_forward_loss) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt m;
    ck_assert_int_eq(tiny(&m, p, &rng), NB_OK);
    nb_tensor *ids = nb_from_data(ctx, NB_I64, NB_SHAPE(1, 3), (int64_t[]){1, 2, 3});
    nb_tensor *far = nb_from_data(ctx, NB_I64, NB_SHAPE(1, 3), (int64_t[]){1, 7, 3});
    nb_tensor *neg = nb_from_data(ctx, NB_I64, NB_SHAPE(1, 3), (int64_t[]){1, -1, 3});
    nb_tensor *longer = nb_zeros(ctx, NB_I64, NB_SHAPE(1, 5)); /* T 5 > block 4 */
    nb_tensor *flt = nb_zeros(ctx, NB_F64, NB_SHAPE(1, 3));
    expect_any(ctx, !nb_gpt_forward(ctx, &m, NULL), "gpt");
    expect_any(ctx, !nb_gpt_forward(ctx, &m, far), "gpt");
    expect_any(ctx, !nb_gpt_forward(ctx, &m, neg), "gpt");
    expect_any(ctx, !nb_gpt_forward(ctx, &m, longer), "gpt");
    expect_any(ctx, !nb_gpt_forward(ctx, &m, flt), "gpt");
    ck_assert_ptr_null(nb_gpt_forward(NULL, &m, ids));
    expect_any(ctx, !nb_gpt_forward(ctx, NULL, ids), "gpt");
    nb_tensor *logits = nb_gpt_forward(ctx, &m, ids);
    ck_assert_ptr_nonnull(logits);
    ck_assert_int_eq(logits->shape[2], 7);
    expect_any(ctx, !nb_gpt_loss(ctx, &m, ids, NULL, NULL), "");
    expect_any(ctx, !nb_gpt_loss(ctx, &m, ids, far, NULL), "");
    expect_any(ctx, !nb_gpt_loss(ctx, &m, ids, longer, NULL), "");
    nb_tensor *lg = NULL;
    nb_tensor *loss = nb_gpt_loss(ctx, &m, ids, ids, &lg);
    ck_assert_ptr_nonnull(loss);
    ck_assert_ptr_nonnull(lg);
    ck_assert(isfinite(nb_item(loss)));
    expect_any(ctx, !nb_gpt_infer(ctx, &m, far), "gpt");
    expect_any(ctx, !nb_gpt_infer(ctx, NULL, ids), "gpt");
    /* NaN in the weights: the forward runs and gives NaN, no crash */
    nb_set(m.wte, 0, NAN);
    nb_tensor *nan_logits = nb_gpt_infer(ctx, &m, nb_zeros(ctx, NB_I64, NB_SHAPE(1, 1)));
    ck_assert_ptr_nonnull(nan_logits);
    ck_assert(isnan(nb_get(nan_logits, 0)));
    nb_gpt_free(&m);
    nb_ctx_free(ctx), nb_ctx_free(p);
}
END_TEST

START_TEST(test_gpt_cache_generate) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt m;
    ck_assert_int_eq(tiny(&m, p, &rng), NB_OK);
    ck_assert_ptr_null(nb_gpt_cache_new(&m, 0, p));
    nb_ctx_clear_error(p);
    ck_assert_ptr_null(nb_gpt_cache_new(NULL, 1, p));
    nb_ctx_clear_error(p);
    ck_assert_ptr_null(nb_gpt_cache_new(&m, INT64_MAX, p)); /* too big */
    nb_ctx_clear_error(p);
    nb_gpt_cache_free(NULL);
    nb_gpt_cache_reset(NULL);
    ck_assert_int_le(nb_gpt_cache_len(NULL), 0);
    nb_gpt_cache *c = nb_gpt_cache_new(&m, 1, p);
    ck_assert_ptr_nonnull(c);
    nb_tensor *three = nb_from_data(ctx, NB_I64, NB_SHAPE(1, 3), (int64_t[]){1, 2, 3});
    ck_assert_ptr_nonnull(nb_gpt_forward_cached(ctx, &m, c, three));
    ck_assert_int_eq(nb_gpt_cache_len(c), 3);
    /* 3 + 3 > block_size 4: refused, naming the op and the shapes */
    expect_any(ctx, !nb_gpt_forward_cached(ctx, &m, c, three), "gpt: ids is i64 (1, 3)");
    expect_any(ctx, !nb_gpt_forward_cached(ctx, &m, NULL, three), "");
    expect_any(ctx, !nb_gpt_forward_cached(ctx, &m, c, NULL), "");
    nb_tensor *two_rows = nb_zeros(ctx, NB_I64, NB_SHAPE(2, 1)); /* cache made for 1 */
    nb_gpt_cache_reset(c);
    expect_any(ctx, !nb_gpt_forward_cached(ctx, &m, c, two_rows), "");
    nb_gpt_cache_free(c);

    nb_gpt_sample_opts o = nb_gpt_sample_defaults();
    ck_assert_int_eq(o.max_new_tokens, 100);
    o.max_new_tokens = 5;
    int64_t prompt[2] = {1, 2}, out[16], n_out = -1;
    ck_assert_int_ne(nb_gpt_generate(&m, prompt, 0, &o, out, &n_out, ctx), NB_OK);
    nb_ctx_clear_error(ctx);
    ck_assert_int_ne(nb_gpt_generate(&m, NULL, 2, &o, out, &n_out, ctx), NB_OK);
    nb_ctx_clear_error(ctx);
    ck_assert_int_ne(nb_gpt_generate(&m, prompt, 2, &o, NULL, &n_out, ctx), NB_OK);
    nb_ctx_clear_error(ctx);
    ck_assert_int_ne(nb_gpt_generate(NULL, prompt, 2, &o, out, &n_out, NULL), NB_OK);
    int64_t bad_prompt[2] = {1, 99};
    ck_assert_int_ne(nb_gpt_generate(&m, bad_prompt, 2, &o, out, &n_out, ctx), NB_OK);
    nb_ctx_clear_error(ctx);
    o.temperature = -1;
    ck_assert_int_ne(nb_gpt_generate(&m, prompt, 2, &o, out, &n_out, ctx), NB_OK);
    nb_ctx_clear_error(ctx);
    o.temperature = NAN;
    ck_assert_int_ne(nb_gpt_generate(&m, prompt, 2, &o, out, &n_out, ctx), NB_OK);
    nb_ctx_clear_error(ctx);
    o.temperature = 1, o.top_k = -3;
    ck_assert_int_ne(nb_gpt_generate(&m, prompt, 2, &o, out, &n_out, ctx), NB_OK);
    nb_ctx_clear_error(ctx);
    o.top_k = 100; /* more than V: all kept, as nanoGPT's min(top_k, V) */
    ck_assert_int_eq(nb_gpt_generate(&m, prompt, 2, &o, out, &n_out, ctx), NB_OK);
    ck_assert_int_eq(n_out, 7);
    for (int i = 0; i < n_out; i++) ck_assert(out[i] >= 0 && out[i] < 7);
    nb_gpt_free(&m);
    nb_ctx_free(ctx), nb_ctx_free(p);
}
END_TEST

START_TEST(test_data_tokenizer) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_char_vocab v;
    ck_assert_int_ne(nb_utf8_check(NULL, "x", "a", 1), NB_OK);
    expect_fail(ctx, nb_utf8_check(ctx, "myop", NULL, 3) != NB_OK, NB_ERR_NULL, "myop");
    expect_fail(ctx, nb_utf8_check(ctx, "myop", "\xC0\xAF", 2) != NB_OK, NB_ERR_VALUE, "myop");
    expect_fail(ctx, nb_utf8_check(ctx, "myop", "\xED\xA0\x80", 3) != NB_OK, NB_ERR_VALUE, "myop");
    expect_fail(ctx, nb_utf8_check(ctx, "myop", "ab\xE2\x82", 4) != NB_OK, NB_ERR_VALUE, "myop");
    ck_assert_int_eq(nb_utf8_check(ctx, "myop", "", 0), NB_OK);
    expect_any(ctx, nb_char_vocab_build(ctx, "", 0, &v) != NB_OK, "");
    ck_assert_int_eq(v.size, 0);
    expect_any(ctx, nb_char_vocab_build(ctx, NULL, 4, &v) != NB_OK, "");
    expect_any(ctx, nb_char_vocab_build(ctx, "ab", 2, NULL) != NB_OK, "");
    expect_any(ctx, nb_char_vocab_build(ctx, "a\xFF", 2, &v) != NB_OK, "");
    ck_assert_int_eq(nb_char_vocab_build(ctx, "héllo", strlen("héllo"), &v), NB_OK);
    ck_assert_int_eq(v.size, 4);
    expect_any(ctx, !nb_char_encode(ctx, &v, "hz", 2), "");    /* z not in the vocabulary */
    expect_any(ctx, !nb_char_encode(ctx, &v, "h\xFF", 2), ""); /* invalid UTF-8 */
    expect_any(ctx, !nb_char_encode(ctx, NULL, "h", 1), "");
    expect_any(ctx, !nb_char_decode(ctx, &v, (int64_t[]){0, 4}, 2, NULL), "");
    expect_any(ctx, !nb_char_decode(ctx, &v, (int64_t[]){-1}, 1, NULL), "");
    expect_any(ctx, !nb_char_decode(ctx, NULL, (int64_t[]){0}, 1, NULL), "");
    size_t len = 99;
    const char *empty = nb_char_decode(ctx, &v, NULL, 0, &len);
    ck_assert_ptr_nonnull(empty);
    ck_assert_int_eq(len, 0);
    expect_any(ctx, !nb_char_vocab_to_string(ctx, NULL), "");
    const char *bad[] = {"", "10 x", "10 10", "20 10", "1114112", "55296", "-3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        nb_char_vocab w;
        ck_assert_msg(nb_char_vocab_from_string(ctx, bad[i], &w) != NB_OK, "accepted '%s'", bad[i]);
        ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_FORMAT);
        nb_ctx_clear_error(ctx);
    }
    expect_any(ctx, nb_char_vocab_from_string(ctx, NULL, &v) != NB_OK, "");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_data_split_batch) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_token_split s = nb_token_split_90_10(ctx, NULL);
    ck_assert(!s.train && !s.val && nb_ctx_status(ctx) == NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    s = nb_token_split_90_10(ctx, nb_zeros(ctx, NB_F32, NB_SHAPE(10)));
    ck_assert(!s.train && !s.val && nb_ctx_status(ctx) == NB_ERR_DTYPE);
    nb_ctx_clear_error(ctx);
    s = nb_token_split_90_10(ctx, nb_zeros(ctx, NB_I64, NB_SHAPE(1))); /* documented: train NULL */
    ck_assert(!s.train && s.val && nb_ctx_status(ctx) == NB_OK);
    nb_tensor *data = nb_zeros(ctx, NB_I64, NB_SHAPE(10)), *x, *y;
    expect_fail(ctx, nb_get_batch(ctx, data, 2, 10, &rng, &x, &y) != NB_OK, NB_ERR_VALUE, "");
    ck_assert(!x && !y);
    expect_fail(ctx, nb_get_batch(ctx, data, 0, 3, &rng, &x, &y) != NB_OK, NB_ERR_VALUE, "");
    expect_fail(ctx, nb_get_batch(ctx, data, 2, -1, &rng, &x, &y) != NB_OK, NB_ERR_VALUE, "");
    expect_fail(ctx, nb_get_batch(ctx, data, 2, 3, NULL, &x, &y) != NB_OK, NB_ERR_NULL, "");
    expect_fail(ctx, nb_get_batch(ctx, NULL, 2, 3, &rng, &x, &y) != NB_OK, NB_ERR_NULL, "");
    expect_fail(ctx, nb_get_batch(ctx, data, 2, 3, &rng, NULL, &y) != NB_OK, NB_ERR_NULL, "");
    expect_fail(ctx, nb_get_batch(ctx, nb_zeros(ctx, NB_F64, NB_SHAPE(10)), 2, 3, &rng, &x, &y) != NB_OK,
                NB_ERR_DTYPE, "");
    expect_any(ctx, nb_get_batch(ctx, data, INT64_MAX, 3, &rng, &x, &y) != NB_OK, "");
    ck_assert_int_eq(nb_get_batch(ctx, data, 2, 9, &rng, &x, &y), NB_OK);
    nb_ctx_free(ctx);
}
END_TEST

static nb_tensor *loss_of(nb_ctx *ctx, int micro, void *user) {
    (void)micro;
    nb_tensor *w = user;
    return nb_sum(ctx, nb_mul(ctx, w, w));
}

static nb_tensor *failing_loss(nb_ctx *ctx, int micro, void *user) {
    (void)micro, (void)user;
    nb_ctx_fail(ctx, NB_ERR_VALUE, "my_loss: bad batch");
    return NULL;
}

START_TEST(test_train_pieces) {
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_tensor *w = nb_requires_grad(nb_ones(p, NB_F64, NB_SHAPE(2, 2)));
    nb_tensor_list l = {0};
    nb_list_add(&l, "w", w);
    nb_adam_opts o = nb_adamw_defaults(0.1);
    ck_assert_ptr_null(nb_adamw_new_groups(NULL, o, false, p));
    nb_ctx_clear_error(p);
    o.lr = -1;
    ck_assert_ptr_null(nb_adamw_new_groups(&l, o, false, p));
    nb_ctx_clear_error(p);
    o.lr = 0.1, o.beta1 = 1.5;
    ck_assert_ptr_null(nb_adamw_new_groups(&l, o, false, p));
    nb_ctx_clear_error(p);
    o.beta1 = 0.9;
    nb_optim *opt = nb_adamw_new_groups(&l, o, false, p);
    ck_assert_ptr_nonnull(opt);

    nb_lr_schedule s = {1.0, true, 10, 100, 0.1};
    ck_assert(isnan(nb_lr_at(NULL, 3)));
    ck_assert_double_eq_tol(nb_lr_at(&s, 0), 1.0 / 11, 1e-15); /* warmup: lr (it+1)/(w+1) */
    ck_assert_double_eq(nb_lr_at(&s, 1000), 0.1);             /* past the decay: min_lr */
    ck_assert(isfinite(nb_lr_at(&s, -5)));                    /* a negative iteration: no NaN */
    s.lr_decay_iters = s.warmup_iters = 10;
    ck_assert_double_eq(nb_lr_at(&s, 10), 0.1);

    nb_train_step st = {.opt = opt, .params = &l, .accum_steps = 1, .lr = 0.1,
                        .loss_fn = loss_of, .user = w};
    ck_assert_int_ne(nb_train_step_run(NULL, &st, NULL), NB_OK);
    expect_any(ctx, nb_train_step_run(ctx, NULL, NULL) != NB_OK, "");
    st.accum_steps = 0;
    expect_any(ctx, nb_train_step_run(ctx, &st, NULL) != NB_OK, "");
    st.accum_steps = 1, st.loss_fn = NULL;
    expect_any(ctx, nb_train_step_run(ctx, &st, NULL) != NB_OK, "");
    st.loss_fn = failing_loss;
    double before = nb_get(w, 0);
    expect_fail(ctx, nb_train_step_run(ctx, &st, NULL) != NB_OK, NB_ERR_VALUE, "my_loss");
    ck_assert_double_eq(nb_get(w, 0), before); /* no update after a failed loss */
    st.loss_fn = loss_of, st.lr = NAN;
    expect_any(ctx, nb_train_step_run(ctx, &st, NULL) != NB_OK, "");
    st.lr = 0.1;
    nb_step_result r;
    ck_assert_int_eq(nb_train_step_run(ctx, &st, &r), NB_OK);
    ck_assert_double_eq_tol(r.loss, 4.0, 1e-12);
    nb_optim_free(opt);
    nb_ctx_free(ctx), nb_ctx_free(p);
}
END_TEST

Suite *suite_matrix_gpt(void) {
    Suite *s = suite_create("matrix_gpt");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_gpt_config_and_init);
    tcase_add_test(tc, test_gpt_state_dict);
    tcase_add_test(tc, test_gpt_forward_loss);
    tcase_add_test(tc, test_gpt_cache_generate);
    tcase_add_test(tc, test_data_tokenizer);
    tcase_add_test(tc, test_data_split_batch);
    tcase_add_test(tc, test_train_pieces);
    suite_add_tcase(s, tc);
    return s;
}
