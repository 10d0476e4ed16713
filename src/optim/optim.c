/* train/optim.c - SGD, Adam and AdamW with PyTorch's exact update order, their
 * checkpointable state, and gradient clipping.
 *
 * An optimizer lives entirely in its own context: the struct, the copy of
 * the parameter list, the per-parameter records and the state tensors. State
 * tensors are created on a parameter's first step (PyTorch's lazy state);
 * freeing the optimizer is freeing that context. */
#include "kernels/kernels_internal.h"
#include "optim/optim_internal.h"

#include <stdarg.h>
#include <stdlib.h>

typedef enum opt_kind { OPT_SGD, OPT_ADAM, OPT_ADAMW } opt_kind;

static const char *const kind_names[] = {"sgd", "adam", "adamw"};

/* One parameter's state. Tensors have the parameter's shape and dtype. */
typedef struct param_state {
    nb_tensor *momentum_buffer; /* SGD with momentum */
    nb_tensor *exp_avg;         /* Adam: m */
    nb_tensor *exp_avg_sq;      /* Adam: v */
    nb_tensor *max_exp_avg_sq;  /* Adam with amsgrad: v_max */
    int64_t step;               /* Adam: this parameter's t */
    bool live; /* the state exists (PyTorch: the param has an entry in optimizer.state) */
} param_state;

struct nb_optim {
    opt_kind kind;
    nb_sgd_opts sgd;       /* used when kind == OPT_SGD */
    nb_adam_opts adam;     /* used for OPT_ADAM and OPT_ADAMW */
    nb_tensor_list params; /* copied from the caller */
    param_state *st;       /* params.n records */
    int64_t steps;         /* nb_optim_step calls */
    bool *no_decay;        /* params.n flags (nb_adamw_new_groups) or NULL: weight_decay 0 */
    nb_ctx *ctx;           /* owns all of the above */
    char err[NB_ERRMSG];
};

static const char *kname(const nb_optim *o) { return kind_names[o->kind]; }

/* Records a message on o (for nb_optim_error) and, when given, on ctx. */
static nb_status fail(nb_optim *o, nb_ctx *ctx, nb_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static nb_status fail(nb_optim *o, nb_ctx *ctx, nb_status s, const char *fmt, ...) {
    char msg[NB_ERRMSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (o) snprintf(o->err, sizeof o->err, "%s", msg);
    if (ctx) nb_ctx_fail(ctx, s, "%s", msg);
    return s;
}

/* ---- options ------------------------------------------------------------ */
nb_sgd_opts nb_sgd_defaults(double lr) {
    return (nb_sgd_opts){.lr = lr, .momentum = 0, .dampening = 0, .weight_decay = 0,
                         .nesterov = false, .maximize = false};
}

nb_adam_opts nb_adam_defaults(double lr) {
    return (nb_adam_opts){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .weight_decay = 0, .amsgrad = false, .maximize = false};
}

nb_adam_opts nb_adamw_defaults(double lr) {
    nb_adam_opts o = nb_adam_defaults(lr);
    o.weight_decay = 0.01;
    return o;
}

/* The `!(x >= 0)` form also refuses NaN, as Python's `not 0.0 <= x` does. */
static nb_status check_sgd_opts(nb_ctx *err, const nb_sgd_opts *o) {
    if (!(o->lr >= 0))
        return fail(NULL, err, NB_ERR_VALUE, "sgd: invalid learning rate %g, expected >= 0",
                    o->lr);
    if (!(o->momentum >= 0))
        return fail(NULL, err, NB_ERR_VALUE, "sgd: invalid momentum %g, expected >= 0",
                    o->momentum);
    if (!(o->weight_decay >= 0))
        return fail(NULL, err, NB_ERR_VALUE, "sgd: invalid weight_decay %g, expected >= 0",
                    o->weight_decay);
    if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
        return fail(NULL, err, NB_ERR_VALUE,
                    "sgd: nesterov momentum requires a momentum > 0 and zero dampening "
                    "(momentum %g, dampening %g)", o->momentum, o->dampening);
    return NB_OK;
}

static nb_status check_adam_opts(nb_ctx *err, const char *name, const nb_adam_opts *o) {
    if (!(o->lr >= 0))
        return fail(NULL, err, NB_ERR_VALUE, "%s: invalid learning rate %g, expected >= 0",
                    name, o->lr);
    if (!(o->eps >= 0))
        return fail(NULL, err, NB_ERR_VALUE, "%s: invalid eps %g, expected >= 0", name, o->eps);
    if (!(o->beta1 >= 0 && o->beta1 < 1))
        return fail(NULL, err, NB_ERR_VALUE, "%s: beta1 = %g is outside [0, 1)", name, o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1))
        return fail(NULL, err, NB_ERR_VALUE, "%s: beta2 = %g is outside [0, 1)", name, o->beta2);
    if (!(o->weight_decay >= 0))
        return fail(NULL, err, NB_ERR_VALUE, "%s: invalid weight_decay %g, expected >= 0",
                    name, o->weight_decay);
    return NB_OK;
}

/* Name of parameter i for messages and state keys: its list name, or its
 * index when it has none. */
static const char *param_name(const nb_tensor_list *l, int i, char *buf, size_t n) {
    const char *name = nb_list_name(l, i);
    if (name) return name;
    snprintf(buf, n, "%d", i);
    return buf;
}

/* Longest parameter name: "state.<name>.max_exp_avg_sq" must fit a key. */
#define NAME_MAX_LEN 400
#define KEY_MAX 512

static nb_status check_params(nb_ctx *err, const char *name, const nb_tensor_list *l) {
    if (!l) return fail(NULL, err, NB_ERR_NULL, "%s: params list is NULL", name);
    if (!nb_list_valid(l) || l->n <= 0)
        return fail(NULL, err, NB_ERR_VALUE, "%s: got %d parameters, expected at least 1", name,
                    l->n);
    for (int i = 0; i < l->n; i++) {
        char ib[16];
        const char *pn = param_name(l, i, ib, sizeof ib);
        const nb_tensor *t = nb_list_tensor(l, i);
        if (strlen(pn) > NAME_MAX_LEN)
            return fail(NULL, err, NB_ERR_VALUE, "%s: parameter %d's name has %zu characters, "
                        "expected at most %d", name, i, strlen(pn), NAME_MAX_LEN);
        if (!t) return fail(NULL, err, NB_ERR_NULL, "%s: parameter %d ('%s') is NULL", name, i, pn);
        if (t->dtype != NB_F32 && t->dtype != NB_F64)
            return fail(NULL, err, NB_ERR_DTYPE,
                        "%s: parameter %d ('%s') has dtype %s, expected f32 or f64", name, i,
                        pn, nb_dtype_name(t->dtype));
        if (t->node)
            return fail(NULL, err, NB_ERR_VALUE,
                        "%s: parameter %d ('%s') is the result of op '%s'; can't optimize a "
                        "non-leaf tensor", name, i, pn, nb_node_name(t->node));
        if (!t->grad)
            return fail(NULL, err, NB_ERR_STATE,
                        "%s: parameter %d ('%s') has no grad buffer; call nb_requires_grad "
                        "on it first", name, i, pn);
        for (int j = 0; j < i; j++) {
            char jb[16];
            if (nb_list_tensor(l, j) == t)
                return fail(NULL, err, NB_ERR_VALUE,
                            "%s: parameter %d ('%s') is the same tensor as parameter %d",
                            name, i, pn, j);
            if (strcmp(param_name(l, j, jb, sizeof jb), pn) == 0)
                return fail(NULL, err, NB_ERR_VALUE,
                            "%s: parameters %d and %d are both named '%s'", name, j, i, pn);
        }
    }
    return NB_OK;
}

/* Arena bytes for the struct, the records and `slots` state tensors per
 * parameter, so the lazy state needs no further malloc. 0 (the default
 * size) if the sum overflows. */
static size_t arena_bytes(const nb_tensor_list *l, int slots) {
    const size_t a = 64; /* the arena's alignment */
#define ROUND(x) (((x) + a - 1) / a * a)
    size_t total = ROUND(sizeof(nb_optim)) + ROUND((size_t)l->n * sizeof(param_state)) + a;
    for (int i = 0; i < l->n; i++) {
        const nb_tensor *t = nb_list_tensor(l, i);
        size_t bytes = t->numel * nb_dtype_size(t->dtype);
        if (bytes > SIZE_MAX / 8) return 0;
        size_t one = ROUND(sizeof(nb_tensor)) + ROUND(bytes);
        if ((size_t)slots * one > SIZE_MAX / 2 - total) return 0;
        total += (size_t)slots * one;
    }
#undef ROUND
    return total;
}

static nb_optim *optim_new(opt_kind kind, const nb_tensor_list *params, int slots, nb_ctx *err) {
    nb_ctx *ctx = nb_ctx_new(arena_bytes(params, slots));
    nb_optim *o = ctx ? nb_ctx_alloc(ctx, sizeof *o) : NULL;
    param_state *st = o ? nb_ctx_alloc(ctx, (size_t)params->n * sizeof *st) : NULL;
    if (!st) {
        nb_ctx_free(ctx);
        fail(NULL, err, NB_ERR_MEMORY, "%s: out of memory", kind_names[kind]);
        return NULL;
    }
    o->kind = kind;
    o->st = st;
    o->ctx = ctx;
    for (int i = 0; i < params->n; i++) {
        if (nb_list_append(&o->params, nb_list_name(params, i), nb_list_tensor(params, i))) {
            nb_optim_free(o);
            fail(NULL, err, NB_ERR_MEMORY, "%s: out of memory", kind_names[kind]);
            return NULL;
        }
    }
    return o;
}

nb_optim *nb_sgd_new(const nb_tensor_list *params, nb_sgd_opts opts, nb_ctx *err_ctx) {
    if (check_params(err_ctx, "sgd", params) || check_sgd_opts(err_ctx, &opts)) return NULL;
    nb_optim *o = optim_new(OPT_SGD, params, opts.momentum != 0 ? 1 : 0, err_ctx);
    if (o) o->sgd = opts;
    return o;
}

static nb_optim *adam_new(opt_kind kind, const nb_tensor_list *params, nb_adam_opts opts,
                          nb_ctx *err_ctx) {
    const char *name = kind_names[kind];
    if (check_params(err_ctx, name, params) || check_adam_opts(err_ctx, name, &opts))
        return NULL;
    nb_optim *o = optim_new(kind, params, opts.amsgrad ? 3 : 2, err_ctx);
    if (o) o->adam = opts;
    return o;
}

nb_optim *nb_adam_new(const nb_tensor_list *params, nb_adam_opts o, nb_ctx *err_ctx) {
    return adam_new(OPT_ADAM, params, o, err_ctx);
}

nb_optim *nb_adamw_new(const nb_tensor_list *params, nb_adam_opts o, nb_ctx *err_ctx) {
    return adam_new(OPT_ADAMW, params, o, err_ctx);
}

/* nanoGPT's two groups: parameters with fewer than 2 dims get no decay. */
nb_optim *nb_adamw_new_groups(const nb_tensor_list *params, nb_adam_opts o, bool decay_1d,
                              nb_ctx *err_ctx) {
    nb_optim *opt = adam_new(OPT_ADAMW, params, o, err_ctx);
    if (!opt || decay_1d) return opt;
    opt->no_decay = nb_ctx_alloc(opt->ctx, (size_t)opt->params.n * sizeof *opt->no_decay + 1);
    if (!opt->no_decay) {
        nb_ctx_fail(err_ctx, NB_ERR_MEMORY, "adamw: out of memory");
        nb_optim_free(opt);
        return NULL;
    }
    for (int i = 0; i < opt->params.n; i++) opt->no_decay[i] = nb_list_tensor(&opt->params, i)->ndim < 2;
    return opt;
}

void nb_optim_free(nb_optim *o) {
    if (!o) return;
    nb_list_free(&o->params);
    nb_ctx_free(o->ctx);
}

/* ---- state records ------------------------------------------------------ */
/* Which state tensors this optimizer keeps per parameter. */
enum { S_MOMENTUM, S_EXP_AVG, S_EXP_AVG_SQ, S_MAX_EXP_AVG_SQ, S_COUNT };
static const char *const slot_names[S_COUNT] = {"momentum_buffer", "exp_avg", "exp_avg_sq",
                                                "max_exp_avg_sq"};

static bool uses_slot(const nb_optim *o, int s) {
    if (o->kind == OPT_SGD) return s == S_MOMENTUM && o->sgd.momentum != 0;
    if (s == S_MAX_EXP_AVG_SQ) return o->adam.amsgrad;
    return s == S_EXP_AVG || s == S_EXP_AVG_SQ;
}

static bool has_step(const nb_optim *o) { return o->kind != OPT_SGD; }

/* Do parameters keep any state at all? (SGD without momentum keeps none.) */
static bool keeps_state(const nb_optim *o) {
    for (int s = 0; s < S_COUNT; s++)
        if (uses_slot(o, s)) return true;
    return has_step(o);
}

static nb_tensor **slot(param_state *ps, int s) {
    switch (s) {
    case S_MOMENTUM: return &ps->momentum_buffer;
    case S_EXP_AVG: return &ps->exp_avg;
    case S_EXP_AVG_SQ: return &ps->exp_avg_sq;
    default: return &ps->max_exp_avg_sq;
    }
}

/* Makes sure parameter i's state tensors exist (their values are set by the
 * caller). They are allocated once and reused after a load_state. */
static bool alloc_state(nb_optim *o, int i) {
    const nb_tensor *p = nb_list_tensor(&o->params, i);
    for (int s = 0; s < S_COUNT; s++) {
        nb_tensor **t = slot(&o->st[i], s);
        if (!uses_slot(o, s) || *t) continue;
        *t = nb_empty(o->ctx, p->dtype, p->ndim, p->shape);
        if (!*t) {
            char ib[16];
            nb_ctx_clear_error(o->ctx);
            fail(o, NULL, NB_ERR_MEMORY, "%s: out of memory for the state of parameter '%s'",
                 kname(o), param_name(&o->params, i, ib, sizeof ib));
            return false;
        }
    }
    return true;
}

/* ---- SGD ------------------------------------------------------------------ */
/* p, g, buf all have the parameter's shape (n elements). On the parameter's
 * first step (`first`) the buffer is the (decayed) gradient itself. */
static void sgd_update(const nb_sgd_opts *so, nb_tensor *param, param_state *ps, bool first) {
    const size_t n = param->numel;
    const bool decay = so->weight_decay != 0, mom = so->momentum != 0;
#define K(T)                                                                   \
    {                                                                          \
        T *p = param->data;                                                    \
        const T *g = param->grad;                                              \
        T *buf = mom ? ps->momentum_buffer->data : NULL;                       \
        const T wd = (T)so->weight_decay, mu = (T)so->momentum;                \
        const T keep = (T)(1.0 - so->dampening), neg_lr = (T)(-so->lr);        \
        for (size_t i = 0; i < n; i++) {                                       \
            T d = so->maximize ? -g[i] : g[i];                                 \
            if (decay) d = d + wd * p[i];                                      \
            if (mom) {                                                         \
                buf[i] = first ? d : buf[i] * mu + keep * d;                   \
                d = so->nesterov ? d + mu * buf[i] : buf[i];                   \
            }                                                                  \
            p[i] = p[i] + neg_lr * d;                                          \
        }                                                                      \
    }
    NB_DISPATCH(param->dtype, K);
#undef K
}

/* ---- Adam / AdamW ----------------------------------------------------------- */
/* p, g, m, v, v_max all have the parameter's shape (n elements); ps->step is
 * already this step's t. The scalar coefficients are computed in double,
 * then rounded to T, in PyTorch's order. */
/* One Adam update of elements [lo, hi) of a parameter, on any thread. */
typedef struct adam_job {
    const nb_adam_opts *ao;
    bool decoupled;
    nb_tensor *param;
    param_state *ps;
    double step_size, bias_correction2_sqrt;
    const nb_vec_kernels *vk;
} adam_job;

/* The fewest elements worth a thread. */
#define ADAM_GRAIN 8192

static void adam_range(void *arg, int64_t lo, int64_t hi) {
    const adam_job *j = arg;
    const nb_adam_opts *ao = j->ao;
    const bool decoupled = j->decoupled;
    const bool l2 = !decoupled && ao->weight_decay != 0;
    nb_tensor *param = j->param;
    param_state *ps = j->ps;
    const size_t n = (size_t)(hi - lo);
    if (param->dtype == NB_F32 && !l2 && !ao->maximize && !ao->amsgrad) {
        /* the common case, as SIMD: the same operations in the same order */
        nb_adam_coef c = {
            .shrink = decoupled ? (float)(1.0 - ao->lr * ao->weight_decay) : 1.0f,
            .b1 = (float)ao->beta1, .one_b1 = (float)(1.0 - ao->beta1),
            .b2 = (float)ao->beta2, .one_b2 = (float)(1.0 - ao->beta2),
            .bc2s = (float)j->bias_correction2_sqrt, .eps = (float)ao->eps,
            .neg_step = (float)(-j->step_size)};
        j->vk->adam((float *)param->data + lo, (const float *)param->grad + lo,
                    (float *)ps->exp_avg->data + lo, (float *)ps->exp_avg_sq->data + lo, n, &c);
        return;
    }
#define K(T)                                                                     \
    {                                                                            \
        T *p = (T *)param->data + lo;                                            \
        const T *g = (const T *)param->grad + lo;                                \
        T *m = (T *)ps->exp_avg->data + lo, *v = (T *)ps->exp_avg_sq->data + lo; \
        T *vmax = ao->amsgrad ? (T *)ps->max_exp_avg_sq->data + lo : NULL;       \
        const T shrink = (T)(1.0 - ao->lr * ao->weight_decay);                   \
        const T wd = (T)ao->weight_decay, eps = (T)ao->eps;                      \
        const T b1 = (T)ao->beta1, one_b1 = (T)(1.0 - ao->beta1);                \
        const T b2 = (T)ao->beta2, one_b2 = (T)(1.0 - ao->beta2);                \
        const T bc2s = (T)j->bias_correction2_sqrt, neg_step = (T)(-j->step_size); \
        for (size_t i = 0; i < n; i++) {                                         \
            if (decoupled) p[i] = p[i] * shrink;                                 \
            T d = ao->maximize ? -g[i] : g[i];                                   \
            if (l2) d = d + wd * p[i];                                           \
            m[i] = m[i] * b1 + one_b1 * d;                                       \
            v[i] = v[i] * b2 + one_b2 * d * d;                                   \
            T second = v[i];                                                     \
            if (vmax) {                                                          \
                /* torch.maximum: NaN wins */                                    \
                if (isnan(second) || second > vmax[i]) vmax[i] = second;         \
                second = vmax[i];                                                \
            }                                                                    \
            const T denom = (T)sqrt((double)second) / bc2s + eps;                \
            p[i] = p[i] + neg_step * m[i] / denom;                               \
        }                                                                        \
    }
    NB_DISPATCH(param->dtype, K);
#undef K
}

static void adam_update(const nb_adam_opts *ao, bool decoupled, nb_tensor *param,
                        param_state *ps) {
    const double t = (double)ps->step;
    const double bias_correction1 = 1.0 - pow(ao->beta1, t);
    const double bias_correction2 = 1.0 - pow(ao->beta2, t);
    adam_job j = {ao, decoupled, param, ps, ao->lr / bias_correction1, sqrt(bias_correction2),
                  nb_vec()};
    nb_parallel_for((int64_t)param->numel, ADAM_GRAIN, adam_range, &j);
}

/* ---- step ----------------------------------------------------------------- */
nb_status nb_optim_step(nb_optim *o) {
    if (!o) return NB_ERR_NULL;
    o->err[0] = '\0';
    /* Allocate all new state first, so running out of memory changes nothing. */
    for (int i = 0; i < o->params.n; i++)
        if (nb_list_tensor(&o->params, i)->grad && !o->st[i].live && !alloc_state(o, i))
            return NB_ERR_MEMORY;
    for (int i = 0; i < o->params.n; i++) {
        nb_tensor *p = nb_list_tensor(&o->params, i);
        param_state *ps = &o->st[i];
        if (!p->grad) continue;
        bool first = !ps->live;
        if (first && o->kind != OPT_SGD) {
            /* PyTorch: step 0, exp_avg and exp_avg_sq (and max) zeros */
            size_t bytes = p->numel * nb_dtype_size(p->dtype);
            memset(ps->exp_avg->data, 0, bytes);
            memset(ps->exp_avg_sq->data, 0, bytes);
            if (ps->max_exp_avg_sq) memset(ps->max_exp_avg_sq->data, 0, bytes);
            ps->step = 0;
        }
        ps->live = keeps_state(o);
        if (o->kind == OPT_SGD) {
            sgd_update(&o->sgd, p, ps, first);
        } else {
            ps->step++;
            nb_adam_opts ao = o->adam;
            if (o->no_decay && o->no_decay[i]) ao.weight_decay = 0.0;
            adam_update(&ao, o->kind == OPT_ADAMW, p, ps);
        }
    }
    o->steps++;
    return NB_OK;
}

void nb_optim_zero_grad(nb_optim *o) {
    if (!o) return;
    for (int i = 0; i < o->params.n; i++) nb_zero_grad(nb_list_tensor(&o->params, i));
}

void nb_optim_set_lr(nb_optim *o, double lr) {
    if (!o) return;
    o->err[0] = '\0';
    if (!(lr >= 0)) {
        fail(o, NULL, NB_ERR_VALUE, "%s: set_lr: invalid learning rate %g, expected >= 0",
             kname(o), lr);
        return;
    }
    if (o->kind == OPT_SGD)
        o->sgd.lr = lr;
    else
        o->adam.lr = lr;
}

double nb_optim_get_lr(const nb_optim *o) {
    if (!o) return NAN;
    return o->kind == OPT_SGD ? o->sgd.lr : o->adam.lr;
}

int64_t nb_optim_step_count(const nb_optim *o) { return o ? o->steps : 0; }

const char *nb_optim_error(const nb_optim *o) {
    if (!o) return "NULL optimizer";
    return o->err[0] ? o->err : NULL;
}

/* ---- checkpoints ------------------------------------------------------------ */
#define STEP_NAME "state.step"

/* "state.<param>.<what>" in buf (KEY_MAX bytes; names are at most
 * NAME_MAX_LEN long, so it always fits). */
static void key_name(char *buf, const nb_optim *o, int i, const char *what) {
    char ib[16];
    snprintf(buf, KEY_MAX, "state.%s.%s", param_name(&o->params, i, ib, sizeof ib), what);
}

/* An entry nb_optim_state will append: a copy of `src`, or an f64 scalar
 * holding `step` when src is NULL. */
typedef struct pending {
    const char *name; /* in the caller's context */
    const nb_tensor *src;
    double step;
    nb_tensor *copy;
} pending;

/* Queues one entry after checking that `out` lacks the name. */
static nb_status queue(nb_optim *o, nb_ctx *ctx, const nb_tensor_list *out, pending *q,
                       int *n, const char *key, const nb_tensor *src, double step) {
    if (nb_list_get(out, key))
        return fail(o, ctx, NB_ERR_VALUE, "%s state: the output list already has an entry "
                    "'%s'", kname(o), key);
    char *name = nb_ctx_alloc(ctx, strlen(key) + 1);
    if (!name) return fail(o, NULL, nb_ctx_status(ctx), "%s", nb_ctx_error(ctx));
    memcpy(name, key, strlen(key) + 1);
    q[*n] = (pending){name, src, step, NULL};
    (*n)++;
    return NB_OK;
}

/* Queues every entry of the state into q (room for them all). */
static nb_status queue_all(nb_optim *o, nb_ctx *ctx, const nb_tensor_list *out, pending *q,
                           int *n) {
    char key[KEY_MAX];
    nb_status s = NB_OK;
    for (int i = 0; i < o->params.n && !s; i++) {
        param_state *ps = &o->st[i];
        if (!ps->live) continue;
        if (has_step(o)) {
            key_name(key, o, i, "step");
            s = queue(o, ctx, out, q, n, key, NULL, (double)ps->step);
        }
        for (int sl = 0; sl < S_COUNT && !s; sl++) {
            if (!uses_slot(o, sl)) continue;
            key_name(key, o, i, slot_names[sl]);
            s = queue(o, ctx, out, q, n, key, *slot(ps, sl), 0);
        }
    }
    return s ? s : queue(o, ctx, out, q, n, STEP_NAME, NULL, (double)o->steps);
}

/* Copies the queued entries into ctx and appends them; out is unchanged
 * when that fails. */
static nb_status append_all(nb_optim *o, nb_ctx *ctx, nb_tensor_list *out, pending *q, int n) {
    for (int j = 0; j < n; j++) {
        q[j].copy = q[j].src ? nb_copy(ctx, q[j].src, q[j].src->dtype)
                             : nb_scalar(ctx, NB_F64, q[j].step);
        if (!q[j].copy) return fail(o, NULL, nb_ctx_status(ctx), "%s", nb_ctx_error(ctx));
        q[j].copy->name = q[j].name;
    }
    const int n0 = out->n;
    for (int j = 0; j < n; j++) {
        nb_status s = nb_list_add(out, q[j].name, q[j].copy);
        if (s) {
            out->n = n0;
            return fail(o, ctx, s, "%s state: cannot append '%s' to the output list (%s)",
                        kname(o), q[j].name, nb_status_str(s));
        }
    }
    return NB_OK;
}

nb_status nb_optim_state(nb_optim *o, nb_ctx *ctx, nb_tensor_list *out) {
    if (!o || !ctx || !out)
        return fail(o, ctx, NB_ERR_NULL, "optim state: %s is NULL",
                    !o ? "optimizer" : !ctx ? "context" : "output list");
    o->err[0] = '\0';
    if (!nb_ctx_ok(ctx))
        return fail(o, NULL, nb_ctx_status(ctx), "%s state: the context already holds an "
                    "error: %s", kname(o), nb_ctx_error(ctx));
    if (!nb_list_valid(out))
        return fail(o, ctx, NB_ERR_VALUE, "%s state: the output list is corrupt (n = %d)",
                    kname(o), out->n);
    /* Queue everything first, so nothing is appended on failure. */
    pending *q = malloc(((size_t)o->params.n * (S_COUNT + 1) + 1) * sizeof *q);
    if (!q) return fail(o, ctx, NB_ERR_MEMORY, "%s state: out of memory", kname(o));
    int n = 0;
    nb_status s = queue_all(o, ctx, out, q, &n);
    if (!s) s = append_all(o, ctx, out, q, n);
    free(q);
    return s;
}

/* A step count: an f64 one-element tensor holding a whole number >= 0. */
static nb_status read_step(nb_optim *o, const char *key, const nb_tensor *t, int64_t *step) {
    if (t->dtype != NB_F64 || t->numel != 1) {
        char sb[64];
        return fail(o, NULL, t->dtype != NB_F64 ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                    "%s load_state: '%s' is %s %s, expected an f64 scalar", kname(o), key,
                    nb_dtype_name(t->dtype), nb_shape_str(t, sb, sizeof sb));
    }
    double v = nb_item(t);
    if (!(v >= 0 && v <= 9007199254740992.0 && v == floor(v)))
        return fail(o, NULL, NB_ERR_VALUE, "%s load_state: '%s' is %g, expected a whole "
                    "number >= 0", kname(o), key, v);
    *step = (int64_t)v;
    return NB_OK;
}

/* Is "<param>.<what>" (a state key without its "state." prefix) a state
 * this optimizer keeps for one of its parameters? */
static bool is_state_key(const nb_optim *o, const char *rest) {
    const char *dot = strrchr(rest, '.');
    if (!dot) return false;
    const char *what = dot + 1;
    bool known = has_step(o) && !strcmp(what, "step");
    for (int s = 0; s < S_COUNT && !known; s++) known = uses_slot(o, s) && !strcmp(what, slot_names[s]);
    if (!known) return false;
    size_t len = (size_t)(dot - rest);
    for (int i = 0; i < o->params.n; i++) {
        char ib[16];
        const char *pn = param_name(&o->params, i, ib, sizeof ib);
        if (strlen(pn) == len && !strncmp(pn, rest, len)) return true;
    }
    return false;
}

/* What a load found for one parameter, checked but not yet applied. */
typedef struct loaded_state {
    const nb_tensor *found[S_COUNT];
    bool live;
    int64_t step;
} loaded_state;

/* Finds and checks parameter i's entries in `state`. */
static nb_status find_param_state(nb_optim *o, const nb_tensor_list *state, int i,
                                  loaded_state *ls) {
    const nb_tensor *p = nb_list_tensor(&o->params, i);
    const char *present = NULL, *absent = NULL;
    char key[KEY_MAX];
    nb_status s;
    *ls = (loaded_state){0};
    if (has_step(o)) {
        key_name(key, o, i, "step");
        const nb_tensor *t = nb_list_get(state, key);
        if (t) {
            if ((s = read_step(o, key, t, &ls->step))) return s;
            present = "step";
        } else {
            absent = "step";
        }
    }
    for (int sl = 0; sl < S_COUNT; sl++) {
        if (!uses_slot(o, sl)) continue;
        key_name(key, o, i, slot_names[sl]);
        const nb_tensor *t = nb_list_get(state, key);
        if (!t) {
            if (!absent) absent = slot_names[sl];
            continue;
        }
        if (!present) present = slot_names[sl];
        if (t->dtype != p->dtype || !nb_same_shape(t, p)) {
            char tb[64], pb[64];
            return fail(o, NULL, t->dtype != p->dtype ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                        "%s load_state: '%s' is %s %s, expected %s %s like its parameter",
                        kname(o), key, nb_dtype_name(t->dtype), nb_shape_str(t, tb, sizeof tb),
                        nb_dtype_name(p->dtype), nb_shape_str(p, pb, sizeof pb));
        }
        ls->found[sl] = t;
    }
    if (present && absent) {
        char k2[KEY_MAX];
        key_name(key, o, i, present);
        key_name(k2, o, i, absent);
        return fail(o, NULL, NB_ERR_VALUE, "%s load_state: '%s' is present but '%s' is "
                    "missing", kname(o), key, k2);
    }
    ls->live = present != NULL;
    return NB_OK;
}

/* Checks everything in `state` into ls (one record per parameter). */
static nb_status check_state(nb_optim *o, const nb_tensor_list *state, loaded_state *ls) {
    nb_status s;
    for (int i = 0; i < o->params.n; i++)
        if ((s = find_param_state(o, state, i, &ls[i]))) return s;
    /* Every "state." entry must be one of ours. */
    for (int j = 0; j < state->n; j++) {
        const char *nm = nb_list_name(state, j);
        if (!nm || strncmp(nm, "state.", 6) != 0 || !strcmp(nm, STEP_NAME)) continue;
        if (!is_state_key(o, nm + 6))
            return fail(o, NULL, NB_ERR_VALUE, "%s load_state: unexpected entry '%s' (not "
                        "a state of this optimizer's parameters)", kname(o), nm);
    }
    for (int i = 0; i < o->params.n; i++)
        if (ls[i].live && !alloc_state(o, i)) return NB_ERR_MEMORY;
    return NB_OK;
}

nb_status nb_optim_load_state(nb_optim *o, const nb_tensor_list *state) {
    if (!o) return NB_ERR_NULL;
    o->err[0] = '\0';
    if (!state) return fail(o, NULL, NB_ERR_NULL, "%s load_state: state list is NULL", kname(o));
    if (!nb_list_valid(state))
        return fail(o, NULL, NB_ERR_VALUE, "%s load_state: the state list is corrupt (n = %d)",
                    kname(o), state->n);
    const nb_tensor *gstep = nb_list_get(state, STEP_NAME);
    int64_t total_steps;
    if (!gstep)
        return fail(o, NULL, NB_ERR_VALUE, "%s load_state: missing '" STEP_NAME "'", kname(o));
    nb_status s = read_step(o, STEP_NAME, gstep, &total_steps);
    if (s) return s;
    /* Validate every parameter's entries before changing anything. */
    loaded_state *ls = malloc((size_t)o->params.n * sizeof *ls);
    if (!ls) return fail(o, NULL, NB_ERR_MEMORY, "%s load_state: out of memory", kname(o));
    s = check_state(o, state, ls);
    for (int i = 0; i < o->params.n && !s; i++) { /* commit */
        param_state *ps = &o->st[i];
        ps->live = ls[i].live;
        ps->step = ls[i].step;
        for (int sl = 0; sl < S_COUNT; sl++)
            if (ls[i].found[sl])
                memmove((*slot(ps, sl))->data, ls[i].found[sl]->data,
                        ls[i].found[sl]->numel * nb_dtype_size(ls[i].found[sl]->dtype));
    }
    if (!s) o->steps = total_steps;
    free(ls);
    return s;
}

/* ---- what an optimizer is (read by checkpoints and tools) --------------------- */
/* Does o optimize exactly the tensors of params, under the same names? On
 * a mismatch, why[] says which parameter differs. */
bool nb_optim_matches(const nb_optim *o, const nb_tensor_list *params, char *why, size_t n) {
    if (o->params.n != params->n) {
        snprintf(why, n, "the optimizer has %d parameters but %d are given", o->params.n,
                 params->n);
        return false;
    }
    for (int i = 0; i < o->params.n; i++) {
        char ib[16];
        const char *pn = param_name(&o->params, i, ib, sizeof ib);
        const nb_tensor *t = nb_list_get(params, pn);
        if (t != nb_list_tensor(&o->params, i)) {
            snprintf(why, n, "the optimizer's parameter '%s' is %s", pn,
                     t ? "another tensor than the one given under that name"
                       : "not among the parameters given");
            return false;
        }
    }
    return true;
}

const char *nb_optim_kind(const nb_optim *o) { return o ? kname(o) : NULL; }

bool nb_optim_sgd_options(const nb_optim *o, nb_sgd_opts *out) {
    if (!o || !out || o->kind != OPT_SGD) return false;
    *out = o->sgd;
    return true;
}

bool nb_optim_adam_options(const nb_optim *o, nb_adam_opts *out) {
    if (!o || !out || o->kind == OPT_SGD) return false;
    *out = o->adam;
    return true;
}

/* ---- clipping ----------------------------------------------------------------- */
static bool has_float_grad(const nb_tensor *t) {
    return t && t->grad && (t->dtype == NB_F32 || t->dtype == NB_F64);
}

/* ---- a parameter list's gradients, element ranges over the threads ---------- */
typedef struct grad_ranges_job {
    const nb_tensor_list *l;
    const int *idx;      /* entries with a float gradient */
    const int64_t *ends; /* their element counts, summed */
    int n;
    nb_grad_range_fn fn;
    void *arg;
} grad_ranges_job;

static void grad_ranges_range(void *arg, int64_t lo, int64_t hi) {
    const grad_ranges_job *j = arg;
    int k = 0;
    while (k < j->n && j->ends[k] <= lo) k++;
    for (; k < j->n && lo < hi; k++) {
        int64_t start = k ? j->ends[k - 1] : 0, end = j->ends[k] < hi ? j->ends[k] : hi;
        j->fn(nb_list_tensor(j->l, j->idx[k]), (size_t)(lo - start), (size_t)(end - start),
              j->arg);
        lo = end;
    }
}

/* The entries are taken a batch of up to BATCH at a time (a stack index). */
void nb_grad_ranges(const nb_tensor_list *l, nb_grad_range_fn fn, void *arg) {
    enum { BATCH = 1024 };
    int idx[BATCH];
    int64_t ends[BATCH];
    for (int i = 0; i < l->n;) {
        int n = 0;
        int64_t total = 0;
        for (; i < l->n && n < BATCH; i++) {
            const nb_tensor *t = nb_list_tensor(l, i);
            if (!has_float_grad(t)) continue;
            total += (int64_t)t->numel;
            idx[n] = i, ends[n] = total, n++;
        }
        grad_ranges_job j = {l, idx, ends, n, fn, arg};
        nb_parallel_for(total, 1 << 15, grad_ranges_range, &j); /* 32k elements a thread */
    }
}

/* g *= coef over one range of a gradient (the same multiply as one thread) */
static void scale_range(nb_tensor *t, size_t lo, size_t hi, void *arg) {
    const double coef = *(const double *)arg;
#define K(T)                                                        \
    {                                                               \
        T *g = (T *)t->grad + lo;                                   \
        const T c = (T)coef;                                        \
        for (size_t j = 0; j < hi - lo; j++) g[j] = g[j] * c;       \
    }
    NB_DISPATCH(t->dtype, K);
#undef K
}

double nb_clip_grad_norm(const nb_tensor_list *params, double max_norm) {
    if (!nb_list_valid(params)) return NAN;
    /* four partial sums (element j into s[j % 4] within each tensor), added
     * up at the end: the adds do not wait on each other, the order is fixed */
    double s[4] = {0, 0, 0, 0};
    for (int i = 0; i < params->n; i++) {
        const nb_tensor *t = nb_list_tensor(params, i);
        if (!has_float_grad(t)) continue;
#define K(T)                                                        \
    {                                                               \
        const T *g = t->grad;                                       \
        size_t j = 0;                                               \
        for (; j + 4 <= t->numel; j += 4)                           \
            for (int l = 0; l < 4; l++)                             \
                s[l] += (double)g[j + l] * (double)g[j + l];        \
        for (; j < t->numel; j++) s[0] += (double)g[j] * (double)g[j]; \
    }
        NB_DISPATCH(t->dtype, K);
#undef K
    }
    const double total = sqrt((s[0] + s[1]) + (s[2] + s[3]));
    double coef = max_norm / (total + 1e-6);
    if (coef < 1.0) nb_grad_ranges(params, scale_range, &coef); /* on every thread */
    return total;
}

void nb_clip_grad_value(const nb_tensor_list *params, double clip) {
    if (!nb_list_valid(params) || !(clip >= 0)) return;
    for (int i = 0; i < params->n; i++) {
        nb_tensor *t = nb_list_tensor(params, i);
        if (!has_float_grad(t)) continue;
#define K(T)                                                        \
    {                                                               \
        T *g = t->grad;                                             \
        const T hi = (T)clip, lo = -hi;                             \
        for (size_t j = 0; j < t->numel; j++)                       \
            g[j] = g[j] < lo ? lo : g[j] > hi ? hi : g[j];          \
    }
        NB_DISPATCH(t->dtype, K);
#undef K
    }
}
