/* check_muon.c - Muon (nb_muon_new) and Muon with AdamW (nb_muon_adamw_new):
 * the Newton-Schulz step orthogonalizes (the singular values of its output
 * lie in [0.5, 1.5] for random inputs, tall, wide and square, in f32 and
 * f64), one step by hand, one step of a matrix wide enough for the
 * symmetric products' wide bands against the formula, the same bits on 1
 * and 2 threads, bad options named, the state's names, load_state and a
 * checkpoint resuming bit for bit, set_lr scaling both groups. Parity with PyTorch over 20 training
 * steps of the small GPTs is in check_gpt_tool.c (test_parity_muon). */
#include "check_nabla.h"

#include <unistd.h>

/* A (rows, cols) parameter of dtype dt with a gradient of N(0, 1) draws. */
static nb_tensor *param_with_grad(nb_ctx *c, nb_dtype dt, int64_t rows, int64_t cols,
                                  nb_pcg32 *rng) {
    nb_tensor *p = nb_requires_grad(nb_zeros(c, dt, NB_SHAPE(rows, cols)));
    ck_assert_ptr_nonnull(p);
    nb_zero_grad(p);
    for (int64_t i = 0; i < rows * cols; i++) {
        double v = nb_pcg32_normal(rng);
        if (dt == NB_F32) ((float *)p->grad)[i] = (float)v;
        else ((double *)p->grad)[i] = v;
    }
    return p;
}

/* The eigenvalues of the symmetric (n, n) s (destroyed), by cyclic Jacobi
 * rotations, into ev. */
static void sym_eigenvalues(double *s, int n, double *ev) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) off += s[p * n + q] * s[p * n + q];
        if (off < 1e-26) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = s[p * n + q];
                if (fabs(apq) < 1e-300) continue;
                double theta = (s[q * n + q] - s[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double cs = 1 / sqrt(t * t + 1), sn = t * cs;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    double kp = s[k * n + p], kq = s[k * n + q];
                    s[k * n + p] = cs * kp - sn * kq, s[k * n + q] = sn * kp + cs * kq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    double pk = s[p * n + k], qk = s[q * n + k];
                    s[p * n + k] = cs * pk - sn * qk, s[q * n + k] = sn * pk + cs * qk;
                }
            }
    }
    for (int i = 0; i < n; i++) ev[i] = s[i * n + i];
}

/* Muon with momentum 0, lr 1, no decay on a zero parameter leaves
 * p = -scale * NS(g): the singular values of NS(g), from the eigenvalues of
 * its Gram matrix on the short side. */
static void ns_singular_values(nb_dtype dt, int64_t rows, int64_t cols, int steps, double *lo,
                               double *hi) {
    nb_ctx *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, (uint64_t)(rows * 1000 + cols), 7);
    nb_tensor *p = param_with_grad(c, dt, rows, cols, &rng);
    nb_tensor_list l = {0};
    nb_list_add(&l, "w", p);
    nb_muon_opts o = {.lr = 1, .momentum = 0, .nesterov = false, .ns_steps = steps};
    nb_optim *opt = nb_muon_new(c, &l, o);
    ck_assert_msg(opt != NULL, "%s", nb_ctx_error(c));
    ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    double scale = sqrt(rows > cols ? (double)rows / (double)cols : 1.0);
    int m = (int)(rows < cols ? rows : cols);
    double *gram = calloc((size_t)(m * m), sizeof *gram), *ev = malloc((size_t)m * sizeof *ev);
    for (int a = 0; a < m; a++)
        for (int b = 0; b < m; b++) {
            double s = 0;
            if (rows <= cols)
                for (int64_t k = 0; k < cols; k++) s += nb_get(p, a * cols + k) * nb_get(p, b * cols + k);
            else
                for (int64_t k = 0; k < rows; k++) s += nb_get(p, k * cols + a) * nb_get(p, k * cols + b);
            gram[a * m + b] = s / (scale * scale);
        }
    sym_eigenvalues(gram, m, ev);
    *lo = INFINITY, *hi = 0;
    for (int i = 0; i < m; i++) {
        double sv = sqrt(fmax(ev[i], 0));
        *lo = fmin(*lo, sv), *hi = fmax(*hi, sv);
    }
    free(gram), free(ev);
    nb_optim_free(opt);
    nb_list_free(&l);
    nb_ctx_free(c);
}

START_TEST(test_newton_schulz_singular_values) {
    /* wide, tall, square; and a shape past the packed gemm's thresholds */
    const int64_t shapes[][2] = {{8, 32}, {32, 8}, {12, 40}, {40, 12}, {5, 64}, {64, 48},
                                 {16, 16}, {96, 160}};
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            double lo, hi;
            ns_singular_values(d ? NB_F64 : NB_F32, shapes[s][0], shapes[s][1], 5, &lo, &hi);
            ck_assert_msg(lo >= 0.5 && hi <= 1.5, "%s (%lld, %lld): singular values in [%g, %g]",
                          d ? "f64" : "f32", (long long)shapes[s][0], (long long)shapes[s][1], lo,
                          hi);
        }
    /* the iteration is what lifts the small ones: after one step they are lower */
    double lo1, hi1, lo5, hi5;
    ns_singular_values(NB_F64, 12, 40, 1, &lo1, &hi1);
    ns_singular_values(NB_F64, 12, 40, 5, &lo5, &hi5);
    ck_assert_msg(lo5 > lo1 + 0.1, "1 step [%g, %g], 5 steps [%g, %g]", lo1, hi1,
                  lo5, hi5);
}
END_TEST

/* A 1 x 2 gradient (3, 4) with momentum 0.5 by hand: buf = 0.5 g,
 * u = g + 0.5 (buf - g) = 0.75 g; X = u / (|u| + 1e-7) = (0.6, 0.8) up to
 * 1e-7; a row vector stays on the unit sphere's fixed point only when its
 * norm is 1: NS maps the norm s to s (a + b s^2 + c s^4) each step. */
START_TEST(test_one_step_by_hand) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *p = nb_requires_grad(nb_from_doubles(c, NB_F64, NB_SHAPE(1, 2),
                                                    (const double[]){1.0, -2.0}));
    nb_zero_grad(p);
    ((double *)p->grad)[0] = 3, ((double *)p->grad)[1] = 4;
    nb_tensor_list l = {0};
    nb_list_add(&l, "w", p);
    nb_muon_opts o = {.lr = 0.1, .momentum = 0.5, .nesterov = true, .ns_steps = 3,
                      .weight_decay = 0.2};
    nb_optim *opt = nb_muon_new(c, &l, o);
    ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    double s = 3.75 / (3.75 + 1e-7); /* |u| = 0.75 * 5 */
    for (int k = 0; k < 3; k++) s = 3.4445 * s - 4.7750 * s * s * s + 2.0315 * s * s * s * s * s;
    double want0 = 1.0 * (1 - 0.1 * 0.2) - 0.1 * 0.6 * s;
    double want1 = -2.0 * (1 - 0.1 * 0.2) - 0.1 * 0.8 * s;
    ck_assert_double_eq_tol(nb_get(p, 0), want0, 1e-13);
    ck_assert_double_eq_tol(nb_get(p, 1), want1, 1e-13);
    /* the momentum buffer is (1 - 0.5) g */
    nb_tensor_list st = {0};
    ck_assert_int_eq(nb_optim_state(c, opt, &st), NB_OK);
    nb_tensor *buf = nb_list_get(&st, "state.w.momentum_buffer");
    ck_assert_ptr_nonnull(buf);
    ck_assert_double_eq(nb_get(buf, 0), 1.5);
    ck_assert_double_eq(nb_get(buf, 1), 2.0);
    ck_assert_ptr_null(nb_list_get(&st, "state.w.step"));
    nb_list_free(&st);
    nb_optim_free(opt);
    nb_list_free(&l);
    nb_ctx_free(c);
}
END_TEST

/* One plain quintic step of a (520, 512) f64 gradient (tall: Muon works on
 * its (512, 520) transpose), against the formula in plain loops: the
 * symmetric products of a matrix this wide are made in bands of 128 rows
 * and mirrored, and an error in either would show far above 1e-12. With
 * momentum 0 and no Nesterov the update is g itself; p starts at 0, so p =
 * -lr scale X1, X1 = a X + (b A + c A A) X, X = g^T / |g|, A = X X^T. */
START_TEST(test_newton_schulz_wide_bands) {
    enum { R = 520, M = 512 };
    nb_ctx *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 11, 3);
    nb_tensor *p = param_with_grad(c, NB_F64, R, M, &rng);
    nb_tensor_list l = {0};
    nb_list_add(&l, "w", p);
    nb_muon_opts o = {.lr = 0.5, .momentum = 0, .nesterov = false, .ns_steps = 1};
    nb_optim *opt = nb_muon_new(c, &l, o);
    ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    double *x = malloc(sizeof(double) * M * R), *a = malloc(sizeof(double) * M * M);
    double *q = malloc(sizeof(double) * M * M), norm = 0;
    const double *g = p->grad;
    for (int i = 0; i < M * R; i++) norm += g[i] * g[i];
    for (int i = 0; i < M; i++) /* x = g^T / (|g| + 1e-7) */
        for (int k = 0; k < R; k++) x[i * R + k] = g[k * M + i] / (sqrt(norm) + 1e-7);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) {
            double s = 0;
            for (int k = 0; k < R; k++) s += x[i * R + k] * x[j * R + k];
            a[i * M + j] = s;
        }
    for (int i = 0; i < M; i++) /* q = b A + c A A */
        for (int j = 0; j < M; j++) {
            double s = 0;
            for (int k = 0; k < M; k++) s += a[i * M + k] * a[k * M + j];
            q[i * M + j] = -4.7750 * a[i * M + j] + 2.0315 * s;
        }
    double worst = 0, scale = sqrt((double)R / M);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < R; k++) {
            double s = 0;
            for (int j = 0; j < M; j++) s += q[i * M + j] * x[j * R + k];
            double want = -0.5 * scale * (3.4445 * x[i * R + k] + s);
            worst = fmax(worst, fabs(nb_get(p, (size_t)k * M + i) - want));
        }
    ck_assert_msg(worst < 1e-12, "largest difference %g", worst);
    free(x), free(a), free(q);
    nb_optim_free(opt);
    nb_list_free(&l);
    nb_ctx_free(c);
}
END_TEST

/* Three steps of five matrices, f32 and f64, tall, wide and square: the
 * same bits on one thread and on two (where they are shared out, one a
 * thread), and on two when only two are given (each product split over the
 * threads). */
static const int64_t SHAPES[5][2] = {{96, 160}, {70, 30}, {40, 40}, {16, 64}, {64, 8}};

static void run_three(int threads, int n_params, char **out) {
    int before = nb_get_num_threads();
    nb_set_num_threads(threads);
    nb_ctx *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 5);
    nb_tensor_list l = {0};
    const char *names[5] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < n_params; i++)
        nb_list_add(&l, names[i], param_with_grad(c, i % 2 ? NB_F64 : NB_F32, SHAPES[i][0],
                                                  SHAPES[i][1], &rng));
    nb_muon_opts o = nb_muon_defaults();
    o.weight_decay = 0.1;
    nb_optim *opt = nb_muon_new(c, &l, o);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    for (int i = 0; i < n_params; i++) {
        nb_tensor *p = nb_list_tensor(&l, i);
        size_t bytes = p->numel * nb_dtype_size(p->dtype);
        out[i] = malloc(bytes);
        memcpy(out[i], p->data, bytes);
        ck_assert(nb_get(p, 0) != 0);
    }
    nb_optim_free(opt);
    nb_list_free(&l);
    nb_ctx_free(c);
    nb_set_num_threads(before);
}

START_TEST(test_same_bits_on_1_and_2_threads) {
    char *one[5], *two[5], *two_few[2];
    run_three(1, 5, one);
    run_three(2, 5, two);
    run_three(2, 2, two_few);
    for (int i = 0; i < 5; i++) {
        size_t bytes = (size_t)(SHAPES[i][0] * SHAPES[i][1]) * (i % 2 ? 8 : 4);
        ck_assert_msg(memcmp(one[i], two[i], bytes) == 0, "parameter %d", i);
        if (i < 2) ck_assert_msg(memcmp(one[i], two_few[i], bytes) == 0, "parameter %d", i);
        free(one[i]), free(two[i]);
        if (i < 2) free(two_few[i]);
    }
}
END_TEST

START_TEST(test_bad_options_named) {
    nb_ctx *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_tensor *w = param_with_grad(c, NB_F32, 3, 4, &rng);
    nb_tensor *v = nb_requires_grad(nb_zeros(c, NB_F32, NB_SHAPE(4)));
    nb_zero_grad(v);
    nb_tensor_list l = {0};
    nb_list_add(&l, "w", w);
    struct {
        nb_muon_opts o;
        const char *msg;
    } bad[] = {
        {{.lr = 0, .momentum = 0.9, .ns_steps = 5}, "muon: lr = 0, expected a finite value > 0"},
        {{.lr = -1, .momentum = 0.9, .ns_steps = 5}, "muon: lr = -1"},
        {{.lr = NAN, .momentum = 0.9, .ns_steps = 5}, "muon: lr = nan"},
        {{.lr = 0.02, .momentum = 1, .ns_steps = 5}, "muon: momentum = 1 is outside [0, 1)"},
        {{.lr = 0.02, .momentum = -0.1, .ns_steps = 5}, "muon: momentum = -0.1 is outside"},
        {{.lr = 0.02, .momentum = 0.9, .ns_steps = 0}, "muon: ns_steps = 0, expected 1 to 1000"},
        {{.lr = 0.02, .momentum = 0.9, .ns_steps = 1001}, "muon: ns_steps = 1001, expected 1"},
        {{.lr = 0.02, .momentum = 0.9, .ns_steps = 5, .weight_decay = -1},
         "muon: weight_decay = -1, expected >= 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_ptr_null(nb_muon_new(c, &l, bad[i].o));
        ck_assert_msg(strstr(nb_ctx_error(c), bad[i].msg), "%s", nb_ctx_error(c));
        nb_ctx_clear_error(c);
    }
    nb_list_add(&l, "v", v);
    ck_assert_ptr_null(nb_muon_new(c, &l, nb_muon_defaults()));
    ck_assert_str_eq(nb_ctx_error(c), "muon: parameter 1 ('v') has 1 dim; Muon needs matrices "
                                      "(give it to AdamW)");
    nb_ctx_clear_error(c);
    /* with AdamW beside it the vector is fine, unless it is given to Muon */
    const bool ok[2] = {true, false}, wrong[2] = {true, true};
    nb_optim *o = nb_muon_adamw_new(c, &l, ok, nb_muon_defaults(), nb_adamw_defaults(1e-3));
    ck_assert_msg(o != NULL, "%s", nb_ctx_error(c));
    ck_assert_str_eq(nb_optim_kind(o), "muon");
    nb_optim_free(o);
    ck_assert_ptr_null(nb_muon_adamw_new(c, &l, wrong, nb_muon_defaults(), nb_adamw_defaults(1e-3)));
    ck_assert_ptr_nonnull(strstr(nb_ctx_error(c), "has 1 dim"));
    nb_ctx_clear_error(c);
    ck_assert_ptr_null(nb_muon_adamw_new(c, &l, NULL, nb_muon_defaults(), nb_adamw_defaults(1e-3)));
    ck_assert_str_eq(nb_ctx_error(c), "muon: use_muon is NULL");
    nb_ctx_clear_error(c);
    ck_assert_ptr_null(nb_muon_adamw_new(c, &l, ok, nb_muon_defaults(), nb_adamw_defaults(0)));
    ck_assert_ptr_nonnull(strstr(nb_ctx_error(c), "AdamW group's lr = 0"));
    nb_ctx_clear_error(c);
    nb_adam_opts ab = nb_adamw_defaults(1e-3);
    ab.beta2 = 1;
    ck_assert_ptr_null(nb_muon_adamw_new(c, &l, ok, nb_muon_defaults(), ab));
    ck_assert_ptr_nonnull(strstr(nb_ctx_error(c), "beta2 = 1 is outside [0, 1)"));
    nb_list_free(&l);
    nb_ctx_free(c);
}
END_TEST

/* The defaults, set_lr scaling both groups, and the options read back. */
START_TEST(test_defaults_and_set_lr) {
    nb_muon_opts d = nb_muon_defaults();
    ck_assert_double_eq(d.lr, 0.02);
    ck_assert_double_eq(d.momentum, 0.95);
    ck_assert(d.nesterov);
    ck_assert_int_eq(d.ns_steps, 5);
    ck_assert_double_eq(d.weight_decay, 0);
    nb_ctx *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_tensor_list l = {0};
    nb_list_add(&l, "w", param_with_grad(c, NB_F64, 3, 4, &rng));
    nb_tensor *v = nb_requires_grad(nb_zeros(c, NB_F64, NB_SHAPE(4)));
    nb_zero_grad(v);
    nb_list_add(&l, "v", v);
    nb_optim *o = nb_muon_adamw_new(c, &l, (const bool[]){true, false}, d, nb_adamw_defaults(1e-3));
    ck_assert_double_eq(nb_optim_get_lr(o), 1e-3);
    nb_optim_set_lr(o, 5e-4);
    nb_muon_opts mo;
    nb_adam_opts ao;
    ck_assert(nb_optim_muon_options(o, &mo) && nb_optim_adam_options(o, &ao));
    ck_assert_double_eq(ao.lr, 5e-4);
    ck_assert_double_eq_tol(mo.lr, 0.01, 1e-17);
    ck_assert(!nb_optim_sgd_options(o, &(nb_sgd_opts){0}));
    nb_optim_free(o);
    /* Muon alone: its lr is the optimizer's; no AdamW options */
    l.n = 1;
    o = nb_muon_new(c, &l, d);
    nb_optim_set_lr(o, 0.01);
    ck_assert_double_eq(nb_optim_get_lr(o), 0.01);
    ck_assert(!nb_optim_adam_options(o, &ao));
    nb_optim_set_lr(o, -1); /* refused, recorded */
    ck_assert_ptr_nonnull(strstr(nb_ctx_error(c), "muon: set_lr: invalid learning rate -1"));
    ck_assert_double_eq(nb_optim_get_lr(o), 0.01);
    nb_optim_free(o);
    l.n = 2;
    nb_list_free(&l);
    nb_ctx_free(c);
}
END_TEST

/* Muon with AdamW over w (6, 4), u (2, 3, 2) (viewed as (2, 6)) and a vector
 * b: 3 steps, its state saved (nb_optim_state, and a checkpoint file),
 * 3 more; a new optimizer loading either state and taking the same 3 steps
 * ends with the same bits. */
typedef struct trio {
    nb_ctx *c;
    nb_tensor *w, *u, *b;
    nb_tensor_list l;
    nb_optim *o;
} trio;

static void trio_new(trio *t, nb_dtype dt) {
    t->c = nb_ctx_new(0);
    t->w = nb_requires_grad(nb_full(t->c, dt, NB_SHAPE(6, 4), 0.3));
    t->u = nb_requires_grad(nb_full(t->c, dt, NB_SHAPE(2, 3, 2), -0.2));
    t->b = nb_requires_grad(nb_full(t->c, dt, NB_SHAPE(4), 0.1));
    t->l = (nb_tensor_list){0};
    nb_list_add(&t->l, "w", t->w);
    nb_list_add(&t->l, "u", t->u);
    nb_list_add(&t->l, "b", t->b);
    nb_muon_opts mo = nb_muon_defaults();
    mo.weight_decay = 0.1;
    nb_adam_opts ao = nb_adamw_defaults(3e-3);
    ao.eps = 1e-10;
    t->o = nb_muon_adamw_new(t->c, &t->l, (const bool[]){true, true, false}, mo, ao);
    ck_assert_msg(t->o != NULL, "%s", nb_ctx_error(t->c));
}

static void trio_free(trio *t) {
    nb_optim_free(t->o);
    nb_list_free(&t->l);
    nb_ctx_free(t->c);
}

/* Gradients from rng, then a step at lr. */
static void trio_step(trio *t, nb_pcg32 *rng, double lr) {
    for (int i = 0; i < 3; i++) {
        nb_tensor *p = nb_list_tensor(&t->l, i);
        nb_zero_grad(p);
        for (size_t k = 0; k < p->numel; k++) {
            double v = nb_pcg32_normal(rng);
            if (p->dtype == NB_F32) ((float *)p->grad)[k] = (float)v;
            else ((double *)p->grad)[k] = v;
        }
    }
    nb_optim_set_lr(t->o, lr);
    ck_assert_int_eq(nb_optim_step(t->o), NB_OK);
}

static void same_params(const trio *a, const trio *b) {
    for (int i = 0; i < 3; i++) {
        const nb_tensor *x = nb_list_tensor(&a->l, i), *y = nb_list_tensor(&b->l, i);
        ck_assert_msg(memcmp(x->data, y->data, x->numel * nb_dtype_size(x->dtype)) == 0,
                      "parameter %d differs", i);
    }
}

START_TEST(test_state_and_checkpoint_resume_bit_identical) {
    nb_dtype dt = _i ? NB_F64 : NB_F32;
    trio a, b, k;
    trio_new(&a, dt), trio_new(&b, dt), trio_new(&k, dt);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 9, 9);
    for (int s = 0; s < 3; s++) trio_step(&a, &rng, 3e-3 / (s + 1));
    /* the state's names: Muon's buffer for the matrices, AdamW's for b */
    nb_tensor_list st = {0};
    ck_assert_int_eq(nb_optim_state(a.c, a.o, &st), NB_OK);
    const char *want[] = {"state.w.momentum_buffer", "state.u.momentum_buffer", "state.b.step",
                          "state.b.exp_avg", "state.b.exp_avg_sq", "state.step"};
    ck_assert_int_eq(st.n, 6);
    for (int i = 0; i < 6; i++) ck_assert_msg(nb_list_get(&st, want[i]), "%s missing", want[i]);
    ck_assert_double_eq(nb_item(nb_list_get(&st, "state.b.step")), 3);
    char dir[] = "/tmp/nb-muon-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    ck_assert_msg(nb_save_checkpoint(a.c, path, &a.l, a.o, NULL, 0, NULL, NULL) == NB_OK, "%s",
                  nb_ctx_error(a.c));
    /* b from nb_optim_load_state, k from the file */
    for (int i = 0; i < 3; i++) {
        nb_tensor *src = nb_list_tensor(&a.l, i);
        memcpy(nb_list_tensor(&b.l, i)->data, src->data, src->numel * nb_dtype_size(dt));
    }
    ck_assert_msg(nb_optim_load_state(b.o, &st) == NB_OK, "%s", nb_ctx_error(b.c));
    ck_assert_msg(nb_load_checkpoint(k.c, path, &k.l, k.o, NULL) == NB_OK, "%s",
                  nb_ctx_error(k.c));
    ck_assert_int_eq(nb_optim_step_count(k.o), 3);
    nb_pcg32 r1 = rng, r2 = rng;
    for (int s = 3; s < 6; s++) {
        trio_step(&a, &rng, 3e-3 / (s + 1));
        trio_step(&b, &r1, 3e-3 / (s + 1));
        trio_step(&k, &r2, 3e-3 / (s + 1));
    }
    same_params(&a, &b);
    same_params(&a, &k);
    /* an AdamW optimizer does not take Muon's checkpoint; a state missing a
     * buffer is refused and changes nothing */
    nb_adam_opts ao = nb_adamw_defaults(1e-3);
    nb_optim *w = nb_adamw_new(k.c, &k.l, ao);
    ck_assert_int_ne(nb_load_checkpoint(k.c, path, &k.l, w, NULL), NB_OK);
    ck_assert_ptr_nonnull(strstr(nb_ctx_error(k.c), "saved with optimizer 'muon'"));
    nb_ctx_clear_error(k.c);
    nb_optim_free(w);
    nb_tensor_list part = {0};
    for (int i = 0; i < st.n; i++)
        if (strcmp(nb_list_name(&st, i), "state.u.momentum_buffer"))
            nb_list_add(&part, nb_list_name(&st, i), nb_list_tensor(&st, i));
    ck_assert_int_eq(nb_optim_load_state(b.o, &part), NB_OK); /* u then has no state */
    nb_list_add(&part, "state.b.momentum_buffer", nb_list_tensor(&st, 0));
    ck_assert_int_eq(nb_optim_load_state(b.o, &part), NB_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(nb_ctx_error(b.c), "unexpected entry 'state.b.momentum_buffer'"));
    nb_list_free(&part);
    unlink(path);
    rmdir(dir);
    nb_list_free(&st);
    trio_free(&a), trio_free(&b), trio_free(&k);
}
END_TEST

/* nb_optim_set_lr_scale is PyTorch's parameter groups with their own lr:
 * the trio with scales 0.5 (w, Muon), 1 (u, Muon) and 3 (b, AdamW) takes
 * the same steps, bit for bit, as one optimizer a parameter at the scaled
 * rates (the schedule's set_lr moving them all); a scale of 0 holds a
 * parameter; bad indices and scales are refused, named. */
START_TEST(test_lr_scale_is_a_param_group) {
    trio t;
    trio_new(&t, NB_F64);
    const double scale[3] = {0.5, 1, 3}, per = 0.02 / 3e-3; /* Muon's lr / AdamW's */
    for (int i = 0; i < 3; i++) ck_assert_double_eq(nb_optim_lr_scale_of(t.o, i), 1);
    ck_assert_int_eq(nb_optim_set_lr_scale(t.o, 0, scale[0]), NB_OK);
    ck_assert_int_eq(nb_optim_set_lr_scale(t.o, 2, scale[2]), NB_OK);
    ck_assert_double_eq(nb_optim_lr_scale_of(t.o, 2), 3);
    ck_assert_double_eq(nb_optim_lr_scale_of(t.o, 1), 1);
    /* the reference: one optimizer a parameter, each made with its rate */
    trio r;
    trio_new(&r, NB_F64);
    nb_optim_free(r.o);
    r.o = NULL;
    nb_optim *one[3];
    for (int i = 0; i < 3; i++) {
        nb_tensor_list li = {0};
        nb_list_add(&li, nb_list_name(&r.l, i), nb_list_tensor(&r.l, i));
        nb_muon_opts mo = nb_muon_defaults();
        mo.weight_decay = 0.1;
        nb_adam_opts ao = nb_adamw_defaults(3e-3);
        ao.eps = 1e-10;
        one[i] = i < 2 ? nb_muon_new(r.c, &li, mo) : nb_adamw_new(r.c, &li, ao);
        ck_assert_ptr_nonnull(one[i]);
        nb_list_free(&li);
    }
    nb_pcg32 ga, gb;
    nb_pcg32_seed(&ga, 7, 1);
    nb_pcg32_seed(&gb, 7, 1);
    const double lrs[4] = {3e-3, 2e-3, 1e-3, 5e-4};
    for (int s = 0; s < 4; s++) {
        trio_step(&t, &ga, lrs[s]);
        for (int i = 0; i < 3; i++) { /* trio_step's draws, in its order */
            nb_tensor *p = nb_list_tensor(&r.l, i);
            nb_zero_grad(p);
            for (size_t k = 0; k < p->numel; k++) ((double *)p->grad)[k] = nb_pcg32_normal(&gb);
        }
        for (int i = 0; i < 3; i++) {
            nb_optim_set_lr(one[i], i < 2 ? lrs[s] * per * scale[i] : lrs[s] * scale[i]);
            ck_assert_int_eq(nb_optim_step(one[i]), NB_OK);
        }
        same_params(&t, &r);
    }
    /* scale 0: b stays where it is */
    double before[4];
    memcpy(before, t.b->data, sizeof before);
    ck_assert_int_eq(nb_optim_set_lr_scale(t.o, 2, 0), NB_OK);
    trio_step(&t, &ga, 1e-3);
    ck_assert_int_eq(memcmp(before, t.b->data, sizeof before), 0);
    /* refused, named, nothing changed */
    ck_assert_int_eq(nb_optim_set_lr_scale(t.o, 3, 1), NB_ERR_VALUE);
    ck_assert_str_eq(nb_ctx_error(t.c), "muon: set_lr_scale: parameter 3, expected 0 to 2");
    nb_ctx_clear_error(t.c);
    const double bad[3] = {-1, NAN, INFINITY};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(nb_optim_set_lr_scale(t.o, 0, bad[k]), NB_ERR_VALUE);
        ck_assert_ptr_nonnull(strstr(nb_ctx_error(t.c), "muon: set_lr_scale: w: invalid scale"));
        nb_ctx_clear_error(t.c);
    }
    ck_assert_double_eq(nb_optim_lr_scale_of(t.o, 0), 0.5);
    ck_assert(isnan(nb_optim_lr_scale_of(t.o, 3)) && isnan(nb_optim_lr_scale_of(NULL, 0)));
    ck_assert_int_eq(nb_optim_set_lr_scale(NULL, 0, 1), NB_ERR_NULL);
    for (int i = 0; i < 3; i++) nb_optim_free(one[i]);
    trio_free(&r);
    trio_free(&t);
}
END_TEST

Suite *suite_muon(void) {
    Suite *s = suite_create("muon");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_newton_schulz_singular_values);
    tcase_add_test(tc, test_one_step_by_hand);
    tcase_add_test(tc, test_newton_schulz_wide_bands);
    tcase_add_test(tc, test_same_bits_on_1_and_2_threads);
    tcase_add_test(tc, test_bad_options_named);
    tcase_add_test(tc, test_defaults_and_set_lr);
    tcase_add_loop_test(tc, test_state_and_checkpoint_resume_bit_identical, 0, 2);
    tcase_add_test(tc, test_lr_scale_is_a_param_group);
    suite_add_tcase(s, tc);
    return s;
}
