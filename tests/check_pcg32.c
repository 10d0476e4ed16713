/* check_pcg32.c - PCG32 against the reference vectors published with the
 * pcg-c-basic distribution (pcg32-demo, seed 42, sequence 54). */
#include "check_nabla.h"

START_TEST(test_pcg32_reference_outputs) {
    nb_pcg32 r;
    nb_pcg32_seed(&r, 42u, 54u);
    const uint32_t want[6] = {0xa15c02b7, 0x7b47f409, 0xba1d3330,
                              0x83d2f293, 0xbfa4784b, 0xcbed606e};
    for (int i = 0; i < 6; i++) ck_assert_uint_eq(nb_pcg32_next(&r), want[i]);
}
END_TEST

START_TEST(test_pcg32_reference_coins_and_dice) {
    nb_pcg32 r;
    nb_pcg32_seed(&r, 42u, 54u);
    for (int i = 0; i < 6; i++) nb_pcg32_next(&r);
    char coins[66];
    for (int i = 0; i < 65; i++) coins[i] = nb_pcg32_bounded(&r, 2) ? 'H' : 'T';
    coins[65] = '\0';
    ck_assert_str_eq(coins, "HHTTTHTHHHTHTTTHHHHHTTTHHHTHTHTHTTHTTTHHHHHHTTTTHHTTTTTHTTTTTTTHT");
    const int dice[33] = {3, 4, 1, 1, 2, 2, 3, 2, 4, 3, 2, 4, 3, 3, 5, 2, 3,
                          1, 3, 1, 5, 1, 4, 1, 5, 6, 4, 6, 6, 2, 6, 3, 3};
    for (int i = 0; i < 33; i++) ck_assert_int_eq((int)nb_pcg32_bounded(&r, 6) + 1, dice[i]);
}
END_TEST

START_TEST(test_pcg32_float_is_top_24_bits) {
    nb_pcg32 a, b;
    nb_pcg32_seed(&a, 7, 3);
    nb_pcg32_seed(&b, 7, 3);
    for (int i = 0; i < 1000; i++) {
        float f = nb_pcg32_float(&a);
        uint32_t x = nb_pcg32_next(&b);
        ck_assert(f == (float)(x >> 8) / 16777216.0f);
        ck_assert(f >= 0.0f && f < 1.0f);
    }
}
END_TEST

START_TEST(test_pcg32_double_range_and_mean) {
    nb_pcg32 r;
    nb_pcg32_seed(&r, 1, 1);
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double d = nb_pcg32_double(&r);
        ck_assert(d >= 0.0 && d < 1.0);
        sum += d;
    }
    ck_assert_double_eq_tol(sum / 100000, 0.5, 0.005);
}
END_TEST

START_TEST(test_pcg32_normal_moments) {
    nb_pcg32 r;
    nb_pcg32_seed(&r, 123, 5);
    double s = 0, s2 = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double z = nb_pcg32_normal(&r);
        ck_assert(isfinite(z));
        s += z;
        s2 += z * z;
    }
    ck_assert_double_eq_tol(s / n, 0.0, 0.01);
    ck_assert_double_eq_tol(s2 / n, 1.0, 0.015);
}
END_TEST

START_TEST(test_pcg32_bounded_is_uniform_and_in_range) {
    nb_pcg32 r;
    nb_pcg32_seed(&r, 9, 9);
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint32_t v = nb_pcg32_bounded(&r, 7);
        ck_assert_uint_lt(v, 7);
        counts[v]++;
    }
    for (int k = 0; k < 7; k++) ck_assert_int_gt(counts[k], 9500);
    ck_assert_uint_eq(nb_pcg32_bounded(&r, 0), 0);
    ck_assert_uint_eq(nb_pcg32_bounded(&r, 1), 0);
}
END_TEST

START_TEST(test_pcg32_same_seed_same_stream) {
    nb_pcg32 a, b, c;
    nb_pcg32_seed(&a, 5, 1);
    nb_pcg32_seed(&b, 5, 1);
    nb_pcg32_seed(&c, 5, 2);
    int differ = 0;
    for (int i = 0; i < 100; i++) {
        uint32_t x = nb_pcg32_next(&a);
        ck_assert_uint_eq(x, nb_pcg32_next(&b));
        differ += x != nb_pcg32_next(&c);
    }
    ck_assert_int_gt(differ, 90);
}
END_TEST

Suite *suite_pcg32(void) {
    Suite *s = suite_create("pcg32");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_pcg32_reference_outputs);
    tcase_add_test(tc, test_pcg32_reference_coins_and_dice);
    tcase_add_test(tc, test_pcg32_float_is_top_24_bits);
    tcase_add_test(tc, test_pcg32_double_range_and_mean);
    tcase_add_test(tc, test_pcg32_normal_moments);
    tcase_add_test(tc, test_pcg32_bounded_is_uniform_and_in_range);
    tcase_add_test(tc, test_pcg32_same_seed_same_stream);
    suite_add_tcase(s, tc);
    return s;
}
