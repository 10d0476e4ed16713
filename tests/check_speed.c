/* check_speed.c - what the speed work must not change: a whole training
 * step (MultiHeadAttention, MSE, backward, Adam) gives the same bits on 1
 * and 2 threads; a steady-state step allocates nothing; the SIMD kernels
 * (src/kernels/) give their portable twins' bits; the packed gemm is the
 * documented FMA chain bit for bit in every transposition; the polynomial
 * expf is within 2 ulp of libm; nb_pcg32_advance lands where the draws do. */
#include "check_nabla.h"

#include "kernels/kernels_internal.h"
#include "nn/gpt_internal.h"

/* ---- a training step on 1 and 2 threads -------------------------------------------- */

/* MultiHeadAttention(128, 128, context 64, dropout 0.1, 4 heads) on x (8, 64,
 * 128), MSE against a target, backward, Adam: sizes at which matmul,
 * linear, softmax, dropout and Adam all split over two threads. */
typedef struct train_run {
    nb_ctx *params, *step;
    nb_nn_mha m;
    nb_optim *opt;
    nb_tensor *x, *target;
    nb_pcg32 drop;
} train_run;

static void train_init(train_run *t) {
    nb_pcg32 init;
    nb_pcg32_seed(&init, 2024, 1);
    nb_pcg32_seed(&t->drop, 2024, 3);
    t->params = nb_ctx_new(0);
    t->step = nb_ctx_new(0);
    ck_assert_int_eq(nb_nn_mha_init(t->params, &t->m, 128, 128, 64, 0.1, 4, false, NB_F32, &init),
                     NB_OK);
    t->m.dropout.rng = &t->drop;
    t->x = nb_uniform(t->params, NB_F32, NB_SHAPE(8, 64, 128), -1, 1, &init);
    t->target = nb_uniform(t->params, NB_F32, NB_SHAPE(8, 64, 128), -1, 1, &init);
    t->opt = nb_adam_new(t->params, &t->m.params, nb_adam_defaults(1e-3));
    ck_assert_ptr_nonnull(t->opt);
}

static nb_tensor *train_step(train_run *t) {
    nb_ctx_reset(t->step);
    nb_tensor *loss = nb_mse_loss(t->step, nb_nn_mha_forward(t->step, &t->m, t->x), t->target);
    ck_assert_ptr_nonnull(loss);
    nb_params_zero_grad(&t->m.params);
    ck_assert_int_eq(nb_backward(t->step, loss, NULL), NB_OK);
    ck_assert_int_eq(nb_optim_step(t->opt), NB_OK);
    return loss;
}

static void train_free(train_run *t) {
    nb_optim_free(t->opt);
    nb_ctx_free(t->step);
    nb_ctx_free(t->params);
}

/* Three steps each; then the losses, every parameter and its last gradient
 * must be memcmp-identical. */
START_TEST(test_train_step_same_bits_on_1_and_2_threads) {
    train_run run[2];
    float loss[2][3];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(nb_set_num_threads(k + 1), k + 1);
        train_init(&run[k]);
        for (int s = 0; s < 3; s++) loss[k][s] = *(float *)train_step(&run[k])->data;
    }
    nb_set_num_threads(1);
    ck_assert(memcmp(loss[0], loss[1], sizeof loss[0]) == 0);
    ck_assert(loss[0][2] < loss[0][0]); /* and it trains */
    for (int i = 0; i < run[0].m.params.n; i++) {
        nb_tensor *a = run[0].m.params.t[i], *b = run[1].m.params.t[i];
        size_t bytes = a->numel * sizeof(float);
        ck_assert_msg(memcmp(a->data, b->data, bytes) == 0, "%s differs",
                      run[0].m.params.names[i]);
        ck_assert_msg(memcmp(a->grad, b->grad, bytes) == 0, "%s's gradient differs",
                      run[0].m.params.names[i]);
    }
    train_free(&run[0]);
    train_free(&run[1]);
}
END_TEST

/* A GPT training step (nb_train_step_run: both layouts, layer_norm, GELU,
 * sdpa with dropout, cross-entropy over 65 classes, clipping, AdamW) at
 * sizes where each of those splits over two threads: three steps on 1 and
 * on 2 threads give memcmp-identical losses, weights and gradients. */
typedef struct gpt_run {
    nb_gpt *m;
    nb_tensor *x, *y;
} gpt_run;

static nb_tensor *gpt_run_loss(nb_ctx *ctx, int micro, void *user) {
    (void)micro;
    gpt_run *r = user;
    return nb_gpt_loss(ctx, r->m, r->x, r->y, NULL);
}

START_TEST(test_gpt_step_same_bits_on_1_and_2_threads) {
    nb_gpt_arch arch = _i ? NB_GPT_NANOGPT : NB_GPT_GPTMODEL;
    nb_ctx *p[2], *s[2];
    nb_gpt m[2];
    double loss[2][3];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(nb_set_num_threads(k + 1), k + 1);
        p[k] = nb_ctx_new(0), s[k] = nb_ctx_new(0);
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 77, 1);
        nb_gpt_config c = nb_gpt_config_default(arch);
        c.vocab_size = 65, c.block_size = 32, c.n_layer = 1, c.n_head = 2, c.n_embd = 64;
        c.dropout = 0.1, c.dtype = NB_F32;
        ck_assert_int_eq(nb_gpt_init(p[k], &m[k], &c, &rng), NB_OK);
        gpt_run r = {&m[k], nb_empty(p[k], NB_I64, NB_SHAPE(16, 32)),
                     nb_empty(p[k], NB_I64, NB_SHAPE(16, 32))};
        for (int i = 0; i < 16 * 32; i++) {
            ((int64_t *)r.x->data)[i] = nb_pcg32_bounded(&rng, 65);
            ((int64_t *)r.y->data)[i] = (((int64_t *)r.x->data)[i] * 7 + 3) % 65;
        }
        nb_optim *opt = nb_adamw_new_groups(p[k], &m[k].params, nb_adamw_defaults(1e-3), false);
        nb_train_step st = {.opt = opt, .params = &m[k].params, .accum_steps = 1,
                            .grad_clip = 1.0, .lr = 1e-2, .loss_fn = gpt_run_loss, .user = &r};
        for (int i = 0; i < 3; i++) {
            nb_step_result res;
            ck_assert_int_eq(nb_train_step_run(s[k], &st, &res), NB_OK);
            loss[k][i] = res.loss;
        }
        nb_optim_free(opt);
    }
    nb_set_num_threads(1);
    ck_assert(memcmp(loss[0], loss[1], sizeof loss[0]) == 0);
    ck_assert(loss[0][2] < loss[0][0]);
    for (int i = 0; i < m[0].params.n; i++) {
        nb_tensor *a = m[0].params.t[i], *b = m[1].params.t[i];
        size_t bytes = a->numel * sizeof(float);
        ck_assert_msg(memcmp(a->data, b->data, bytes) == 0, "%s differs", m[0].params.names[i]);
        ck_assert_msg(memcmp(a->grad, b->grad, bytes) == 0, "%s's gradient differs",
                      m[0].params.names[i]);
    }
    for (int k = 0; k < 2; k++) {
        nb_gpt_free(&m[k]);
        nb_ctx_free(s[k]), nb_ctx_free(p[k]);
    }
}
END_TEST

/* After two warm-up steps (the arena grows to its peak, Adam allocates its
 * state), eight more steps on 2 threads call malloc no more. */
START_TEST(test_steady_state_steps_do_not_allocate) {
    nb_set_num_threads(2);
    train_run t;
    train_init(&t);
    train_step(&t);
    train_step(&t);
    size_t step_mallocs = nb_ctx_mallocs(t.step), param_mallocs = nb_ctx_mallocs(t.params);
    size_t reserved = nb_ctx_mem_reserved(t.step);
    for (int s = 0; s < 8; s++) train_step(&t);
    ck_assert_uint_eq(nb_ctx_mallocs(t.step), step_mallocs);
    ck_assert_uint_eq(nb_ctx_mallocs(t.params), param_mallocs);
    ck_assert_uint_eq(nb_ctx_mem_reserved(t.step), reserved);
    nb_set_num_threads(1);
    train_free(&t);
}
END_TEST

/* ---- the SIMD elementwise kernels ------------------------------------------------- */

static void fill(float *v, size_t n, nb_pcg32 *r, float lo, float hi) {
    for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * nb_pcg32_float(r);
}

/* transpose on shapes with whole 16 x 16 blocks, edges on either side and
 * none at all: every element lands at its transposed place, in both sets */
static void check_transpose(const nb_vec_kernels *v) {
    static const size_t shapes[][3] = {{16, 16, 16}, {64, 32, 128}, {17, 33, 40}, {5, 3, 3},
                                       {0, 4, 4},    {48, 16, 16},  {1, 1, 1},    {31, 47, 47}};
    enum { M = 64 * 128 };
    static float src[M], d1[M], d2[M];
    for (size_t i = 0; i < M; i++) src[i] = (float)i * 0.5f - 7.0f;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t rows = shapes[s][0], cols = shapes[s][1], ld = shapes[s][2];
        memset(d1, 0xff, sizeof d1);
        memset(d2, 0xff, sizeof d2);
        v->transpose(d1, src, ld, rows, cols);
        nb_vec_portable.transpose(d2, src, ld, rows, cols);
        for (size_t j = 0; j < rows; j++)
            for (size_t d = 0; d < cols; d++) {
                ck_assert(d1[d * rows + j] == src[j * ld + d]);
                ck_assert(d2[d * rows + j] == src[j * ld + d]);
            }
        ck_assert(memcmp(d1, d2, sizeof d1) == 0); /* nothing else written */
    }
}

/* The fused attention's tile kernels: rows of n (up to 70) columns, ld 73
 * apart, each with its own visible length (0, 1, a tail, all) and its own
 * max; a -inf bias (a padded key) and a NaN score in one row. Against the
 * portable set bit for bit, and each row's sum against exp_affine_sum on
 * that row alone. */
static void check_tile_rows(const nb_vec_kernels *v) {
    const nb_vec_kernels *p = &nb_vec_portable;
    enum { LD = 73, ROWS = 6 };
    static float x[ROWS * LD], a1[ROWS * LD], a2[ROWS * LD], a3[LD], bias[LD];
    float m1[ROWS], m2[ROWS], s1[ROWS], s2[ROWS];
    nb_pcg32 r;
    nb_pcg32_seed(&r, 8, 8);
    for (size_t n = 1; n <= 70; n += 23) {
        int64_t lim[ROWS] = {0, 1, (int64_t)n / 2, (int64_t)n, (int64_t)n - 1, (int64_t)n};
        fill(x, ROWS * LD, &r, -8, 8);
        for (size_t c = 0; c < LD; c++) bias[c] = c == 3 ? -INFINITY : 0.5f * (float)(c % 3);
        x[5 * LD + n / 3] = NAN;
        v->max_affine_rows(m1, x, LD, lim, ROWS, 0.3f, bias);
        p->max_affine_rows(m2, x, LD, lim, ROWS, 0.3f, bias);
        for (int k = 0; k < ROWS; k++) {
            if (k == 5 || lim[k] == 0) ck_assert(k == 5 ? isnan(m1[k]) && isnan(m2[k]) : m1[k] == -INFINITY);
            else ck_assert(m1[k] == m2[k]);
            if (k == 5) m1[k] = m2[k] = 1.0f; /* the exps below use a number */
        }
        m1[0] = m2[0] = 0; /* a row that sees nothing: any m */
        memcpy(a1, x, sizeof a1), memcpy(a2, x, sizeof a2);
        v->exp_affine_rows(a1, LD, lim, ROWS - 1, n, 0.3f, bias, m1, s1);
        p->exp_affine_rows(a2, LD, lim, ROWS - 1, n, 0.3f, bias, m2, s2);
        ck_assert(memcmp(a1, a2, sizeof a1) == 0); /* columns past n untouched alike */
        ck_assert(memcmp(s1, s2, (ROWS - 1) * sizeof(float)) == 0);
        for (int k = 0; k < ROWS - 1; k++) {
            for (size_t c = (size_t)lim[k]; c < n; c++) ck_assert(a1[k * LD + c] == 0.0f);
            float want = v->exp_affine_sum(a3, x + k * LD, 0.3f, bias, m1[k], (size_t)lim[k]);
            ck_assert(memcmp(&want, &s1[k], sizeof want) == 0);
            ck_assert(memcmp(a3, a1 + k * LD, (size_t)lim[k] * sizeof(float)) == 0);
        }
        v->exp_affine_rows(a1, LD, lim, ROWS - 1, n, 0.3f, bias, m1, NULL); /* no sums */
    }
}

/* Kernel set v against the portable one, on every length from 0 to 40 (each
 * tail) and 1000, including -inf inputs to exp.
 * Long: one loop over the lengths, each kernel checked in turn on the same
 * buffers and random stream; the checks read what the ones before them
 * left (the stream's state, the drawn bits and keep masks, a1 and a2). */
static void check_vec_set(const nb_vec_kernels *v) {
    check_transpose(v);
    check_tile_rows(v);
    const nb_vec_kernels *p = &nb_vec_portable;
    enum { N = 1000 };
    static float x[N], y[N], dy[N], a1[N], a2[N], b1[N], b2[N], m1[N], m2[N];
    static uint32_t bits[N];
    static unsigned char k1[N], k2[N];
    nb_pcg32 r;
    nb_pcg32_seed(&r, 9, 9);
    for (size_t n = 0; n <= N; n = n < 40 ? n + 1 : n < N ? N : N + 1) {
        fill(x, n, &r, -30, 5);
        if (n > 3) x[3] = -INFINITY;
        fill(y, n, &r, 0, 1);
        fill(dy, n, &r, -1, 1);
        nb_pcg32 r1 = r, r2 = r;
        v->pcg32_fill(&r1, bits, n);
        p->pcg32_fill(&r2, bits, 0); /* nothing drawn, nothing changed */
        ck_assert_uint_eq(r2.state, r.state);
        for (size_t i = 0; i < n; i++) ck_assert_uint_eq(bits[i], nb_pcg32_next(&r2));
        ck_assert_uint_eq(r1.state, r2.state);
        r = r1;
        uint32_t thr = 1u + nb_pcg32_next(&r) % (1u << 24); /* a dropout threshold */
        r1 = r, r2 = r;
        v->pcg32_keep(&r1, k1, n, thr);
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(k1[i], (nb_pcg32_next(&r2) >> 8) >= thr);
        ck_assert_uint_eq(r1.state, r2.state);
        r1 = r;
        p->pcg32_keep(&r1, k2, n, thr);
        ck_assert(memcmp(k1, k2, n) == 0);
        r = r2;
        if (n > 0) {
            float m1 = v->max(x, n), m2 = p->max(x, n);
            ck_assert(memcmp(&m1, &m2, sizeof m1) == 0);
            memcpy(a1, x, n * sizeof(float));
            a1[n / 2] = NAN;
            ck_assert(isnan(v->max(a1, n)) && isnan(p->max(a1, n)));
        }
        /* exp_affine_sum against its formula and the portable twin; the
         * bias -inf where x is (a padded key) */
        for (size_t i = 0; i < n; i++) b1[i] = i == 3 ? -INFINITY : 0.25f * (float)(i % 5);
        float e1 = v->exp_affine_sum(a1, y, 0.7f, b1, 0.3f, n);
        float e2 = p->exp_affine_sum(a2, y, 0.7f, b1, 0.3f, n);
        ck_assert(memcmp(&e1, &e2, sizeof e1) == 0);
        ck_assert(memcmp(a1, a2, n * sizeof(float)) == 0);
        for (size_t i = 0; i < n; i++) {
            float t = y[i] * 0.7f;
            t = t + b1[i];
            ck_assert(a1[i] == nb_expf_poly(t - 0.3f));
        }
        float s1 = v->exp_sub_sum(a1, x, 1.5f, n), s2 = p->exp_sub_sum(a2, x, 1.5f, n);
        ck_assert(memcmp(&s1, &s2, sizeof s1) == 0);
        ck_assert(memcmp(a1, a2, n * sizeof(float)) == 0);
        v->scale(a1, 0.37f, n);
        p->scale(a2, 0.37f, n);
        ck_assert(memcmp(a1, a2, n * sizeof(float)) == 0);
        v->add(a1, y, n);
        p->add(a2, y, n);
        ck_assert(memcmp(a1, a2, n * sizeof(float)) == 0);
        memcpy(b1, dy, sizeof b1);
        memcpy(b2, dy, sizeof b2);
        v->softmax_bwd(b1, y, dy, n);
        p->softmax_bwd(b2, y, dy, n);
        ck_assert(memcmp(b1, b2, n * sizeof(float)) == 0);
        v->dropout(a1, k1, x, bits, 1677722, 1.25f, n);
        p->dropout(a2, k2, x, bits, 1677722, 1.25f, n);
        ck_assert(memcmp(a1, a2, n * sizeof(float)) == 0);
        ck_assert(memcmp(k1, k2, n) == 0);
        v->dropout_bwd(b1, k1, dy, 1.25f, n);
        p->dropout_bwd(b2, k2, dy, 1.25f, n);
        ck_assert(memcmp(b1, b2, n * sizeof(float)) == 0);
        /* plain, then with the training step's clip folded in (g scaled and
         * stored back) */
        for (int clip = 0; clip < 2; clip++) {
            nb_adam_coef c = {0.999f, 0.9f, 0.1f, 0.999f, 0.001f, 0.3f, 1e-8f, -0.01f,
                              clip ? 0.37f : 1.0f};
            float g1[sizeof a1 / sizeof *a1], g2[sizeof a1 / sizeof *a1];
            memcpy(g1, x, n * sizeof(float)), memcpy(g2, x, n * sizeof(float));
            memcpy(a1, y, sizeof a1), memcpy(a2, y, sizeof a2);
            memcpy(m1, dy, sizeof m1), memcpy(m2, dy, sizeof m2);
            fill(b1, n, &r, 0, 1);
            memcpy(b2, b1, sizeof b2);
            v->adam(a1, g1, m1, b1, n, &c);
            p->adam(a2, g2, m2, b2, n, &c);
            ck_assert(memcmp(a1, a2, n * sizeof(float)) == 0);
            ck_assert(memcmp(m1, m2, n * sizeof(float)) == 0);
            ck_assert(memcmp(b1, b2, n * sizeof(float)) == 0);
            ck_assert(memcmp(g1, g2, n * sizeof(float)) == 0);
            ck_assert(n == 0 || (clip ? g1[n - 1] == x[n - 1] * 0.37f : g1[n - 1] == x[n - 1]));
        }
        for (int approx = 0; approx < 2; approx++) {
            fill(a1, n, &r, -12, 12);
            if (n > 5) a1[5] = NAN;
            v->gelu(m1, a1, n, approx);
            p->gelu(m2, a1, n, approx);
            memcpy(b1, dy, sizeof b1), memcpy(b2, dy, sizeof b2);
            v->gelu_bwd(b1, a1, y, n, approx, 0);
            p->gelu_bwd(b2, a1, y, n, approx, 0);
            if (n > 5) { /* NaN in, NaN out (its sign bit may differ) */
                ck_assert(isnan(m1[5]) && isnan(m2[5]) && isnan(b1[5]) && isnan(b2[5]));
                m1[5] = m2[5] = b1[5] = b2[5] = 0;
            }
            ck_assert(memcmp(m1, m2, n * sizeof(float)) == 0);
            ck_assert(memcmp(b1, b2, n * sizeof(float)) == 0);
            /* store: dy * gelu'(x) whatever dx held, the add's product */
            float *s1 = m1, *s2 = m2;
            fill(s1, n, &r, -1e30f, 1e30f), fill(s2, n, &r, -1e30f, 1e30f);
            v->gelu_bwd(s1, a1, y, n, approx, 1);
            p->gelu_bwd(s2, a1, y, n, approx, 1);
            memset(b1, 0, sizeof b1);
            p->gelu_bwd(b1, a1, y, n, approx, 0);
            if (n > 5) s1[5] = s2[5] = b1[5] = 0;
            ck_assert(memcmp(s1, s2, n * sizeof(float)) == 0);
            for (size_t i = 0; i < n; i++) ck_assert(s1[i] == b1[i]);
            /* gelu_d: gelu's y, and the d whose product with dy (here y) is
             * gelu_bwd's stored gradient s1; the portable twin's bits */
            v->gelu_d(b2, m2, a1, n, approx);
            v->gelu(a2, a1, n, approx);
            for (size_t i = 0; i < n; i++) {
                if (i == 5) continue; /* the NaN */
                ck_assert(b2[i] == a2[i]);
                ck_assert(y[i] * m2[i] == s1[i]);
            }
            p->gelu_d(m1, b1, a1, n, approx);
            if (n > 5) m1[5] = b2[5] = b1[5] = m2[5] = 0;
            ck_assert(memcmp(m1, b2, n * sizeof(float)) == 0);
            ck_assert(memcmp(b1, m2, n * sizeof(float)) == 0);
        }
    }
}

/* check(set) for the set this CPU uses and each SIMD set the CPU can run. */
static void for_each_vec_set(void (*check)(const nb_vec_kernels *)) {
    check(nb_vec());
#if NB_X86_KERNELS
    if (__builtin_cpu_supports("avx512f")) check(&nb_vec_avx512);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) check(&nb_vec_avx2);
#endif
}

START_TEST(test_vec_kernels_match_portable) { for_each_vec_set(check_vec_set); }
END_TEST

/* exp where its result is subnormal, overflows or is NaN: each SIMD set's
 * exp (AVX-512 scales by 2^n in one vscalefps, AVX2 and the portable set
 * by two exact factors) must give the portable bits, through exp_sub_sum
 * with m = 0 over [-110, 90] (x below -87.3 gives subnormals, above 88.7
 * infinity). */
static void check_exp_range(const nb_vec_kernels *v) {
    enum { N = 20000 };
    static float x[N], a[N], b[N];
    for (int i = 0; i < N; i++) x[i] = -110.0f + 200.0f * (float)i / N;
    x[77] = NAN;
    float sa = v->exp_sub_sum(a, x, 0.0f, N), sb = nb_vec_portable.exp_sub_sum(b, x, 0.0f, N);
    ck_assert(isnan(a[77]) && isnan(b[77]) && isnan(sa) && isnan(sb));
    a[77] = b[77] = 0;
    ck_assert(memcmp(a, b, sizeof a) == 0);
    int subnormal = 0;
    for (int i = 0; i < N; i++) subnormal += a[i] != 0 && a[i] < 1.17549435e-38f;
    ck_assert_int_gt(subnormal, 1000);
    ck_assert(isinf(a[N - 1]));
}

START_TEST(test_vec_exp_subnormal_range) { for_each_vec_set(check_exp_range); }
END_TEST

/* The float GELU kernels against the double formulas (libm's erf, tanh):
 * within 4e-7 of max(|y|, 1) for y, 1e-6 of max(|dy/dx|, 1) for dy/dx, over [-12, 12]. */
START_TEST(test_gelu_kernel_accuracy) {
    const double PI_ = 3.14159265358979323846;
    for (int approx = 0; approx < 2; approx++)
        for (int i = -120000; i <= 120000; i++) {
            float x = (float)i / 10000, y, d;
            nb_gelu1(x, approx, &y, &d);
            double xd = x, yd, dd;
            if (approx) {
                double c = sqrt(2 / PI_), t = tanh(c * (xd + 0.044715 * xd * xd * xd));
                yd = 0.5 * xd * (1 + t);
                dd = 0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * c * (1 + 3 * 0.044715 * xd * xd);
            } else {
                double phi = 0.5 * erfc(-xd / sqrt(2.0));
                yd = xd * phi;
                dd = phi + xd * exp(-0.5 * xd * xd) / sqrt(2 * PI_);
            }
            ck_assert_msg(fabs(y - yd) <= 4e-7 * fmax(fabs(yd), 1.0),
                          "gelu(%g) approx %d: %.9g vs %.9g", xd, approx, y, yd);
            ck_assert_msg(fabs(d - dd) <= 1e-6 * fmax(fabs(dd), 1.0),
                          "gelu'(%g) approx %d: %.9g vs %.9g", xd, approx, d, dd);
        }
}
END_TEST

/* Distance in units in the last place between two finite floats of one sign. */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

/* nb_expf_poly against libm's exp in double, rounded to float, over about
 * two million points of [-87.3, 88.7] (normal results), the edges, and the
 * special values. The same bits from the SIMD kernel are checked above. */
START_TEST(test_expf_poly_within_2_ulp) {
    int64_t worst = 0;
    float at = 0;
    for (double x = -87.3; x <= 88.7; x += 8.3e-5) {
        float xf = (float)x, want = (float)exp((double)xf), got = nb_expf_poly(xf);
        int64_t u = ulps(got, want);
        if (u > worst) worst = u, at = xf;
    }
    ck_assert_msg(worst <= 2, "expf_poly is %lld ulp off at %.9g", (long long)worst, at);
    ck_assert_float_eq(nb_expf_poly(0.0f), 1.0f);
    ck_assert_float_eq(nb_expf_poly(-INFINITY), 0.0f);
    ck_assert_float_eq(nb_expf_poly(-200.0f), 0.0f);
    ck_assert(isinf(nb_expf_poly(INFINITY)));
    ck_assert(isinf(nb_expf_poly(89.0f)));
    ck_assert(isnan(nb_expf_poly(NAN)));
    ck_assert(ulps(nb_expf_poly(88.72f), (float)exp((double)88.72f)) <= 2);
}
END_TEST

/* ---- the packed gemm ------------------------------------------------------------- */

/* c (R, 45) (+)= a (R, 300) @ b (300, 45) in the four transpositions and
 * both modes, against the contract written out: per NB_GEMM_KC block an fmaf
 * chain from zero, stored or added. Bit for bit. R = 13 is one sliver and a
 * partial one; R = 603 makes a transposed a's columns 2.4 KB apart, the
 * weight gradient's case that packs a several slivers at a time, ending in
 * a partial group and a partial sliver for both kernels. */
static void check_packed_rows(const nb_sgemm_kernel *k, int R) {
    enum { K = 300, C = 45, RMAX = 603 };
    static float a[RMAX * K], b[K * C], c[RMAX * C], want[RMAX * C], c0[RMAX * C];
    ck_assert_int_le(R, RMAX);
    const size_t bytes = sizeof(float) * (size_t)(R * C);
    nb_pcg32 r;
    nb_pcg32_seed(&r, 3, 4);
    fill(a, R * K, &r, -1, 1);
    fill(b, K * C, &r, -1, 1);
    fill(c0, R * C, &r, -1, 1);
    for (int t = 0; t < 8; t++) {
        bool ta = t & 1, tb = t & 2, add = t & 4;
        int64_t ars = ta ? 1 : K, acs = ta ? R : 1, brs = tb ? 1 : C, bcs = tb ? K : 1;
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) {
                float w = c0[i * C + j];
                for (int p0 = 0; p0 < K; p0 += NB_GEMM_KC) {
                    float acc = 0;
                    for (int p = p0; p < K && p < p0 + NB_GEMM_KC; p++)
                        acc = fmaf(a[i * ars + p * acs], b[p * brs + j * bcs], acc);
                    w = (add || p0 > 0) ? w + acc : acc;
                }
                want[i * C + j] = w;
            }
        memcpy(c, c0, bytes);
        ck_assert(nb_sgemm_packed(k, c, C, a, ars, acs, b, brs, bcs, R, K, C, add));
        ck_assert_msg(memcmp(c, want, bytes) == 0, "%dx%d kernel, %d rows: case %d differs", k->mr,
                      k->nr, R, t);
        /* b packed whole in two ranges of slivers, then two ranges of rows */
        float *bp = nb_sgemm_whole_buffer(0, nb_sgemm_whole_size(k, K, C));
        ck_assert_ptr_nonnull(bp);
        int64_t ns = nb_sgemm_whole_slivers(k, C);
        nb_sgemm_pack_whole(k, bp, b, brs, bcs, K, C, 0, 1);
        nb_sgemm_pack_whole(k, bp, b, brs, bcs, K, C, 1, ns);
        memcpy(c, c0, bytes);
        ck_assert(nb_sgemm_prepacked(k, c, a, ars, acs, bp, k->mr, K, C, add));
        ck_assert(nb_sgemm_prepacked(k, c + k->mr * C, a + k->mr * ars, ars, acs, bp,
                                     R - k->mr, K, C, add));
        ck_assert_msg(memcmp(c, want, bytes) == 0, "%dx%d kernel, %d rows, b packed whole: case %d "
                      "differs", k->mr, k->nr, R, t);
    }
}

/* Row counts whose last sliver has every height from 1 to 5 for the
 * 6-row AVX2 kernel (its ukr_rows), and none. */
static void check_packed(const nb_sgemm_kernel *k) {
    static const int rows[] = {13, 16, 17, 20, 24, 603};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) check_packed_rows(k, rows[i]);
}

/* The kernel this CPU uses, and the AVX2 one when it can run (a CPU with
 * neither runs only the portable gemm, which check_kernels covers). */
START_TEST(test_packed_gemm_is_the_fma_chain) {
    const nb_sgemm_kernel *k = nb_sgemm_kernel_best();
    if (k) check_packed(k);
#if NB_X86_KERNELS
    static const nb_sgemm_kernel avx2 = {NB_SGEMM_AVX2_MR, NB_SGEMM_AVX2_NR, nb_sgemm_ukr_avx2,
                                         nb_sgemm_ukr_avx2_rows};
    /* and with a partial sliver packed with zero rows, as without ukr_rows */
    static const nb_sgemm_kernel avx2_packed = {NB_SGEMM_AVX2_MR, NB_SGEMM_AVX2_NR,
                                                nb_sgemm_ukr_avx2, NULL};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        check_packed(&avx2);
        check_packed(&avx2_packed);
    }
#endif
}
END_TEST

/* The unpacked gemm on narrow products (9 to 16 floats or 5 to 8 doubles a
 * row, 8 to 19 rows: the AVX-512 8 x 64-byte tiles where the CPU has them,
 * the AVX2 ones on the rest;
 * the fused attention's heads of 16), c's rows wider apart than its
 * columns: the fmaf chain, bit for bit, and c's padding untouched. */
START_TEST(test_narrow_gemm_is_the_fma_chain) {
#if NB_X86_KERNELS
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
#else
    return; /* the portable kernel rounds a product and a sum apart */
#endif
    enum { K = 37, LD = 20 };
    static float a[19 * K], b[K * 16], c[19 * LD], want[19 * LD];
    nb_pcg32 r;
    nb_pcg32_seed(&r, 6, 7);
    fill(a, 19 * K, &r, -1, 1);
    fill(b, K * 16, &r, -1, 1);
    for (int rows = 8; rows <= 19; rows += 11)
        for (int cols = 9; cols <= 16; cols++)
            for (int add = 0; add < 2; add++) {
                for (int i = 0; i < 19 * LD; i++) c[i] = want[i] = (float)i * 0.25f;
                for (int i = 0; i < rows; i++)
                    for (int j = 0; j < cols; j++) {
                        float acc = 0;
                        for (int p = 0; p < K; p++) acc = fmaf(a[i * K + p], b[p * 16 + j], acc);
                        want[i * LD + j] = add ? want[i * LD + j] + acc : acc;
                    }
                nb_gemm_float_ldc(c, LD, a, K, 1, b, 16, 1, rows, K, cols, add);
                ck_assert_msg(memcmp(c, want, sizeof c) == 0, "%d x %d, add %d", rows, cols, add);
            }
    /* float64 (gradcheck's) on 5 to 8 columns, the same 8 x 64-byte tiles */
    static double ad[19 * K], bd[K * 8], cd[19 * LD], wd[19 * LD];
    for (int i = 0; i < 19 * K; i++) ad[i] = a[i];
    for (int i = 0; i < K * 8; i++) bd[i] = b[i] * 0.5;
    for (int rows = 8; rows <= 19; rows += 11)
        for (int cols = 5; cols <= 8; cols++) {
            for (int i = 0; i < 19 * LD; i++) cd[i] = wd[i] = (double)i * 0.25;
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < cols; j++) {
                    double acc = 0;
                    for (int p = 0; p < K; p++) acc = fma(ad[i * K + p], bd[p * 8 + j], acc);
                    wd[i * LD + j] = acc;
                }
            nb_gemm_double_ldc(cd, LD, ad, K, 1, bd, 8, 1, rows, K, cols, false);
            ck_assert_msg(memcmp(cd, wd, sizeof cd) == 0, "double %d x %d", rows, cols);
        }
}
END_TEST

/* ---- products as one job ---------------------------------------------------------- */

static void add_one_range(void *arg, int64_t lo, int64_t hi) {
    float *v = arg;
    for (int64_t i = lo; i < hi; i++) v[i] += 1.0f;
}

/* nb_gemm_float_par_n with more products and tasks than one job holds (5
 * products and an extra task: two jobs), on 2 threads: each product the
 * bits of nb_gemm_float alone, the extra task run once. */
START_TEST(test_gemm_par_n_beyond_one_job) {
    enum { P = 5, R = 40, K = 300, C = 48, X = 1000 };
    static float a[R * K], b[P][K * C], c[P][R * C], want[P][R * C], extra[X];
    nb_pcg32 r;
    nb_pcg32_seed(&r, 9, 10);
    fill(a, R * K, &r, -1, 1);
    nb_gemm_desc d[P];
    for (int p = 0; p < P; p++) {
        fill(b[p], K * C, &r, -1, 1);
        /* b transposed for some (packed whole), in place for the rest */
        bool t = p % 2;
        nb_gemm_float(want[p], a, K, 1, b[p], t ? 1 : C, t ? K : 1, R, K, C, false);
        d[p] = (nb_gemm_desc){c[p], NULL, a, K, 1, b[p], t ? 1 : C, t ? K : 1, R, K, C, false};
    }
    memset(extra, 0, sizeof extra);
    nb_task e = {add_one_range, extra, X, 1.0};
    nb_set_num_threads(2);
    nb_gemm_float_par_n(d, P, &e, 1);
    nb_set_num_threads(1);
    for (int p = 0; p < P; p++) ck_assert_msg(memcmp(c[p], want[p], sizeof c[p]) == 0, "%d", p);
    for (int i = 0; i < X; i++) ck_assert(extra[i] == 1.0f);
}
END_TEST

/* ---- nb_pcg32_advance ------------------------------------------------------------ */

/* The models' few-row linear (sampling: grad off, at most 8 rows) is, for
 * every output, eight partial sums along k in order, combined as
 * ((0+4)+(1+5))+((2+6)+(3+7)), then the tail, then the bias, bit for bit,
 * whether the kernel takes the output in a group of four or alone and on
 * any thread count. */
#define REF_DOT(T)                                                                \
    static T ref_dot_##T(const T *x, const T *w, const T *b, int64_t in) {        \
        T a[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                        \
        int64_t k = 0;                                                            \
        for (; k + 8 <= in; k += 8)                                               \
            for (int l = 0; l < 8; l++) a[l] += x[k + l] * w[k + l];              \
        T s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));  \
        for (; k < in; k++) s += x[k] * w[k];                                     \
        return b ? s + *b : s;                                                    \
    }
REF_DOT(float)
REF_DOT(double)

START_TEST(test_few_row_linear_is_the_dot_chain) {
    static const int64_t shapes[][3] = {{1, 37, 11}, {3, 768, 13}, {8, 8, 4}, {2, 5, 3}};
    for (int th = 1; th <= 2; th++) {
        nb_set_num_threads(th);
        for (int dt = 0; dt < 2; dt++)
            for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
                for (int bias = 0; bias < 2; bias++) {
                    const int64_t R = shapes[c][0], K = shapes[c][1], O = shapes[c][2];
                    const nb_dtype t = dt ? NB_F64 : NB_F32;
                    nb_ctx *ctx = nb_ctx_new(0);
                    nb_set_grad_enabled(ctx, false);
                    nb_pcg32 rng;
                    nb_pcg32_seed(&rng, 71, (uint64_t)c);
                    nb_tensor *x = nb_normal(ctx, t, NB_SHAPE(R, K), 0, 1, &rng);
                    nb_tensor *w = nb_normal(ctx, t, NB_SHAPE(O, K), 0, 1, &rng);
                    nb_tensor *b = bias ? nb_normal(ctx, t, NB_SHAPE(O), 0, 1, &rng) : NULL;
                    nb_tensor *y = nb_gpt_linear(ctx, x, w, b);
                    ck_assert_msg(y != NULL, "%s", nb_ctx_error(ctx));
                    for (int64_t r = 0; r < R; r++)
                        for (int64_t o = 0; o < O; o++) {
                            bool same;
                            if (dt) {
                                const double *xd = x->data, *wd = w->data;
                                double want = ref_dot_double(xd + r * K, wd + o * K,
                                                             b ? (double *)b->data + o : NULL, K);
                                same = ((double *)y->data)[r * O + o] == want;
                            } else {
                                const float *xf = x->data, *wf = w->data;
                                float want = ref_dot_float(xf + r * K, wf + o * K,
                                                           b ? (float *)b->data + o : NULL, K);
                                same = ((float *)y->data)[r * O + o] == want;
                            }
                            ck_assert_msg(same, "%s (%lld, %lld) x (%lld, %lld)%s: y[%lld][%lld] "
                                          "at %d threads", dt ? "f64" : "f32", (long long)R,
                                          (long long)K, (long long)O, (long long)K,
                                          bias ? " + b" : "", (long long)r, (long long)o, th);
                        }
                    nb_ctx_free(ctx);
                }
    }
    nb_set_num_threads(1);
}
END_TEST


START_TEST(test_pcg32_advance_matches_draws) {
    static const uint64_t deltas[] = {0, 1, 2, 3, 255, 256, 1000, 65537};
    for (size_t i = 0; i < sizeof deltas / sizeof deltas[0]; i++) {
        nb_pcg32 a, b;
        nb_pcg32_seed(&a, 42, 54);
        b = a;
        for (uint64_t d = 0; d < deltas[i]; d++) nb_pcg32_next(&a);
        nb_pcg32_advance(&b, deltas[i]);
        ck_assert_uint_eq(a.state, b.state);
        ck_assert_uint_eq(nb_pcg32_next(&a), nb_pcg32_next(&b));
    }
}
END_TEST

Suite *suite_speed(void) {
    Suite *s = suite_create("speed");
    TCase *tc = tcase_create("speed");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_train_step_same_bits_on_1_and_2_threads);
    tcase_add_test(tc, test_steady_state_steps_do_not_allocate);
    tcase_add_test(tc, test_vec_kernels_match_portable);
    tcase_add_test(tc, test_gelu_kernel_accuracy);
    tcase_add_test(tc, test_vec_exp_subnormal_range);
    tcase_add_loop_test(tc, test_gpt_step_same_bits_on_1_and_2_threads, 0, 2);
    tcase_add_test(tc, test_expf_poly_within_2_ulp);
    tcase_add_test(tc, test_packed_gemm_is_the_fma_chain);
    tcase_add_test(tc, test_narrow_gemm_is_the_fma_chain);
    tcase_add_test(tc, test_gemm_par_n_beyond_one_job);
    tcase_add_test(tc, test_pcg32_advance_matches_draws);
    tcase_add_test(tc, test_few_row_linear_is_the_dot_chain);
    suite_add_tcase(s, tc);
    return s;
}
