/* io/checkpoint.c - whole training states (parameters, optimizer state, extra
 * state such as the dropout rng) in one safetensors file, for exact resume.
 * The layout and the rules are in nabla/io.h.
 *
 * Saving gathers everything into one list in a private context (the
 * optimizer state is copied there by nb_optim_state) and hands it to
 * nb_save_safetensors, which writes atomically. Loading reads the file into a
 * private context, checks every entry against what it is to be copied into,
 * and only then lets nb_optim_load_state (itself all-or-nothing) and the
 * copies change anything, so a failed load leaves the caller's state alone. */
#include "io/io_internal.h"
#include "optim/optim_internal.h"

#include <stddef.h>
#include <stdlib.h>

#define CK_FORMAT "nabla-checkpoint-1"
#define CK_EXTRA "extra."
#define CK_STATE "state."
#define SAVE "save_checkpoint"
#define LOAD "load_checkpoint"

/* Metadata pairs nabla writes before the caller's: format, version,
 * optimizer and at most 10 options (Muon's 5 and its AdamW group's 5). */
#define CK_OWN_META 13
/* How many metadata pairs a load looks at (ours come first). */
#define CK_READ_META 64

_Static_assert(sizeof(nb_pcg32) == 2 * sizeof(int64_t) && offsetof(nb_pcg32, inc) == 8,
               "nb_pcg32_tensor views the generator as two 64-bit integers");

/* Passes the error held by `from` (a private context) on to ctx. */
static nb_status forward_error(nb_ctx *ctx, nb_ctx *from, const char *op) {
    nb_status s = nb_ctx_status(from);
    const char *msg = nb_ctx_error(from);
    return nb_ctx_fail(ctx, s ? s : NB_ERR_MEMORY, "%s: %s", op, msg ? msg : "out of memory");
}

static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool reserved_meta_key(const char *k) {
    return !strcmp(k, "format") || !strcmp(k, "nabla_version") || !strcmp(k, "optimizer") ||
           starts_with(k, "optimizer.");
}

/* ---- metadata: the optimizer's kind and options -------------------------- */
/* The metadata strings, kept in the save's private context. */
typedef struct ck_meta {
    const char *keys[CK_OWN_META];
    const char *values[CK_OWN_META];
    int n;
} ck_meta;

static void meta_add(ck_meta *m, const char *key, const char *value) {
    m->keys[m->n] = key;
    m->values[m->n] = value;
    m->n++;
}

/* The shortest of %.15g, %.16g, %.17g that reads back as v, in tmp. */
static void meta_num(ck_meta *m, nb_ctx *tmp, const char *key, double v) {
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    char *s = nb_ctx_alloc(tmp, strlen(buf) + 1);
    if (!s) return; /* the error is on tmp and is checked by the caller */
    memcpy(s, buf, strlen(buf) + 1);
    meta_add(m, key, s);
}

static void meta_bool(ck_meta *m, const char *key, bool v) {
    meta_add(m, key, v ? "true" : "false");
}

static void optimizer_meta(ck_meta *m, nb_ctx *tmp, const nb_optim *opt) {
    nb_sgd_opts so;
    nb_adam_opts ao;
    nb_muon_opts mo;
    meta_add(m, "optimizer", opt ? nb_optim_kind(opt) : "none");
    if (nb_optim_sgd_options(opt, &so)) {
        meta_num(m, tmp, "optimizer.lr", so.lr);
        meta_num(m, tmp, "optimizer.momentum", so.momentum);
        meta_num(m, tmp, "optimizer.dampening", so.dampening);
        meta_num(m, tmp, "optimizer.weight_decay", so.weight_decay);
        meta_bool(m, "optimizer.nesterov", so.nesterov);
        meta_bool(m, "optimizer.maximize", so.maximize);
    } else if (nb_optim_muon_options(opt, &mo)) {
        meta_num(m, tmp, "optimizer.lr", mo.lr);
        meta_num(m, tmp, "optimizer.momentum", mo.momentum);
        meta_bool(m, "optimizer.nesterov", mo.nesterov);
        meta_num(m, tmp, "optimizer.ns_steps", mo.ns_steps);
        meta_num(m, tmp, "optimizer.weight_decay", mo.weight_decay);
        if (nb_optim_adam_options(opt, &ao)) { /* the AdamW group's */
            meta_num(m, tmp, "optimizer.adamw.lr", ao.lr);
            meta_num(m, tmp, "optimizer.adamw.beta1", ao.beta1);
            meta_num(m, tmp, "optimizer.adamw.beta2", ao.beta2);
            meta_num(m, tmp, "optimizer.adamw.eps", ao.eps);
            meta_num(m, tmp, "optimizer.adamw.weight_decay", ao.weight_decay);
        }
    } else if (nb_optim_adam_options(opt, &ao)) {
        meta_num(m, tmp, "optimizer.lr", ao.lr);
        meta_num(m, tmp, "optimizer.beta1", ao.beta1);
        meta_num(m, tmp, "optimizer.beta2", ao.beta2);
        meta_num(m, tmp, "optimizer.eps", ao.eps);
        meta_num(m, tmp, "optimizer.weight_decay", ao.weight_decay);
        meta_bool(m, "optimizer.amsgrad", ao.amsgrad);
        meta_bool(m, "optimizer.maximize", ao.maximize);
    }
}

/* ---- saving ------------------------------------------------------------------ */
/* Checks the lists and the caller's metadata before anything is gathered. */
static nb_status save_check_args(nb_ctx *ctx, const char *path, const nb_tensor_list *params,
                                 const nb_tensor_list *extra, int n_meta,
                                 const char *const *keys, const char *const *values) {
    if (!params) return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "params is NULL");
    const nb_tensor_list *lists[2] = {params, extra};
    for (int l = 0; l < 2; l++) {
        const char *what = l ? "extra" : "params";
        if (!lists[l]) continue;
        if (!nb_list_valid(lists[l]))
            return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "%s is corrupt (n = %d)", what,
                              lists[l]->n);
        for (int i = 0; i < lists[l]->n; i++) {
            const char *name = nb_list_name(lists[l], i);
            if (!name || !nb_list_tensor(lists[l], i))
                return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "%s entry %d has a NULL %s", what,
                                  i, name ? "tensor" : "name");
            if (!name[0])
                return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "%s entry %d has an empty name",
                                  what, i);
            if (!l && (starts_with(name, CK_STATE) || starts_with(name, CK_EXTRA)))
                return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path,
                                  "parameter '%s': names starting with '" CK_STATE "' or '" CK_EXTRA
                                  "' are reserved for optimizer and extra state", name);
        }
    }
    if (n_meta < 0)
        return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "n_meta is %d, expected >= 0", n_meta);
    if (n_meta > 0 && (!keys || !values))
        return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "%d metadata pairs but %s is NULL", n_meta,
                          keys ? "values" : "keys");
    for (int i = 0; i < n_meta; i++) {
        if (!keys[i] || !values[i])
            return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "metadata %s %d is NULL",
                              keys[i] ? "value" : "key", i);
        if (reserved_meta_key(keys[i]))
            return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path,
                              "metadata key '%s' is reserved for nabla's own entries", keys[i]);
    }
    return NB_OK;
}

/* The optimizer's state is saved and loaded under its parameters' names,
 * so it must be built over the very tensors given as params. */
static nb_status check_optim_params(nb_ctx *ctx, const char *op, const char *path,
                                    const nb_optim *opt, const nb_tensor_list *params) {
    char why[256];
    if (!opt || nb_optim_matches(opt, params, why, sizeof why)) return NB_OK;
    return nb_io_fail(ctx, NB_ERR_VALUE, op, path, "the optimizer was built over other tensors "
                      "than params: %s", why);
}

/* Appends (name, t) to the gathered list, with a message on failure. */
static nb_status gather(nb_ctx *ctx, const char *path, nb_tensor_list *all, const char *name,
                        nb_tensor *t) {
    nb_status s = nb_list_insert(all, name, t);
    if (s == NB_ERR_VALUE) return nb_io_fail(ctx, s, SAVE, path, "duplicate name '%s'", name);
    if (s) return nb_io_fail(ctx, s, SAVE, path, "cannot gather '%s': %s", name, nb_status_str(s));
    return NB_OK;
}

/* Does the work of nb_save_checkpoint with the private context tmp,
 * gathering everything into `all` (empty; the caller frees it). */
static nb_status save_with(nb_ctx *ctx, nb_ctx *tmp, nb_tensor_list *all, const char *path,
                           const nb_tensor_list *params, nb_optim *opt,
                           const nb_tensor_list *extra, int n_meta, const char *const *keys,
                           const char *const *values) {
    nb_status s = NB_OK;
    for (int i = 0; i < params->n && !s; i++)
        s = gather(ctx, path, all, nb_list_name(params, i), nb_list_tensor(params, i));
    if (s) return s;
    if (opt && nb_optim_state_views(tmp, opt, all)) return forward_error(ctx, tmp, SAVE);
    for (int i = 0; extra && i < extra->n && !s; i++) {
        size_t len = strlen(CK_EXTRA) + strlen(nb_list_name(extra, i)) + 1;
        char *name = nb_ctx_alloc(tmp, len);
        if (!name) return forward_error(ctx, tmp, SAVE);
        snprintf(name, len, CK_EXTRA "%s", nb_list_name(extra, i));
        s = gather(ctx, path, all, name, nb_list_tensor(extra, i));
    }
    if (s) return s;

    ck_meta own = {0};
    meta_add(&own, "format", CK_FORMAT);
    meta_add(&own, "nabla_version", NB_VERSION);
    optimizer_meta(&own, tmp, opt);
    if (nb_ctx_status(tmp)) return forward_error(ctx, tmp, SAVE);
    size_t total = (size_t)own.n + (size_t)n_meta;
    const char **mk = malloc(total * sizeof *mk), **mv = malloc(total * sizeof *mv);
    if (!mk || !mv) {
        free(mk);
        free(mv);
        return nb_io_fail(ctx, NB_ERR_MEMORY, SAVE, path, "out of memory");
    }
    memcpy(mk, own.keys, (size_t)own.n * sizeof *mk);
    memcpy(mv, own.values, (size_t)own.n * sizeof *mv);
    for (int i = 0; i < n_meta; i++) {
        mk[own.n + i] = keys[i];
        mv[own.n + i] = values[i];
    }
    s = nb_save_safetensors(tmp, path, all, (int)total, mk, mv);
    free(mk);
    free(mv);
    return s ? forward_error(ctx, tmp, SAVE) : NB_OK;
}

nb_status nb_save_checkpoint(nb_ctx *ctx, const char *path, const nb_tensor_list *params,
                             nb_optim *opt, const nb_tensor_list *extra, int n_meta,
                             const char *const *keys, const char *const *values) {
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!path) return nb_ctx_fail(ctx, NB_ERR_NULL, SAVE ": path is NULL");
    nb_status s = save_check_args(ctx, path, params, extra, n_meta, keys, values);
    if (!s) s = check_optim_params(ctx, SAVE, path, opt, params);
    if (s) return s;
    nb_ctx *tmp = nb_ctx_new(0);
    if (!tmp) return nb_io_fail(ctx, NB_ERR_MEMORY, SAVE, path, "out of memory");
    nb_tensor_list all = {0};
    s = save_with(ctx, tmp, &all, path, params, opt, extra, n_meta, keys, values);
    nb_list_free(&all);
    nb_ctx_free(tmp);
    return s;
}

/* ---- loading ------------------------------------------------------------------ */
static const char *meta_get(int n, const char *const *keys, const char *const *values,
                            const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(keys[i], key)) return values[i];
    return NULL;
}

static bool is_float(nb_dtype dt) { return dt == NB_F32 || dt == NB_F64; }

/* Can `file` (the checkpoint's tensor) be copied into `dst`? exact: the
 * dtype must be the same (extra state); otherwise F32 and F64 convert. */
static nb_status check_fit(nb_ctx *ctx, const char *path, const char *kind, const char *name,
                           const nb_tensor *dst, const nb_tensor *file, bool exact) {
    char db[64], fb[64];
    if (!nb_same_shape(dst, file))
        return nb_io_fail(ctx, NB_ERR_SHAPE, LOAD, path,
                          "%s '%s' has shape %s here but %s in the checkpoint", kind, name,
                          nb_shape_str(dst, db, sizeof db), nb_shape_str(file, fb, sizeof fb));
    bool ok = exact ? dst->dtype == file->dtype
                    : (is_float(dst->dtype) ? is_float(file->dtype) : dst->dtype == file->dtype);
    if (!ok)
        return nb_io_fail(ctx, NB_ERR_DTYPE, LOAD, path,
                          "%s '%s' is %s here but %s in the checkpoint", kind, name,
                          nb_dtype_name(dst->dtype), nb_dtype_name(file->dtype));
    return NB_OK;
}

/* Everything the load will copy, found and checked before anything changes. */
static nb_status load_check(nb_ctx *ctx, const char *path, const nb_tensor_list *file,
                            int n_meta, const char *const *mk, const char *const *mv,
                            const nb_tensor_list *params, const nb_optim *opt,
                            const nb_tensor_list *extra, const nb_tensor **extra_src) {
    const char *format = meta_get(n_meta, mk, mv, "format");
    if (!format || strcmp(format, CK_FORMAT))
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "not a nabla checkpoint: metadata \"format\" is %s%s%s, expected \""
                          CK_FORMAT "\" (for a plain weights file use nb_load_safetensors and "
                          "nb_params_copy_from)",
                          format ? "\"" : "", format ? format : "missing", format ? "\"" : "");
    if (opt) {
        const char *saved = meta_get(n_meta, mk, mv, "optimizer");
        const char *mine = nb_optim_kind(opt);
        if (!saved || !strcmp(saved, "none"))
            return nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path,
                              "the checkpoint holds no optimizer state, but a%s %s optimizer "
                              "was given to restore (pass NULL to load the parameters only)",
                              mine[0] == 'a' ? "n" : "", mine);
        if (strcmp(saved, mine))
            return nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path,
                              "the checkpoint was saved with optimizer '%s' but the optimizer "
                              "given is '%s'", saved, mine);
    }
    for (int i = 0; i < params->n; i++) {
        const char *name = nb_list_name(params, i);
        if (!name || !nb_list_tensor(params, i))
            return nb_io_fail(ctx, NB_ERR_NULL, LOAD, path, "params entry %d has a NULL %s", i,
                              name ? "tensor" : "name");
        const nb_tensor *src = nb_list_get(file, name);
        if (!src)
            return nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path,
                              "parameter '%s' is missing from the checkpoint", name);
        nb_status s = check_fit(ctx, path, "parameter", name, nb_list_tensor(params, i), src, false);
        if (s) return s;
    }
    for (int i = 0; extra && i < extra->n; i++) {
        const char *name = nb_list_name(extra, i);
        if (!name || !nb_list_tensor(extra, i))
            return nb_io_fail(ctx, NB_ERR_NULL, LOAD, path, "extra entry %d has a NULL %s", i,
                              name ? "tensor" : "name");
        extra_src[i] = NULL;
        for (int j = 0; j < file->n && !extra_src[i]; j++)
            if (starts_with(nb_list_name(file, j), CK_EXTRA) &&
                !strcmp(nb_list_name(file, j) + strlen(CK_EXTRA), name))
                extra_src[i] = nb_list_tensor(file, j);
        if (!extra_src[i])
            return nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path,
                              "extra state '%s' (entry '" CK_EXTRA "%s') is missing from the "
                              "checkpoint", name, name);
        nb_status s = check_fit(ctx, path, "extra state", name, nb_list_tensor(extra, i), extra_src[i], true);
        if (s) return s;
    }
    return NB_OK;
}

typedef struct lazy_copy {
    nb_ctx *tmp;
    const nb_st_lazy *lz;
} lazy_copy;

static nb_status copy_from_file(void *user, void *dst, const nb_tensor *src) {
    const lazy_copy *c = user;
    return nb_st_lazy_copy(c->tmp, c->lz, dst, src->dtype, src);
}

nb_status nb_load_checkpoint(nb_ctx *ctx, const char *path, const nb_tensor_list *params,
                             nb_optim *opt, const nb_tensor_list *extra) {
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!path) return nb_ctx_fail(ctx, NB_ERR_NULL, LOAD ": path is NULL");
    if (!params) return nb_io_fail(ctx, NB_ERR_NULL, LOAD, path, "params is NULL");
    const nb_tensor_list *lists[2] = {params, extra};
    for (int l = 0; l < 2; l++)
        if (lists[l] && !nb_list_valid(lists[l]))
            return nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path, "%s is corrupt (n = %d)",
                              l ? "extra" : "params", lists[l]->n);
    nb_status s = check_optim_params(ctx, LOAD, path, opt, params);
    if (s) return s;
    nb_ctx *tmp = nb_ctx_new(0);
    if (!tmp) return nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
    nb_tensor_list file = {0};
    nb_st_lazy lz = {0}; /* the big tensors stay in the file until copied in place */
    const char *mk[CK_READ_META], *mv[CK_READ_META];
    const nb_tensor **extra_src = malloc((extra && extra->n ? (size_t)extra->n : 1) *
                                         sizeof *extra_src);
    int n_meta = 0;
    s = extra_src ? NB_OK : nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
    if (s) goto done;
    s = nb_load_safetensors_lazy(tmp, path, &file, CK_READ_META, &n_meta, mk, mv, &lz);
    if (s) {
        s = forward_error(ctx, tmp, LOAD);
        goto done;
    }
    if (n_meta > CK_READ_META) n_meta = CK_READ_META;
    s = load_check(ctx, path, &file, n_meta, mk, mv, params, opt, extra, extra_src);
    if (s) goto done;
    /* nb_optim_load_state validates before it changes anything, and
     * load_check has checked the rest: from here on only a read of a file
     * that changed since it was validated can fail. */
    lazy_copy lc = {tmp, &lz};
    if (opt && (s = nb_optim_load_state_with(tmp, opt, &file, copy_from_file, &lc))) {
        s = nb_io_fail(ctx, s, LOAD, path, "%s", nb_ctx_error(tmp));
        goto done;
    }
    for (int i = 0; i < params->n && !s; i++) {
        nb_tensor *d = nb_list_tensor(params, i);
        s = nb_st_lazy_copy(tmp, &lz, d->data, d->dtype, nb_list_get(&file, nb_list_name(params, i)));
    }
    for (int i = 0; extra && i < extra->n && !s; i++)
        s = nb_st_lazy_copy(tmp, &lz, nb_list_tensor(extra, i)->data, extra_src[i]->dtype,
                            extra_src[i]);
    if (s) s = nb_io_fail(ctx, s, LOAD, path, "%s", nb_ctx_error(tmp));
done:
    free(extra_src);
    nb_st_lazy_free(&lz);
    nb_list_free(&file);
    nb_ctx_free(tmp);
    return s;
}

/* ---- the rng as a tensor -------------------------------------------------------- */
nb_tensor *nb_pcg32_tensor(nb_ctx *ctx, struct nb_pcg32 *rng) {
    if (!nb_ctx_ok(ctx)) return NULL;
    if (!rng) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "pcg32_tensor: rng is NULL");
        return NULL;
    }
    nb_tensor *t = nb_empty(ctx, NB_I64, NB_SHAPE(2));
    if (t) t->data = rng; /* a view of (state, inc), so loads restore the generator */
    return t;
}
