/* optim/optim.c - SGD, Adam and AdamW with PyTorch's exact update order.
 * Their checkpointable state is io/optim_state.c; clipping is clip.c.
 *
 * An optimizer lives entirely in its own context: the struct, the copy of
 * the parameter list, the per-parameter records and the state tensors. State
 * tensors are created on a parameter's first step (PyTorch's lazy state);
 * freeing the optimizer is freeing that context. */
#include "kernels/kernels_internal.h"
#include "optim/optim_internal.h"

#include <stdlib.h>

const char *const nb_optim_kind_names[] = {"sgd", "adam", "adamw", "muon"};

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
        return nb_ctx_fail(err, NB_ERR_VALUE, "sgd: invalid learning rate %g, expected >= 0",
                           o->lr);
    if (!(o->momentum >= 0))
        return nb_ctx_fail(err, NB_ERR_VALUE, "sgd: invalid momentum %g, expected >= 0",
                           o->momentum);
    if (!(o->weight_decay >= 0))
        return nb_ctx_fail(err, NB_ERR_VALUE, "sgd: invalid weight_decay %g, expected >= 0",
                           o->weight_decay);
    if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
        return nb_ctx_fail(err, NB_ERR_VALUE,
                           "sgd: nesterov momentum requires a momentum > 0 and zero dampening "
                           "(momentum %g, dampening %g)", o->momentum, o->dampening);
    return NB_OK;
}

nb_status nb_optim_check_adam_opts(nb_ctx *err, const char *name, const nb_adam_opts *o) {
    if (!(o->lr >= 0))
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s: invalid learning rate %g, expected >= 0",
                           name, o->lr);
    if (!(o->eps >= 0))
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s: invalid eps %g, expected >= 0", name, o->eps);
    if (!(o->beta1 >= 0 && o->beta1 < 1))
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s: beta1 = %g is outside [0, 1)", name, o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1))
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s: beta2 = %g is outside [0, 1)", name, o->beta2);
    if (!(o->weight_decay >= 0))
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s: invalid weight_decay %g, expected >= 0",
                           name, o->weight_decay);
    return NB_OK;
}

/* Name of parameter i for messages and state keys: its list name, or its
 * index when it has none. */
const char *nb_optim_param_name(const nb_tensor_list *l, int i, char *buf, size_t n) {
    const char *name = nb_list_name(l, i);
    if (name) return name;
    snprintf(buf, n, "%d", i);
    return buf;
}

nb_status nb_optim_check_params(nb_ctx *err, const char *name, const nb_tensor_list *l) {
    if (!l) return nb_ctx_fail(err, NB_ERR_NULL, "%s: params list is NULL", name);
    if (!nb_list_valid(l) || l->n <= 0)
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s: got %d parameters, expected at least 1", name,
                           l->n);
    for (int i = 0; i < l->n; i++) {
        char ib[16];
        const char *pn = nb_optim_param_name(l, i, ib, sizeof ib);
        const nb_tensor *t = nb_list_tensor(l, i);
        if (strlen(pn) > NAME_MAX_LEN)
            return nb_ctx_fail(err, NB_ERR_VALUE, "%s: parameter %d's name has %zu characters, "
                               "expected at most %d", name, i, strlen(pn), NAME_MAX_LEN);
        if (!t) return nb_ctx_fail(err, NB_ERR_NULL, "%s: parameter %d ('%s') is NULL", name, i, pn);
        if (t->dtype != NB_F32 && t->dtype != NB_F64)
            return nb_ctx_fail(err, NB_ERR_DTYPE,
                               "%s: parameter %d ('%s') has dtype %s, expected f32 or f64", name, i,
                               pn, nb_dtype_name(t->dtype));
        if (t->node)
            return nb_ctx_fail(err, NB_ERR_VALUE,
                               "%s: parameter %d ('%s') is the result of op '%s'; can't optimize a "
                               "non-leaf tensor", name, i, pn, nb_node_name(t->node));
        if (!t->grad)
            return nb_ctx_fail(err, NB_ERR_STATE,
                               "%s: parameter %d ('%s') has no grad buffer; call nb_requires_grad "
                               "on it first", name, i, pn);
        for (int j = 0; j < i; j++) {
            char jb[16];
            if (nb_list_tensor(l, j) == t)
                return nb_ctx_fail(err, NB_ERR_VALUE,
                                   "%s: parameter %d ('%s') is the same tensor as parameter %d",
                                   name, i, pn, j);
            if (strcmp(nb_optim_param_name(l, j, jb, sizeof jb), pn) == 0)
                return nb_ctx_fail(err, NB_ERR_VALUE,
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

nb_optim *nb_optim_new_kind(nb_ctx *err, opt_kind kind, const nb_tensor_list *params, int slots) {
    nb_ctx *ctx = nb_ctx_new(arena_bytes(params, slots));
    nb_optim *o = ctx ? nb_ctx_alloc(ctx, sizeof *o) : NULL;
    param_state *st = o ? nb_ctx_alloc(ctx, (size_t)params->n * sizeof *st) : NULL;
    if (!st) {
        nb_ctx_free(ctx);
        nb_ctx_fail(err, NB_ERR_MEMORY, "%s: out of memory", nb_optim_kind_names[kind]);
        return NULL;
    }
    o->kind = kind;
    o->grad_scale = 1.0;
    o->st = st;
    o->ctx = ctx;
    o->err_ctx = err;
    for (int i = 0; i < params->n; i++) {
        if (nb_list_append(&o->params, nb_list_name(params, i), nb_list_tensor(params, i))) {
            nb_optim_free(o);
            nb_ctx_fail(err, NB_ERR_MEMORY, "%s: out of memory", nb_optim_kind_names[kind]);
            return NULL;
        }
    }
    return o;
}

/* The constructors' context is required (it records the optimizer's errors
 * for its whole life) and, as for every function taking a context, must not
 * hold an error already. */
nb_optim *nb_sgd_new(nb_ctx *ctx, const nb_tensor_list *params, nb_sgd_opts opts) {
    if (!nb_ctx_ok(ctx) || nb_optim_check_params(ctx, "sgd", params) || check_sgd_opts(ctx, &opts))
        return NULL;
    nb_optim *o = nb_optim_new_kind(ctx, OPT_SGD, params, opts.momentum != 0 ? 1 : 0);
    if (o) o->sgd = opts;
    return o;
}

static nb_optim *adam_new(nb_ctx *ctx, opt_kind kind, const nb_tensor_list *params,
                          nb_adam_opts opts) {
    const char *name = nb_optim_kind_names[kind];
    if (!nb_ctx_ok(ctx) || nb_optim_check_params(ctx, name, params) ||
        nb_optim_check_adam_opts(ctx, name, &opts))
        return NULL;
    nb_optim *o = nb_optim_new_kind(ctx, kind, params, opts.amsgrad ? 3 : 2);
    if (o) o->adam = opts;
    return o;
}

nb_optim *nb_adam_new(nb_ctx *ctx, const nb_tensor_list *params, nb_adam_opts o) {
    return adam_new(ctx, OPT_ADAM, params, o);
}

nb_optim *nb_adamw_new(nb_ctx *ctx, const nb_tensor_list *params, nb_adam_opts o) {
    return adam_new(ctx, OPT_ADAMW, params, o);
}

/* nanoGPT's two groups: parameters with fewer than 2 dims get no decay. */
nb_optim *nb_adamw_new_groups(nb_ctx *ctx, const nb_tensor_list *params, nb_adam_opts o,
                              bool decay_1d) {
    nb_optim *opt = adam_new(ctx, OPT_ADAMW, params, o);
    if (!opt || decay_1d) return opt;
    opt->no_decay = nb_ctx_alloc(opt->ctx, (size_t)opt->params.n * sizeof *opt->no_decay + 1);
    if (!opt->no_decay) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "adamw: out of memory");
        nb_optim_free(opt);
        return NULL;
    }
    for (int i = 0; i < opt->params.n; i++) opt->no_decay[i] = nb_list_tensor(&opt->params, i)->ndim < 2;
    return opt;
}

void nb_optim_free(nb_optim *o) {
    if (!o) return;
    free(o->ns_work);
    nb_list_free(&o->params);
    nb_ctx_free(o->ctx);
}

const char *const nb_optim_slot_names[S_COUNT] = {"momentum_buffer", "exp_avg", "exp_avg_sq",
                                                  "max_exp_avg_sq"};

bool nb_optim_alloc_state(nb_ctx *err, nb_optim *o, int i) {
    const nb_tensor *p = nb_list_tensor(&o->params, i);
    for (int s = 0; s < S_COUNT; s++) {
        nb_tensor **t = nb_optim_slot(&o->st[i], s);
        if (!nb_optim_uses_slot(o, i, s) || *t) continue;
        *t = nb_empty(o->ctx, p->dtype, p->ndim, p->shape);
        if (!*t) {
            char ib[16];
            nb_ctx_clear_error(o->ctx);
            nb_ctx_fail(err, NB_ERR_MEMORY, "%s: out of memory for the state of parameter '%s'",
                        nb_optim_kname(o), nb_optim_param_name(&o->params, i, ib, sizeof ib));
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
    nb_adam_opts ao;
    bool decoupled;
    nb_tensor *param;
    param_state *ps;
    double step_size, bias_correction2_sqrt, grad_scale;
    const nb_vec_kernels *vk;
} adam_job;

/* The fewest elements worth a thread. */
#define ADAM_GRAIN 8192

static void adam_range(void *arg, int64_t lo, int64_t hi) {
    const adam_job *j = arg;
    const nb_adam_opts *ao = &j->ao;
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
            .neg_step = (float)(-j->step_size), .gscale = (float)j->grad_scale};
        j->vk->adam((float *)param->data + lo, (float *)param->grad + lo,
                    (float *)ps->exp_avg->data + lo, (float *)ps->exp_avg_sq->data + lo, n, &c);
        return;
    }
#define K(T)                                                                     \
    {                                                                            \
        T *p = (T *)param->data + lo;                                            \
        T *g = (T *)param->grad + lo;                                            \
        T *m = (T *)ps->exp_avg->data + lo, *v = (T *)ps->exp_avg_sq->data + lo; \
        T *vmax = ao->amsgrad ? (T *)ps->max_exp_avg_sq->data + lo : NULL;       \
        const T shrink = (T)(1.0 - ao->lr * ao->weight_decay);                   \
        const T wd = (T)ao->weight_decay, eps = (T)ao->eps;                      \
        const T b1 = (T)ao->beta1, one_b1 = (T)(1.0 - ao->beta1);                \
        const T b2 = (T)ao->beta2, one_b2 = (T)(1.0 - ao->beta2);                \
        const T bc2s = (T)j->bias_correction2_sqrt, neg_step = (T)(-j->step_size); \
        const T gs = (T)j->grad_scale;                                           \
        for (size_t i = 0; i < n; i++) {                                         \
            if (decoupled) p[i] = p[i] * shrink;                                 \
            if (gs != 1) g[i] = g[i] * gs;                                       \
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

/* One parameter's update, its coefficients from its step count. */
static adam_job adam_job_of(const nb_adam_opts *ao, bool decoupled, nb_tensor *param,
                            param_state *ps, double grad_scale) {
    const double t = (double)ps->step;
    const double bias_correction1 = 1.0 - pow(ao->beta1, t);
    const double bias_correction2 = 1.0 - pow(ao->beta2, t);
    return (adam_job){*ao,       decoupled, param, ps, ao->lr / bias_correction1,
                      sqrt(bias_correction2), grad_scale, nb_vec()};
}

/* Every parameter's update as one job over all their elements, element e
 * of the whole being in job k where ends[k - 1] <= e < ends[k]: the threads
 * meet once a step rather than once a parameter (a mixture of experts has
 * a hundred weights of some 25k elements each). */
typedef struct adam_all {
    const adam_job *jobs;
    const int64_t *ends;
    int n;
} adam_all;

static void adam_piece(void *arg, int k, int64_t a, int64_t b) {
    adam_range((void *)&((const adam_all *)arg)->jobs[k], a, b);
}

static void adam_all_range(void *arg, int64_t lo, int64_t hi) {
    const adam_all *a = arg;
    nb_pieces_range(a->ends, a->n, lo, hi, adam_piece, arg);
}

/* ---- step ----------------------------------------------------------------- */
nb_status nb_optim_step(nb_optim *o) { return o ? nb_optim_step_on(o->err_ctx, o) : NB_ERR_NULL; }

nb_status nb_optim_step_on(nb_ctx *err, nb_optim *o) {
    if (!o) return NB_ERR_NULL;
    /* Allocate all new state first, so running out of memory changes nothing
     * (and the list of the Muon parameters to update). */
    int *idx = NULL;
    if (o->kind == OPT_MUON && !(idx = malloc((size_t)o->params.n * sizeof *idx)))
        return nb_ctx_fail(err, NB_ERR_MEMORY, "muon: out of memory");
    for (int i = 0; i < o->params.n; i++)
        if (nb_list_tensor(&o->params, i)->grad && !o->st[i].live &&
            !nb_optim_alloc_state(err, o, i)) {
            free(idx);
            return NB_ERR_MEMORY;
        }
    adam_job *jobs = o->kind == OPT_SGD ? NULL : malloc((size_t)o->params.n * sizeof *jobs);
    int64_t *ends = jobs ? malloc((size_t)o->params.n * sizeof *ends) : NULL;
    int n_jobs = 0;
    for (int i = 0; i < o->params.n; i++) {
        nb_tensor *p = nb_list_tensor(&o->params, i);
        param_state *ps = &o->st[i];
        if (!p->grad) continue;
        bool first = !ps->live;
        if (nb_optim_is_muon(o, i)) continue; /* below, all at once */
        if (first && o->kind != OPT_SGD) {
            /* PyTorch: step 0, exp_avg and exp_avg_sq (and max) zeros */
            size_t bytes = p->numel * nb_dtype_size(p->dtype);
            memset(ps->exp_avg->data, 0, bytes);
            memset(ps->exp_avg_sq->data, 0, bytes);
            if (ps->max_exp_avg_sq) memset(ps->max_exp_avg_sq->data, 0, bytes);
            ps->step = 0;
        }
        ps->live = nb_optim_keeps_state(o, i);
        if (o->kind == OPT_SGD) {
            nb_sgd_opts so = o->sgd;
            so.lr *= nb_optim_lr_scale(o, i);
            sgd_update(&so, p, ps, first);
        } else {
            ps->step++;
            nb_adam_opts ao = o->adam;
            if (o->no_decay && o->no_decay[i]) ao.weight_decay = 0.0;
            ao.lr *= nb_optim_lr_scale(o, i);
            adam_job j = adam_job_of(&ao, o->kind != OPT_ADAM, p, ps, o->grad_scale);
            if (!ends) { /* out of memory for the list: this one now */
                nb_parallel_for((int64_t)p->numel, ADAM_GRAIN, adam_range, &j);
                continue;
            }
            ends[n_jobs] = (n_jobs ? ends[n_jobs - 1] : 0) + (int64_t)p->numel;
            jobs[n_jobs++] = j;
        }
    }
    if (n_jobs) {
        adam_all a = {jobs, ends, n_jobs};
        nb_parallel_for(ends[n_jobs - 1], ADAM_GRAIN, adam_all_range, &a);
    }
    free(jobs), free(ends);
    if (o->kind == OPT_MUON) {
        int n = 0;
        for (int i = 0; i < o->params.n; i++)
            if (nb_optim_is_muon(o, i) && nb_list_tensor(&o->params, i)->grad) idx[n++] = i;
        nb_muon_update(o, idx, n);
        for (int q = 0; q < n; q++) o->st[idx[q]].live = true;
    }
    free(idx);
    o->steps++;
    return NB_OK;
}

bool nb_optim_fuses_scale(const nb_optim *o, const nb_tensor_list *clipped) {
    if (o->kind == OPT_SGD || o->kind == OPT_MUON || o->adam.amsgrad || o->adam.maximize)
        return false;
    if (clipped->n != o->params.n) return false;
    for (int i = 0; i < o->params.n; i++) {
        const nb_tensor *t = nb_list_tensor(&o->params, i);
        if (t != nb_list_tensor(clipped, i) || t->dtype != NB_F32) return false;
    }
    return true;
}

void nb_optim_zero_grad(nb_optim *o) {
    if (!o) return;
    for (int i = 0; i < o->params.n; i++) nb_zero_grad(nb_list_tensor(&o->params, i));
}

void nb_optim_set_lr(nb_optim *o, double lr) {
    if (!o) return;
    if (!(lr >= 0)) {
        nb_ctx_fail(o->err_ctx, NB_ERR_VALUE, "%s: set_lr: invalid learning rate %g, expected >= 0",
                    nb_optim_kname(o), lr);
        return;
    }
    if (o->kind == OPT_SGD) {
        o->sgd.lr = lr;
    } else if (o->kind == OPT_MUON && !o->aux_adam) {
        o->muon.lr = lr;
    } else {
        o->adam.lr = lr;
        if (o->kind == OPT_MUON) o->muon.lr = lr * o->muon_per_lr;
    }
}

nb_status nb_optim_set_lr_scale(nb_optim *o, int i, double scale) {
    if (!o) return NB_ERR_NULL;
    if (i < 0 || i >= o->params.n)
        return nb_ctx_fail(o->err_ctx, NB_ERR_VALUE, "%s: set_lr_scale: parameter %d, expected 0 "
                           "to %d", nb_optim_kname(o), i, o->params.n - 1);
    if (!(scale >= 0) || isinf(scale))
        return nb_ctx_fail(o->err_ctx, NB_ERR_VALUE, "%s: set_lr_scale: %s: invalid scale %g, "
                           "expected a finite number >= 0", nb_optim_kname(o),
                           nb_list_name(&o->params, i) ? nb_list_name(&o->params, i) : "?", scale);
    if (!o->lr_scale) {
        o->lr_scale = nb_ctx_alloc(o->ctx, (size_t)o->params.n * sizeof *o->lr_scale);
        if (!o->lr_scale)
            return nb_ctx_fail(o->err_ctx, NB_ERR_MEMORY, "%s: set_lr_scale: out of memory",
                               nb_optim_kname(o));
        for (int k = 0; k < o->params.n; k++) o->lr_scale[k] = 1.0;
    }
    o->lr_scale[i] = scale;
    return NB_OK;
}

double nb_optim_lr_scale_of(const nb_optim *o, int i) {
    return o && i >= 0 && i < o->params.n ? nb_optim_lr_scale(o, i) : NAN;
}

double nb_optim_get_lr(const nb_optim *o) {
    if (!o) return NAN;
    if (o->kind == OPT_MUON && !o->aux_adam) return o->muon.lr;
    return o->kind == OPT_SGD ? o->sgd.lr : o->adam.lr;
}

int64_t nb_optim_step_count(const nb_optim *o) { return o ? o->steps : 0; }

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
        const char *pn = nb_optim_param_name(&o->params, i, ib, sizeof ib);
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

const char *nb_optim_kind(const nb_optim *o) { return o ? nb_optim_kname(o) : NULL; }

bool nb_optim_sgd_options(const nb_optim *o, nb_sgd_opts *out) {
    if (!o || !out || o->kind != OPT_SGD) return false;
    *out = o->sgd;
    return true;
}

bool nb_optim_adam_options(const nb_optim *o, nb_adam_opts *out) {
    if (!o || !out || o->kind == OPT_SGD || (o->kind == OPT_MUON && !o->aux_adam)) return false;
    *out = o->adam;
    return true;
}


bool nb_optim_muon_options(const nb_optim *o, nb_muon_opts *out) {
    if (!o || !out || o->kind != OPT_MUON) return false;
    *out = o->muon;
    return true;
}
