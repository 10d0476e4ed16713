/* check_matrix_data.c - the bad-input matrix (see check_matrix_ops.c's top
 * comment) for nabla/data.h: UTF-8 checks, the character tokenizer, the
 * vocabulary string, GPT-2's BPE tokenizer (its file errors and its calls
 * with a real vocabulary are in check_bpe.c), the 90/10 split and
 * get_batch. */
#include "check_nabla.h"

#include "matrix_util.h"

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

START_TEST(test_data_bpe) {
    nb_ctx *ctx = nb_ctx_new(0);
    expect_fail(ctx, !nb_bpe_load(ctx, NULL, "merges.txt"), NB_ERR_NULL, "bpe_load");
    expect_fail(ctx, !nb_bpe_load(ctx, "vocab.json", NULL), NB_ERR_NULL, "bpe_load");
    expect_fail(ctx, !nb_bpe_load(ctx, "/nonexistent/vocab.json", "/nonexistent/merges.txt"),
                NB_ERR_IO, "/nonexistent/vocab.json");
    ck_assert_ptr_null(nb_bpe_load(NULL, "vocab.json", "merges.txt"));
    nb_bpe_free(NULL);
    ck_assert_int_eq(nb_bpe_vocab_size(NULL), 0);
    ck_assert_int_eq(nb_bpe_token_id(NULL, "a"), -1);
    expect_fail(ctx, !nb_bpe_encode(ctx, NULL, "a", 1, false), NB_ERR_NULL, "bpe_encode");
    ck_assert_ptr_null(nb_bpe_encode(NULL, NULL, "a", 1, true));
    size_t len = 7;
    expect_fail(ctx, !nb_bpe_decode(ctx, NULL, (int64_t[]){0}, 1, &len), NB_ERR_NULL, "bpe_decode");
    ck_assert_uint_eq(len, 0);
    expect_fail(ctx, !nb_utf8_display(ctx, NULL, 3, &len), NB_ERR_NULL, "utf8_display");
    ck_assert_ptr_null(nb_utf8_display(NULL, "a", 1, NULL));
    /* a context holding an error: nothing runs, the first error stays */
    nb_ctx_fail(ctx, NB_ERR_VALUE, "earlier");
    ck_assert_ptr_null(nb_utf8_display(ctx, "a", 1, NULL));
    ck_assert_ptr_null(nb_bpe_load(ctx, "/nonexistent/vocab.json", "/nonexistent/merges.txt"));
    ck_assert_str_eq(nb_ctx_error(ctx), "earlier");
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

Suite *suite_matrix_data(void) {
    Suite *s = suite_create("matrix_data");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_data_tokenizer);
    tcase_add_test(tc, test_data_bpe);
    tcase_add_test(tc, test_data_split_batch);
    suite_add_tcase(s, tc);
    return s;
}
