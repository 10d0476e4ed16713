/* check_optim.c - SGD, Adam, AdamW and gradient clipping against PyTorch.
 *
 * The trajectory tests replay tests/fixtures/optim.txt, written by
 * tools/ref/gen_optim_fixtures.py with PyTorch 1.13's single-tensor optimizers:
 * for each configuration, 10 steps on W (3, 4) and b (4), feeding nabla the
 * gradient PyTorch fed its optimizer at each step and comparing both
 * parameters after every step. Errors are measured relative to the largest
 * element of each parameter. The f64 trajectories must agree to 1e-12 (they
 * agree to 4e-16, two ulps: PyTorch's AVX2 kernels fuse some multiply-adds,
 * nabla does not). The f32 trajectories come from a separate float32 run of
 * PyTorch (its own f32 gradients, fed unchanged) and must agree to 1e-6
 * (they agree to 4.4e-7, a few f32 ulps). */
#include "check_nabla.h"

#include <stdarg.h>

/* ---- fixture reader ------------------------------------------------------- */
typedef struct fx_rec {
    char *key;
    int n;
    double *v;
} fx_rec;

typedef struct fixture {
    fx_rec *r;
    int n, cap;
} fixture;

static void fx_free(fixture *fx) {
    if (!fx) return;
    for (int i = 0; i < fx->n; i++) {
        free(fx->r[i].key);
        free(fx->r[i].v);
    }
    free(fx->r);
    free(fx);
}

/* Lines "key n v1 ... vn"; '#' lines are comments. */
static fixture *fx_load(void) {
    const char *path = NB_SOURCE_DIR "/tests/fixtures/optim.txt";
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fixture *fx = calloc(1, sizeof *fx);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char *save = NULL;
        char *key = strtok_r(line, " \n", &save);
        char *count = strtok_r(NULL, " \n", &save);
        ck_assert_msg(key && count, "bad fixture line");
        if (fx->n == fx->cap) {
            fx->cap = fx->cap ? 2 * fx->cap : 256;
            fx->r = realloc(fx->r, (size_t)fx->cap * sizeof *fx->r);
        }
        fx_rec *r = &fx->r[fx->n++];
        r->key = strdup(key);
        r->n = atoi(count);
        r->v = malloc((size_t)r->n * sizeof(double));
        for (int i = 0; i < r->n; i++) {
            char *tok = strtok_r(NULL, " \n", &save);
            ck_assert_msg(tok != NULL, "fixture '%s' has fewer than %d values", r->key, r->n);
            r->v[i] = strtod(tok, NULL);
        }
    }
    free(line);
    fclose(f);
    return fx;
}

static const fx_rec *fx_vfind(const fixture *fx, const char *fmt, va_list ap) {
    char key[256];
    vsnprintf(key, sizeof key, fmt, ap);
    for (int i = 0; i < fx->n; i++)
        if (strcmp(fx->r[i].key, key) == 0) return &fx->r[i];
    return NULL;
}

/* The record called printf(fmt, ...), or NULL. */
static const fx_rec *fx_find(const fixture *fx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const fx_rec *r = fx_vfind(fx, fmt, ap);
    va_end(ap);
    return r;
}

/* Same, failing the test when it is missing. */
static const fx_rec *fx_need(const fixture *fx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const fx_rec *r = fx_vfind(fx, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "a fixture record is missing (pattern '%s')", fmt);
    return r;
}

/* ---- helpers ------------------------------------------------------------ */
/* Writes doubles (rounded to t's dtype) into t's grad. */
static void set_grad(nb_tensor *t, const double *v) {
    for (size_t i = 0; i < t->numel; i++) {
        if (t->dtype == NB_F32)
            ((float *)t->grad)[i] = (float)v[i];
        else
            ((double *)t->grad)[i] = v[i];
    }
}

/* Largest |got - want| over t's elements, relative to the largest |want|
 * (so an element near zero is judged at the tensor's scale). */
static double max_rel_err(const nb_tensor *t, const double *want) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < t->numel; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < t->numel; i++) {
        double e = fabs(nb_get(t, i) - want[i]) / scale;
        if (!(e <= worst)) worst = e; /* NaN counts as the worst */
    }
    return worst;
}

typedef enum { K_SGD, K_ADAM, K_ADAMW } kind;

static kind kind_of(const char *cfg) {
    if (strncmp(cfg, "sgd_", 4) == 0) return K_SGD;
    return strncmp(cfg, "adamw_", 6) == 0 ? K_ADAMW : K_ADAM;
}

/* An optimizer over params built from the fixture's options line. */
static nb_optim *fx_optim(const fixture *fx, const char *cfg, const char *dt,
                          const nb_tensor_list *params, nb_ctx *err) {
    const fx_rec *o = fx_need(fx, "%s.%s.opts", cfg, dt);
    if (kind_of(cfg) == K_SGD) {
        ck_assert_int_eq(o->n, 6);
        nb_sgd_opts so = {.lr = o->v[0], .momentum = o->v[1], .dampening = o->v[2],
                          .weight_decay = o->v[3], .nesterov = o->v[4] != 0,
                          .maximize = o->v[5] != 0};
        return nb_sgd_new(err, params, so);
    }
    ck_assert_int_eq(o->n, 7);
    nb_adam_opts ao = {.lr = o->v[0], .beta1 = o->v[1], .beta2 = o->v[2], .eps = o->v[3],
                       .weight_decay = o->v[4], .amsgrad = o->v[5] != 0,
                       .maximize = o->v[6] != 0};
    return kind_of(cfg) == K_ADAMW ? nb_adamw_new(err, params, ao) : nb_adam_new(err, params, ao);
}

/* W (3, 4) and b (4) at the fixture's initial values, listed as "W", "b". */
static void fx_params(const fixture *fx, nb_ctx *ctx, const char *cfg, nb_dtype dt,
                      nb_tensor_list *l) {
    const char *dn = nb_dtype_name(dt);
    nb_tensor *W = nb_requires_grad(
        nb_from_doubles(ctx, dt, NB_SHAPE(3, 4), fx_need(fx, "%s.%s.init.W", cfg, dn)->v));
    nb_tensor *b = nb_requires_grad(
        nb_from_doubles(ctx, dt, NB_SHAPE(4), fx_need(fx, "%s.%s.init.b", cfg, dn)->v));
    ck_assert_ptr_nonnull(W);
    ck_assert_ptr_nonnull(b);
    *l = (nb_tensor_list){0};
    nb_list_add(l, "W", W);
    nb_list_add(l, "b", b);
}

/* Sets the gradients of step k from the fixture (NULL where PyTorch had
 * None) and steps; restores the grad pointers afterwards. */
static void fx_step(const fixture *fx, nb_optim *o, nb_tensor_list *l, const char *cfg, int k) {
    const char *dn = nb_dtype_name(l->t[0]->dtype);
    void *saved[2];
    for (int i = 0; i < 2; i++) {
        nb_tensor *p = l->t[i];
        const fx_rec *g = fx_find(fx, "%s.%s.s%d.grad.%s", cfg, dn, k, l->names[i]);
        saved[i] = p->grad;
        if (g) {
            ck_assert_int_eq(g->n, (int)p->numel);
            set_grad(p, g->v);
        } else {
            p->grad = NULL;
        }
    }
    ck_assert_int_eq(nb_optim_step(o), NB_OK);
    for (int i = 0; i < 2; i++) l->t[i]->grad = saved[i];
}

/* The configurations of tools/ref/gen_optim_fixtures.py. */
static const char *const CONFIGS[] = {
    "sgd_plain",     "sgd_momentum",    "sgd_nesterov",  "sgd_maximize",
    "sgd_skip",      "adam_default",    "adam_amsgrad_wd", "adam_maximize",
    "adam_skip",     "adamw_default",   "adamw_amsgrad",
};
#define N_CONFIGS (int)(sizeof CONFIGS / sizeof CONFIGS[0])

static void run_trajectory(const char *cfg, nb_dtype dt, double tol) {
    fixture *fx = fx_load();
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list l;
    fx_params(fx, ctx, cfg, dt, &l);
    nb_optim *o = fx_optim(fx, cfg, nb_dtype_name(dt), &l, ctx);
    ck_assert_msg(o != NULL, "%s: %s", cfg, nb_ctx_error(ctx));
    for (int k = 1; k <= 10; k++) {
        fx_step(fx, o, &l, cfg, k);
        for (int i = 0; i < 2; i++) {
            const fx_rec *want = fx_need(fx, "%s.%s.s%d.%s", cfg, nb_dtype_name(dt), k,
                                         l.names[i]);
            double e = max_rel_err(l.t[i], want->v);
            ck_assert_msg(e <= tol, "%s %s step %d param %s: relative error %g > %g", cfg,
                          nb_dtype_name(dt), k, l.names[i], e, tol);
        }
    }
    ck_assert_int_eq(nb_optim_step_count(o), 10);
    nb_optim_free(o);
    nb_ctx_free(ctx);
    fx_free(fx);
}

/* ---- trajectories against PyTorch ---------------------------------------- */
START_TEST(test_trajectory_f64_matches_pytorch) {
    run_trajectory(CONFIGS[_i], NB_F64, 1e-12);
}
END_TEST

START_TEST(test_trajectory_f32_matches_pytorch) {
    run_trajectory(CONFIGS[_i], NB_F32, 1e-6);
}
END_TEST

/* ---- exact resume through saved state ------------------------------------- */
static const struct {
    const char *cfg;
    int split; /* steps before the save */
} RESUMES[] = {
    {"sgd_momentum", 4}, {"sgd_nesterov", 4},  {"sgd_skip", 1},       {"adam_default", 4},
    {"adam_amsgrad_wd", 4}, {"adam_skip", 1}, {"adam_skip", 5},      {"adamw_default", 4},
    {"adamw_amsgrad", 7},
};

START_TEST(test_resume_from_state_is_bit_identical) {
    const char *cfg = RESUMES[_i].cfg;
    const int split = RESUMES[_i].split;
    fixture *fx = fx_load();
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        nb_ctx *ctx = nb_ctx_new(0), *ck = nb_ctx_new(0);
        nb_tensor_list straight, resumed;
        fx_params(fx, ctx, cfg, dt, &straight);
        fx_params(fx, ctx, cfg, dt, &resumed);
        const char *dn = nb_dtype_name(dt);
        nb_optim *a = fx_optim(fx, cfg, dn, &straight, ctx);
        nb_optim *b = fx_optim(fx, cfg, dn, &resumed, ctx);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        for (int k = 1; k <= 10; k++) fx_step(fx, a, &straight, cfg, k);
        for (int k = 1; k <= split; k++) fx_step(fx, b, &resumed, cfg, k);
        /* a checkpoint: the parameters and the optimizer state */
        nb_tensor_list saved = {0};
        nb_list_add(&saved, "W", resumed.t[0]);
        nb_list_add(&saved, "b", resumed.t[1]);
        ck_assert_int_eq(nb_optim_state(ck, b, &saved), NB_OK);
        nb_optim_free(b);
        nb_optim *c = fx_optim(fx, cfg, dn, &resumed, ctx);
        ck_assert_int_eq(nb_optim_load_state(c, &saved), NB_OK);
        ck_assert_ptr_null(nb_ctx_error(ctx));
        ck_assert_int_eq(nb_optim_step_count(c), split);
        for (int k = split + 1; k <= 10; k++) fx_step(fx, c, &resumed, cfg, k);
        for (int i = 0; i < 2; i++)
            ck_assert_msg(memcmp(straight.t[i]->data, resumed.t[i]->data,
                                 straight.t[i]->numel * nb_dtype_size(dt)) == 0,
                          "%s %s split %d: %s differs after resume", cfg, dn, split,
                          straight.names[i]);
        nb_optim_free(a);
        nb_optim_free(c);
        nb_ctx_free(ck);
        nb_ctx_free(ctx);
    }
    fx_free(fx);
}
END_TEST

/* ---- hand-computed single steps ---------------------------------------------- */
/* One parameter p = [1, -2] with gradient g = [0.5, 0.25]. */
static nb_tensor *one_param(nb_ctx *ctx, nb_dtype dt, nb_tensor_list *l) {
    nb_tensor *p = nb_requires_grad(nb_from_doubles(ctx, dt, NB_SHAPE(2), (double[]){1, -2}));
    set_grad(p, (double[]){0.5, 0.25});
    *l = (nb_tensor_list){0};
    nb_list_add(l, "p", p);
    return p;
}

START_TEST(test_sgd_single_steps_by_hand) {
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        double tol = d ? 1e-6 : 1e-15;
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor_list l;
        nb_tensor *p = one_param(ctx, dt, &l);
        nb_sgd_opts so = nb_sgd_defaults(0.1);
        so.momentum = 0.9;
        so.dampening = 0.5;
        nb_optim *o = nb_sgd_new(ctx, &l, so);
        ck_assert_ptr_nonnull(o);
        /* first step: buf = g (no dampening), p -= 0.1 * g */
        ck_assert_int_eq(nb_optim_step(o), NB_OK);
        ck_assert_tensor_near(p, ((double[]){0.95, -2.025}), 2, tol);
        /* second: buf = 0.9 * g + 0.5 * g = 1.4 g */
        ck_assert_int_eq(nb_optim_step(o), NB_OK);
        ck_assert_tensor_near(p, ((double[]){0.95 - 0.07, -2.025 - 0.035}), 2, tol);
        nb_optim_free(o);
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_adam_and_adamw_first_step_by_hand) {
    /* After one step m/sqrt(v) corrected is g/|g|, so p -= lr * g / (|g| + eps). */
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        double tol = d ? 1e-6 : 1e-14;
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor_list l1, l2;
        nb_tensor *p1 = one_param(ctx, dt, &l1);
        nb_tensor *p2 = one_param(ctx, dt, &l2);
        nb_optim *adam = nb_adam_new(ctx, &l1, nb_adam_defaults(0.1));
        nb_optim *adamw = nb_adamw_new(ctx, &l2, nb_adamw_defaults(0.1));
        ck_assert_int_eq(nb_optim_step(adam), NB_OK);
        ck_assert_int_eq(nb_optim_step(adamw), NB_OK);
        const double u0 = 0.1 * 0.5 / (0.5 + 1e-8), u1 = 0.1 * 0.25 / (0.25 + 1e-8);
        ck_assert_tensor_near(p1, ((double[]){1 - u0, -2 - u1}), 2, tol);
        /* AdamW first shrinks p by 1 - lr * 0.01 */
        ck_assert_tensor_near(p2, ((double[]){0.999 - u0, -2 * 0.999 - u1}), 2, tol);
        nb_optim_free(adam);
        nb_optim_free(adamw);
        nb_ctx_free(ctx);
    }
}
END_TEST

/* ---- validation ------------------------------------------------------------- */
#define ck_assert_new_fails(call, ctx, status, part)                           \
    do {                                                                       \
        nb_ctx_clear_error(ctx);                                               \
        ck_assert_ptr_null(call);                                              \
        ck_assert_int_eq(nb_ctx_status(ctx), (status));                        \
        ck_assert_error_has(ctx, part);                                        \
        nb_ctx_clear_error(ctx);                                               \
    } while (0)

START_TEST(test_constructors_validate_params) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list l = {0};
    nb_sgd_opts so = nb_sgd_defaults(0.1);
    ck_assert_new_fails(nb_sgd_new(ctx, NULL, so), ctx, NB_ERR_NULL, "sgd: params list is NULL");
    ck_assert_new_fails(nb_adam_new(ctx, &l, nb_adam_defaults(0.1)), ctx, NB_ERR_VALUE,
                        "adam: got 0 parameters, expected at least 1");
    nb_tensor *w = nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(2)));
    nb_tensor *nograd = nb_zeros(ctx, NB_F32, NB_SHAPE(2));
    nb_tensor *ids = nb_zeros(ctx, NB_I64, NB_SHAPE(2));
    nb_list_add(&l, "w", w);
    l.names[1] = "x", l.t[1] = NULL, l.n = 2;
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_NULL,
                        "sgd: parameter 1 ('x') is NULL");
    l.t[1] = ids;
    ck_assert_new_fails(nb_adamw_new(ctx, &l, nb_adamw_defaults(0.1)), ctx, NB_ERR_DTYPE,
                        "adamw: parameter 1 ('x') has dtype i64, expected f32 or f64");
    l.t[1] = nograd;
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_STATE,
                        "sgd: parameter 1 ('x') has no grad buffer; call nb_requires_grad");
    l.t[1] = nb_add(ctx, w, w);
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE,
                        "is the result of op 'add'; can't optimize a non-leaf tensor");
    l.t[1] = w;
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE,
                        "sgd: parameter 1 ('x') is the same tensor as parameter 0");
    l.t[1] = nb_requires_grad(nb_zeros(ctx, NB_F64, NB_SHAPE(1)));
    l.names[1] = "w";
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE,
                        "sgd: parameters 0 and 1 are both named 'w'");
    char longname[402];
    memset(longname, 'n', 401);
    longname[401] = '\0';
    l.names[1] = longname;
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE,
                        "sgd: parameter 1's name has 401 characters, expected at most 400");
    l.names[1] = "w";
    /* a NULL context: NULL (the context is required), no crash */
    ck_assert_ptr_null(nb_sgd_new(NULL, &l, so));
    /* mixed dtypes and unnamed parameters are fine */
    l.names[1] = NULL;
    nb_ctx_clear_error(ctx);
    nb_optim *o = nb_sgd_new(ctx, &l, so);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    nb_optim_free(o);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_constructors_validate_options) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list l;
    one_param(ctx, NB_F64, &l);
    nb_sgd_opts so = nb_sgd_defaults(-0.1);
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE,
                        "sgd: invalid learning rate -0.1, expected >= 0");
    so = nb_sgd_defaults(NAN);
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE, "invalid learning rate nan");
    so = nb_sgd_defaults(0.1);
    so.momentum = -0.5;
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE, "sgd: invalid momentum -0.5");
    so.momentum = 0;
    so.weight_decay = -1;
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE,
                        "sgd: invalid weight_decay -1");
    so.weight_decay = 0;
    so.nesterov = true;
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE,
                        "sgd: nesterov momentum requires a momentum > 0 and zero dampening "
                        "(momentum 0, dampening 0)");
    so.momentum = 0.9;
    so.dampening = 0.1;
    ck_assert_new_fails(nb_sgd_new(ctx, &l, so), ctx, NB_ERR_VALUE, "(momentum 0.9, dampening 0.1)");

    nb_adam_opts ao = nb_adam_defaults(0.1);
    ao.beta1 = 1.0;
    ck_assert_new_fails(nb_adam_new(ctx, &l, ao), ctx, NB_ERR_VALUE,
                        "adam: beta1 = 1 is outside [0, 1)");
    ao = nb_adamw_defaults(0.1);
    ao.beta2 = -0.1;
    ck_assert_new_fails(nb_adamw_new(ctx, &l, ao), ctx, NB_ERR_VALUE,
                        "adamw: beta2 = -0.1 is outside [0, 1)");
    ao = nb_adam_defaults(0.1);
    ao.eps = -1e-8;
    ck_assert_new_fails(nb_adam_new(ctx, &l, ao), ctx, NB_ERR_VALUE, "adam: invalid eps -1e-08");
    ao = nb_adam_defaults(0.1);
    ao.weight_decay = -0.01;
    ck_assert_new_fails(nb_adam_new(ctx, &l, ao), ctx, NB_ERR_VALUE,
                        "adam: invalid weight_decay -0.01");
    ao = nb_adam_defaults(-1);
    ck_assert_new_fails(nb_adamw_new(ctx, &l, ao), ctx, NB_ERR_VALUE,
                        "adamw: invalid learning rate -1");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_defaults_match_pytorch) {
    nb_sgd_opts s = nb_sgd_defaults(0.5);
    ck_assert_double_eq(s.lr, 0.5);
    ck_assert_double_eq(s.momentum, 0);
    ck_assert_double_eq(s.dampening, 0);
    ck_assert_double_eq(s.weight_decay, 0);
    ck_assert(!s.nesterov && !s.maximize);
    nb_adam_opts a = nb_adam_defaults(1e-3);
    ck_assert_double_eq(a.lr, 1e-3);
    ck_assert_double_eq(a.beta1, 0.9);
    ck_assert_double_eq(a.beta2, 0.999);
    ck_assert_double_eq(a.eps, 1e-8);
    ck_assert_double_eq(a.weight_decay, 0);
    ck_assert(!a.amsgrad && !a.maximize);
    nb_adam_opts w = nb_adamw_defaults(1e-3);
    ck_assert_double_eq(w.weight_decay, 0.01);
    ck_assert_double_eq(w.beta2, 0.999);
}
END_TEST

/* ---- zero_grad, lr, NULL grads ------------------------------------------------ */
START_TEST(test_zero_grad_and_null_arguments) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list l;
    nb_tensor *p = one_param(ctx, NB_F32, &l);
    nb_tensor *q = nb_requires_grad(nb_ones(ctx, NB_F64, NB_SHAPE(3)));
    nb_list_add(&l, "q", q);
    ((double *)q->grad)[1] = 7;
    nb_optim *o = nb_sgd_new(ctx, &l, nb_sgd_defaults(0.1));
    void *qgrad = q->grad;
    q->grad = NULL;
    nb_optim_zero_grad(o);
    ck_assert_ptr_null(q->grad); /* NULL stays NULL */
    q->grad = qgrad;
    ck_assert_double_eq(nb_grad_get(q, 1), 7);
    nb_optim_zero_grad(o);
    ck_assert_grad_near(p, ((double[]){0, 0}), 2, 0);
    ck_assert_grad_near(q, ((double[]){0, 0, 0}), 3, 0);
    nb_optim_zero_grad(NULL);
    nb_optim_free(NULL);
    ck_assert_int_eq(nb_optim_step(NULL), NB_ERR_NULL); /* no context to record on */
    ck_assert_ptr_null(nb_ctx_error(ctx));
    ck_assert_int_eq(nb_optim_step_count(NULL), 0);
    ck_assert(isnan(nb_optim_get_lr(NULL)));
    nb_optim_set_lr(NULL, 1.0);
    nb_optim_free(o);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_set_lr_changes_next_steps) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list l;
    nb_tensor *p = one_param(ctx, NB_F64, &l);
    nb_optim *o = nb_sgd_new(ctx, &l, nb_sgd_defaults(0.1));
    ck_assert_double_eq(nb_optim_get_lr(o), 0.1);
    ck_assert_int_eq(nb_optim_step(o), NB_OK);
    nb_optim_set_lr(o, 0.5);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    ck_assert_double_eq(nb_optim_get_lr(o), 0.5);
    ck_assert_int_eq(nb_optim_step(o), NB_OK);
    ck_assert_tensor_near(p, ((double[]){1 - 0.05 - 0.25, -2 - 0.025 - 0.125}), 2, 1e-15);
    ck_assert_int_eq(nb_optim_step_count(o), 2);
    nb_optim_set_lr(o, -1);
    ck_assert_double_eq(nb_optim_get_lr(o), 0.5);
    ck_assert_str_eq(nb_ctx_error(ctx), "sgd: set_lr: invalid learning rate -1, expected >= 0");
    nb_ctx_clear_error(ctx);
    nb_optim_set_lr(o, 0.0);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    ck_assert_double_eq(nb_optim_get_lr(o), 0.0);
    nb_optim *a = nb_adam_new(ctx, &l, nb_adam_defaults(0.1));
    nb_optim_set_lr(a, 0.25);
    ck_assert_double_eq(nb_optim_get_lr(a), 0.25);
    nb_optim_set_lr(a, NAN);
    ck_assert_double_eq(nb_optim_get_lr(a), 0.25);
    ck_assert_str_eq(nb_ctx_error(ctx), "adam: set_lr: invalid learning rate nan, expected >= 0");
    nb_ctx_clear_error(ctx);
    nb_optim_free(a);
    nb_optim_free(o);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_null_grads_are_skipped) {
    nb_ctx *ctx = nb_ctx_new(0), *ck = nb_ctx_new(0);
    nb_tensor_list l;
    nb_tensor *p = one_param(ctx, NB_F64, &l);
    nb_tensor *q = nb_requires_grad(nb_ones(ctx, NB_F64, NB_SHAPE(2)));
    set_grad(q, (double[]){1, 1});
    nb_list_add(&l, "q", q);
    nb_optim *o = nb_adam_new(ctx, &l, nb_adam_defaults(0.1));
    void *pg = p->grad;
    p->grad = NULL;
    ck_assert_int_eq(nb_optim_step(o), NB_OK);
    ck_assert_int_eq(nb_optim_step(o), NB_OK);
    ck_assert_tensor_near(p, ((double[]){1, -2}), 2, 0); /* untouched */
    ck_assert_double_lt(nb_get(q, 0), 1.0);
    /* p has no state yet; q took two steps */
    nb_tensor_list st = {0};
    ck_assert_int_eq(nb_optim_state(ck, o, &st), NB_OK);
    ck_assert_ptr_null(nb_list_get(&st, "state.p.exp_avg"));
    ck_assert_double_eq(nb_item(nb_list_get(&st, "state.q.step")), 2);
    p->grad = pg;
    ck_assert_int_eq(nb_optim_step(o), NB_OK);
    /* p's first step: lr * g / (|g| + eps) whatever the optimizer's step count */
    ck_assert_tensor_near(p, ((double[]){1 - 0.1 * 0.5 / (0.5 + 1e-8),
                                         -2 - 0.1 * 0.25 / (0.25 + 1e-8)}), 2, 1e-14);
    nb_ctx_reset(ck);
    st = (nb_tensor_list){0};
    ck_assert_int_eq(nb_optim_state(ck, o, &st), NB_OK);
    ck_assert_double_eq(nb_item(nb_list_get(&st, "state.p.step")), 1);
    ck_assert_double_eq(nb_item(nb_list_get(&st, "state.q.step")), 3);
    ck_assert_double_eq(nb_item(nb_list_get(&st, "state.step")), 3);
    nb_optim_free(o);
    nb_ctx_free(ck);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- state export ------------------------------------------------------------ */
START_TEST(test_state_names_and_values) {
    nb_ctx *ctx = nb_ctx_new(0), *ck = nb_ctx_new(0);
    nb_tensor_list l;
    nb_tensor *p = one_param(ctx, NB_F32, &l);
    nb_tensor *u = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(1)));
    l.t[1] = u, l.names[1] = NULL, l.n = 2; /* unnamed: state keyed by index */

    nb_adam_opts ao = nb_adam_defaults(0.1);
    ao.amsgrad = true;
    nb_optim *o = nb_adam_new(ctx, &l, ao);
    nb_tensor_list st = {0};
    ck_assert_int_eq(nb_optim_state(ck, o, &st), NB_OK);
    ck_assert_int_eq(st.n, 1); /* before any step: only the step count */
    ck_assert_str_eq(st.names[0], "state.step");
    ck_assert_int_eq(st.t[0]->dtype, NB_F64);
    ck_assert_int_eq(st.t[0]->ndim, 0);
    ck_assert_double_eq(nb_item(st.t[0]), 0);

    ck_assert_int_eq(nb_optim_step(o), NB_OK);
    st = (nb_tensor_list){0};
    ck_assert_int_eq(nb_optim_state(ck, o, &st), NB_OK);
    const char *want[] = {"state.p.step", "state.p.exp_avg", "state.p.exp_avg_sq",
                          "state.p.max_exp_avg_sq", "state.1.step", "state.1.exp_avg",
                          "state.1.exp_avg_sq", "state.1.max_exp_avg_sq", "state.step"};
    ck_assert_int_eq(st.n, 9);
    for (int i = 0; i < 9; i++) ck_assert_str_eq(st.names[i], want[i]);
    nb_tensor *m = nb_list_get(&st, "state.p.exp_avg");
    ck_assert_int_eq(m->dtype, NB_F32);
    ck_assert_ptr_eq(m->owner, ck);
    ck_assert_str_eq(m->name, "state.p.exp_avg");
    /* m = 0.1 g, v = 0.001 g^2 */
    ck_assert_tensor_near(m, ((double[]){0.05, 0.025}), 2, 1e-8);
    ck_assert_tensor_near(nb_list_get(&st, "state.p.exp_avg_sq"),
                          ((double[]){0.00025, 0.0000625}), 2, 1e-10);
    /* copies: later steps do not change what was saved */
    ck_assert_int_eq(nb_optim_step(o), NB_OK);
    ck_assert_double_eq_tol(nb_get(m, 0), 0.05, 1e-8);
    ck_assert_double_eq(nb_item(nb_list_get(&st, "state.step")), 1);

    /* SGD: a momentum buffer equal to the first gradient; none without momentum */
    nb_sgd_opts so = nb_sgd_defaults(0.1);
    so.momentum = 0.9;
    nb_optim *s = nb_sgd_new(ctx, &l, so);
    nb_optim *plain = nb_sgd_new(ctx, &l, nb_sgd_defaults(0.1));
    nb_optim_step(s);
    nb_optim_step(plain);
    nb_ctx_reset(ck);
    st = (nb_tensor_list){0};
    ck_assert_int_eq(nb_optim_state(ck, s, &st), NB_OK);
    ck_assert_int_eq(st.n, 3);
    ck_assert_tensor_near(nb_list_get(&st, "state.p.momentum_buffer"),
                          ((double[]){0.5, 0.25}), 2, 0);
    ck_assert_ptr_nonnull(nb_list_get(&st, "state.1.momentum_buffer"));
    nb_ctx_reset(ck);
    st = (nb_tensor_list){0};
    ck_assert_int_eq(nb_optim_state(ck, plain, &st), NB_OK);
    ck_assert_int_eq(st.n, 1);
    (void)p;
    nb_optim_free(s);
    nb_optim_free(plain);
    nb_optim_free(o);
    nb_ctx_free(ck);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_state_export_errors) {
    nb_ctx *ctx = nb_ctx_new(0), *ck = nb_ctx_new(0);
    nb_tensor_list l;
    one_param(ctx, NB_F64, &l);
    nb_optim *o = nb_adam_new(ctx, &l, nb_adam_defaults(0.1));
    nb_optim_step(o);
    nb_tensor_list st = {0};
    ck_assert_int_eq(nb_optim_state(ck, NULL, &st), NB_ERR_NULL);
    ck_assert_error_has(ck, "optim state: optimizer is NULL");
    nb_ctx_clear_error(ck);
    ck_assert_int_eq(nb_optim_state(NULL, o, &st), NB_ERR_NULL); /* nowhere to record */
    ck_assert_ptr_null(nb_ctx_error(ctx));
    ck_assert_int_eq(nb_optim_state(ck, o, NULL), NB_ERR_NULL);
    ck_assert_error_has(ck, "optim state: output list is NULL");
    nb_ctx_clear_error(ck);
    /* a name already there: nothing appended */
    nb_list_add(&st, "state.p.exp_avg", l.t[0]);
    ck_assert_int_eq(nb_optim_state(ck, o, &st), NB_ERR_VALUE);
    ck_assert_int_eq(st.n, 1);
    ck_assert_error_has(ck, "adam state: the output list already has an entry 'state.p.exp_avg'");
    ck_assert_ptr_null(nb_ctx_error(ctx)); /* on ck only, the context given */
    nb_ctx_clear_error(ck);
    /* a corrupt list (n past its storage): refused, not written */
    st = (nb_tensor_list){0};
    st.n = NB_LIST_MAX + 1;
    ck_assert_int_eq(nb_optim_state(ck, o, &st), NB_ERR_VALUE);
    ck_assert_int_eq(st.n, NB_LIST_MAX + 1);
    ck_assert_error_has(ck, "adam state: the output list is corrupt (n = 257)");
    /* sticky: a context holding an error is refused */
    ck_assert_int_eq(nb_optim_state(ck, o, &st), NB_ERR_VALUE);
    nb_optim_free(o);
    nb_ctx_free(ck);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- state import ------------------------------------------------------------ */
/* Each way a state can be wrong is refused with its message, and after all
 * of them the optimizer's state is still the one it had.
 * Long: a list of bad states against one optimizer, whose state is compared
 * at the end; splitting it would lose that final check. */
START_TEST(test_load_state_errors_change_nothing) {
    nb_ctx *ctx = nb_ctx_new(0), *ck = nb_ctx_new(0);
    nb_tensor_list l;
    one_param(ctx, NB_F64, &l);
    nb_adam_opts ao = nb_adam_defaults(0.1);
    ao.amsgrad = true;
    nb_optim *o = nb_adam_new(ctx, &l, ao);
    nb_optim_step(o);
    nb_tensor_list good = {0};
    ck_assert_int_eq(nb_optim_state(ck, o, &good), NB_OK);
    nb_optim_step(o); /* now differs from `good` */
    nb_tensor_list before = {0};
    ck_assert_int_eq(nb_optim_state(ck, o, &before), NB_OK);

    nb_tensor_list bad;
    ck_assert_int_eq(nb_optim_load_state(o, NULL), NB_ERR_NULL);
    ck_assert_str_eq(nb_ctx_error(ctx), "adam load_state: state list is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_optim_load_state(NULL, &good), NB_ERR_NULL);
    ck_assert_ptr_null(nb_ctx_error(ctx)); /* no optimizer, no context: nothing recorded */

    bad = good;
    bad.names[bad.n - 1] = "state.steps"; /* no "state.step" any more */
    ck_assert_int_eq(nb_optim_load_state(o, &bad), NB_ERR_VALUE);
    ck_assert_str_eq(nb_ctx_error(ctx), "adam load_state: missing 'state.step'");
    nb_ctx_clear_error(ctx);

    bad = good;
    bad.t[1] = nb_zeros(ck, NB_F64, NB_SHAPE(2, 1)); /* state.p.exp_avg */
    ck_assert_int_eq(nb_optim_load_state(o, &bad), NB_ERR_SHAPE);
    ck_assert_str_eq(nb_ctx_error(ctx), "adam load_state: 'state.p.exp_avg' is f64 (2, 1), "
                                        "expected f64 (2) like its parameter");
    nb_ctx_clear_error(ctx);
    bad.t[1] = nb_zeros(ck, NB_F32, NB_SHAPE(2));
    ck_assert_int_eq(nb_optim_load_state(o, &bad), NB_ERR_DTYPE);
    ck_assert_str_eq(nb_ctx_error(ctx), "adam load_state: 'state.p.exp_avg' is f32 (2), "
                                        "expected f64 (2) like its parameter");
    nb_ctx_clear_error(ctx);

    bad = good;
    bad.t[0] = nb_scalar(ck, NB_F64, 1.5); /* state.p.step */
    ck_assert_int_eq(nb_optim_load_state(o, &bad), NB_ERR_VALUE);
    ck_assert_str_eq(nb_ctx_error(ctx), "adam load_state: 'state.p.step' is 1.5, expected a "
                                        "whole number >= 0");
    nb_ctx_clear_error(ctx);
    bad.t[0] = nb_scalar(ck, NB_F32, 1);
    ck_assert_int_eq(nb_optim_load_state(o, &bad), NB_ERR_DTYPE);
    ck_assert_str_eq(nb_ctx_error(ctx), "adam load_state: 'state.p.step' is f32 (), expected "
                                        "an f64 scalar");
    nb_ctx_clear_error(ctx);

    bad = good;
    bad.names[3] = "other.max"; /* drops state.p.max_exp_avg_sq */
    ck_assert_int_eq(nb_optim_load_state(o, &bad), NB_ERR_VALUE);
    ck_assert_str_eq(nb_ctx_error(ctx), "adam load_state: 'state.p.step' is present but "
                                        "'state.p.max_exp_avg_sq' is missing");
    nb_ctx_clear_error(ctx);

    bad = good;
    bad.names[3] = "state.p.momentum_buffer";
    ck_assert_int_eq(nb_optim_load_state(o, &bad), NB_ERR_VALUE);
    ck_assert_ptr_nonnull(nb_ctx_error(ctx));
    nb_ctx_clear_error(ctx);

    bad = good;
    nb_list_add(&bad, "state.q.exp_avg", good.t[1]);
    ck_assert_int_eq(nb_optim_load_state(o, &bad), NB_ERR_VALUE);
    ck_assert_str_eq(nb_ctx_error(ctx), "adam load_state: unexpected entry 'state.q.exp_avg' "
                                        "(not a state of this optimizer's parameters)");
    nb_ctx_clear_error(ctx);

    /* Adam's state into SGD is refused, not silently dropped */
    nb_sgd_opts so = nb_sgd_defaults(0.1);
    so.momentum = 0.9;
    nb_optim *s = nb_sgd_new(ctx, &l, so);
    ck_assert_int_eq(nb_optim_load_state(s, &good), NB_ERR_VALUE);
    ck_assert_str_eq(nb_ctx_error(ctx), "sgd load_state: unexpected entry 'state.p.step' "
                                        "(not a state of this optimizer's parameters)");
    nb_ctx_clear_error(ctx);

    /* after all the failures the state is still the one of two steps */
    nb_tensor_list after = {0};
    ck_assert_int_eq(nb_optim_state(ck, o, &after), NB_OK);
    ck_assert_int_eq(after.n, before.n);
    for (int i = 0; i < after.n; i++) {
        ck_assert_str_eq(after.names[i], before.names[i]);
        ck_assert_mem_eq(after.t[i]->data, before.t[i]->data, after.t[i]->numel * 8);
    }
    ck_assert_int_eq(nb_optim_step_count(o), 2);
    /* and a good load works, recording nothing */
    ck_assert_int_eq(nb_optim_load_state(o, &good), NB_OK);
    ck_assert_ptr_null(nb_ctx_error(ctx));
    ck_assert_int_eq(nb_optim_step_count(o), 1);
    nb_optim_free(s);
    nb_optim_free(o);
    nb_ctx_free(ck);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_load_state_resets_params_without_state) {
    /* Loading a state saved before any step makes the optimizer fresh again. */
    nb_ctx *ctx = nb_ctx_new(0), *ck = nb_ctx_new(0);
    nb_tensor_list l1, l2;
    nb_tensor *p1 = one_param(ctx, NB_F64, &l1);
    nb_tensor *p2 = one_param(ctx, NB_F64, &l2);
    nb_sgd_opts so = nb_sgd_defaults(0.1);
    so.momentum = 0.9;
    so.dampening = 0.5;
    nb_optim *a = nb_sgd_new(ctx, &l1, so);
    nb_optim *b = nb_sgd_new(ctx, &l2, so);
    nb_tensor_list fresh = {0};
    ck_assert_int_eq(nb_optim_state(ck, b, &fresh), NB_OK);
    nb_optim_step(b);
    nb_optim_step(b);
    ck_assert_int_eq(nb_optim_load_state(b, &fresh), NB_OK);
    ck_assert_int_eq(nb_optim_step_count(b), 0);
    memcpy(p2->data, p1->data, 2 * sizeof(double));
    nb_optim_step(a);
    nb_optim_step(b); /* a first step again: buf = g, no dampening */
    ck_assert_mem_eq(p1->data, p2->data, 2 * sizeof(double));
    nb_optim_free(a);
    nb_optim_free(b);
    nb_ctx_free(ck);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_dotted_names_round_trip) {
    /* state_dict-style names contain dots: "state.fc.weight.exp_avg" */
    nb_ctx *ctx = nb_ctx_new(0), *ck = nb_ctx_new(0);
    nb_tensor_list l;
    nb_tensor *p = one_param(ctx, NB_F32, &l);
    l.names[0] = "fc.weight";
    nb_optim *a = nb_adamw_new(ctx, &l, nb_adamw_defaults(0.1));
    nb_optim_step(a);
    nb_tensor_list st = {0};
    ck_assert_int_eq(nb_optim_state(ck, a, &st), NB_OK);
    ck_assert_ptr_nonnull(nb_list_get(&st, "state.fc.weight.exp_avg_sq"));
    ck_assert_ptr_nonnull(nb_list_get(&st, "state.fc.weight.step"));
    nb_optim *b = nb_adamw_new(ctx, &l, nb_adamw_defaults(0.1));
    ck_assert_int_eq(nb_optim_load_state(b, &st), NB_OK);
    float before[2];
    memcpy(before, p->data, sizeof before);
    nb_optim_step(a);
    float via_a[2];
    memcpy(via_a, p->data, sizeof via_a);
    memcpy(p->data, before, sizeof before);
    nb_optim_step(b);
    ck_assert_mem_eq(p->data, via_a, sizeof via_a);
    /* a parameter called "fc" does not own "state.fc.weight.*" */
    l.names[0] = "fc";
    nb_optim *c = nb_adamw_new(ctx, &l, nb_adamw_defaults(0.1));
    ck_assert_int_eq(nb_optim_load_state(c, &st), NB_ERR_VALUE);
    ck_assert_str_eq(nb_ctx_error(ctx), "adamw load_state: unexpected entry "
                                        "'state.fc.weight.step' (not a state of this "
                                        "optimizer's parameters)");
    nb_ctx_clear_error(ctx);
    nb_optim_free(a);
    nb_optim_free(b);
    nb_optim_free(c);
    nb_ctx_free(ck);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- clipping ---------------------------------------------------------------- */
START_TEST(test_clip_grad_norm_by_hand) {
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        double tol = d ? 1e-6 : 1e-15;
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(nb_zeros(ctx, dt, NB_SHAPE(2)));
        nb_tensor *b = nb_requires_grad(nb_zeros(ctx, dt, NB_SHAPE(1)));
        nb_tensor *c = nb_requires_grad(nb_zeros(ctx, dt, NB_SHAPE(1)));
        nb_tensor_list l = {0};
        nb_list_add(&l, "a", a);
        nb_list_add(&l, "b", b);
        nb_list_add(&l, "c", c);
        set_grad(a, (double[]){3, 0});
        set_grad(b, (double[]){4});
        c->grad = NULL; /* skipped */
        /* norm 5 > 10? no: unchanged */
        ck_assert_double_eq_tol(nb_clip_grad_norm(&l, 10.0), 5.0, tol);
        ck_assert_grad_near(a, ((double[]){3, 0}), 2, 0);
        ck_assert_grad_near(b, ((double[]){4}), 1, 0);
        /* max_norm 1: coef = 1 / (5 + 1e-6) */
        const double coef = 1.0 / (5.0 + 1e-6);
        ck_assert_double_eq_tol(nb_clip_grad_norm(&l, 1.0), 5.0, tol);
        ck_assert_grad_near(a, ((double[]){3 * coef, 0}), 2, tol);
        ck_assert_grad_near(b, ((double[]){4 * coef}), 1, tol);
        ck_assert_double_lt(nb_grad_get(b, 0), 0.8); /* 0.79999984 */
        /* the clipped norm is just under 1 */
        ck_assert_double_eq_tol(nb_clip_grad_norm(&l, 1.0), 5.0 * coef, tol);
        nb_tensor_list empty = {0};
        ck_assert_double_eq(nb_clip_grad_norm(&empty, 1.0), 0.0);
        ck_assert(isnan(nb_clip_grad_norm(NULL, 1.0)));
        nb_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_clip_grad_norm_matches_pytorch) {
    fixture *fx = fx_load();
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        double tol = d ? 1e-6 : 1e-14;
        const char *tags[] = {"small", "large"};
        for (int k = 0; k < 2; k++) {
            const char *dn = nb_dtype_name(dt), *tag = tags[k];
            nb_ctx *ctx = nb_ctx_new(0);
            nb_tensor *W = nb_requires_grad(nb_zeros(ctx, dt, NB_SHAPE(3, 4)));
            nb_tensor *b = nb_requires_grad(nb_zeros(ctx, dt, NB_SHAPE(4)));
            set_grad(W, fx_need(fx, "clip_%s.%s.grad.W", tag, dn)->v);
            set_grad(b, fx_need(fx, "clip_%s.%s.grad.b", tag, dn)->v);
            nb_tensor_list l = {0};
            nb_list_add(&l, "W", W);
            nb_list_add(&l, "b", b);
            double max_norm = fx_need(fx, "clip_%s.%s.max_norm", tag, dn)->v[0];
            double want = fx_need(fx, "clip_%s.%s.total", tag, dn)->v[0];
            double got = nb_clip_grad_norm(&l, max_norm);
            ck_assert_double_eq_tol(got, want, tol * want);
            const double *cw = fx_need(fx, "clip_%s.%s.clipped.W", tag, dn)->v;
            const double *cb = fx_need(fx, "clip_%s.%s.clipped.b", tag, dn)->v;
            for (size_t i = 0; i < 12; i++)
                ck_assert_double_eq_tol(nb_grad_get(W, i), cw[i], tol * fmax(fabs(cw[i]), 1e-3));
            for (size_t i = 0; i < 4; i++)
                ck_assert_double_eq_tol(nb_grad_get(b, i), cb[i], tol * fmax(fabs(cb[i]), 1e-3));
            nb_ctx_free(ctx);
        }
    }
    fx_free(fx);
}
END_TEST

/* The step's zero_grad is deferred (step.c): every gradient is marked
 * stale and the first rule reaching it stores rather than adds. Gradients
 * filled with NaN before the step, so any rule that read a stale value
 * shows: the step's gradients, in anomaly mode and over 1 and 2
 * micro-batches, must be the same bits as those of zero_grad and one
 * backward, and a parameter the loss does not use must come out zero.
 * The rules: a float32 linear (dx stored, dw stored then added to, as w
 * serves two linears), an embedding (adds only), grouped_linear (each
 * weight's dw stored; its third group has no rows, so its weight's stale
 * gradient is an input of a rule that does not write it: anomaly mode must
 * not read it) and a weight no rule reaches. */
enum { N_STALE = 6 };
typedef struct stale_model {
    nb_tensor *x, *w, *emb, *g[3], *unused;
} stale_model;

static nb_tensor *stale_loss(nb_ctx *ctx, int micro, void *user) {
    (void)micro;
    stale_model *m = user;
    nb_tensor *ids = nb_from_data(ctx, NB_I64, 1, (const int64_t[]){4}, (const int64_t[]){3, 0, 3, 1});
    nb_tensor *h = nb_linear(ctx, m->x, m->w, NULL);                   /* (4, 5) */
    nb_tensor *h2 = nb_linear(ctx, nb_add(ctx, h, nb_embedding(ctx, m->emb, ids)), nb_transpose(ctx, m->w, 0, 1), NULL);
    nb_tensor *y = nb_grouped_linear(ctx, m->x, 3, m->g, (const int64_t[]){3, 1, 0}); /* (4, 2) */
    return nb_add(ctx, nb_sum(ctx, nb_mul(ctx, h2, h2)), nb_sum(ctx, nb_mul(ctx, y, y)));
}

START_TEST(test_train_step_deferred_zero_grad) {
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F64 : NB_F32;
        size_t es = nb_dtype_size(dt);
        nb_ctx *pc = nb_ctx_new(0), *sc = nb_ctx_new(0);
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 11, 2);
        stale_model m;
        m.x = nb_normal(pc, dt, NB_SHAPE(4, 3), 0, 1, &rng);
        m.w = nb_requires_grad(nb_normal(pc, dt, NB_SHAPE(5, 3), 0, 1, &rng));
        m.emb = nb_requires_grad(nb_normal(pc, dt, NB_SHAPE(4, 5), 0, 1, &rng));
        m.g[0] = nb_requires_grad(nb_normal(pc, dt, NB_SHAPE(2, 3), 0, 1, &rng));
        m.g[1] = nb_requires_grad(nb_normal(pc, dt, NB_SHAPE(2, 3), 0, 1, &rng));
        m.g[2] = nb_requires_grad(nb_normal(pc, dt, NB_SHAPE(2, 3), 0, 1, &rng));
        m.g[2]->grad = nb_ctx_alloc(pc, 6 * es);
        m.unused = nb_requires_grad(nb_normal(pc, dt, NB_SHAPE(6), 0, 1, &rng));
        m.unused->grad = nb_ctx_alloc(pc, 6 * es); /* a gradient from an earlier step */
        nb_tensor_list l = {0};
        nb_list_add(&l, "w", m.w), nb_list_add(&l, "emb", m.emb), nb_list_add(&l, "g0", m.g[0]);
        nb_list_add(&l, "g1", m.g[1]), nb_list_add(&l, "g2", m.g[2]);
        nb_list_add(&l, "unused", m.unused);
        nb_optim *opt = nb_sgd_new(pc, &l, nb_sgd_defaults(0.0)); /* lr 0: the same params */
        for (int acc = 1; acc <= 2; acc++) {
            /* the reference: zero_grad, then acc backwards of loss / acc */
            nb_set_detect_anomaly(sc, false);
            for (int i = 0; i < N_STALE; i++) nb_zero_grad(nb_list_tensor(&l, i));
            for (int k = 0; k < acc; k++) {
                nb_ctx_reset(sc);
                nb_tensor *loss = stale_loss(sc, k, &m);
                ck_assert_int_eq(nb_backward(sc, acc > 1 ? nb_scale(sc, loss, 1.0 / acc) : loss,
                                             NULL), NB_OK);
            }
            void *want[N_STALE];
            for (int i = 0; i < N_STALE; i++) {
                nb_tensor *t = nb_list_tensor(&l, i);
                ck_assert_ptr_nonnull(t->grad);
                want[i] = malloc(t->numel * es);
                memcpy(want[i], t->grad, t->numel * es);
                for (size_t j = 0; j < t->numel; j++)
                    if (dt == NB_F32) ((float *)t->grad)[j] = NAN;
                    else ((double *)t->grad)[j] = NAN;
            }
            nb_set_detect_anomaly(sc, true);
            nb_train_step st = {opt, &l, acc, 0, 0.0, stale_loss, &m, NULL, NULL};
            ck_assert_msg(nb_train_step_run(sc, &st, NULL) == NB_OK, "%s", nb_ctx_error(sc));
            for (int i = 0; i < N_STALE; i++) {
                nb_tensor *t = nb_list_tensor(&l, i);
                ck_assert(!t->grad_stale);
                ck_assert_msg(!memcmp(t->grad, want[i], t->numel * es), "%s %d micro-batches: "
                              "%s.grad differs", nb_dtype_name(dt), acc, nb_list_name(&l, i));
                free(want[i]);
            }
        }
        ck_assert_double_eq(nb_grad_get(m.unused, 0), 0.0);
        ck_assert_double_eq(nb_grad_get(m.g[2], 0), 0.0);
        nb_optim_free(opt), nb_list_free(&l);
        nb_ctx_free(sc), nb_ctx_free(pc);
    }
}
END_TEST

/* The training step clips inside AdamW's update (one pass over the
 * gradients instead of two). Against the same step spelt out (backward,
 * nb_clip_grad_norm, nb_optim_step) on float32 parameters of several norm
 * chunks (16384 elements each), on 1 and 2 threads: the loss, the norm, the
 * clipped gradients and the parameters must be the same bits. */
typedef struct sq_loss {
    nb_tensor *w, *b;
} sq_loss;

static nb_tensor *sum_of_squares(nb_ctx *ctx, int micro, void *user) {
    (void)micro;
    sq_loss *q = user;
    return nb_add(ctx, nb_sum(ctx, nb_mul(ctx, q->w, q->w)), nb_sum(ctx, nb_mul(ctx, q->b, q->w)));
}

START_TEST(test_train_step_fused_clip_same_bits) {
    for (int threads = 1; threads <= 2; threads++) {
        nb_set_num_threads(threads);
        nb_ctx *pc = nb_ctx_new(0), *sc = nb_ctx_new(0);
        nb_tensor_list l[2] = {{0}, {0}};
        sq_loss q[2];
        nb_optim *opt[2];
        for (int k = 0; k < 2; k++) {
            nb_pcg32 rng;
            nb_pcg32_seed(&rng, 7, 1);
            q[k].w = nb_requires_grad(nb_normal(pc, NB_F32, NB_SHAPE(3, 17000), 0, 1, &rng));
            q[k].b = nb_requires_grad(nb_normal(pc, NB_F32, NB_SHAPE(17000), 0, 1, &rng));
            nb_list_add(&l[k], "w", q[k].w);
            nb_list_add(&l[k], "b", q[k].b);
            opt[k] = nb_adamw_new(pc, &l[k], nb_adamw_defaults(1e-2));
        }
        nb_train_step st = {opt[0], &l[0], 1, 1.0, 1e-2, sum_of_squares, &q[0], NULL, NULL};
        for (int it = 0; it < 3; it++) {
            nb_step_result r;
            ck_assert_int_eq(nb_train_step_run(sc, &st, &r), NB_OK);
            nb_optim_zero_grad(opt[1]);
            nb_ctx_reset(sc);
            nb_tensor *loss = sum_of_squares(sc, 0, &q[1]);
            ck_assert_double_eq(nb_item(loss), r.loss);
            ck_assert_int_eq(nb_backward(sc, loss, NULL), NB_OK);
            ck_assert_double_eq(nb_clip_grad_norm(&l[1], 1.0), r.grad_norm);
            ck_assert_double_gt(r.grad_norm, 10); /* the clip did act */
            nb_optim_set_lr(opt[1], 1e-2);
            ck_assert_int_eq(nb_optim_step(opt[1]), NB_OK);
            for (int i = 0; i < 2; i++) {
                nb_tensor *a = nb_list_tensor(&l[0], i), *b = nb_list_tensor(&l[1], i);
                size_t bytes = a->numel * sizeof(float);
                ck_assert_msg(!memcmp(a->data, b->data, bytes), "step %d: %s differs", it,
                              nb_list_name(&l[0], i));
                ck_assert_msg(!memcmp(a->grad, b->grad, bytes), "step %d: %s.grad differs", it,
                              nb_list_name(&l[0], i));
            }
        }
        for (int k = 0; k < 2; k++) nb_optim_free(opt[k]), nb_list_free(&l[k]);
        nb_ctx_free(sc), nb_ctx_free(pc);
    }
    nb_set_num_threads(1);
}
END_TEST

START_TEST(test_clip_grad_value) {
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *a = nb_requires_grad(nb_zeros(ctx, dt, NB_SHAPE(5)));
        nb_tensor *b = nb_requires_grad(nb_zeros(ctx, dt, NB_SHAPE(1)));
        nb_tensor_list l = {0};
        nb_list_add(&l, "a", a);
        nb_list_add(&l, "b", b);
        set_grad(a, (double[]){-3, 0.5, 2, -1, NAN});
        b->grad = NULL;
        nb_clip_grad_value(&l, -1); /* refused */
        nb_clip_grad_value(&l, NAN);
        ck_assert_double_eq(nb_grad_get(a, 0), -3);
        nb_clip_grad_value(&l, 1.0);
        ck_assert_grad_near(a, ((double[]){-1, 0.5, 1, -1}), 4, 0);
        ck_assert(isnan(nb_grad_get(a, 4)));
        nb_clip_grad_value(&l, 0.0);
        ck_assert_grad_near(a, ((double[]){0, 0, 0, 0}), 4, 0);
        nb_clip_grad_value(NULL, 1.0);
        nb_ctx_free(ctx);
    }
}
END_TEST

Suite *suite_optim(void) {
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("pytorch");
    tcase_add_loop_test(tc, test_trajectory_f64_matches_pytorch, 0, N_CONFIGS);
    tcase_add_loop_test(tc, test_trajectory_f32_matches_pytorch, 0, N_CONFIGS);
    tcase_add_loop_test(tc, test_resume_from_state_is_bit_identical, 0,
                        (int)(sizeof RESUMES / sizeof RESUMES[0]));
    tcase_add_test(tc, test_clip_grad_norm_matches_pytorch);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    tc = tcase_create("api");
    tcase_add_test(tc, test_sgd_single_steps_by_hand);
    tcase_add_test(tc, test_adam_and_adamw_first_step_by_hand);
    tcase_add_test(tc, test_constructors_validate_params);
    tcase_add_test(tc, test_constructors_validate_options);
    tcase_add_test(tc, test_defaults_match_pytorch);
    tcase_add_test(tc, test_zero_grad_and_null_arguments);
    tcase_add_test(tc, test_set_lr_changes_next_steps);
    tcase_add_test(tc, test_null_grads_are_skipped);
    tcase_add_test(tc, test_state_names_and_values);
    tcase_add_test(tc, test_state_export_errors);
    tcase_add_test(tc, test_load_state_errors_change_nothing);
    tcase_add_test(tc, test_load_state_resets_params_without_state);
    tcase_add_test(tc, test_dotted_names_round_trip);
    tcase_add_test(tc, test_clip_grad_norm_by_hand);
    tcase_add_test(tc, test_clip_grad_value);
    tcase_add_test(tc, test_train_step_fused_clip_same_bits);
    tcase_add_test(tc, test_train_step_deferred_zero_grad);
    suite_add_tcase(s, tc);
    return s;
}
