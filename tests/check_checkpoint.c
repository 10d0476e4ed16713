/* check_checkpoint.c - training checkpoints (nb_save_checkpoint,
 * nb_load_checkpoint, nb_pcg32_tensor) and the optimizer accessors they use.
 *
 * The resume test trains a MultiHeadAttention (d_in = d_out = 8, 2 heads,
 * qkv_bias, T = 6, B = 2) with MSE loss on three fixed batches picked by a
 * data cursor: 20 steps straight, against 10 steps, a checkpoint, a load
 * into a fresh model and optimizer (another init and another rng state),
 * and 10 more steps. With dropout 0.1 the masks come from the rng, which the
 * checkpoint carries as extra state together with the cursor. Every
 * parameter must come out bit-identical (memcmp), for SGD (momentum,
 * nesterov), Adam (plain, amsgrad) and AdamW, in f32 and f64. The other
 * tests corrupt files, fail saves and mismatch models, and check that
 * nothing changes and the message says why. */
#include "check_nabla.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#define D 8
#define T 6
#define B 2
#define HEADS 2
#define NBATCH 3

/* ---- a training run ----------------------------------------------------------- */
typedef enum { K_SGD, K_ADAM, K_ADAMW } kind;

typedef struct cfg {
    const char *name;
    kind k;
    double lr, momentum, dampening, weight_decay;
    bool nesterov, amsgrad;
} cfg;

static const cfg CFGS[] = {
    {"sgd_nesterov", K_SGD, 0.05, 0.9, 0, 1e-3, true, false},
    {"sgd_momentum_dampening", K_SGD, 0.05, 0.8, 0.1, 0, false, false},
    {"adam", K_ADAM, 0.01, 0, 0, 0, false, false},
    {"adam_amsgrad_wd", K_ADAM, 0.01, 0, 0, 1e-3, false, true},
    {"adamw", K_ADAMW, 0.01, 0, 0, 0.01, false, false},
};
#define N_CFGS (int)(sizeof CFGS / sizeof CFGS[0])

static nb_optim *make_optim(const cfg *c, const nb_tensor_list *params, nb_ctx *err) {
    if (c->k == K_SGD) {
        nb_sgd_opts o = nb_sgd_defaults(c->lr);
        o.momentum = c->momentum;
        o.dampening = c->dampening;
        o.weight_decay = c->weight_decay;
        o.nesterov = c->nesterov;
        return nb_sgd_new(err, params, o);
    }
    nb_adam_opts o = c->k == K_ADAM ? nb_adam_defaults(c->lr) : nb_adamw_defaults(c->lr);
    o.weight_decay = c->weight_decay;
    o.amsgrad = c->amsgrad;
    return c->k == K_ADAM ? nb_adam_new(err, params, o) : nb_adamw_new(err, params, o);
}

/* Heap-allocated: the model's dropout keeps a pointer to rng. */
typedef struct run {
    nb_ctx *pctx, *step;
    nb_pcg32 rng; /* the init draws and the dropout masks */
    nb_nn_mha mha;
    nb_optim *opt;
    nb_tensor *cursor; /* I64 scalar: how many batches were consumed */
    nb_tensor_list extra;
    nb_tensor *x[NBATCH], *y[NBATCH];
} run;

/* A model of d_out `d_out` (8 but for mismatch tests), weights drawn from
 * `seed`, the same data for every seed. c may be NULL (no optimizer). */
static run *run_new_sized(const cfg *c, nb_dtype dt, double dropout, uint64_t seed,
                          int64_t d_out, bool qkv_bias) {
    run *r = calloc(1, sizeof *r);
    r->pctx = nb_ctx_new(0);
    r->step = nb_ctx_new(0);
    nb_pcg32_seed(&r->rng, seed, 1);
    ck_assert_int_eq(nb_nn_mha_init(r->pctx, &r->mha, D, d_out, T, dropout, HEADS, qkv_bias, dt,
                                    &r->rng),
                     NB_OK);
    nb_pcg32 data;
    nb_pcg32_seed(&data, 99, 7);
    for (int b = 0; b < NBATCH; b++) {
        r->x[b] = nb_normal(r->pctx, dt, NB_SHAPE(B, T, D), 0, 1, &data);
        r->y[b] = nb_normal(r->pctx, dt, NB_SHAPE(B, T, d_out), 0, 1, &data);
    }
    r->cursor = nb_scalar(r->pctx, NB_I64, 0);
    ck_assert_int_eq(nb_list_add(&r->extra, "rng", nb_pcg32_tensor(r->pctx, &r->rng)), NB_OK);
    ck_assert_int_eq(nb_list_add(&r->extra, "cursor", r->cursor), NB_OK);
    if (c) {
        r->opt = make_optim(c, &r->mha.params, r->pctx);
        ck_assert_msg(r->opt != NULL, "%s", nb_ctx_error(r->pctx));
    }
    ck_assert_ptr_null(nb_ctx_error(r->pctx));
    return r;
}

static run *run_new(const cfg *c, nb_dtype dt, double dropout, uint64_t seed) {
    return run_new_sized(c, dt, dropout, seed, D, true);
}

static void run_free(run *r) {
    nb_optim_free(r->opt);
    nb_ctx_free(r->step);
    nb_ctx_free(r->pctx);
    free(r);
}

static void train(run *r, int steps) {
    for (int s = 0; s < steps; s++) {
        nb_ctx_reset(r->step);
        int64_t c = (int64_t)nb_item(r->cursor);
        nb_tensor *out = nb_nn_mha_forward(r->step, &r->mha, r->x[c % NBATCH]);
        nb_tensor *loss = nb_mse_loss(r->step, out, r->y[c % NBATCH]);
        ck_assert_msg(loss != NULL, "%s", nb_ctx_error(r->step));
        nb_optim_zero_grad(r->opt);
        ck_assert_int_eq(nb_backward(r->step, loss, NULL), NB_OK);
        ck_assert_int_eq(nb_optim_step(r->opt), NB_OK);
        nb_set(r->cursor, 0, (double)(c + 1));
    }
}

static bool same_bytes(const nb_tensor *a, const nb_tensor *b) {
    return a->dtype == b->dtype && a->numel == b->numel &&
           memcmp(a->data, b->data, a->numel * nb_dtype_size(a->dtype)) == 0;
}

static bool same_params(const run *a, const run *b) {
    for (int i = 0; i < a->mha.params.n; i++)
        if (!same_bytes(a->mha.params.t[i], b->mha.params.t[i])) return false;
    return true;
}

/* ---- a snapshot of everything a load may change --------------------------------- */
typedef struct snapshot {
    nb_ctx *ctx;
    nb_tensor_list params, state;
    nb_pcg32 rng;
    double cursor;
    int64_t steps;
} snapshot;

static void snap_take(snapshot *s, run *r) {
    *s = (snapshot){.ctx = nb_ctx_new(0), .rng = r->rng, .cursor = nb_item(r->cursor)};
    for (int i = 0; i < r->mha.params.n; i++)
        nb_list_add(&s->params, r->mha.params.names[i],
                    nb_copy(s->ctx, r->mha.params.t[i], r->mha.params.t[i]->dtype));
    if (r->opt) {
        ck_assert_int_eq(nb_optim_state(s->ctx, r->opt, &s->state), NB_OK);
        s->steps = nb_optim_step_count(r->opt);
    }
}

/* r is exactly as when s was taken; frees s. */
static void snap_check_free(snapshot *s, run *r) {
    for (int i = 0; i < r->mha.params.n; i++)
        ck_assert_msg(same_bytes(s->params.t[i], r->mha.params.t[i]), "parameter '%s' changed",
                      s->params.names[i]);
    ck_assert_msg(s->rng.state == r->rng.state && s->rng.inc == r->rng.inc, "rng changed");
    ck_assert_double_eq(s->cursor, nb_item(r->cursor));
    if (r->opt) {
        nb_tensor_list now = {0};
        ck_assert_int_eq(nb_optim_state(s->ctx, r->opt, &now), NB_OK);
        ck_assert_int_eq(now.n, s->state.n);
        for (int i = 0; i < now.n; i++) {
            ck_assert_str_eq(now.names[i], s->state.names[i]);
            ck_assert_msg(same_bytes(now.t[i], s->state.t[i]), "state '%s' changed",
                          now.names[i]);
        }
        ck_assert_int_eq(nb_optim_step_count(r->opt), s->steps);
    }
    nb_ctx_free(s->ctx);
}

/* ---- files ---------------------------------------------------------------------- */
typedef struct tmpdir {
    char dir[64];
    char path[128]; /* dir/ck.safetensors */
} tmpdir;

static void tmp_make(tmpdir *t) {
    snprintf(t->dir, sizeof t->dir, "/tmp/nb-checkpoint-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(t->dir));
    snprintf(t->path, sizeof t->path, "%s/ck.safetensors", t->dir);
}

/* Number of entries in t->dir (besides . and ..). */
static int tmp_count(const tmpdir *t) {
    DIR *d = opendir(t->dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void tmp_remove(const tmpdir *t) {
    DIR *d = opendir(t->dir);
    if (!d) return;
    char p[512];
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", t->dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(t->dir);
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(len > 0 ? (size_t)len : 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static void write_all(const char *path, const unsigned char *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
}

static void save_ok(run *r, const char *path) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_status s = nb_save_checkpoint(ctx, path, &r->mha.params, r->opt, &r->extra, 0, NULL, NULL);
    ck_assert_msg(s == NB_OK, "%s", nb_ctx_error(ctx));
    nb_ctx_free(ctx);
}

/* ---- exact resume ------------------------------------------------------------------ */
START_TEST(test_resume_is_bit_identical) {
    const cfg *c = &CFGS[_i / 4];
    const nb_dtype dt = (_i / 2) % 2 ? NB_F32 : NB_F64;
    const double dropout = _i % 2 ? 0.1 : 0.0;
    tmpdir td;
    tmp_make(&td);

    run *straight = run_new(c, dt, dropout, 1);
    nb_pcg32 rng0 = straight->rng;
    train(straight, 20);
    if (dropout > 0)
        ck_assert_msg(straight->rng.state != rng0.state, "dropout drew nothing from the rng");
    else
        ck_assert_msg(straight->rng.state == rng0.state, "dropout 0 drew from the rng");

    run *first = run_new(c, dt, dropout, 1);
    train(first, 10);
    save_ok(first, td.path);

    run *resumed = run_new(c, dt, dropout, 2); /* another init, another rng state */
    ck_assert(!same_params(first, resumed));
    nb_ctx *ctx = nb_ctx_new(0);
    nb_status s = nb_load_checkpoint(ctx, td.path, &resumed->mha.params, resumed->opt,
                                     &resumed->extra);
    ck_assert_msg(s == NB_OK, "%s", nb_ctx_error(ctx));
    ck_assert(same_params(first, resumed));
    ck_assert(resumed->rng.state == first->rng.state && resumed->rng.inc == first->rng.inc);
    ck_assert_double_eq(nb_item(resumed->cursor), 10);
    ck_assert_int_eq(nb_optim_step_count(resumed->opt), 10);
    run_free(first);

    train(resumed, 10);
    for (int i = 0; i < straight->mha.params.n; i++)
        ck_assert_msg(same_bytes(straight->mha.params.t[i], resumed->mha.params.t[i]),
                      "%s %s dropout %g: '%s' differs after resume", c->name, nb_dtype_name(dt),
                      dropout, straight->mha.params.names[i]);
    ck_assert(straight->rng.state == resumed->rng.state);
    nb_ctx_free(ctx);
    run_free(straight);
    run_free(resumed);
    tmp_remove(&td);
}
END_TEST

/* ---- what the file holds ------------------------------------------------------------- */
static const char *meta_of(int n, const char **k, const char **v, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(k[i], key)) return v[i];
    return NULL;
}

#define ck_assert_meta(key, want)                                                          \
    do {                                                                                   \
        const char *got_ = meta_of(nm, mk, mv, key);                                       \
        ck_assert_msg(got_ != NULL, "no metadata '%s'", key);                              \
        ck_assert_str_eq(got_, want);                                                      \
    } while (0)

START_TEST(test_file_contents_adam) {
    tmpdir td;
    tmp_make(&td);
    run *r = run_new(&CFGS[3], NB_F32, 0.1, 5); /* adam, amsgrad, wd 1e-3 */
    train(r, 2);
    nb_ctx *ctx = nb_ctx_new(0);
    const char *uk[] = {"epoch", "note"}, *uv[] = {"3", "café"};
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, &r->mha.params, r->opt, &r->extra, 2, uk,
                                        uv),
                     NB_OK);
    nb_tensor_list l = {0};
    const char *mk[32], *mv[32];
    int nm = 0;
    ck_assert_int_eq(nb_load_safetensors_meta(ctx, td.path, &l, 32, &nm, mk, mv), NB_OK);
    ck_assert_int_eq(nm, 12);
    ck_assert_str_eq(mk[0], "format"); /* nabla's own pairs first */
    ck_assert_meta("format", "nabla-checkpoint-1");
    ck_assert_meta("nabla_version", NB_VERSION);
    ck_assert_meta("optimizer", "adam");
    ck_assert_meta("optimizer.lr", "0.01");
    ck_assert_meta("optimizer.beta1", "0.9");
    ck_assert_meta("optimizer.beta2", "0.999");
    ck_assert_meta("optimizer.eps", "1e-08");
    ck_assert_meta("optimizer.weight_decay", "0.001");
    ck_assert_meta("optimizer.amsgrad", "true");
    ck_assert_meta("optimizer.maximize", "false");
    ck_assert_meta("epoch", "3");
    ck_assert_meta("note", "café");
    /* 8 parameters, 8 x (step, exp_avg, exp_avg_sq, max_exp_avg_sq), state.step, 2 extra */
    ck_assert_int_eq(l.n, 8 + 32 + 1 + 2);
    for (int i = 0; i < r->mha.params.n; i++) {
        const char *name = r->mha.params.names[i];
        nb_tensor *t = nb_list_get(&l, name);
        ck_assert_msg(t != NULL, "no '%s' in the file", name);
        ck_assert(same_bytes(t, r->mha.params.t[i]));
        char key[128];
        snprintf(key, sizeof key, "state.%s.max_exp_avg_sq", name);
        ck_assert_ptr_nonnull(nb_list_get(&l, key));
        snprintf(key, sizeof key, "state.%s.step", name);
        ck_assert_double_eq(nb_item(nb_list_get(&l, key)), 2);
    }
    ck_assert_ptr_nonnull(nb_list_get(&l, "W_query.bias"));
    ck_assert_double_eq(nb_item(nb_list_get(&l, "state.step")), 2);
    nb_tensor *rng = nb_list_get(&l, "extra.rng");
    ck_assert_ptr_nonnull(rng);
    ck_assert_int_eq(rng->dtype, NB_I64);
    ck_assert_int_eq(rng->ndim, 1);
    ck_assert_int_eq(rng->shape[0], 2);
    ck_assert(((const uint64_t *)rng->data)[0] == r->rng.state);
    ck_assert(((const uint64_t *)rng->data)[1] == r->rng.inc);
    nb_tensor *cur = nb_list_get(&l, "extra.cursor");
    ck_assert_ptr_nonnull(cur);
    ck_assert_int_eq(cur->dtype, NB_I64);
    ck_assert_double_eq(nb_item(cur), 2);
    nb_ctx_free(ctx);
    run_free(r);
    tmp_remove(&td);
}
END_TEST

START_TEST(test_file_contents_sgd_and_none) {
    tmpdir td;
    tmp_make(&td);
    run *r = run_new(&CFGS[0], NB_F64, 0, 5); /* sgd momentum 0.9 nesterov wd 1e-3 */
    train(r, 1);
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, &r->mha.params, r->opt, NULL, 0, NULL,
                                        NULL),
                     NB_OK);
    nb_tensor_list l = {0};
    const char *mk[32], *mv[32];
    int nm = 0;
    ck_assert_int_eq(nb_load_safetensors_meta(ctx, td.path, &l, 32, &nm, mk, mv), NB_OK);
    ck_assert_int_eq(nm, 9);
    ck_assert_meta("optimizer", "sgd");
    ck_assert_meta("optimizer.lr", "0.05");
    ck_assert_meta("optimizer.momentum", "0.9");
    ck_assert_meta("optimizer.dampening", "0");
    ck_assert_meta("optimizer.weight_decay", "0.001");
    ck_assert_meta("optimizer.nesterov", "true");
    ck_assert_meta("optimizer.maximize", "false");
    ck_assert_int_eq(l.n, 8 + 8 + 1); /* momentum buffers and state.step, no extra */
    ck_assert_ptr_nonnull(nb_list_get(&l, "state.out_proj.bias.momentum_buffer"));

    /* without an optimizer: parameters only */
    nb_tensor_list l2 = {0};
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, &r->mha.params, NULL, NULL, 0, NULL, NULL),
                     NB_OK);
    ck_assert_int_eq(nb_load_safetensors_meta(ctx, td.path, &l2, 32, &nm, mk, mv), NB_OK);
    ck_assert_int_eq(nm, 3);
    ck_assert_meta("optimizer", "none");
    ck_assert_int_eq(l2.n, 8);
    for (int i = 0; i < l2.n; i++) ck_assert(strncmp(l2.names[i], "state.", 6) != 0);
    nb_ctx_free(ctx);
    run_free(r);
    tmp_remove(&td);
}
END_TEST

/* ---- loads that must fail and change nothing ------------------------------------------ */
START_TEST(test_truncated_file_changes_nothing) {
    tmpdir td;
    tmp_make(&td);
    run *src = run_new(&CFGS[2], NB_F64, 0.1, 1);
    train(src, 3);
    save_ok(src, td.path);
    size_t n;
    unsigned char *bytes = read_all(td.path, &n);
    run *r = run_new(&CFGS[2], NB_F64, 0.1, 2);
    train(r, 2); /* some optimizer state to lose */
    const size_t cuts[] = {0, 5, 8, 100, n / 2, n - 8, n - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        write_all(td.path, bytes, cuts[k]);
        snapshot s;
        snap_take(&s, r);
        nb_ctx *ctx = nb_ctx_new(0);
        nb_status st = nb_load_checkpoint(ctx, td.path, &r->mha.params, r->opt, &r->extra);
        ck_assert_msg(st == NB_ERR_FORMAT, "cut at %zu: status %d (%s)", cuts[k], st,
                      nb_ctx_error(ctx));
        ck_assert_error_has(ctx, "load_checkpoint: load_safetensors: ");
        ck_assert_error_has(ctx, td.path);
        snap_check_free(&s, r);
        nb_ctx_free(ctx);
    }
    /* a flipped byte inside the header: not JSON any more */
    unsigned char *bad = malloc(n);
    memcpy(bad, bytes, n);
    bad[8] = 'x';
    write_all(td.path, bad, n);
    snapshot s;
    snap_take(&s, r);
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_int_eq(nb_load_checkpoint(ctx, td.path, &r->mha.params, r->opt, &r->extra),
                     NB_ERR_FORMAT);
    ck_assert_error_has(ctx, "header is not");
    snap_check_free(&s, r);
    /* the whole file loads */
    write_all(td.path, bytes, n);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_load_checkpoint(ctx, td.path, &r->mha.params, r->opt, &r->extra), NB_OK);
    ck_assert(same_params(src, r));
    free(bad);
    free(bytes);
    nb_ctx_free(ctx);
    run_free(src);
    run_free(r);
    tmp_remove(&td);
}
END_TEST

/* Loads td into r, expecting status `want` and `msg` in the message, and
 * that r did not change. */
static void load_fails(run *r, const char *path, nb_tensor_list *extra, nb_status want,
                       const char *msg) {
    snapshot s;
    snap_take(&s, r);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_status st = nb_load_checkpoint(ctx, path, &r->mha.params, r->opt, extra);
    ck_assert_msg(st == want, "status %d, want %d (%s)", st, want, nb_ctx_error(ctx));
    ck_assert_error_has(ctx, msg);
    snap_check_free(&s, r);
    nb_ctx_free(ctx);
}

START_TEST(test_mismatches_change_nothing) {
    tmpdir td;
    tmp_make(&td);
    run *src = run_new(&CFGS[2], NB_F64, 0, 1); /* adam */
    train(src, 2);
    save_ok(src, td.path);

    run *sgd = run_new(&CFGS[0], NB_F64, 0, 2);
    train(sgd, 1);
    load_fails(sgd, td.path, &sgd->extra, NB_ERR_VALUE,
               "was saved with optimizer 'adam' but the optimizer given is 'sgd'");
    run_free(sgd);

    /* amsgrad wants max_exp_avg_sq: nb_optim_load_state refuses, and the
     * parameters (copied after it) must not have changed either */
    run *ams = run_new(&CFGS[3], NB_F64, 0, 2);
    train(ams, 1);
    load_fails(ams, td.path, &ams->extra, NB_ERR_VALUE, "max_exp_avg_sq");
    run_free(ams);

    run *nobias = run_new_sized(&CFGS[2], NB_F64, 0, 2, D, false);
    run *small = run_new_sized(&CFGS[2], NB_F64, 0, 2, 4, true);
    /* a model without biases loads a checkpoint with them (they are ignored),
     * but not the other way round */
    save_ok(nobias, td.path);
    load_fails(src, td.path, &src->extra, NB_ERR_VALUE,
               "parameter 'W_query.bias' is missing from the checkpoint");
    save_ok(src, td.path);
    load_fails(small, td.path, &small->extra, NB_ERR_SHAPE,
               "parameter 'W_query.weight' has shape (4, 8) here but (8, 8) in the checkpoint");

    run *r = run_new(&CFGS[2], NB_F64, 0, 3);
    nb_tensor_list extra = r->extra;
    nb_tensor *other = nb_scalar(r->pctx, NB_I64, 5);
    nb_list_add(&extra, "epoch", other);
    load_fails(r, td.path, &extra, NB_ERR_VALUE,
               "extra state 'epoch' (entry 'extra.epoch') is missing from the checkpoint");
    extra = (nb_tensor_list){0};
    nb_list_add(&extra, "cursor", nb_scalar(r->pctx, NB_F64, 0));
    load_fails(r, td.path, &extra, NB_ERR_DTYPE,
               "extra state 'cursor' is f64 here but i64 in the checkpoint");
    extra = (nb_tensor_list){0};
    nb_list_add(&extra, "rng", nb_zeros(r->pctx, NB_I64, NB_SHAPE(3)));
    load_fails(r, td.path, &extra, NB_ERR_SHAPE,
               "extra state 'rng' has shape (3) here but (2) in the checkpoint");

    /* saved without an optimizer, loaded with one */
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, &src->mha.params, NULL, NULL, 0, NULL,
                                        NULL),
                     NB_OK);
    load_fails(r, td.path, NULL, NB_ERR_VALUE,
               "the checkpoint holds no optimizer state, but an adam optimizer was given");
    /* a plain safetensors file, and no file at all */
    ck_assert_int_eq(nb_save_safetensors(ctx, td.path, &src->mha.params, 0, NULL, NULL), NB_OK);
    load_fails(r, td.path, NULL, NB_ERR_FORMAT,
               "not a nabla checkpoint: metadata \"format\" is missing");
    const char *k[] = {"format"}, *v[] = {"nabla-checkpoint-0"};
    ck_assert_int_eq(nb_save_safetensors(ctx, td.path, &src->mha.params, 1, k, v), NB_OK);
    load_fails(r, td.path, NULL, NB_ERR_FORMAT, "\"format\" is \"nabla-checkpoint-0\"");
    unlink(td.path);
    load_fails(r, td.path, NULL, NB_ERR_IO, "cannot open");

    nb_ctx_free(ctx);
    run_free(nobias);
    run_free(small);
    run_free(r);
    run_free(src);
    tmp_remove(&td);
}
END_TEST

START_TEST(test_partial_loads) {
    tmpdir td;
    tmp_make(&td);
    run *src = run_new(&CFGS[4], NB_F64, 0.1, 1); /* adamw */
    train(src, 2);
    save_ok(src, td.path);
    nb_ctx *ctx = nb_ctx_new(0);

    /* parameters only: opt and extra NULL; the model's rng stays */
    run *r = run_new(NULL, NB_F64, 0.1, 2);
    nb_pcg32 before = r->rng;
    ck_assert_int_eq(nb_load_checkpoint(ctx, td.path, &r->mha.params, NULL, NULL), NB_OK);
    ck_assert(same_params(src, r));
    ck_assert(r->rng.state == before.state);
    run_free(r);

    /* into an f32 model: parameters convert (the f32 optimizer state cannot
     * take f64 state, so it is not given) */
    run *f = run_new(NULL, NB_F32, 0.1, 2);
    ck_assert_int_eq(nb_load_checkpoint(ctx, td.path, &f->mha.params, NULL, &f->extra), NB_OK);
    for (int i = 0; i < f->mha.params.n; i++)
        for (size_t k = 0; k < f->mha.params.t[i]->numel; k++)
            ck_assert_double_eq(nb_get(f->mha.params.t[i], k),
                                (float)nb_get(src->mha.params.t[i], k));
    ck_assert(f->rng.state == src->rng.state);
    ck_assert_double_eq(nb_item(f->cursor), 2);
    run_free(f);

    /* an f32 optimizer refuses f64 state, before touching anything */
    run *g = run_new(&CFGS[4], NB_F32, 0, 2);
    load_fails(g, td.path, NULL, NB_ERR_DTYPE, "expected f32");
    run_free(g);

    nb_ctx_free(ctx);
    run_free(src);
    tmp_remove(&td);
}
END_TEST

/* Tensors of 64 KB or more stay in the file until the load copies them in
 * place (io/io_internal.h, nb_load_safetensors_lazy): a (300, 100) weight,
 * its AdamW moments, and a small bias beside it, loaded into the same
 * dtype (bit for bit), and float64 into a float32 model (converted). */
START_TEST(test_big_tensors_load_in_place) {
    tmpdir td;
    tmp_make(&td);
    nb_ctx *ctx = nb_ctx_new(0), *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 5);
    nb_tensor_list l[3] = {{0}, {0}, {0}};
    nb_dtype dts[3] = {NB_F64, NB_F64, NB_F32};
    nb_optim *opt[2];
    for (int k = 0; k < 3; k++) {
        nb_list_add(&l[k], "w", nb_requires_grad(nb_normal(p, dts[k], NB_SHAPE(300, 100), 0, 1, &rng)));
        nb_list_add(&l[k], "b", nb_requires_grad(nb_normal(p, dts[k], NB_SHAPE(7), 0, 1, &rng)));
    }
    for (int k = 0; k < 2; k++) opt[k] = nb_adamw_new(p, &l[k], nb_adamw_defaults(1e-2));
    for (int i = 0; i < 2; i++) /* a gradient, a step: live state */
        for (size_t j = 0; j < l[0].t[i]->numel; j++) ((double *)l[0].t[i]->grad)[j] = 0.01 * (double)(j % 17);
    ck_assert_int_eq(nb_optim_step(opt[0]), NB_OK);
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, &l[0], opt[0], NULL, 0, NULL, NULL), NB_OK);
    ck_assert_msg(nb_load_checkpoint(ctx, td.path, &l[1], opt[1], NULL) == NB_OK, "%s", nb_ctx_error(ctx));
    nb_tensor_list s0 = {0}, s1 = {0};
    ck_assert_int_eq(nb_optim_state(p, opt[0], &s0), NB_OK);
    ck_assert_int_eq(nb_optim_state(p, opt[1], &s1), NB_OK);
    ck_assert_int_eq(s0.n, s1.n);
    for (int i = 0; i < s0.n; i++)
        ck_assert_msg(same_bytes(s0.t[i], s1.t[i]), "%s differs", s0.names[i]);
    for (int i = 0; i < 2; i++) ck_assert(same_bytes(l[0].t[i], l[1].t[i]));
    ck_assert_int_eq(nb_load_checkpoint(ctx, td.path, &l[2], NULL, NULL), NB_OK);
    for (int i = 0; i < 2; i++)
        for (size_t j = 0; j < l[0].t[i]->numel; j++)
            ck_assert(((float *)l[2].t[i]->data)[j] == (float)((double *)l[0].t[i]->data)[j]);
    nb_list_free(&s0), nb_list_free(&s1);
    for (int k = 0; k < 2; k++) nb_optim_free(opt[k]);
    for (int k = 0; k < 3; k++) nb_list_free(&l[k]);
    nb_ctx_free(p), nb_ctx_free(ctx);
    tmp_remove(&td);
}
END_TEST

/* ---- saves that fail keep the old file ---------------------------------------------- */
START_TEST(test_failed_save_keeps_old_file) {
    tmpdir td;
    tmp_make(&td);
    run *r = run_new(&CFGS[2], NB_F64, 0, 1);
    train(r, 2);
    save_ok(r, td.path);
    size_t n;
    unsigned char *old = read_all(td.path, &n);
    run *kept = run_new(&CFGS[2], NB_F64, 0, 1);
    train(kept, 2);
    train(r, 3);
    nb_ctx *ctx = nb_ctx_new(0);

    /* refused before the file is touched */
    const char *k[] = {"optimizer.lr"}, *v[] = {"1"};
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, &r->mha.params, r->opt, &r->extra, 1, k,
                                        v),
                     NB_ERR_VALUE);
    ck_assert_error_has(ctx, "metadata key 'optimizer.lr' is reserved");
    nb_ctx_clear_error(ctx);

    /* the OS refuses mid-write: a file-size limit below the checkpoint's
     * size (SIGXFSZ ignored, so write fails with EFBIG) */
    struct rlimit lim, small;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &lim), 0);
    small = lim;
    small.rlim_cur = (rlim_t)(n / 2);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    nb_status st = nb_save_checkpoint(ctx, td.path, &r->mha.params, r->opt, &r->extra, 0, NULL,
                                      NULL);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    signal(SIGXFSZ, prev);
    ck_assert_int_eq(st, NB_ERR_IO);
    ck_assert_error_has(ctx, "save_checkpoint: save_safetensors: ");
    ck_assert_error_has(ctx, td.path);

    size_t n2;
    unsigned char *now = read_all(td.path, &n2);
    ck_assert_uint_eq(n2, n);
    ck_assert(memcmp(old, now, n) == 0);
    ck_assert_int_eq(tmp_count(&td), 1); /* no temporary file left behind */
    /* and the old checkpoint still loads: the state after 2 steps */
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_load_checkpoint(ctx, td.path, &r->mha.params, r->opt, &r->extra), NB_OK);
    ck_assert(same_params(kept, r));
    ck_assert_int_eq(nb_optim_step_count(r->opt), 2);
    free(old);
    free(now);
    nb_ctx_free(ctx);
    run_free(r);
    run_free(kept);
    tmp_remove(&td);
}
END_TEST

/* ---- argument errors ------------------------------------------------------------------ */
START_TEST(test_save_argument_errors) {
    tmpdir td;
    tmp_make(&td);
    run *r = run_new(&CFGS[2], NB_F32, 0, 1);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list *P = &r->mha.params;

    ck_assert_int_eq(nb_save_checkpoint(NULL, td.path, P, NULL, NULL, 0, NULL, NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_save_checkpoint(ctx, NULL, P, NULL, NULL, 0, NULL, NULL), NB_ERR_NULL);
    ck_assert_error_has(ctx, "save_checkpoint: path is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, NULL, NULL, NULL, 0, NULL, NULL),
                     NB_ERR_NULL);
    ck_assert_error_has(ctx, "params is NULL");
    nb_ctx_clear_error(ctx);

    nb_tensor_list bad = {0};
    nb_list_add(&bad, "state.w", P->t[0]);
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, &bad, NULL, NULL, 0, NULL, NULL),
                     NB_ERR_VALUE);
    ck_assert_error_has(ctx, "parameter 'state.w': names starting with 'state.' or 'extra.' "
                             "are reserved");
    nb_ctx_clear_error(ctx);

    const char *k[] = {"epoch", NULL}, *v[] = {"1", "2"};
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, P, NULL, NULL, 2, k, v), NB_ERR_NULL);
    ck_assert_error_has(ctx, "metadata key 1 is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, P, NULL, NULL, 1, NULL, v), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    const char *fk[] = {"format"};
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, P, NULL, NULL, 1, fk, v), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "metadata key 'format' is reserved");
    nb_ctx_clear_error(ctx);

    /* a repeated extra name */
    nb_tensor_list ex = {0};
    ex.n = 2;
    ex.names[0] = ex.names[1] = "cursor";
    ex.t[0] = ex.t[1] = r->cursor;
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, P, NULL, &ex, 0, NULL, NULL), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "duplicate name 'extra.cursor'");
    nb_ctx_clear_error(ctx);

    /* a context holding an error: nothing is done */
    nb_ctx_fail(ctx, NB_ERR_SHAPE, "earlier error");
    ck_assert_int_eq(nb_save_checkpoint(ctx, td.path, P, NULL, NULL, 0, NULL, NULL),
                     NB_ERR_SHAPE);
    ck_assert_str_eq(nb_ctx_error(ctx), "earlier error");
    ck_assert_int_eq(tmp_count(&td), 0);

    /* load */
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_load_checkpoint(NULL, td.path, P, NULL, NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_load_checkpoint(ctx, NULL, P, NULL, NULL), NB_ERR_NULL);
    ck_assert_error_has(ctx, "load_checkpoint: path is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_load_checkpoint(ctx, td.path, NULL, NULL, NULL), NB_ERR_NULL);
    ck_assert_error_has(ctx, "params is NULL");

    nb_ctx_free(ctx);
    run_free(r);
    tmp_remove(&td);
}
END_TEST

START_TEST(test_pcg32_tensor_is_a_view) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, 54);
    nb_tensor *t = nb_pcg32_tensor(ctx, &rng);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, NB_I64);
    ck_assert_int_eq(t->ndim, 1);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_ptr_eq(t->data, &rng);
    nb_pcg32_next(&rng);
    ck_assert(((const uint64_t *)t->data)[0] == rng.state);
    ck_assert(((const uint64_t *)t->data)[1] == rng.inc);
    /* writing the tensor moves the generator: a replay */
    nb_pcg32 copy = rng;
    uint32_t a = nb_pcg32_next(&rng);
    memcpy(t->data, &copy, sizeof copy);
    ck_assert_uint_eq(nb_pcg32_next(&rng), a);

    ck_assert_ptr_null(nb_pcg32_tensor(NULL, &rng));
    ck_assert_ptr_null(nb_pcg32_tensor(ctx, NULL));
    ck_assert_error_has(ctx, "pcg32_tensor: rng is NULL");
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_optim_kind_and_options) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *w = nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(2)));
    nb_tensor_list p = {0};
    nb_list_add(&p, "w", w);
    nb_sgd_opts so = nb_sgd_defaults(0.5);
    so.momentum = 0.9;
    so.nesterov = true;
    nb_optim *sgd = nb_sgd_new(ctx, &p, so);
    nb_optim *adam = nb_adam_new(ctx, &p, nb_adam_defaults(1e-3));
    nb_optim *adamw = nb_adamw_new(ctx, &p, nb_adamw_defaults(2e-3));
    ck_assert_str_eq(nb_optim_kind(sgd), "sgd");
    ck_assert_str_eq(nb_optim_kind(adam), "adam");
    ck_assert_str_eq(nb_optim_kind(adamw), "adamw");
    ck_assert_ptr_null(nb_optim_kind(NULL));

    nb_sgd_opts s2 = {0};
    nb_adam_opts a2 = {0};
    ck_assert(nb_optim_sgd_options(sgd, &s2));
    ck_assert_double_eq(s2.lr, 0.5);
    ck_assert_double_eq(s2.momentum, 0.9);
    ck_assert(s2.nesterov);
    ck_assert(!nb_optim_adam_options(sgd, &a2));
    ck_assert_double_eq(a2.lr, 0); /* left alone */
    ck_assert(!nb_optim_sgd_options(adam, &s2));
    ck_assert(nb_optim_adam_options(adamw, &a2));
    ck_assert_double_eq(a2.lr, 2e-3);
    ck_assert_double_eq(a2.weight_decay, 0.01);
    ck_assert_double_eq(a2.beta2, 0.999);
    nb_optim_set_lr(adam, 0.25);
    ck_assert(nb_optim_adam_options(adam, &a2));
    ck_assert_double_eq(a2.lr, 0.25);
    ck_assert_double_eq(a2.weight_decay, 0);
    ck_assert(!nb_optim_adam_options(NULL, &a2));
    ck_assert(!nb_optim_adam_options(adam, NULL));
    ck_assert(!nb_optim_sgd_options(NULL, &s2));
    nb_optim_free(sgd);
    nb_optim_free(adam);
    nb_optim_free(adamw);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_checkpoint(void) {
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("resume");
    /* _i: config (5) x dtype (f64, f32) x dropout (0, 0.1) */
    tcase_add_loop_test(tc, test_resume_is_bit_identical, 0, N_CFGS * 4);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    tc = tcase_create("files");
    tcase_add_test(tc, test_file_contents_adam);
    tcase_add_test(tc, test_file_contents_sgd_and_none);
    tcase_add_test(tc, test_truncated_file_changes_nothing);
    tcase_add_test(tc, test_mismatches_change_nothing);
    tcase_add_test(tc, test_partial_loads);
    tcase_add_test(tc, test_failed_save_keeps_old_file);
    tcase_add_test(tc, test_save_argument_errors);
    tcase_add_test(tc, test_pcg32_tensor_is_a_view);
    tcase_add_test(tc, test_optim_kind_and_options);
    tcase_add_test(tc, test_big_tensors_load_in_place);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
