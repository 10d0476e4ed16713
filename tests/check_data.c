/* check_data.c - the character tokenizer (vocabulary, UTF-8 round trip, the
 * metadata string), the 90/10 split and nanoGPT's get_batch formula. */
#include "check_nabla.h"

/* "héllo, 世界 🙂\n": 1-, 2-, 3- and 4-byte characters. */
static const char MIXED[] = "h\xc3\xa9llo, \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82\n";

START_TEST(test_vocab_is_sorted_code_points) {
    nb_ctx *c = nb_ctx_new(0);
    nb_char_vocab v;
    ck_assert_int_eq(nb_char_vocab_build(c, MIXED, strlen(MIXED), &v), NB_OK);
    const uint32_t want[] = {'\n', ' ', ',', 'h', 'l', 'o', 0xe9, 0x4e16, 0x754c, 0x1f642};
    ck_assert_int_eq(v.size, 10);
    for (int i = 0; i < 10; i++) ck_assert_uint_eq(v.chars[i], want[i]);
    nb_ctx_free(c);
}
END_TEST

START_TEST(test_encode_decode_round_trip_multibyte) {
    nb_ctx *c = nb_ctx_new(0);
    nb_char_vocab v;
    nb_char_vocab_build(c, MIXED, strlen(MIXED), &v);
    nb_tensor *ids = nb_char_encode(c, &v, MIXED, strlen(MIXED));
    ck_assert_ptr_nonnull(ids);
    /* h é l l o , ' ' 世 界 ' ' 🙂 \n */
    const int64_t want[] = {3, 6, 4, 4, 5, 2, 1, 7, 8, 1, 9, 0};
    ck_assert_int_eq(ids->shape[0], 12);
    for (int i = 0; i < 12; i++) ck_assert_int_eq(((int64_t *)ids->data)[i], want[i]);
    size_t len;
    char *back = nb_char_decode(c, &v, ids->data, 12, &len);
    ck_assert_uint_eq(len, strlen(MIXED));
    ck_assert_str_eq(back, MIXED);
    /* a text with U+0000 inside also round-trips, byte for byte */
    const char nul[] = "a\0b\xc3\xa9";
    nb_char_vocab v0;
    nb_char_vocab_build(c, nul, 5, &v0);
    ck_assert_int_eq(v0.size, 4);
    ck_assert_uint_eq(v0.chars[0], 0);
    nb_tensor *ids0 = nb_char_encode(c, &v0, nul, 5);
    char *back0 = nb_char_decode(c, &v0, ids0->data, 4, &len);
    ck_assert_uint_eq(len, 5);
    ck_assert_mem_eq(back0, nul, 5);
    ck_assert_ptr_null(nb_ctx_error(c));
    nb_ctx_free(c);
}
END_TEST

START_TEST(test_vocab_string_round_trip) {
    nb_ctx *c = nb_ctx_new(0);
    nb_char_vocab v, w;
    nb_char_vocab_build(c, MIXED, strlen(MIXED), &v);
    char *s = nb_char_vocab_to_string(c, &v);
    ck_assert_str_eq(s, "10 32 44 104 108 111 233 19990 30028 128578");
    ck_assert_int_eq(nb_char_vocab_from_string(c, s, &w), NB_OK);
    ck_assert_int_eq(w.size, v.size);
    ck_assert_mem_eq(w.chars, v.chars, sizeof(uint32_t) * (size_t)v.size);
    const char *bad[] = {"", "10 10", "32 10", "10  32", "10 32 ", "x", "-1", "55296",
                         "1114112", "10,32"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        nb_ctx_reset(c);
        ck_assert_msg(nb_char_vocab_from_string(c, bad[i], &w) == NB_ERR_FORMAT, "'%s'", bad[i]);
        ck_assert_error_has(c, "char_vocab_from_string: entry");
        ck_assert_int_eq(w.size, 0);
    }
    nb_ctx_free(c);
}
END_TEST

START_TEST(test_text_errors) {
    nb_ctx *c = nb_ctx_new(0);
    nb_char_vocab v;
    ck_assert_int_eq(nb_char_vocab_build(c, "", 0, &v), NB_ERR_VALUE);
    ck_assert_error_has(c, "char_vocab_build: the text is empty");
    ck_assert_int_eq(v.size, 0);
    /* a lone continuation byte, a truncated 3-byte sequence, an overlong
     * '/', a surrogate, a code point past U+10FFFF */
    const char *bad[] = {"ab\x80", "ab\xe4\xb8", "ab\xc0\xaf", "ab\xed\xa0\x80",
                         "ab\xf4\x90\x80\x80"};
    for (int i = 0; i < 5; i++) {
        nb_ctx_reset(c);
        ck_assert_int_eq(nb_char_vocab_build(c, bad[i], strlen(bad[i]), &v), NB_ERR_VALUE);
        ck_assert_error_has(c, "not valid UTF-8: byte offset 2");
    }
    nb_ctx_reset(c);
    nb_char_vocab_build(c, "abc", 3, &v);
    ck_assert_ptr_null(nb_char_encode(c, &v, "abd", 3));
    ck_assert_error_has(c, "char_encode: character U+0064 ('d') at byte offset 2 is not in the vocabulary of 3");
    nb_ctx_reset(c);
    nb_char_vocab_build(c, "abc", 3, &v);
    ck_assert_ptr_null(nb_char_decode(c, &v, (const int64_t[]){0, 3}, 2, NULL));
    ck_assert_error_has(c, "char_decode: id 3 at position 1 is outside 0..2");
    nb_ctx_free(c);
}
END_TEST

START_TEST(test_split_90_10) {
    nb_ctx *c = nb_ctx_new(0);
    int64_t d[25];
    for (int i = 0; i < 25; i++) d[i] = i;
    nb_tensor *ids = nb_from_data(c, NB_I64, NB_SHAPE(25), d);
    nb_token_split s = nb_token_split_90_10(c, ids);
    ck_assert_int_eq(s.train->shape[0], 22); /* int(25 * 0.9) */
    ck_assert_int_eq(s.val->shape[0], 3);
    ck_assert_int_eq(((int64_t *)s.val->data)[0], 22);
    nb_tensor *f = nb_zeros(c, NB_F32, NB_SHAPE(4));
    s = nb_token_split_90_10(c, f);
    ck_assert_ptr_null(s.train);
    ck_assert_error_has(c, "token_split_90_10: tokens are f32 (4), expected a 1-D i64 tensor");
    nb_ctx_free(c);
}
END_TEST

START_TEST(test_get_batch_formula) {
    nb_ctx *c = nb_ctx_new(0);
    int64_t d[50];
    for (int i = 0; i < 50; i++) d[i] = (i * 7) % 13;
    nb_tensor *data = nb_from_data(c, NB_I64, NB_SHAPE(50), d);
    nb_pcg32 rng, ref;
    nb_pcg32_seed(&rng, 5, 9);
    nb_pcg32_seed(&ref, 5, 9);
    nb_tensor *x, *y;
    ck_assert_int_eq(nb_get_batch(c, data, 4, 6, &rng, &x, &y), NB_OK);
    ck_assert_int_eq(x->shape[0], 4);
    ck_assert_int_eq(x->shape[1], 6);
    const int64_t *px = x->data, *py = y->data;
    for (int b = 0; b < 4; b++) {
        uint32_t i = nb_pcg32_bounded(&ref, 50 - 6); /* torch.randint(len(data) - T) */
        for (int t = 0; t < 6; t++) {
            ck_assert_int_eq(px[b * 6 + t], d[i + t]);
            ck_assert_int_eq(py[b * 6 + t], d[i + t + 1]);
        }
    }
    ck_assert_uint_eq(nb_pcg32_next(&rng), nb_pcg32_next(&ref));
    /* exactly T + 1 tokens: the only offset is 0 */
    nb_tensor *short_d = nb_from_data(c, NB_I64, NB_SHAPE(7), d);
    ck_assert_int_eq(nb_get_batch(c, short_d, 2, 6, &rng, &x, &y), NB_OK);
    ck_assert_int_eq(((int64_t *)y->data)[11], d[6]);
    ck_assert_int_eq(nb_get_batch(c, short_d, 2, 7, &rng, &x, &y), NB_ERR_VALUE);
    ck_assert_error_has(c, "get_batch: 7 tokens, expected at least block_size + 1 = 8");
    ck_assert_ptr_null(x);
    nb_ctx_free(c);
}
END_TEST

Suite *suite_data(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_vocab_is_sorted_code_points);
    tcase_add_test(tc, test_encode_decode_round_trip_multibyte);
    tcase_add_test(tc, test_vocab_string_round_trip);
    tcase_add_test(tc, test_text_errors);
    tcase_add_test(tc, test_split_90_10);
    tcase_add_test(tc, test_get_batch_formula);
    suite_add_tcase(s, tc);
    return s;
}
