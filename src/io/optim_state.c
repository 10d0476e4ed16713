/* io/optim_state.c - an optimizer's state as named tensors, as PyTorch's
 * optimizer.state_dict() holds it ("state.<param>.exp_avg", ..., and
 * "state.step"): nb_optim_state lists it for a checkpoint, and
 * nb_optim_load_state puts a saved one back, checking every name, shape and
 * dtype first so a bad file changes nothing. */
#include "io/io_internal.h"
#include "optim/optim_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- checkpoints ------------------------------------------------------------ */
#define STEP_NAME "state.step"

/* "state.<param>.<what>" in buf (KEY_MAX bytes; names are at most
 * NAME_MAX_LEN long, so it always fits). */
static void key_name(char *buf, const nb_optim *o, int i, const char *what) {
    char ib[16];
    snprintf(buf, KEY_MAX, "state.%s.%s", nb_optim_param_name(&o->params, i, ib, sizeof ib), what);
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
static nb_status queue(nb_ctx *ctx, nb_optim *o, const nb_tensor_list *out, pending *q,
                       int *n, const char *key, const nb_tensor *src, double step) {
    if (nb_list_get(out, key))
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s state: the output list already has an entry "
                           "'%s'", nb_optim_kname(o), key);
    char *name = nb_ctx_alloc(ctx, strlen(key) + 1);
    if (!name) return nb_ctx_status(ctx);
    memcpy(name, key, strlen(key) + 1);
    q[*n] = (pending){name, src, step, NULL};
    (*n)++;
    return NB_OK;
}

/* Queues every entry of the state into q (room for them all). */
static nb_status queue_all(nb_ctx *ctx, nb_optim *o, const nb_tensor_list *out, pending *q,
                           int *n) {
    char key[KEY_MAX];
    nb_status s = NB_OK;
    for (int i = 0; i < o->params.n && !s; i++) {
        param_state *ps = &o->st[i];
        if (!ps->live) continue;
        if (nb_optim_has_step(o, i)) {
            key_name(key, o, i, "step");
            s = queue(ctx, o, out, q, n, key, NULL, (double)ps->step);
        }
        for (int sl = 0; sl < S_COUNT && !s; sl++) {
            if (!nb_optim_uses_slot(o, i, sl)) continue;
            key_name(key, o, i, nb_optim_slot_names[sl]);
            s = queue(ctx, o, out, q, n, key, *nb_optim_slot(ps, sl), 0);
        }
    }
    return s ? s : queue(ctx, o, out, q, n, STEP_NAME, NULL, (double)o->steps);
}

/* Copies the queued entries into ctx (or, with alias, makes views of the
 * state tensors there) and appends them; out is unchanged when that fails. */
static nb_status append_all(nb_ctx *ctx, nb_optim *o, nb_tensor_list *out, pending *q, int n,
                            bool alias) {
    for (int j = 0; j < n; j++) {
        nb_tensor *src = (nb_tensor *)q[j].src;
        q[j].copy = !src ? nb_scalar(ctx, NB_F64, q[j].step)
                    : alias ? nb_view_of(ctx, src, src->ndim, src->shape)
                            : nb_copy(ctx, src, src->dtype);
        if (!q[j].copy) return nb_ctx_status(ctx);
        q[j].copy->name = q[j].name;
    }
    const int n0 = out->n;
    for (int j = 0; j < n; j++) {
        nb_status s = nb_list_insert(out, q[j].name, q[j].copy);
        if (s) {
            out->n = n0;
            return nb_ctx_fail(ctx, s, "%s state: cannot append '%s' to the output list (%s)",
                               nb_optim_kname(o), q[j].name, nb_status_str(s));
        }
    }
    return NB_OK;
}

static nb_status optim_state(nb_ctx *ctx, nb_optim *o, nb_tensor_list *out, bool alias) {
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!o || !out)
        return nb_ctx_fail(ctx, NB_ERR_NULL, "optim state: %s is NULL",
                           !o ? "optimizer" : "output list");
    if (!nb_list_valid(out))
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s state: the output list is corrupt (n = %d)",
                           nb_optim_kname(o), out->n);
    /* Queue everything first, so nothing is appended on failure. */
    pending *q = malloc(((size_t)o->params.n * (S_COUNT + 1) + 1) * sizeof *q);
    if (!q) return nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s state: out of memory", nb_optim_kname(o));
    int n = 0;
    nb_status s = queue_all(ctx, o, out, q, &n);
    if (!s) s = append_all(ctx, o, out, q, n, alias);
    free(q);
    return s;
}

nb_status nb_optim_state(nb_ctx *ctx, nb_optim *o, nb_tensor_list *out) {
    return optim_state(ctx, o, out, false);
}

nb_status nb_optim_state_views(nb_ctx *ctx, nb_optim *o, nb_tensor_list *out) {
    return optim_state(ctx, o, out, true);
}

/* A step count: an f64 one-element tensor holding a whole number >= 0. */
static nb_status read_step(nb_ctx *err, nb_optim *o, const char *key, const nb_tensor *t,
                           int64_t *step) {
    if (t->dtype != NB_F64 || t->numel != 1) {
        char sb[64];
        return nb_ctx_fail(err, t->dtype != NB_F64 ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                           "%s load_state: '%s' is %s %s, expected an f64 scalar",
                           nb_optim_kname(o), key, nb_dtype_name(t->dtype),
                           nb_shape_str(t, sb, sizeof sb));
    }
    double v = nb_item(t);
    if (!(v >= 0 && v <= 9007199254740992.0 && v == floor(v)))
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s load_state: '%s' is %g, expected a whole "
                           "number >= 0", nb_optim_kname(o), key, v);
    *step = (int64_t)v;
    return NB_OK;
}

/* Is "<param>.<what>" (a state key without its "state." prefix) a state
 * this optimizer keeps for one of its parameters? */
static bool is_state_key(const nb_optim *o, const char *rest) {
    const char *dot = strrchr(rest, '.');
    if (!dot) return false;
    const char *what = dot + 1;
    size_t len = (size_t)(dot - rest);
    for (int i = 0; i < o->params.n; i++) {
        char ib[16];
        const char *pn = nb_optim_param_name(&o->params, i, ib, sizeof ib);
        if (strlen(pn) != len || strncmp(pn, rest, len)) continue;
        bool known = nb_optim_has_step(o, i) && !strcmp(what, "step");
        for (int s = 0; s < S_COUNT && !known; s++)
            known = nb_optim_uses_slot(o, i, s) && !strcmp(what, nb_optim_slot_names[s]);
        if (known) return true;
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
static nb_status find_param_state(nb_ctx *err, nb_optim *o, const nb_tensor_list *state, int i,
                                  loaded_state *ls) {
    const nb_tensor *p = nb_list_tensor(&o->params, i);
    const char *present = NULL, *absent = NULL;
    char key[KEY_MAX];
    nb_status s;
    *ls = (loaded_state){0};
    if (nb_optim_has_step(o, i)) {
        key_name(key, o, i, "step");
        const nb_tensor *t = nb_list_get(state, key);
        if (t) {
            if ((s = read_step(err, o, key, t, &ls->step))) return s;
            present = "step";
        } else {
            absent = "step";
        }
    }
    for (int sl = 0; sl < S_COUNT; sl++) {
        if (!nb_optim_uses_slot(o, i, sl)) continue;
        key_name(key, o, i, nb_optim_slot_names[sl]);
        const nb_tensor *t = nb_list_get(state, key);
        if (!t) {
            if (!absent) absent = nb_optim_slot_names[sl];
            continue;
        }
        if (!present) present = nb_optim_slot_names[sl];
        if (t->dtype != p->dtype || !nb_same_shape(t, p)) {
            char tb[64], pb[64];
            return nb_ctx_fail(err, t->dtype != p->dtype ? NB_ERR_DTYPE : NB_ERR_SHAPE,
                               "%s load_state: '%s' is %s %s, expected %s %s like its parameter",
                               nb_optim_kname(o), key, nb_dtype_name(t->dtype),
                               nb_shape_str(t, tb, sizeof tb), nb_dtype_name(p->dtype),
                               nb_shape_str(p, pb, sizeof pb));
        }
        ls->found[sl] = t;
    }
    if (present && absent) {
        char k2[KEY_MAX];
        key_name(key, o, i, present);
        key_name(k2, o, i, absent);
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s load_state: '%s' is present but '%s' is "
                           "missing", nb_optim_kname(o), key, k2);
    }
    ls->live = present != NULL;
    return NB_OK;
}

/* Checks everything in `state` into ls (one record per parameter). */
static nb_status check_state(nb_ctx *err, nb_optim *o, const nb_tensor_list *state,
                             loaded_state *ls) {
    nb_status s;
    for (int i = 0; i < o->params.n; i++)
        if ((s = find_param_state(err, o, state, i, &ls[i]))) return s;
    /* Every "state." entry must be one of ours. */
    for (int j = 0; j < state->n; j++) {
        const char *nm = nb_list_name(state, j);
        if (!nm || strncmp(nm, "state.", 6) != 0 || !strcmp(nm, STEP_NAME)) continue;
        if (!is_state_key(o, nm + 6))
            return nb_ctx_fail(err, NB_ERR_VALUE, "%s load_state: unexpected entry '%s' (not "
                               "a state of this optimizer's parameters)", nb_optim_kname(o), nm);
    }
    for (int i = 0; i < o->params.n; i++)
        if (ls[i].live && !nb_optim_alloc_state(err, o, i)) return NB_ERR_MEMORY;
    return NB_OK;
}

nb_status nb_optim_load_state(nb_optim *o, const nb_tensor_list *state) {
    return o ? nb_optim_load_state_on(o->err_ctx, o, state) : NB_ERR_NULL;
}

static nb_status copy_in_memory(void *user, void *dst, const nb_tensor *src) {
    (void)user;
    memmove(dst, src->data, src->numel * nb_dtype_size(src->dtype));
    return NB_OK;
}

nb_status nb_optim_load_state_on(nb_ctx *err, nb_optim *o, const nb_tensor_list *state) {
    return nb_optim_load_state_with(err, o, state, copy_in_memory, NULL);
}

nb_status nb_optim_load_state_with(nb_ctx *err, nb_optim *o, const nb_tensor_list *state,
                                   nb_status (*copy)(void *user, void *dst, const nb_tensor *src),
                                   void *user) {
    if (!o) return NB_ERR_NULL;
    if (!state)
        return nb_ctx_fail(err, NB_ERR_NULL, "%s load_state: state list is NULL",
                           nb_optim_kname(o));
    if (!nb_list_valid(state))
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s load_state: the state list is corrupt (n = %d)",
                           nb_optim_kname(o), state->n);
    const nb_tensor *gstep = nb_list_get(state, STEP_NAME);
    int64_t total_steps;
    if (!gstep)
        return nb_ctx_fail(err, NB_ERR_VALUE, "%s load_state: missing '" STEP_NAME "'",
                           nb_optim_kname(o));
    nb_status s = read_step(err, o, STEP_NAME, gstep, &total_steps);
    if (s) return s;
    /* Validate every parameter's entries before changing anything. */
    loaded_state *ls = malloc((size_t)o->params.n * sizeof *ls);
    if (!ls)
        return nb_ctx_fail(err, NB_ERR_MEMORY, "%s load_state: out of memory", nb_optim_kname(o));
    s = check_state(err, o, state, ls);
    for (int i = 0; i < o->params.n && !s; i++) { /* commit */
        param_state *ps = &o->st[i];
        ps->live = ls[i].live;
        ps->step = ls[i].step;
        for (int sl = 0; sl < S_COUNT && !s; sl++)
            if (ls[i].found[sl]) s = copy(user, (*nb_optim_slot(ps, sl))->data, ls[i].found[sl]);
    }
    if (!s) o->steps = total_steps;
    free(ls);
    return s;
}
