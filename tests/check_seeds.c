/* check_seeds.c - the seed notebooks' simple self-attention (no weights) on
 * the six 3-d embeddings of "Your journey starts with one step":
 *   scores = inputs @ inputs^T, weights = softmax(scores), context = weights @ inputs.
 * Every number is the 4-decimal value the notebooks print. */
#include "check_nabla.h"

static const double SEED_SCORES[36] = {
    0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310, /* */
    0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865, /* */
    0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605, /* */
    0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565, /* */
    0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935, /* */
    0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450,
};

static const double SEED_WEIGHTS[36] = {
    0.2098, 0.2006, 0.1981, 0.1242, 0.1220, 0.1452, /* */
    0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581, /* */
    0.1390, 0.2369, 0.2326, 0.1242, 0.1108, 0.1565, /* */
    0.1435, 0.2074, 0.2046, 0.1462, 0.1263, 0.1720, /* */
    0.1526, 0.1958, 0.1975, 0.1367, 0.1879, 0.1295, /* */
    0.1385, 0.2184, 0.2128, 0.1420, 0.0988, 0.1896,
};

static const double SEED_CONTEXT[18] = {
    0.4421, 0.5931, 0.5790, 0.4419, 0.6515, 0.5683, 0.4431, 0.6496, 0.5671,
    0.4304, 0.6298, 0.5510, 0.4671, 0.5910, 0.5266, 0.4177, 0.6503, 0.5645,
};

/* PyTorch's print(context_vecs). */
static const char SEED_CONTEXT_TEXT[] = "tensor([[0.4421, 0.5931, 0.5790],\n"
                                        "        [0.4419, 0.6515, 0.5683],\n"
                                        "        [0.4431, 0.6496, 0.5671],\n"
                                        "        [0.4304, 0.6298, 0.5510],\n"
                                        "        [0.4671, 0.5910, 0.5266],\n"
                                        "        [0.4177, 0.6503, 0.5645]])";

/* Every element of t, rounded to 4 decimals, is the printed want[i]. In f32
 * a value may sit within float rounding of a half-way point (row 2's
 * 0.14545011 / sum), so there the check is |x - want| <= 5e-5 plus 1e-7. */
static void assert_4dp(const nb_tensor *t, const double *want, size_t n) {
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->numel, n);
    for (size_t i = 0; i < n; i++) {
        double x = nb_get(t, i);
        bool ok = round(x * 1e4) == round(want[i] * 1e4);
        if (!ok && t->dtype == NB_F32) ok = fabs(x - want[i]) <= 5e-5 + 1e-7;
        ck_assert_msg(ok, "%s element %zu: got %.8f, printed %.4f", nb_dtype_name(t->dtype), i,
                      x, want[i]);
    }
}

typedef struct seed_attn {
    nb_tensor *inputs, *scores, *weights, *context;
} seed_attn;

static seed_attn simple_attention(nb_ctx *ctx, nb_dtype dt) {
    seed_attn s;
    s.inputs = nb_from_doubles(ctx, dt, NB_SHAPE(6, 3), NB_SEED_INPUTS);
    s.scores = nb_matmul(ctx, s.inputs, nb_transpose(ctx, s.inputs, 0, 1));
    s.weights = nb_softmax(ctx, s.scores);
    s.context = nb_matmul(ctx, s.weights, s.inputs);
    return s;
}

START_TEST(test_seed_scores) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        seed_attn s = simple_attention(ctx, dt);
        ck_assert_ptr_null(nb_ctx_error(ctx));
        ck_assert_int_eq(s.scores->ndim, 2);
        ck_assert_int_eq(s.scores->shape[0], 6);
        ck_assert_int_eq(s.scores->shape[1], 6);
        assert_4dp(s.scores, SEED_SCORES, 36);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_seed_softmax_weights) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        seed_attn s = simple_attention(ctx, dt);
        assert_4dp(s.weights, SEED_WEIGHTS, 36);
        for (size_t i = 0; i < 6; i++) {
            double row = 0;
            for (size_t j = 0; j < 6; j++) row += nb_get(s.weights, i * 6 + j);
            ck_assert_double_eq_tol(row, 1.0, 1e-6);
        }
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_seed_context_vectors) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        seed_attn s = simple_attention(ctx, dt);
        char sh[64];
        ck_assert_str_eq(nb_shape_str(s.context, sh, sizeof sh), "(6, 3)");
        assert_4dp(s.context, SEED_CONTEXT, 18);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_seed_context_prints_like_pytorch) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        seed_attn s = simple_attention(ctx, dt);
        char *text = nb_test_format(s.context), want[sizeof SEED_CONTEXT_TEXT + 32];
        /* f64 adds PyTorch's dtype suffix */
        snprintf(want, sizeof want, "%.*s%s", (int)strlen(SEED_CONTEXT_TEXT) - 1,
                 SEED_CONTEXT_TEXT, dt == NB_F64 ? ", dtype=torch.float64)" : ")");
        ck_assert_str_eq(text, want);
        free(text);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_seed_weights_normalized_by_sum) {
    /* attn_weights_2_tmp = attn_scores_2 / attn_scores_2.sum(): the query
     * "journey" (the second row) */
    static const double want[6] = {0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656};
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        seed_attn s = simple_attention(ctx, dt);
        nb_tensor *norm = nb_div(ctx, s.scores, nb_sum_dim(ctx, s.scores, -1, true));
        ck_assert_ptr_nonnull(norm);
        ck_assert_int_eq(norm->shape[0], 6);
        ck_assert_int_eq(norm->shape[1], 6);
        double row[6];
        for (size_t j = 0; j < 6; j++) row[j] = nb_get(norm, 6 + j);
        nb_tensor *r = nb_from_doubles(ctx, dt, NB_SHAPE(6), row);
        assert_4dp(r, want, 6);
        ck_assert_double_eq_tol(row[0] + row[1] + row[2] + row[3] + row[4] + row[5], 1.0, 1e-6);
        nb_ctx_free(ctx);
    }
}
END_TEST

static nb_tensor *f_simple_attention(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *x = in[0];
    return nb_matmul(ctx, nb_softmax(ctx, nb_matmul(ctx, x, nb_transpose(ctx, x, 0, 1))), x);
}

START_TEST(test_seed_attention_gradcheck) {
    /* x appears three times (query, key, value): the tape must add all three */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[1] = {nb_from_doubles(ctx, NB_F64, NB_SHAPE(6, 3), NB_SEED_INPUTS)};
    nb_gradcheck_result r;
    ck_assert_msg(nb_gradcheck(ctx, f_simple_attention, NULL, 1, in, NULL, &r) == NB_OK, "%s",
                  r.message);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_seeds(void) {
    Suite *s = suite_create("seeds");
    TCase *tc = tcase_create("simple_attention");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_seed_scores);
    tcase_add_test(tc, test_seed_softmax_weights);
    tcase_add_test(tc, test_seed_context_vectors);
    tcase_add_test(tc, test_seed_context_prints_like_pytorch);
    tcase_add_test(tc, test_seed_weights_normalized_by_sum);
    tcase_add_test(tc, test_seed_attention_gradcheck);
    suite_add_tcase(s, tc);
    return s;
}
