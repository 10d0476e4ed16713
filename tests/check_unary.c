/* check_unary.c - the elementwise ops of one tensor (src/ops/unary.c):
 * values (f32 and f64), hand derivatives, gradcheck, errors. */
#include "check_nabla.h"
#include "tape/tape_internal.h" /* node->f / node->i, to check the stored parameters */

#define TOL(dt) ((dt) == NB_F32 ? 1e-6 : 1e-14)

static nb_tensor *vec(nb_ctx *ctx, nb_dtype dt, int n, const double *v) {
    return nb_from_doubles(ctx, dt, 1, (const int64_t[]){n}, v);
}

/* ---- known values ------------------------------------------------------------ */

START_TEST(test_neg_scale_add_scalar_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), (double[]){1, -2, 0.5, 0});
        nb_tensor *n = nb_neg(ctx, a);
        ck_assert_tensor_near(n, ((double[]){-1, 2, -0.5, 0}), 4, 0);
        ck_assert_int_eq(n->dtype, dt);
        ck_assert_int_eq(n->ndim, 2);
        ck_assert_tensor_near(nb_scale(ctx, a, -2.5), ((double[]){-2.5, 5, -1.25, 0}), 4, 0);
        ck_assert_tensor_near(nb_add_scalar(ctx, a, 0.25), ((double[]){1.25, -1.75, 0.75, 0.25}),
                              4, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_exp_log_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = vec(ctx, dt, 3, (double[]){0, 1, -1});
        ck_assert_tensor_near(nb_exp(ctx, a),
                              ((double[]){1, 2.718281828459045, 0.36787944117144233}), 3,
                              dt == NB_F32 ? 3e-7 : 1e-15);
        nb_tensor *b = vec(ctx, dt, 3, (double[]){1, 2, 0.5});
        ck_assert_tensor_near(nb_log(ctx, b),
                              ((double[]){0, 0.6931471805599453, -0.6931471805599453}), 3,
                              TOL(dt));
        /* log(exp(x)) == x */
        ck_assert_tensor_near(nb_log(ctx, nb_exp(ctx, a)), ((double[]){0, 1, -1}), 3, TOL(dt));
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_sqrt_pow_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = vec(ctx, dt, 4, (double[]){0, 1, 2, 9});
        ck_assert_tensor_near(nb_sqrt(ctx, a), ((double[]){0, 1, 1.4142135623730951, 3}), 4,
                              TOL(dt));
        nb_tensor *b = vec(ctx, dt, 3, (double[]){1.5, 2, 4});
        ck_assert_tensor_near(nb_pow(ctx, b, 2.5),
                              ((double[]){2.7556759606310752, 5.656854249492381, 32}), 3,
                              dt == NB_F32 ? 4e-6 : 1e-13);
        ck_assert_tensor_near(nb_pow(ctx, b, -1), ((double[]){2.0 / 3, 0.5, 0.25}), 3, TOL(dt));
        nb_tensor *c = vec(ctx, dt, 2, (double[]){-2, 3});
        ck_assert_tensor_near(nb_pow(ctx, c, 3), ((double[]){-8, 27}), 2, 0);
        ck_assert_tensor_near(nb_pow(ctx, c, 0), ((double[]){1, 1}), 2, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_tanh_sigmoid_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = vec(ctx, dt, 3, (double[]){0, 0.5, -2});
        ck_assert_tensor_near(nb_tanh(ctx, a),
                              ((double[]){0, 0.46211715726000974, -0.9640275800758169}), 3,
                              TOL(dt));
        ck_assert_tensor_near(nb_sigmoid(ctx, a),
                              ((double[]){0.5, 0.6224593312018546, 0.11920292202211755}), 3,
                              TOL(dt));
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_saturation_stays_finite) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(vec(ctx, dt, 2, (double[]){-100, 100}));
        nb_tensor *s = nb_sigmoid(ctx, a);
        ck_assert_double_eq_tol(nb_get(s, 0), 0.0, 1e-40);
        ck_assert_double_eq(nb_get(s, 1), 1.0);
        nb_tensor *t = nb_tanh(ctx, a);
        ck_assert_double_eq(nb_get(t, 0), -1.0);
        ck_assert_double_eq(nb_get(t, 1), 1.0);
        ck_assert_int_eq(nb_backward(ctx, nb_add(ctx, s, t), nb_ones(ctx, dt, NB_SHAPE(2))),
                         NB_OK);
        /* both derivatives vanish; nothing turns into NaN */
        ck_assert_double_eq_tol(nb_grad_get(a, 0), 0.0, 1e-40);
        ck_assert_double_eq(nb_grad_get(a, 1), 0.0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_relu_values_and_zero_grad) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(vec(ctx, dt, 5, (double[]){-1.5, 0, 2, -0.0, 3.25}));
        nb_tensor *r = nb_relu(ctx, a);
        ck_assert_tensor_near(r, ((double[]){0, 0, 2, 0, 3.25}), 5, 0);
        ck_assert_int_eq(nb_backward(ctx, r, nb_full(ctx, dt, NB_SHAPE(5), 2.0)), NB_OK);
        /* gradient 0 at x == 0, as in PyTorch */
        ck_assert_grad_near(a, ((double[]){0, 0, 2, 0, 2}), 5, 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* silu and its derivative at values from PyTorch (F.silu, float64), out
 * to where e^-x overflows a float (x = -100: 0 and a zero gradient, no NaN) */
START_TEST(test_silu_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(vec(ctx, dt, 7, (double[]){0, 1, -2, 30, -30, 0.5, -100}));
        nb_tensor *y = nb_silu(ctx, a);
        ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, y), NULL), NB_OK);
        const double want[7] = {0, 0.7310585786300049, -0.2384058440442351, 29.999999999997197,
                                -2.8072868906517896e-12, 0.3112296656009273, 0};
        const double dwant[7] = {0.5, 0.9276705118714869, -0.09078424878489547,
                                 1.000000000002711, -2.713710660963134e-12, 0.7399611873026519, 0};
        for (size_t i = 0; i < 7; i++) {
            double tol = dt == NB_F32 ? 3e-7 * (1 + fabs(want[i])) : 1e-15 * (1 + fabs(want[i]));
            ck_assert_double_eq_tol(nb_get(y, i), want[i], tol);
            ck_assert_double_eq_tol(nb_grad_get(a, i), dwant[i], tol);
        }
        nb_ctx_free(ctx);
    }
}
END_TEST

/* float32 silu (the SIMD exp, blocks of 1024) over 3001 values in [-90, 90]
 * against the definition in double, forward and backward; the backward runs
 * twice into x's gradient (stored, then added to) */
START_TEST(test_silu_f32_blocks) {
    nb_ctx *ctx = nb_ctx_new(0);
    enum { N = 3001 };
    double v[N];
    for (int i = 0; i < N; i++) v[i] = -90.0 + 180.0 * i / (N - 1);
    nb_tensor *a = nb_requires_grad(vec(ctx, NB_F32, N, v));
    nb_tensor *y = nb_silu(ctx, a);
    ck_assert_int_eq(nb_backward(ctx, nb_add(ctx, nb_sum(ctx, y), nb_sum(ctx, nb_silu(ctx, a))),
                                 NULL), NB_OK);
    for (size_t i = 0; i < N; i++) {
        double x = nb_get(a, i), s = 1 / (1 + exp(-x));
        double want = x * s, dwant = 2 * s * (1 + x * (1 - s));
        ck_assert_msg(fabs(nb_get(y, i) - want) <= 1e-6 * fabs(want) + 1e-30,
                      "silu(%g) = %.9g, want %.9g", x, nb_get(y, i), want);
        ck_assert_msg(fabs(nb_grad_get(a, i) - dwant) <= 2e-6 * fabs(dwant) + 1e-30,
                      "silu'(%g) = %.9g, want %.9g", x, nb_grad_get(a, i), dwant);
    }
    nb_ctx_free(ctx);
}
END_TEST

/* relu2 = relu(x)^2 exactly (one rounding), gradient 2 relu(x): 0 at and
 * below 0, +0 (not -0) for negative x, NaN kept */
START_TEST(test_relu2_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(vec(ctx, dt, 6, (double[]){-1.5, 0, 0.1, -0.0, 3.25, NAN}));
        nb_tensor *y = nb_relu2(ctx, a);
        const double x01 = dt == NB_F32 ? (double)0.1f : 0.1; /* 0.1 as stored */
        const double want[5] = {0, 0, dt == NB_F32 ? (double)(float)(x01 * x01) : x01 * x01, 0,
                                10.5625};
        for (size_t i = 0; i < 5; i++) ck_assert_double_eq(nb_get(y, i), want[i]);
        ck_assert(!signbit(nb_get(y, 0)) && !signbit(nb_get(y, 3)));
        ck_assert(isnan(nb_get(y, 5)));
        nb_tensor *up = nb_from_doubles(ctx, dt, NB_SHAPE(6), (double[]){1, 1, -2, 1, 0.5, 0});
        ck_assert_int_eq(nb_backward(ctx, y, up), NB_OK);
        const double dwant[5] = {0, 0, -4 * x01, 0, 3.25};
        for (size_t i = 0; i < 5; i++) ck_assert_double_eq(nb_grad_get(a, i), dwant[i]);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_gelu_exact_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = vec(ctx, dt, 5, (double[]){1, -1, 0, 2, -3});
        ck_assert_tensor_near(nb_gelu(ctx, a, NB_GELU_NONE),
                              ((double[]){0.8413447460685429, -0.15865525393145707, 0,
                                          1.9544997361036416, -0.00404969409489031}),
                              5, dt == NB_F32 ? 3e-7 : 1e-15);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_gelu_tanh_values) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = vec(ctx, dt, 5, (double[]){1, -1, 0, 2, -3});
        nb_tensor *g = nb_gelu(ctx, a, NB_GELU_TANH);
        ck_assert_tensor_near(g,
                              ((double[]){0.8411919906082768, -0.15880800939172324, 0,
                                          1.954597694087775, -0.0036373920817729943}),
                              5, dt == NB_F32 ? 3e-7 : 1e-15);
        /* the approximation really differs from the exact form */
        ck_assert(fabs(nb_get(g, 0) - 0.8413447460685429) > 1e-4);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* A float32 GELU of up to 65536 elements keeps gelu'(x) from its forward;
 * a larger one recomputes it in backward. Both must give the same bits:
 * the first 1000 elements of a 70000-element GELU against the same 1000
 * on their own, both approximations, a fresh gradient and an accumulated
 * one (the input used twice), and without a tape (inference) the same y. */
START_TEST(test_gelu_saved_derivative_same_bits) {
    for (int approx = NB_GELU_NONE; approx <= NB_GELU_TANH; approx++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_pcg32 r;
        nb_pcg32_seed(&r, 5, 7);
        nb_tensor *big = nb_requires_grad(nb_empty(ctx, NB_F32, NB_SHAPE(70000)));
        nb_tensor *small = nb_requires_grad(nb_empty(ctx, NB_F32, NB_SHAPE(1000)));
        for (size_t i = 0; i < big->numel; i++)
            ((float *)big->data)[i] = (float)(nb_pcg32_next(&r) >> 8) / (1 << 24) * 12 - 6;
        memcpy(small->data, big->data, 1000 * sizeof(float));
        nb_tensor *ys = nb_gelu(ctx, small, (nb_gelu_approx)approx);
        nb_tensor *yb = nb_gelu(ctx, big, (nb_gelu_approx)approx);
        ck_assert(memcmp(ys->data, yb->data, 1000 * sizeof(float)) == 0);
        /* loss = sum(gelu(x) * w) + sum(gelu(x) * w): each input's gradient
         * is written once and then added to */
        nb_tensor *wb = nb_empty(ctx, NB_F32, NB_SHAPE(70000));
        for (size_t i = 0; i < wb->numel; i++) ((float *)wb->data)[i] = (float)(i % 7) - 3.5f;
        nb_tensor *ws = nb_empty(ctx, NB_F32, NB_SHAPE(1000));
        memcpy(ws->data, wb->data, 1000 * sizeof(float));
        nb_tensor *ys2 = nb_gelu(ctx, small, (nb_gelu_approx)approx);
        nb_tensor *yb2 = nb_gelu(ctx, big, (nb_gelu_approx)approx);
        nb_tensor *ls = nb_add(ctx, nb_sum(ctx, nb_mul(ctx, ys, ws)), nb_sum(ctx, nb_mul(ctx, ys2, ws)));
        nb_tensor *lb = nb_add(ctx, nb_sum(ctx, nb_mul(ctx, yb, wb)), nb_sum(ctx, nb_mul(ctx, yb2, wb)));
        ck_assert_int_eq(nb_backward(ctx, nb_add(ctx, ls, lb), NULL), NB_OK);
        ck_assert(memcmp(small->grad, big->grad, 1000 * sizeof(float)) == 0);
        ck_assert(((float *)small->grad)[1] != 0);
        nb_set_grad_enabled(ctx, false);
        nb_tensor *yi = nb_gelu(ctx, small, (nb_gelu_approx)approx);
        nb_set_grad_enabled(ctx, true);
        ck_assert(memcmp(yi->data, ys->data, 1000 * sizeof(float)) == 0);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_log_sqrt_negative_give_nan) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = vec(ctx, NB_F32, 3, (double[]){-1, 0, 4});
    nb_tensor *l = nb_log(ctx, a), *s = nb_sqrt(ctx, a);
    ck_assert(isnan(nb_get(l, 0)));
    ck_assert(isinf(nb_get(l, 1)) && nb_get(l, 1) < 0);
    ck_assert_double_eq_tol(nb_get(l, 2), 1.3862943611198906, 1e-6);
    ck_assert(isnan(nb_get(s, 0)));
    ck_assert_double_eq(nb_get(s, 2), 2.0);
    ck_assert_ptr_null(nb_ctx_error(ctx)); /* a value, not an error */
    nb_ctx_free(ctx);
}
END_TEST

/* ---- derivatives: every op in a table ------------------------------------------- */

typedef struct unary_case {
    const char *name;
    nb_tensor *(*apply)(nb_ctx *, nb_tensor *);
    double (*deriv)(double); /* dy/dx, written from the math */
    double x[4];             /* inputs away from kinks and domain edges */
} unary_case;

#define SQRT_2_PI 0.7978845608028654

static nb_tensor *ap_neg(nb_ctx *c, nb_tensor *a) { return nb_neg(c, a); }
static nb_tensor *ap_scale(nb_ctx *c, nb_tensor *a) { return nb_scale(c, a, -2.5); }
static nb_tensor *ap_adds(nb_ctx *c, nb_tensor *a) { return nb_add_scalar(c, a, 0.75); }
static nb_tensor *ap_pow25(nb_ctx *c, nb_tensor *a) { return nb_pow(c, a, 2.5); }
static nb_tensor *ap_pow3(nb_ctx *c, nb_tensor *a) { return nb_pow(c, a, 3); }
static nb_tensor *ap_gelu(nb_ctx *c, nb_tensor *a) { return nb_gelu(c, a, NB_GELU_NONE); }
static nb_tensor *ap_gelu_t(nb_ctx *c, nb_tensor *a) { return nb_gelu(c, a, NB_GELU_TANH); }
/* relu then square, the composition relu2 fuses */
static nb_tensor *ap_relu_sq(nb_ctx *c, nb_tensor *a) {
    nb_tensor *r = nb_relu(c, a);
    return nb_mul(c, r, r);
}

static double d_neg(double x) { return (void)x, -1; }
static double d_scale(double x) { return (void)x, -2.5; }
static double d_adds(double x) { return (void)x, 1; }
static double d_exp(double x) { return exp(x); }
static double d_log(double x) { return 1 / x; }
static double d_sqrt(double x) { return 0.5 / sqrt(x); }
static double d_pow25(double x) { return 2.5 * pow(x, 1.5); }
static double d_pow3(double x) { return 3 * x * x; }
static double d_tanh(double x) { return 1 / (cosh(x) * cosh(x)); }
static double d_sigmoid(double x) { return exp(-x) / ((1 + exp(-x)) * (1 + exp(-x))); }
static double d_relu(double x) { return x > 0; }
static double d_silu(double x) {
    double s = 1 / (1 + exp(-x));
    return s + x * s * (1 - s);
}
static double d_relu2(double x) { return x > 0 ? 2 * x : 0; }
static double d_gelu(double x) {
    return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-x * x / 2) / sqrt(2 * 3.14159265358979323846);
}
static double d_gelu_t(double x) {
    double u = SQRT_2_PI * (x + 0.044715 * x * x * x);
    double sech2 = 1 / (cosh(u) * cosh(u));
    return 0.5 * (1 + tanh(u)) + 0.5 * x * sech2 * SQRT_2_PI * (1 + 3 * 0.044715 * x * x);
}

static const unary_case CASES[] = {
    {"neg", ap_neg, d_neg, {-1.5, 0.3, 2, -0.7}},
    {"scale", ap_scale, d_scale, {-1.5, 0.3, 2, -0.7}},
    {"add_scalar", ap_adds, d_adds, {-1.5, 0.3, 2, -0.7}},
    {"exp", nb_exp, d_exp, {-1.5, 0.3, 2, -0.7}},
    {"log", nb_log, d_log, {0.2, 0.9, 3, 7.5}},
    {"sqrt", nb_sqrt, d_sqrt, {0.2, 0.9, 3, 7.5}},
    {"pow 2.5", ap_pow25, d_pow25, {0.2, 0.9, 3, 1.7}},
    {"pow 3", ap_pow3, d_pow3, {-1.5, 0.3, 2, -0.7}},
    {"tanh", nb_tanh, d_tanh, {-1.5, 0.3, 2, -0.7}},
    {"sigmoid", nb_sigmoid, d_sigmoid, {-1.5, 0.3, 2, -0.7}},
    {"relu", nb_relu, d_relu, {-1.5, 0.3, 2, -0.7}},
    {"gelu", ap_gelu, d_gelu, {-2.5, 0.3, 1.2, -0.7}},
    {"gelu tanh", ap_gelu_t, d_gelu_t, {-2.5, 0.3, 1.2, -0.7}},
    {"silu", nb_silu, d_silu, {-2.5, 0.3, 1.2, -0.7}},
    {"relu2", nb_relu2, d_relu2, {-1.5, 0.3, 2, -0.7}},
    {"relu then mul", ap_relu_sq, d_relu2, {-1.5, 0.3, 2, -0.7}},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* Backward with upstream gradient (1, -2, 0.5, 3) in f32 and f64 against the
 * derivative written out by hand. */
START_TEST(test_unary_backward_matches_derivative) {
    const unary_case *c = &CASES[_i];
    const double up[4] = {1, -2, 0.5, 3};
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), c->x));
        nb_tensor *y = c->apply(ctx, a);
        ck_assert_msg(y != NULL, "%s: %s", c->name, nb_ctx_error(ctx));
        ck_assert_int_eq(y->requires_grad, 1);
        ck_assert_int_eq(nb_backward(ctx, y, nb_from_doubles(ctx, dt, NB_SHAPE(2, 2), up)),
                         NB_OK);
        for (int i = 0; i < 4; i++) {
            double want = up[i] * c->deriv(c->x[i]);
            double tol = dt == NB_F32 ? 2e-6 * (1 + fabs(want)) : 1e-12 * (1 + fabs(want));
            ck_assert_msg(fabs(nb_grad_get(a, (size_t)i) - want) <= tol,
                          "%s %s grad[%d]: got %.9g, want %.9g", c->name, nb_dtype_name(dt), i,
                          nb_grad_get(a, (size_t)i), want);
        }
        nb_ctx_free(ctx);
    }
}
END_TEST

static nb_tensor *f_case(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    return ((const unary_case *)user)->apply(ctx, in[0]);
}

START_TEST(test_unary_gradcheck) {
    const unary_case *c = &CASES[_i];
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[1] = {nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2), c->x))};
    nb_gradcheck_result r;
    ck_assert_msg(nb_gradcheck(ctx, f_case, (void *)c, 1, in, NULL, &r) == NB_OK, "%s: %s", c->name,
                  r.message);
    ck_assert(r.passed);
    ck_assert_msg(r.max_abs_err < 1e-6, "%s: max_abs_err %g", c->name, r.max_abs_err);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_gelu_hand_derivatives) {
    /* Phi(1) + phi(1) and the tanh form's exact derivative at 1 and -1 */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(vec(ctx, NB_F64, 2, (double[]){1, -1}));
    ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, nb_gelu(ctx, a, NB_GELU_NONE)), NULL), NB_OK);
    ck_assert_grad_near(a, ((double[]){1.0833154705876864, -0.08331547058768629}), 2, 1e-14);
    nb_zero_grad(a);
    ck_assert_int_eq(nb_backward(ctx, nb_sum(ctx, nb_gelu(ctx, a, NB_GELU_TANH)), NULL), NB_OK);
    ck_assert_grad_near(a, ((double[]){1.0829640838457826, -0.08296408384578255}), 2, 1e-14);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_pow_zero_exponent_grad) {
    /* d/dx x^0 is 0 even at x = 0 (no 0 * inf), as in PyTorch */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_requires_grad(vec(ctx, NB_F64, 2, (double[]){0, 3}));
    nb_tensor *y = nb_pow(ctx, a, 0);
    ck_assert_int_eq(nb_backward(ctx, y, nb_ones(ctx, NB_F64, NB_SHAPE(2))), NB_OK);
    ck_assert_grad_near(a, ((double[]){0, 0}), 2, 0);
    /* x^2 at 0 has derivative 0, x^0.5 at 0 has inf */
    nb_tensor *b = nb_requires_grad(vec(ctx, NB_F64, 1, (double[]){0}));
    ck_assert_int_eq(nb_backward(ctx, nb_pow(ctx, b, 2), nb_ones(ctx, NB_F64, NB_SHAPE(1))),
                     NB_OK);
    ck_assert_double_eq(nb_grad_get(b, 0), 0.0);
    nb_ctx_free(ctx);
}
END_TEST

/* y = tanh(x); z = sum(y*y + y): y is used three times. */
static nb_tensor *f_chain(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *y = nb_tanh(ctx, in[0]);
    return nb_add(ctx, nb_mul(ctx, y, y), y);
}

START_TEST(test_chain_reusing_a_tensor) {
    nb_ctx *ctx = nb_ctx_new(0);
    const double xs[3] = {-0.8, 0.1, 1.3};
    nb_tensor *in[1] = {nb_requires_grad(vec(ctx, NB_F64, 3, xs))};
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_chain, NULL, 1, in, NULL, &r), NB_OK);
    ck_assert(r.passed);
    /* by hand: dz/dx = (2y + 1)(1 - y^2), in f32 too */
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_tensor *x = nb_requires_grad(vec(ctx, dt, 3, xs));
        nb_tensor *z = nb_sum(ctx, f_chain(ctx, &x, NULL));
        ck_assert_int_eq(nb_backward(ctx, z, NULL), NB_OK);
        for (int i = 0; i < 3; i++) {
            double y = tanh(xs[i]);
            ck_assert_double_eq_tol(nb_grad_get(x, (size_t)i), (2 * y + 1) * (1 - y * y),
                                    dt == NB_F32 ? 1e-6 : 1e-14);
        }
    }
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_unary_shapes_and_recording) {
    nb_ctx *ctx = nb_ctx_new(0);
    /* 0-dim and 4-D shapes pass through */
    nb_tensor *s = nb_exp(ctx, nb_scalar(ctx, NB_F64, 0));
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_double_eq(nb_item(s), 1.0);
    nb_tensor *big = nb_sigmoid(ctx, nb_zeros(ctx, NB_F32, NB_SHAPE(2, 3, 1, 5)));
    char buf[64];
    ck_assert_str_eq(nb_shape_str(big, buf, sizeof buf), "(2, 3, 1, 5)");
    ck_assert_double_eq(nb_get(big, 29), 0.5);
    /* inputs that need no grad record nothing */
    ck_assert_int_eq(nb_tape_len(ctx), 0);
    ck_assert(!big->requires_grad);
    /* the scalar parameter and the gelu variant are stored on the node */
    nb_tensor *x = nb_requires_grad(vec(ctx, NB_F64, 2, (double[]){1, 2}));
    nb_tensor *y = nb_scale(ctx, x, -2.5);
    ck_assert_str_eq(nb_node_name(y->node), "scale");
    ck_assert_double_eq(y->node->f[0], -2.5);
    ck_assert_double_eq(nb_add_scalar(ctx, x, 0.75)->node->f[0], 0.75);
    ck_assert_double_eq(nb_pow(ctx, x, 3)->node->f[0], 3.0);
    nb_tensor *g = nb_gelu(ctx, x, NB_GELU_TANH);
    ck_assert_int_eq(g->node->op, NB_OP_GELU);
    ck_assert_int_eq(g->node->i[0], NB_GELU_TANH);
    ck_assert_int_eq(nb_tape_len(ctx), 4);
    /* with grad disabled, nothing is recorded */
    nb_set_grad_enabled(ctx, false);
    nb_tensor *z = nb_tanh(ctx, x);
    ck_assert(!z->requires_grad);
    ck_assert_ptr_null(z->node);
    ck_assert_int_eq(nb_tape_len(ctx), 4);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_unary_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2));
    ck_assert_ptr_null(nb_exp(ctx, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    ck_assert_error_has(ctx, "exp: input 1 is NULL");
    nb_ctx_clear_error(ctx);

    nb_tensor *ids = nb_zeros(ctx, NB_I64, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_tanh(ctx, ids));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_DTYPE);
    ck_assert_error_has(ctx, "tanh: input 1 (2, 3) is i64, expected f32 or f64");
    nb_ctx_clear_error(ctx);

    nb_tensor *mask = nb_zeros(ctx, NB_BOOL, NB_SHAPE(4));
    ck_assert_ptr_null(nb_scale(ctx, mask, 2));
    ck_assert_error_has(ctx, "scale: input 1 (4) is bool, expected f32 or f64");
    nb_ctx_clear_error(ctx);

    ck_assert_ptr_null(nb_relu(NULL, ids));
    ck_assert_ptr_null(nb_pow(ctx, NULL, 2));
    ck_assert_error_has(ctx, "pow: input 1 is NULL");
    /* sticky: a valid op after the error does nothing and keeps the first message */
    ck_assert_ptr_null(nb_sigmoid(ctx, a));
    ck_assert_error_has(ctx, "pow: input 1 is NULL");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_gelu_bad_approx) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *a = nb_ones(ctx, NB_F32, NB_SHAPE(2, 3));
    ck_assert_ptr_null(nb_gelu(ctx, a, (nb_gelu_approx)7));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "gelu: approx 7 for input (2, 3) is not valid, expected "
                             "NB_GELU_NONE (0) or NB_GELU_TANH (1)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_gelu(ctx, a, (nb_gelu_approx)-1));
    ck_assert_error_has(ctx, "gelu: approx -1");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_gelu(ctx, NULL, NB_GELU_NONE));
    ck_assert_error_has(ctx, "gelu: input 1 is NULL");
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_unary(void) {
    Suite *s = suite_create("unary");
    TCase *tc = tcase_create("values");
    tcase_add_test(tc, test_neg_scale_add_scalar_values);
    tcase_add_test(tc, test_gelu_saved_derivative_same_bits);
    tcase_add_test(tc, test_exp_log_values);
    tcase_add_test(tc, test_sqrt_pow_values);
    tcase_add_test(tc, test_tanh_sigmoid_values);
    tcase_add_test(tc, test_saturation_stays_finite);
    tcase_add_test(tc, test_relu_values_and_zero_grad);
    tcase_add_test(tc, test_silu_values);
    tcase_add_test(tc, test_silu_f32_blocks);
    tcase_add_test(tc, test_relu2_values);
    tcase_add_test(tc, test_gelu_exact_values);
    tcase_add_test(tc, test_gelu_tanh_values);
    tcase_add_test(tc, test_log_sqrt_negative_give_nan);
    tcase_add_test(tc, test_unary_shapes_and_recording);
    tcase_add_test(tc, test_unary_errors);
    tcase_add_test(tc, test_gelu_bad_approx);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gradients");
    tcase_set_timeout(tg, 30);
    tcase_add_loop_test(tg, test_unary_backward_matches_derivative, 0, N_CASES);
    tcase_add_loop_test(tg, test_unary_gradcheck, 0, N_CASES);
    tcase_add_test(tg, test_gelu_hand_derivatives);
    tcase_add_test(tg, test_pow_zero_exponent_grad);
    tcase_add_test(tg, test_chain_reusing_a_tensor);
    suite_add_tcase(s, tg);
    return s;
}
