/* check_sdpa.c - the fused attention op nb_sdpa: its values and gradients
 * against the composed ops it replaces (permute, matmul, causal_fill,
 * masked_fill, scale, softmax, dropout mask, matmul) to 1e-12 in float64,
 * finite differences, fully masked rows, the dropout mask, the same bits on
 * 1 and 2 threads, memory that does not grow with T^2, and errors; grouped
 * key/value heads against the same heads repeated, and nb_sdpa_ex's
 * sliding window against an explicit mask. */
#include "check_nabla.h"

#include "ops/ops_internal.h"

/* One attention problem: sizes and options. */
typedef struct sdpa_case {
    int64_t B, Tq, Tk, H, hd, hdv;
    bool causal;
    double p;
    uint64_t seed;
    const uint8_t *pad; /* (B, Tk) or NULL */
    int64_t Hkv;        /* key/value heads; 0: H */
    int64_t window;     /* nb_sdpa_ex's sliding window; 0: none (nb_sdpa) */
} sdpa_case;

static int64_t kv_heads(const sdpa_case *s) { return s->Hkv ? s->Hkv : s->H; }

/* k or v (B, Tk, Hkv, d) with each head repeated H / Hkv times in place:
 * (B, Tk, H, d), as repeat_interleave on dim 2; concat sums the gradients
 * of the copies back. */
static nb_tensor *repeat_heads(nb_ctx *c, nb_tensor *x, const sdpa_case *s) {
    int64_t r = s->H / kv_heads(s), d = x->shape[3];
    if (r == 1) return x;
    nb_tensor *x5 = nb_reshape(c, x, NB_SHAPE(s->B, s->Tk, kv_heads(s), 1, d)), *copies[16];
    for (int64_t i = 0; i < r; i++) copies[i] = x5;
    return nb_reshape(c, nb_concat(c, (int)r, copies, 3), NB_SHAPE(s->B, s->Tk, s->H, d));
}

static nb_tensor *pad_tensor(nb_ctx *c, const sdpa_case *s) {
    return s->pad ? nb_from_data(c, NB_BOOL, NB_SHAPE(s->B, s->Tk), s->pad) : NULL;
}

static double scale_of(const sdpa_case *s) { return 1.0 / sqrt((double)s->hd); }

/* The reference: the seed's MultiHeadAttention core, op by op, with the
 * dropout mask nb_sdpa documents applied by nb_mul. */
static nb_tensor *composed(nb_ctx *c, nb_tensor *const *in, const sdpa_case *s) {
    static const int perm[4] = {0, 2, 1, 3};
    nb_tensor *qh = nb_permute(c, in[0], perm);
    nb_tensor *kh = nb_permute(c, repeat_heads(c, in[1], s), perm);
    nb_tensor *vh = nb_permute(c, repeat_heads(c, in[2], s), perm);
    nb_tensor *scores = nb_matmul(c, qh, nb_transpose(c, kh, 2, 3)); /* (B, H, Tq, Tk) */
    if (s->causal) scores = nb_causal_fill(c, scores, -INFINITY);
    if (s->window > 0) { /* hide keys j <= i - window, element by element */
        nb_tensor *m = nb_zeros(c, NB_BOOL, NB_SHAPE(s->Tq, s->Tk));
        for (int64_t i = 0; i < s->Tq; i++)
            for (int64_t j = 0; j < s->Tk; j++)
                ((bool *)m->data)[i * s->Tk + j] = j <= i - s->window;
        scores = nb_masked_fill(c, scores, m, -INFINITY);
    }
    if (s->pad)
        scores = nb_masked_fill(c, scores, nb_from_data(c, NB_BOOL, NB_SHAPE(s->B, 1, 1, s->Tk),
                                                        s->pad), -INFINITY);
    nb_tensor *w = nb_softmax(c, nb_scale(c, scores, scale_of(s)));
    if (s->p > 0) {
        nb_tensor *keep = nb_sdpa_dropout_mask(c, s->B, s->H, s->Tq, s->Tk, s->p, s->seed);
        double ks = s->p < 1 ? 1.0 / (1.0 - s->p) : 0.0;
        w = nb_mul(c, w, nb_scale(c, nb_copy(c, keep, in[0]->dtype), ks));
    }
    nb_tensor *o = nb_permute(c, nb_matmul(c, w, vh), perm); /* (B, Tq, H, hdv) */
    return nb_reshape(c, o, NB_SHAPE(s->B, s->Tq, s->H * s->hdv));
}

static nb_tensor *fused(nb_ctx *c, nb_tensor *const *in, const sdpa_case *s) {
    if (s->window)
        return nb_sdpa_ex(c, in[0], in[1], in[2],
                          &(nb_sdpa_opts){.key_padding_mask = pad_tensor(c, s),
                                          .causal = s->causal, .dropout_p = s->p,
                                          .seed = s->seed, .window = s->window});
    return nb_sdpa(c, in[0], in[1], in[2], pad_tensor(c, s), s->causal, scale_of(s), s->p,
                   s->seed);
}

static nb_tensor *f_fused(nb_ctx *c, nb_tensor *const *in, void *u) { return fused(c, in, u); }

/* q, k and v all the same tensor: three gradients into one buffer. */
static nb_tensor *f_shared(nb_ctx *c, nb_tensor *const *in, void *u) {
    nb_tensor *same[3] = {in[0], in[0], in[0]};
    return fused(c, same, u);
}

/* The same, with the shared tensor an intermediate (x + x): its gradient
 * buffer is made by sdpa's backward, fresh for q and added to for k and v. */
static nb_tensor *f_shared_mid(nb_ctx *c, nb_tensor *const *in, void *u) {
    nb_tensor *y = nb_add(c, in[0], in[0]);
    nb_tensor *same[3] = {y, y, y};
    return fused(c, same, u);
}

/* q, k, v leaves in `p`, drawn from N(0, 1). */
static void make_qkv(nb_ctx *p, nb_dtype dt, const sdpa_case *s, nb_pcg32 *rng, nb_tensor **in) {
    in[0] = nb_requires_grad(nb_normal(p, dt, NB_SHAPE(s->B, s->Tq, s->H, s->hd), 0, 1, rng));
    int64_t hkv = kv_heads(s);
    in[1] = nb_requires_grad(nb_normal(p, dt, NB_SHAPE(s->B, s->Tk, hkv, s->hd), 0, 1, rng));
    in[2] = nb_requires_grad(nb_normal(p, dt, NB_SHAPE(s->B, s->Tk, hkv, s->hdv), 0, 1, rng));
}

/* Output and the gradients of q, k, v under upstream gradient g, copied out. */
typedef struct result {
    double *out, *grad[3];
    size_t n_out, n_in[3];
} result;

static result run(nb_tensor *(*f)(nb_ctx *, nb_tensor *const *, const sdpa_case *),
                  nb_tensor **in, const nb_tensor *g, const sdpa_case *s) {
    nb_ctx *c = nb_ctx_new(0);
    for (int i = 0; i < 3; i++) nb_zero_grad(in[i]);
    nb_tensor *y = f(c, in, s);
    ck_assert_msg(y != NULL, "%s", nb_ctx_error(c) ? nb_ctx_error(c) : "?");
    ck_assert_int_eq(nb_backward(c, y, g), NB_OK);
    result r = {malloc(y->numel * sizeof(double)), {0}, y->numel, {0}};
    for (size_t i = 0; i < y->numel; i++) r.out[i] = nb_get(y, i);
    for (int k = 0; k < 3; k++) {
        r.n_in[k] = in[k]->numel;
        r.grad[k] = malloc(in[k]->numel * sizeof(double));
        for (size_t i = 0; i < in[k]->numel; i++) r.grad[k][i] = nb_grad_get(in[k], i);
    }
    nb_ctx_free(c);
    return r;
}

static void result_free(result *r) {
    free(r->out);
    for (int k = 0; k < 3; k++) free(r->grad[k]);
}

static double max_diff(const double *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

/* nb_sdpa against the composed ops, values and all three gradients. */
static void check_against_composed(const sdpa_case *s, double tol) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 11, 2);
    nb_tensor *in[3];
    make_qkv(p, NB_F64, s, &rng, in);
    nb_tensor *g = nb_normal(p, NB_F64, NB_SHAPE(s->B, s->Tq, s->H * s->hdv), 0, 1, &rng);
    result a = run(fused, in, g, s), b = run(composed, in, g, s);
    double d = max_diff(a.out, b.out, a.n_out);
    ck_assert_msg(d <= tol, "output differs by %g", d);
    static const char *const names[3] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        d = max_diff(a.grad[k], b.grad[k], a.n_in[k]);
        ck_assert_msg(d <= tol, "d %s differs by %g", names[k], d);
    }
    /* the comparison is not vacuous: gradients and outputs are not all zero */
    double norm_out = 0, norm_dk = 0;
    for (size_t i = 0; i < a.n_out; i++) norm_out += fabs(a.out[i]);
    for (size_t i = 0; i < a.n_in[1]; i++) norm_dk += fabs(a.grad[1][i]);
    ck_assert(s->p == 1.0 ? norm_out == 0 : norm_out > 0.1);
    /* (a window of 1: each query sees only its own key, weight 1, so dk is 0
     * to rounding) */
    if (s->window == 1) ck_assert(norm_dk < 1e-10);
    else ck_assert(s->p == 1.0 ? norm_dk == 0 : norm_dk > 0.1);
    result_free(&a);
    result_free(&b);
    nb_ctx_free(p);
}

/* Batch 0 pads keys 5, 33 and 60..69; batch 1 pads its first 66 keys, so
 * with the causal mask its queries 0..65 see nothing, and key tile 0 (keys
 * 0..63) is hidden from every query. */
static uint8_t pad70[140];

static void fill_pad70(void) {
    memset(pad70, 0, sizeof pad70);
    pad70[5] = pad70[33] = 1;
    for (int j = 60; j < 70; j++) pad70[j] = 1;
    for (int j = 0; j < 66; j++) pad70[70 + j] = 1;
}

START_TEST(test_matches_composed_causal) {
    sdpa_case s = {2, 70, 70, 2, 5, 3, true, 0.0, 0, NULL, 0, 0};
    check_against_composed(&s, 1e-12);
}
END_TEST

START_TEST(test_matches_composed_padded) {
    fill_pad70();
    sdpa_case s = {2, 70, 70, 2, 5, 3, true, 0.0, 0, pad70, 0, 0};
    check_against_composed(&s, 1e-12);
    s.causal = false;
    check_against_composed(&s, 1e-12);
}
END_TEST

START_TEST(test_matches_composed_dropout) {
    fill_pad70();
    sdpa_case s = {2, 70, 70, 3, 4, 4, true, 0.3, 0x1234abcd5678ULL, pad70, 0, 0};
    check_against_composed(&s, 1e-12);
    /* queries and keys of different lengths, no causal mask */
    sdpa_case x = {2, 40, 75, 2, 3, 5, false, 0.25, 99, NULL, 0, 0};
    check_against_composed(&x, 1e-12);
    x.p = 1.0; /* everything dropped */
    check_against_composed(&x, 1e-12);
}
END_TEST

/* float32 nb_sdpa (the SIMD tiles, the products by groups of 16 rows under
 * the causal mask, head sizes the packed gemm takes) against the composed
 * ops in float64 on the same values: within float32 rounding. */
static void check_f32_against_composed(const sdpa_case *s, double tol) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 12, 3);
    nb_tensor *in32[3], *in64[3];
    make_qkv(p, NB_F32, s, &rng, in32);
    for (int k = 0; k < 3; k++) in64[k] = nb_requires_grad(nb_copy(p, in32[k], NB_F64));
    nb_tensor *g32 = nb_normal(p, NB_F32, NB_SHAPE(s->B, s->Tq, s->H * s->hdv), 0, 1, &rng);
    nb_tensor *g64 = nb_copy(p, g32, NB_F64);
    result a = run(fused, in32, g32, s), b = run(composed, in64, g64, s);
    double d = max_diff(a.out, b.out, a.n_out), norm = 0;
    ck_assert_msg(d <= tol, "float32 output differs by %g", d);
    static const char *const names[3] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        d = max_diff(a.grad[k], b.grad[k], a.n_in[k]);
        ck_assert_msg(d <= tol, "float32 d %s differs by %g", names[k], d);
        for (size_t i = 0; i < a.n_in[k]; i++) norm += fabs(a.grad[k][i]);
    }
    ck_assert(norm > 1.0);
    result_free(&a);
    result_free(&b);
    nb_ctx_free(p);
}

START_TEST(test_float32_matches_composed) {
    fill_pad70();
    sdpa_case gpt = {2, 64, 64, 4, 32, 32, true, 0.0, 0, NULL, 0, 0}; /* the GPT's heads */
    check_f32_against_composed(&gpt, 2e-5);
    sdpa_case two = {2, 70, 70, 2, 32, 16, true, 0.0, 0, pad70, 0, 0}; /* two tiles, padding */
    check_f32_against_composed(&two, 2e-5);
    two.p = 0.2, two.seed = 77;
    check_f32_against_composed(&two, 2e-5);
    sdpa_case cross = {2, 40, 75, 2, 16, 24, false, 0.0, 0, NULL, 0, 0};
    check_f32_against_composed(&cross, 2e-5);
    sdpa_case odd = {1, 37, 37, 3, 20, 20, true, 0.1, 5, NULL, 0, 0}; /* a partial group */
    check_f32_against_composed(&odd, 2e-5);
}
END_TEST

/* Finite differences on the fused op alone, with a padded key, a fully
 * masked query (batch 1, query 0) and several tiles. */
static void gradcheck_case(const sdpa_case *s, bool fast) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 5);
    nb_tensor *in[3];
    make_qkv(p, NB_F64, s, &rng, in);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = fast;
    o.n_dirs = 6;
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(p, f_fused, (void *)s, 3, in, &o, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    nb_ctx_free(p);
}

START_TEST(test_gradcheck_finite_differences) {
    static const uint8_t pad[10] = {0, 0, 1, 0, 0, 1, 0, 0, 0, 0};
    sdpa_case s = {2, 5, 5, 2, 3, 2, true, 0.0, 0, pad, 0, 0};
    gradcheck_case(&s, false);
    s.p = 0.4, s.seed = 2024; /* a fixed mask: the same seed every evaluation */
    gradcheck_case(&s, false);
    s.causal = false, s.Tq = 4;
    gradcheck_case(&s, false);
    fill_pad70();
    sdpa_case big = {2, 70, 70, 2, 3, 2, true, 0.2, 7, pad70, 0, 0};
    gradcheck_case(&big, true);
    sdpa_case shared = {2, 5, 5, 2, 3, 3, true, 0.0, 0, NULL, 0, 0};
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 6, 6);
    nb_tensor *x = nb_requires_grad(nb_normal(p, NB_F64, NB_SHAPE(2, 5, 2, 3), 0, 1, &rng));
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(p, f_shared, &shared, 1, &x, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    ck_assert_int_eq(nb_gradcheck(p, f_shared_mid, &shared, 1, &x, NULL, &r), NB_OK);
    ck_assert_msg(r.passed, "%s", r.message);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_fully_masked_rows_are_zero) {
    static const uint8_t pad[8] = {1, 1, 0, 0, 0, 0, 0, 0}; /* batch 0: keys 0, 1 padded */
    sdpa_case s = {2, 4, 4, 1, 2, 2, true, 0.0, 0, pad, 0, 0};
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 3);
    nb_tensor *in[3];
    make_qkv(p, NB_F64, &s, &rng, in);
    nb_set_detect_anomaly(c, true);
    nb_tensor *y = fused(c, in, &s);
    ck_assert_ptr_nonnull(y);
    for (size_t i = 0; i < 4; i++) ck_assert_double_eq(nb_get(y, i), 0.0); /* queries 0, 1 */
    ck_assert_double_ne(nb_get(y, 4), 0.0);
    ck_assert_int_eq(nb_backward(c, nb_sum(c, nb_mul(c, y, y)), NULL), NB_OK);
    for (size_t i = 0; i < 4; i++) ck_assert_double_eq(nb_grad_get(in[0], i), 0.0);
    for (size_t i = 0; i < in[0]->numel; i++) ck_assert(isfinite(nb_grad_get(in[0], i)));
    nb_ctx_free(c);
    nb_ctx_free(p);
}
END_TEST

/* A NaN in a key poisons the rows of the queries that see it, as nb_softmax
 * does, in float32 (the SIMD exp) and float64; rows that do not see it stay
 * finite. */
START_TEST(test_nan_propagates) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        sdpa_case s = {1, 70, 70, 1, 2, 2, true, 0.0, 0, NULL, 0, 0};
        nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 4, 4);
        nb_tensor *in[3];
        make_qkv(p, (nb_dtype)dt, &s, &rng, in);
        nb_set(in[1], 66 * 2, NAN); /* key 66 */
        nb_tensor *y = fused(c, in, &s);
        ck_assert_ptr_nonnull(y);
        for (int64_t i = 0; i < 70; i++)
            ck_assert_msg(isnan(nb_get(y, (size_t)i * 2)) == (i >= 66), "query %d", (int)i);
        nb_ctx_free(c);
        nb_ctx_free(p);
    }
}
END_TEST

START_TEST(test_dropout_mask_rule) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *m = nb_sdpa_dropout_mask(c, 2, 3, 50, 70, 0.3, 42);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->ndim, 4);
    const uint8_t *k = m->data;
    /* row i of head (b, h): PCG32 (seed, (b * H + h) * Tq + i), key j's draw j */
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, (1 * 3 + 2) * 50 + 7);
    uint32_t threshold = (uint32_t)ceil(0.3 * 0x1p24);
    size_t row = ((size_t)(1 * 3 + 2) * 50 + 7) * 70, kept = 0;
    for (int j = 0; j < 70; j++)
        ck_assert_int_eq(k[row + j], (nb_pcg32_next(&rng) >> 8) >= threshold);
    for (size_t i = 0; i < m->numel; i++) kept += k[i];
    double frac = (double)kept / (double)m->numel; /* 21000 draws: sd 0.003 */
    ck_assert_double_eq_tol(frac, 0.7, 0.015);
    nb_tensor *m2 = nb_sdpa_dropout_mask(c, 2, 3, 50, 70, 0.3, 43);
    ck_assert(memcmp(m->data, m2->data, m->numel) != 0);
    nb_tensor *all = nb_sdpa_dropout_mask(c, 1, 1, 3, 3, 0.0, 1);
    for (size_t i = 0; i < 9; i++) ck_assert_int_eq(((uint8_t *)all->data)[i], 1);
    ck_assert_ptr_null(nb_sdpa_dropout_mask(c, 1, 1, 3, 3, 1.5, 1));
    ck_assert_error_has(c, "sdpa_dropout_mask: p 1.5 is outside [0, 1]");
    nb_ctx_free(c);
}
END_TEST

START_TEST(test_pcg32_advance_is_next_repeated) {
    static const uint64_t steps[] = {0, 1, 2, 31, 32, 1000, 123457};
    for (size_t t = 0; t < sizeof steps / sizeof steps[0]; t++) {
        nb_pcg32 a, b;
        nb_pcg32_seed(&a, 17, 5);
        nb_pcg32_seed(&b, 17, 5);
        for (uint64_t i = 0; i < steps[t]; i++) nb_pcg32_next(&a);
        nb_pcg32_advance(&b, steps[t]);
        ck_assert_uint_eq(a.state, b.state);
        ck_assert_uint_eq(nb_pcg32_next(&a), nb_pcg32_next(&b));
    }
}
END_TEST

/* float32 with dropout and padding on 1 and 2 threads: the same bits. */
START_TEST(test_same_bits_one_and_two_threads) {
    fill_pad70();
    sdpa_case s = {2, 70, 70, 4, 16, 16, true, 0.1, 77, pad70, 0, 0};
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 8, 8);
    nb_tensor *in[3];
    make_qkv(p, NB_F32, &s, &rng, in);
    nb_tensor *g = nb_normal(p, NB_F32, NB_SHAPE(s.B, s.Tq, s.H * s.hdv), 0, 1, &rng);
    int before = nb_get_num_threads();
    nb_set_num_threads(1);
    result a = run(fused, in, g, &s);
    ck_assert_int_eq(nb_set_num_threads(2), 2);
    result b = run(fused, in, g, &s);
    nb_set_num_threads(before);
    ck_assert(memcmp(a.out, b.out, a.n_out * sizeof(double)) == 0);
    for (int k = 0; k < 3; k++)
        ck_assert(memcmp(a.grad[k], b.grad[k], a.n_in[k] * sizeof(double)) == 0);
    result_free(&a);
    result_free(&b);
    nb_ctx_free(p);
}
END_TEST

/* Forward and backward at T = 512 allocate far less than one (T, T) matrix
 * per head, which the composed path stores several times. */
START_TEST(test_memory_is_linear_in_t) {
    sdpa_case s = {1, 512, 512, 2, 8, 8, true, 0.1, 1, NULL, 0, 0};
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 9, 9);
    nb_tensor *in[3];
    make_qkv(p, NB_F32, &s, &rng, in);
    nb_tensor *y = fused(c, in, &s);
    ck_assert_int_eq(nb_backward(c, nb_sum(c, y), NULL), NB_OK);
    size_t tt = 512 * 512 * sizeof(float); /* one head's weights: 1 MiB */
    ck_assert_msg(c->peak < tt / 2, "fused attention used %zu bytes", c->peak);
    nb_ctx_free(c);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_errors_name_the_inputs) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *q = nb_zeros(c, NB_F32, NB_SHAPE(2, 5, 2, 3));
    nb_tensor *k = nb_zeros(c, NB_F32, NB_SHAPE(2, 6, 2, 3));
    nb_tensor *v = nb_zeros(c, NB_F32, NB_SHAPE(2, 6, 2, 4));
    nb_tensor *q3 = nb_zeros(c, NB_F32, NB_SHAPE(2, 5, 6));
    nb_tensor *k64 = nb_zeros(c, NB_F64, NB_SHAPE(2, 6, 2, 3));
    nb_tensor *bad_v = nb_zeros(c, NB_F32, NB_SHAPE(2, 5, 2, 4));
    nb_tensor *pad = nb_zeros(c, NB_BOOL, NB_SHAPE(2, 6)), *pad5 = nb_zeros(c, NB_BOOL, NB_SHAPE(2, 5));
    struct {
        nb_tensor *q, *k, *v, *pad;
        double scale, p;
        const char *msg;
    } bad[] = {
        {NULL, k, v, NULL, 1, 0, "sdpa: q is NULL"},
        {q, k, NULL, NULL, 1, 0, "sdpa: v is NULL"},
        {q3, k, v, NULL, 1, 0, "sdpa: q (2, 5, 6), k (2, 6, 2, 3), v (2, 6, 2, 4): expected 4 dims"},
        {q, k64, v, NULL, 1, 0, "mixed dtypes"},
        {q, k, bad_v, NULL, 1, 0, "do not fit: expected q (B, Tq, H, hd), k (B, Tk, Hkv, hd)"},
        {q, k, v, pad5, 1, 0, "sdpa: key_padding_mask has shape (2, 5), expected (2, 6)"},
        {q, k, v, q, 1, 0, "sdpa: key_padding_mask (2, 5, 2, 3) is f32, expected bool"},
        {q, k, v, pad, NAN, 0, "sdpa: scale nan is not finite"},
        {q, k, v, pad, 1, 1.5, "sdpa: dropout_p 1.5 is outside [0, 1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_ptr_null(nb_sdpa(c, bad[i].q, bad[i].k, bad[i].v, bad[i].pad, true,
                                   bad[i].scale, bad[i].p, 0));
        ck_assert_error_has(c, bad[i].msg);
        nb_ctx_clear_error(c);
    }
    nb_tensor *y = nb_sdpa(c, q, k, v, pad, false, 0.5, 0.0, 0);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[2], 8);
    nb_ctx_free(c);
}
END_TEST

/* ---- grouped key/value heads and the sliding window ---------------------------- */

/* Against the composed ops (k and v repeated, the window an explicit mask)
 * in float64 and float32, over several tiles: Hkv 1 (multi-query) and 2 of
 * H 4, windows inside one tile, across tiles (whole tiles skipped below the
 * band), one of 1 (each query sees itself only) and one wider than Tk. */
START_TEST(test_gqa_and_window_match_composed) {
    fill_pad70();
    sdpa_case mqa = {2, 70, 70, 4, 5, 3, true, 0.0, 0, NULL, 1, 0};
    check_against_composed(&mqa, 1e-12);
    sdpa_case gqa = {2, 70, 70, 4, 5, 3, true, 0.3, 99, pad70, 2, 0};
    check_against_composed(&gqa, 1e-12);
    gqa.causal = false, gqa.p = 0;
    check_against_composed(&gqa, 1e-12);
    sdpa_case cross = {2, 40, 75, 6, 3, 4, false, 0.25, 5, NULL, 3, 0};
    check_against_composed(&cross, 1e-12);
    static const int64_t windows[] = {1, 5, 16, 40, 64, 70, 100, 500};
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
        sdpa_case win = {1, 150, 150, 2, 4, 3, true, 0.0, 0, NULL, 0, windows[w]};
        check_against_composed(&win, 1e-12);
        sdpa_case all = {2, 70, 70, 4, 5, 3, true, 0.2, 7, pad70, 2, windows[w]};
        check_against_composed(&all, 1e-12);
    }
    sdpa_case longer = {1, 90, 200, 4, 3, 2, true, 0.0, 0, NULL, 2, 30}; /* Tq != Tk */
    check_against_composed(&longer, 1e-12);
    /* causal with more keys than queries: keys past the last query are in
     * no window, and the backward's groups of keys stop at the last query
     * (20 of 40: a group of keys 16..31 that queries 16..19 see partly) */
    sdpa_case more_keys = {2, 20, 40, 2, 3, 2, true, 0.0, 0, NULL, 0, 0};
    check_against_composed(&more_keys, 1e-12);
    more_keys.window = 2, more_keys.Tq = 4, more_keys.Tk = 7;
    check_against_composed(&more_keys, 1e-12);
    sdpa_case f32 = {2, 140, 140, 8, 32, 16, true, 0.0, 0, NULL, 2, 50};
    check_f32_against_composed(&f32, 2e-5);
    f32.Hkv = 1, f32.window = 0, f32.p = 0.1, f32.seed = 3;
    check_f32_against_composed(&f32, 2e-5);
    sdpa_case f32odd = {1, 37, 37, 4, 20, 20, true, 0.0, 0, pad70, 4, 7}; /* partial groups */
    check_f32_against_composed(&f32odd, 2e-5);
}
END_TEST

/* GQA on k, v (B, Tk, Hkv, d) gives the same output and dq as MHA on k, v
 * repeated into (B, Tk, H, d) as leaves, and dk, dv the sums of the
 * repeated heads' gradients over each group. */
START_TEST(test_gqa_equals_mha_repeated) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        sdpa_case s = {2, 70, 70, 6, 8, 4, true, 0.1, 21, NULL, 2, 0};
        sdpa_case m = s;
        m.Hkv = 0;
        nb_ctx *p = nb_ctx_new(0);
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 13, 1);
        nb_tensor *in[3], *rep[3];
        make_qkv(p, (nb_dtype)dt, &s, &rng, in);
        rep[0] = in[0];
        for (int k = 1; k < 3; k++) {
            nb_ctx *t = nb_ctx_new(0);
            rep[k] = nb_requires_grad(nb_copy(p, repeat_heads(t, in[k], &s), (nb_dtype)dt));
            nb_ctx_free(t);
        }
        nb_tensor *g = nb_normal(p, (nb_dtype)dt, NB_SHAPE(s.B, s.Tq, s.H * s.hdv), 0, 1, &rng);
        result a = run(fused, in, g, &s), b = run(fused, rep, g, &m);
        double tol = dt == NB_F32 ? 1e-5 : 1e-12;
        ck_assert_double_le(max_diff(a.out, b.out, a.n_out), tol);
        ck_assert_double_le(max_diff(a.grad[0], b.grad[0], a.n_in[0]), tol);
        for (int k = 1; k < 3; k++) { /* (B, Tk, Hkv, R, d) summed over R */
            int64_t d = k == 1 ? s.hd : s.hdv, r = s.H / s.Hkv;
            double worst = 0, norm = 0;
            for (size_t i = 0; i < a.n_in[k]; i++) {
                size_t row = i / (size_t)(s.Hkv * d), gh = i / (size_t)d % (size_t)s.Hkv;
                double sum = 0;
                for (int64_t j = 0; j < r; j++)
                    sum += b.grad[k][(row * (size_t)s.H + gh * (size_t)r + (size_t)j) * (size_t)d +
                                     i % (size_t)d];
                worst = fmax(worst, fabs(a.grad[k][i] - sum));
                norm += fabs(sum);
            }
            ck_assert_msg(worst <= tol * 4, "d%s differs by %g", k == 1 ? "k" : "v", worst);
            ck_assert(norm > 1.0);
        }
        result_free(&a);
        result_free(&b);
        nb_ctx_free(p);
    }
}
END_TEST

/* GQA (several query heads adding into one dk, dv) with a window, dropout
 * and padding, float32 and float64, on 1 and 2 threads: the same bits. */
START_TEST(test_gqa_window_same_bits_one_and_two_threads) {
    fill_pad70();
    for (int dt = NB_F32; dt <= NB_F64; dt++)
        for (int64_t hkv = 1; hkv <= 2; hkv++) {
            sdpa_case s = {2, 70, 70, 4, 16, 16, true, 0.1, 77, pad70, hkv, hkv == 1 ? 0 : 20};
            nb_ctx *p = nb_ctx_new(0);
            nb_pcg32 rng;
            nb_pcg32_seed(&rng, 8, 9);
            nb_tensor *in[3];
            make_qkv(p, (nb_dtype)dt, &s, &rng, in);
            nb_tensor *g = nb_normal(p, (nb_dtype)dt, NB_SHAPE(s.B, s.Tq, s.H * s.hdv), 0, 1, &rng);
            int before = nb_get_num_threads();
            nb_set_num_threads(1);
            result a = run(fused, in, g, &s);
            ck_assert_int_eq(nb_set_num_threads(2), 2);
            result b = run(fused, in, g, &s);
            nb_set_num_threads(before);
            ck_assert(memcmp(a.out, b.out, a.n_out * sizeof(double)) == 0);
            for (int k = 0; k < 3; k++)
                ck_assert(memcmp(a.grad[k], b.grad[k], a.n_in[k] * sizeof(double)) == 0);
            result_free(&a);
            result_free(&b);
            nb_ctx_free(p);
        }
}
END_TEST

/* A window of w: query i's output is the attention over keys i - w + 1 ..
 * i alone, here checked against nb_sdpa (causal, no window) on just those
 * keys for a few queries; and the window hides what it should, so a key
 * outside every query's window gets zero gradient. */
START_TEST(test_window_sees_the_last_keys) {
    sdpa_case s = {1, 100, 100, 2, 4, 3, true, 0.0, 0, NULL, 1, 10};
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 2, 2);
    nb_tensor *in[3];
    make_qkv(p, NB_F64, &s, &rng, in);
    nb_tensor *y = fused(c, in, &s); /* (1, 100, 2 * 3) */
    ck_assert_ptr_nonnull(y);
    static const int64_t queries[] = {0, 5, 9, 10, 63, 64, 99};
    for (size_t t = 0; t < sizeof queries / sizeof queries[0]; t++) {
        int64_t i = queries[t], j0 = i - 9 < 0 ? 0 : i - 9, n = i - j0 + 1;
        const double *q = in[0]->data, *k = in[1]->data, *v = in[2]->data;
        nb_tensor *qi = nb_from_data(c, NB_F64, NB_SHAPE(1, 1, 2, 4), q + i * 8);
        nb_tensor *kw = nb_from_data(c, NB_F64, NB_SHAPE(1, n, 1, 4), k + j0 * 4);
        nb_tensor *vw = nb_from_data(c, NB_F64, NB_SHAPE(1, n, 1, 3), v + j0 * 3);
        nb_tensor *ref = nb_sdpa(c, qi, kw, vw, NULL, false, 0.5, 0.0, 0); /* all n keys */
        ck_assert_ptr_nonnull(ref);
        for (int64_t e = 0; e < 6; e++)
            ck_assert_double_eq_tol(nb_get(y, (size_t)(i * 6 + e)), nb_get(ref, (size_t)e), 1e-13);
    }
    /* query 50's output alone, window 3: gradient reaches keys 48, 49, 50
     * and no other */
    nb_tensor *y3 = nb_sdpa_ex(c, in[0], in[1], in[2],
                               &(nb_sdpa_opts){.causal = true, .window = 3});
    nb_tensor *g = nb_zeros(c, NB_F64, NB_SHAPE(1, 100, 6));
    for (size_t e = 0; e < 6; e++) nb_set(g, 50 * 6 + e, 1.0);
    nb_zero_grad(in[1]);
    nb_zero_grad(in[2]);
    ck_assert_int_eq(nb_backward(c, y3, g), NB_OK);
    for (int64_t j = 0; j < 100; j++) {
        bool seen = j >= 48 && j <= 50;
        ck_assert_msg((nb_grad_get(in[2], (size_t)(j * 3)) != 0.0) == seen, "dv of key %d", (int)j);
        ck_assert_msg((nb_grad_get(in[1], (size_t)(j * 4)) != 0.0) == seen, "dk of key %d", (int)j);
    }
    nb_ctx_free(c);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_sdpa_ex_options_and_errors) {
    nb_ctx *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_tensor *q = nb_normal(c, NB_F64, NB_SHAPE(2, 5, 6, 4), 0, 1, &rng);
    nb_tensor *k = nb_normal(c, NB_F64, NB_SHAPE(2, 5, 3, 4), 0, 1, &rng);
    nb_tensor *v = nb_normal(c, NB_F64, NB_SHAPE(2, 5, 3, 2), 0, 1, &rng);
    nb_tensor *k4 = nb_zeros(c, NB_F64, NB_SHAPE(2, 5, 4, 4));
    nb_tensor *v4 = nb_zeros(c, NB_F64, NB_SHAPE(2, 5, 4, 2));
    nb_tensor *k0 = nb_zeros(c, NB_F64, NB_SHAPE(2, 5, 0, 4));
    nb_tensor *v0 = nb_zeros(c, NB_F64, NB_SHAPE(2, 5, 0, 2));
    /* opts NULL: not causal, scale 1 / sqrt(hd) = 0.5, as nb_sdpa spelled out */
    nb_tensor *a = nb_sdpa_ex(c, q, k, v, NULL), *b = nb_sdpa(c, q, k, v, NULL, false, 0.5, 0, 0);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->shape[2], 6 * 2);
    for (size_t i = 0; i < a->numel; i++) ck_assert_double_eq(nb_get(a, i), nb_get(b, i));
    /* a window as wide as the queries, or the widest, is causal alone */
    b = nb_sdpa(c, q, k, v, NULL, true, 0.3, 0, 0);
    static const int64_t wide[] = {5, 6, INT64_MAX};
    for (size_t w = 0; w < 3; w++) {
        a = nb_sdpa_ex(c, q, k, v, &(nb_sdpa_opts){.causal = true, .scale = 0.3, .window = wide[w]});
        ck_assert_ptr_nonnull(a);
        for (size_t i = 0; i < a->numel; i++) ck_assert_double_eq(nb_get(a, i), nb_get(b, i));
    }
    a = nb_sdpa_ex(c, q, k, v, &(nb_sdpa_opts){.causal = true, .scale = 0.3, .window = 4});
    ck_assert_double_ne(nb_get(a, a->numel - 1), nb_get(b, b->numel - 1)); /* 4 hides key 0 */
    ck_assert_ptr_null(nb_sdpa_ex(c, q, k, v, &(nb_sdpa_opts){.causal = true, .window = -2}));
    ck_assert_error_has(c, "sdpa_ex: window -2 is negative (0 is no window)");
    nb_ctx_clear_error(c);
    ck_assert_ptr_null(nb_sdpa_ex(c, q, k, v, &(nb_sdpa_opts){.window = 4}));
    ck_assert_error_has(c, "sdpa_ex: window 4 needs causal");
    nb_ctx_clear_error(c);
    ck_assert_ptr_null(nb_sdpa(c, q, k4, v4, NULL, true, 0.5, 0, 0));
    ck_assert_error_has(c, "sdpa: q (2, 5, 6, 4), k (2, 5, 4, 4), v (2, 5, 4, 2): the key/value "
                           "heads (dim 2 of k and v) must divide the query heads");
    nb_ctx_clear_error(c);
    ck_assert_ptr_null(nb_sdpa_ex(c, q, k0, v0, NULL));
    ck_assert_error_has(c, "must divide the query heads");
    nb_ctx_clear_error(c);
    ck_assert_ptr_null(nb_sdpa(c, q, k, v4, NULL, true, 0.5, 0, 0)); /* v's heads not k's */
    ck_assert_error_has(c, "do not fit");
    nb_ctx_clear_error(c);
    ck_assert_ptr_null(nb_sdpa_ex(c, q, k, v, &(nb_sdpa_opts){.scale = INFINITY}));
    ck_assert_error_has(c, "sdpa_ex: scale inf is not finite");
    nb_ctx_free(c);
}
END_TEST

/* ---- the modules' fused path ------------------------------------------------- */

/* MultiHeadAttention (d_in 5, d_out 6, 3 heads, qkv_bias) on x (2, 40, 5):
 * output and every parameter's gradient, fused vs composed. */
typedef struct mha_run {
    double out[2 * 40 * 6];
    double grads[8][64];
} mha_run;

static void mha_step(nb_nn_mha *m, nb_tensor *x, const nb_tensor *kpm, bool fused, mha_run *r) {
    nb_ctx *c = nb_ctx_new(0);
    m->use_fused = fused;
    nb_params_zero_grad(&m->params);
    nb_tensor *y = nb_nn_mha_forward_masked(c, m, x, kpm, NULL);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(nb_backward(c, nb_sum(c, nb_mul(c, y, y)), NULL), NB_OK);
    for (size_t i = 0; i < y->numel; i++) r->out[i] = nb_get(y, i);
    for (int k = 0; k < m->params.n; k++)
        for (size_t i = 0; i < m->params.t[k]->numel; i++)
            r->grads[k][i] = nb_grad_get(m->params.t[k], i);
    /* the fused path records one sdpa node and no softmax */
    bool has_sdpa = false, has_softmax = false;
    for (nb_node *n = c->tape; n; n = n->prev) {
        has_sdpa |= n->op == NB_OP_SDPA;
        has_softmax |= n->op == NB_OP_SOFTMAX;
    }
    ck_assert(has_sdpa == fused && has_softmax == !fused);
    nb_ctx_free(c);
}

START_TEST(test_mha_fused_matches_composed) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 21, 1);
    nb_nn_mha m;
    ck_assert_int_eq(nb_nn_mha_init(p, &m, 5, 6, 40, 0.2, 3, true, NB_F64, &rng), NB_OK);
    ck_assert(m.use_fused);
    nb_nn_mha_train(&m, false);
    nb_tensor *x = nb_normal(p, NB_F64, NB_SHAPE(2, 40, 5), 0, 1, &rng);
    uint8_t pad[80] = {0};
    for (int j = 30; j < 40; j++) pad[40 + j] = 1;
    pad[3] = 1;
    nb_tensor *kpm = nb_from_data(p, NB_BOOL, NB_SHAPE(2, 40), pad);
    static mha_run a, b;
    for (int masked = 0; masked < 2; masked++) {
        mha_step(&m, x, masked ? kpm : NULL, true, &a);
        mha_step(&m, x, masked ? kpm : NULL, false, &b);
        ck_assert_double_le(max_diff(a.out, b.out, 480), 1e-12);
        for (int k = 0; k < m.params.n; k++)
            ck_assert_double_le(max_diff(a.grads[k], b.grads[k], m.params.t[k]->numel), 1e-12);
    }
    nb_ctx_free(p);
}
END_TEST

/* Train mode: the fused module's output is the composed ops with the mask
 * nb_sdpa_dropout_mask gives for the seed drawn from the Dropout's rng (two
 * draws, high word first); CausalAttention the same with one head. */
START_TEST(test_fused_dropout_seed_from_module_rng) {
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 22, 1);
    nb_nn_mha m;
    nb_nn_causal_attention ca;
    ck_assert_int_eq(nb_nn_mha_init(p, &m, 4, 6, 8, 0.3, 2, false, NB_F64, &rng), NB_OK);
    ck_assert_int_eq(nb_nn_causal_attention_init(p, &ca, 4, 3, 8, 0.3, false, NB_F64, &rng),
                     NB_OK);
    nb_tensor *x = nb_normal(p, NB_F64, NB_SHAPE(2, 8, 4), 0, 1, &rng);
    for (int which = 0; which < 2; which++) {
        nb_pcg32_seed(&rng, 5, 6);
        nb_tensor *y = which ? nb_nn_causal_attention_forward(c, &ca, x)
                             : nb_nn_mha_forward(c, &m, x);
        nb_pcg32_seed(&rng, 5, 6);
        uint64_t seed = (uint64_t)nb_pcg32_next(&rng) << 32;
        seed |= nb_pcg32_next(&rng);
        int64_t heads = which ? 1 : 2, hd = 3;
        sdpa_case s = {2, 8, 8, heads, hd, hd, true, 0.3, seed, NULL, 0, 0};
        nb_nn_linear *lin[3] = {&m.W_query, &m.W_key, &m.W_value};
        if (which) lin[0] = &ca.W_query, lin[1] = &ca.W_key, lin[2] = &ca.W_value;
        nb_tensor *in[3];
        for (int k = 0; k < 3; k++)
            in[k] = nb_view(c, nb_nn_linear_forward(c, lin[k], x), NB_SHAPE(2, 8, heads, hd));
        nb_tensor *want = composed(c, in, &s);
        s.p = 0;
        nb_tensor *no_drop = composed(c, in, &s);
        if (!which) want = nb_nn_linear_forward(c, &m.out_proj, want);
        if (!which) no_drop = nb_nn_linear_forward(c, &m.out_proj, no_drop);
        ck_assert_ptr_nonnull(no_drop);
        ck_assert_int_eq(y->numel, want->numel);
        double moved = 0;
        for (size_t i = 0; i < y->numel; i++) {
            ck_assert_double_eq_tol(nb_get(y, i), nb_get(want, i), 1e-12);
            moved = fmax(moved, fabs(nb_get(y, i) - nb_get(no_drop, i)));
        }
        ck_assert_double_gt(moved, 1e-3); /* dropout acted */
    }
    nb_ctx_free(c);
    nb_ctx_free(p);
}
END_TEST

Suite *suite_sdpa(void) {
    Suite *s = suite_create("sdpa");
    TCase *tc = tcase_create("sdpa");
    tcase_add_test(tc, test_matches_composed_causal);
    tcase_add_test(tc, test_matches_composed_padded);
    tcase_add_test(tc, test_matches_composed_dropout);
    tcase_add_test(tc, test_float32_matches_composed);
    tcase_add_test(tc, test_gradcheck_finite_differences);
    tcase_add_test(tc, test_fully_masked_rows_are_zero);
    tcase_add_test(tc, test_nan_propagates);
    tcase_add_test(tc, test_dropout_mask_rule);
    tcase_add_test(tc, test_pcg32_advance_is_next_repeated);
    tcase_add_test(tc, test_same_bits_one_and_two_threads);
    tcase_add_test(tc, test_memory_is_linear_in_t);
    tcase_add_test(tc, test_errors_name_the_inputs);
    tcase_add_test(tc, test_gqa_and_window_match_composed);
    tcase_add_test(tc, test_gqa_equals_mha_repeated);
    tcase_add_test(tc, test_gqa_window_same_bits_one_and_two_threads);
    tcase_add_test(tc, test_window_sees_the_last_keys);
    tcase_add_test(tc, test_sdpa_ex_options_and_errors);
    tcase_add_test(tc, test_mha_fused_matches_composed);
    tcase_add_test(tc, test_fused_dropout_seed_from_module_rng);
    suite_add_tcase(s, tc);
    return s;
}
