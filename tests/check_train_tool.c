/* check_train_tool.c - runs the nabla-train program against PyTorch's own
 * training runs (tests/fixtures/train, written by tools/ref/gen_train_fixtures.py)
 * and checks its error exits.
 *
 * The program is $NB_BUILD_DIR/bin/nabla-train, or NB_SOURCE_DIR/build/bin/
 * nabla-train when NB_BUILD_DIR is not set (`make` builds it).
 *
 * Each reference is 50 steps of a MultiHeadAttention with MSE loss under SGD
 * (momentum 0.9), Adam (weight decay 0.001) or AdamW, in f64 and f32, for
 * two models: d_in 4, d_out 6, 3 heads, qkv_bias, T 5 (INIT stored as F64,
 * DATA as F32) and d_in = d_out = 8, 2 heads, no bias, T 6 (INIT F32, DATA
 * F64). Every trained parameter must agree with PyTorch's within 1e-9 (f64)
 * or 1e-3 (f32) of the tensor's largest magnitude, and every step's loss
 * within 1e-9 / 1e-3 relative. (They agree to about 1e-15 and 3e-7.)
 *
 * One exception: W_key.bias has a gradient of exactly zero in exact
 * arithmetic (adding a constant to every key adds a constant to each row of
 * scores, which softmax ignores), so what it gets is rounding noise. Adam
 * divides that noise by its own running RMS, and in f32 the noise (1e-8) is
 * not small against eps (1e-8), so under AdamW (no L2 term to dominate the
 * noise) W_key.bias takes lr-sized steps of arbitrary sign, in PyTorch as in
 * nabla. It cannot be matched there and is not compared; the loss, which it
 * cannot affect, still is. */
#include "check_nabla.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#define FIXTURES NB_SOURCE_DIR "/tests/fixtures/train/"
#define SI FIXTURES "small_init.safetensors"
#define SD FIXTURES "small_data.safetensors"
#define QI FIXTURES "square_init.safetensors"
#define QD FIXTURES "square_data.safetensors"

/* ---- running the program ------------------------------------------------------------ */
static const char *tool_path(void) {
    static char path[4096];
    const char *dir = getenv("NB_BUILD_DIR");
    snprintf(path, sizeof path, "%s/bin/nabla-train", dir && *dir ? dir : NB_SOURCE_DIR "/build");
    ck_assert_msg(access(path, X_OK) == 0,
                  "%s is not there: build it with make (or set NB_BUILD_DIR to the build "
                  "directory)", path);
    return path;
}

typedef struct result {
    int status;   /* exit status, or -1 if it did not exit normally */
    char out[8192], err[8192];
    char dir[64]; /* a fresh temporary directory for the run's files */
} result;

/* Runs nabla-train with args[0..] (NULL-terminated), stdout and stderr
 * captured in r. */
static void run_tool(result *r, const char *const *args) {
    const char *prog = tool_path();
    char outp[128], errp[128];
    snprintf(outp, sizeof outp, "%s/stdout", r->dir);
    snprintf(errp, sizeof errp, "%s/stderr", r->dir);
    const char *argv[64] = {prog};
    int n = 1;
    for (; args[n - 1]; n++) {
        ck_assert_int_lt(n, 63);
        argv[n] = args[n - 1];
    }
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(127);
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    nb_test_read_text(outp, r->out, sizeof r->out);
    nb_test_read_text(errp, r->err, sizeof r->err);
    unlink(outp);
    unlink(errp);
}

static void result_init(result *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/nb-train-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(r->dir));
}

static void result_done(result *r, const char *const *files) {
    char p[256];
    for (int i = 0; files && files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", r->dir, files[i]);
        unlink(p);
    }
    ck_assert_msg(rmdir(r->dir) == 0, "%s is not empty after the run", r->dir);
}

/* ---- against PyTorch ------------------------------------------------------------------- */
static const char *const REFS[] = {
    "small_sgd_f64",  "small_sgd_f32",  "small_adam_f64",  "small_adam_f32",
    "small_adamw_f64", "small_adamw_f32", "square_sgd_f64", "square_sgd_f32",
    "square_adam_f64", "square_adam_f32", "square_adamw_f64", "square_adamw_f32",
};
#define N_REFS (int)(sizeof REFS / sizeof REFS[0])

static const char *meta_get(int n, const char **k, const char **v, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(k[i], key)) return v[i];
    return NULL;
}

/* Checks every tensor of ref against got (same dtype and shape); `skip` is
 * a name not compared (or NULL). Returns the largest error seen. */
static double compare(const char *what, const nb_tensor_list *ref, const nb_tensor_list *got,
                      double tol, const char *skip) {
    double worst = 0;
    ck_assert_msg(got->n == ref->n, "%s: %d tensors in the output, %d in the reference", what,
                  got->n, ref->n);
    for (int i = 0; i < ref->n; i++) {
        const char *name = ref->names[i];
        const nb_tensor *r = ref->t[i], *g = nb_list_get(got, name);
        ck_assert_msg(g != NULL, "%s: no '%s' in the output", what, name);
        ck_assert_msg(g->dtype == r->dtype && nb_same_shape(g, r), "%s: '%s' is %s, want %s",
                      what, name, nb_dtype_name(g->dtype), nb_dtype_name(r->dtype));
        if (skip && !strcmp(name, skip)) continue;
        bool per_element = !strcmp(name, "loss");
        double scale = 0;
        for (size_t k = 0; k < r->numel; k++) scale = fmax(scale, fabs(nb_get(r, k)));
        for (size_t k = 0; k < r->numel; k++) {
            double want = nb_get(r, k), have = nb_get(g, k);
            double err = fabs(have - want) / (per_element ? fabs(want) : scale);
            worst = fmax(worst, err);
            ck_assert_msg(err <= tol, "%s: %s[%zu] = %.17g, PyTorch %.17g (relative error %.3g "
                          "> %g)", what, name, k, have, want, err, tol);
        }
    }
    return worst;
}

/* argv from buf (the reference's "args", split in place) plus --init,
 * --data, --out. */
static void build_args(const char **argv, char *buf, const char *init, const char *data,
                       const char *out) {
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
        argv[n++] = tok;
    argv[n++] = "--init";
    argv[n++] = init;
    argv[n++] = "--data";
    argv[n++] = data;
    argv[n++] = "--out";
    argv[n++] = out;
    argv[n] = NULL;
}

START_TEST(test_matches_pytorch) {
    const char *name = REFS[_i];
    nb_ctx *ctx = nb_ctx_new(0);
    char path[512], init[512], data[512], out[256], args[512];
    snprintf(path, sizeof path, FIXTURES "%s.safetensors", name);
    nb_tensor_list ref = {0}, got = {0};
    const char *mk[8], *mv[8];
    int nm = 0;
    ck_assert_msg(nb_load_safetensors_meta(ctx, path, &ref, 8, &nm, mk, mv) == NB_OK, "%s",
                  nb_ctx_error(ctx));
    const char *a = meta_get(nm, mk, mv, "args");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(meta_get(nm, mk, mv, "init"));
    ck_assert_ptr_nonnull(meta_get(nm, mk, mv, "data"));
    snprintf(args, sizeof args, "%s", a);
    snprintf(init, sizeof init, FIXTURES "%s", meta_get(nm, mk, mv, "init"));
    snprintf(data, sizeof data, FIXTURES "%s", meta_get(nm, mk, mv, "data"));
    result r;
    result_init(&r);
    snprintf(out, sizeof out, "%s/out.safetensors", r.dir);
    const char *argv[32];
    build_args(argv, args, init, data, out);
    run_tool(&r, argv);
    ck_assert_msg(r.status == 0, "%s: exit %d: %s", name, r.status, r.err);
    ck_assert_str_eq(r.err, "");
    ck_assert_ptr_nonnull(strstr(r.out, "50 steps"));
    ck_assert_int_eq(nb_load_safetensors(ctx, out, &got), NB_OK);
    bool f32 = strstr(name, "_f32") != NULL;
    bool adamw = strstr(name, "_adamw_") != NULL;
    compare(name, &ref, &got, f32 ? 1e-3 : 1e-9, f32 && adamw ? "W_key.bias" : NULL);
    result_done(&r, (const char *const[]){"out.safetensors", NULL});
    nb_ctx_free(ctx);
}
END_TEST

/* Without --dtype the run is f32, like PyTorch's default. */
START_TEST(test_default_dtype_is_f32) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list ref = {0}, got = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, FIXTURES "square_sgd_f32.safetensors", &ref), NB_OK);
    result r;
    result_init(&r);
    char out[128];
    snprintf(out, sizeof out, "%s/out.safetensors", r.dir);
    run_tool(&r, (const char *const[]){"--init", FIXTURES "square_init.safetensors", "--data",
                                       FIXTURES "square_data.safetensors", "--heads", "2",
                                       "--optim", "sgd", "--lr=0.05", "--momentum", "0.9",
                                       "--steps", "50", "--out", out, NULL});
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_int_eq(nb_load_safetensors(ctx, out, &got), NB_OK);
    ck_assert_int_eq(nb_list_get(&got, "loss")->dtype, NB_F32);
    compare("default dtype", &ref, &got, 1e-3, NULL);
    result_done(&r, (const char *const[]){"out.safetensors", NULL});
    nb_ctx_free(ctx);
}
END_TEST

/* OUT can be the INIT of a further run ("loss" is ignored): with plain SGD,
 * which keeps no state, 2 steps and then 3 more are the same as 5 steps, to
 * the bit. */
START_TEST(test_out_continues_as_init) {
    nb_ctx *ctx = nb_ctx_new(0);
    result r;
    result_init(&r);
    char five[128], two[128], more[128];
    snprintf(five, sizeof five, "%s/five.safetensors", r.dir);
    snprintf(two, sizeof two, "%s/two.safetensors", r.dir);
    snprintf(more, sizeof more, "%s/more.safetensors", r.dir);
#define RUN(init, steps, out)                                                                   \
    run_tool(&r, (const char *const[]){"--init", init, "--data", SD, "--heads", "3",           \
                                       "--qkv-bias", "--optim", "sgd", "--lr", "0.1",          \
                                       "--dtype", "f64", "--steps", steps, "--out", out,       \
                                       NULL});                                                 \
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err)
    RUN(SI, "5", five);
    RUN(SI, "2", two);
    RUN(two, "3", more);
#undef RUN
    nb_tensor_list a = {0}, b = {0}, c = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, five, &a), NB_OK);
    ck_assert_int_eq(nb_load_safetensors(ctx, two, &b), NB_OK);
    ck_assert_int_eq(nb_load_safetensors(ctx, more, &c), NB_OK);
    ck_assert_int_eq(c.n, a.n);
    for (int i = 0; i < a.n; i++) {
        const nb_tensor *x = a.t[i], *y = nb_list_get(&c, a.names[i]);
        ck_assert_ptr_nonnull(y);
        if (strcmp(a.names[i], "loss")) {
            ck_assert_msg(memcmp(x->data, y->data, x->numel * 8) == 0, "'%s' differs",
                          a.names[i]);
            continue;
        }
        const nb_tensor *l2 = nb_list_get(&b, "loss");
        for (int k = 0; k < 5; k++)
            ck_assert_double_eq(nb_get(x, (size_t)k), k < 2 ? nb_get(l2, (size_t)k)
                                                            : nb_get(y, (size_t)k - 2));
    }
    result_done(&r, (const char *const[]){"five.safetensors", "two.safetensors",
                                          "more.safetensors", NULL});
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_help) {
    result r;
    result_init(&r);
    run_tool(&r, (const char *const[]){"--help", NULL});
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: nabla-train --init INIT.safetensors"));
    ck_assert_ptr_nonnull(strstr(r.out, "default f32"));
    ck_assert_str_eq(r.err, "");
    result_done(&r, NULL);
}
END_TEST

/* ---- error exits ------------------------------------------------------------------------- */
/* Writes `src` (a fixture) to dir/name without tensor `drop`, and with
 * tensor `replace` (if not NULL) replaced by `with`. */
static void write_variant(const char *src, const char *dir, const char *name, const char *drop,
                          const char *replace, nb_tensor *with) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list in = {0}, out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, src, &in), NB_OK);
    for (int i = 0; i < in.n; i++) {
        if (drop && !strcmp(in.names[i], drop)) continue;
        bool rep = replace && !strcmp(in.names[i], replace);
        nb_list_add(&out, in.names[i], rep ? with : in.t[i]);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(nb_save_safetensors(ctx, path, &out, 0, NULL, NULL), NB_OK);
    nb_ctx_free(ctx);
}

typedef struct bad_case {
    const char *what;
    const char *init, *data; /* fixture names, or files the test writes into the run's dir */
    const char *flags[12];
    const char *message;
} bad_case;

#define OK_FLAGS "--heads", "3", "--qkv-bias", "--optim", "adam", "--lr", "0.01", "--steps", "3"

static const bad_case BAD[] = {
    {"missing tensor", "@no_out_bias", SD, {OK_FLAGS},
     "no_out_bias.safetensors: no tensor 'out_proj.bias'"},
    {"wrong shape", "@short_key", SD, {OK_FLAGS},
     "short_key.safetensors: 'W_key.weight' has shape (6, 3), expected (6, 4)"},
    {"wrong dtype", "@int_value", SD, {OK_FLAGS},
     "int_value.safetensors: 'W_value.weight' has dtype i64, expected F32 or F64"},
    {"data shape", SI, "@wide_y", {OK_FLAGS},
     "wide_y.safetensors: 'y' has shape (2, 5, 7), expected (2, 5, 6)"},
    {"data d_in", SI, QD, {OK_FLAGS},
     "square_data.safetensors: 'x' has shape (2, 6, 8), expected (*, *, 4)"},
    {"data without y", SI, "@no_y", {OK_FLAGS}, "no_y.safetensors: no tensor 'y'"},
    {"heads do not divide d_out", SI, SD,
     {"--heads", "4", "--qkv-bias", "--optim", "sgd", "--lr", "0.1", "--steps", "3"},
     "--heads 4 does not divide d_out = 6 (from W_query.weight)"},
    {"bias without flag", SI, SD,
     {"--heads", "3", "--optim", "sgd", "--lr", "0.1", "--steps", "3"},
     "small_init.safetensors: has 'W_query.bias' but --qkv-bias was not given"},
    {"flag without bias", QI, QD,
     {"--heads", "2", "--qkv-bias", "--optim", "sgd", "--lr", "0.1", "--steps", "3"},
     "square_init.safetensors: no tensor 'W_query.bias'"},
    {"unexpected tensor", "@extra", SD, {OK_FLAGS},
     "extra.safetensors: unexpected tensor 'ln.weight' (not a MultiHeadAttention parameter)"},
    {"missing --lr", SI, SD, {"--heads", "3", "--qkv-bias", "--optim", "adam", "--steps", "3"},
     "missing required flag --lr"},
    {"missing --heads", SI, SD, {"--qkv-bias", "--optim", "adam", "--lr", "1", "--steps", "3"},
     "missing required flag --heads"},
    {"bad optimizer", SI, SD,
     {"--heads", "3", "--qkv-bias", "--optim", "rmsprop", "--lr", "0.1", "--steps", "3"},
     "--optim: 'rmsprop' is not one of sgd, adam, adamw"},
    {"bad dtype", SI, SD, {OK_FLAGS, "--dtype", "f16"}, "--dtype: 'f16' is not f32 or f64"},
    {"zero steps", SI, SD,
     {"--heads", "3", "--qkv-bias", "--optim", "adam", "--lr", "0.1", "--steps", "0"},
     "--steps: '0' is not a positive integer"},
    {"bad number", SI, SD,
     {"--heads", "3", "--qkv-bias", "--optim", "adam", "--lr", "0.1x", "--steps", "2"},
     "--lr: '0.1x' is not a finite number"},
    {"negative lr", SI, SD,
     {"--heads", "3", "--qkv-bias", "--optim", "adam", "--lr", "-1", "--steps", "2"},
     "adam: invalid learning rate -1, expected >= 0"},
    {"momentum for adam", SI, SD, {OK_FLAGS, "--momentum", "0.9"},
     "--momentum applies to --optim sgd only (got --optim adam)"},
    {"unknown flag", SI, SD, {OK_FLAGS, "--epochs", "3"},
     "unknown argument '--epochs' (try --help)"},
    {"flag without value", SI, SD, {OK_FLAGS, "--weight-decay"}, "--weight-decay needs a value"},
    {"unreadable init", "/nonexistent/init.safetensors", SD, {OK_FLAGS},
     "cannot read --init: load_safetensors: /nonexistent/init.safetensors: cannot open"},
    {"truncated data", SI, "@truncated", {OK_FLAGS},
     "cannot read --data: load_safetensors: "},
};
#define N_BAD (int)(sizeof BAD / sizeof BAD[0])

/* Makes the "@name" inputs of the error cases in dir. */
static void make_bad_inputs(const char *dir) {
    nb_ctx *ctx = nb_ctx_new(0);
    write_variant(SI, dir, "no_out_bias.safetensors", "out_proj.bias", NULL, NULL);
    write_variant(SI, dir, "short_key.safetensors", NULL, "W_key.weight",
                  nb_zeros(ctx, NB_F64, NB_SHAPE(6, 3)));
    write_variant(SI, dir, "int_value.safetensors", NULL, "W_value.weight",
                  nb_zeros(ctx, NB_I64, NB_SHAPE(6, 4)));
    write_variant(SD, dir, "wide_y.safetensors", NULL, "y", nb_zeros(ctx, NB_F32,
                                                                     NB_SHAPE(2, 5, 7)));
    write_variant(SD, dir, "no_y.safetensors", "y", NULL, NULL);
    write_variant(SI, dir, "extra.safetensors", NULL, "mask", nb_zeros(ctx, NB_F32, NB_SHAPE(6)));
    /* "extra": the mask replaced, then renamed to an unknown parameter */
    char path[256];
    nb_tensor_list l = {0};
    snprintf(path, sizeof path, "%s/extra.safetensors", dir);
    ck_assert_int_eq(nb_load_safetensors(ctx, path, &l), NB_OK);
    for (int i = 0; i < l.n; i++)
        if (!strcmp(l.names[i], "mask")) l.names[i] = "ln.weight";
    ck_assert_int_eq(nb_save_safetensors(ctx, path, &l, 0, NULL, NULL), NB_OK);
    /* the data file cut short */
    FILE *f = fopen(SD, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/truncated.safetensors", dir);
    f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(buf, 1, n - 10, f), n - 10);
    fclose(f);
    nb_ctx_free(ctx);
}

/* "@name" is dir/name.safetensors; anything else is a path. */
static void input_path(char *buf, size_t n, const char *dir, const char *spec) {
    if (spec[0] == '@')
        snprintf(buf, n, "%s/%s.safetensors", dir, spec + 1);
    else
        snprintf(buf, n, "%s", spec);
}

START_TEST(test_error_exits) {
    const bad_case *c = &BAD[_i];
    result r;
    result_init(&r);
    make_bad_inputs(r.dir);
    char init[256], data[256], out[256];
    input_path(init, sizeof init, r.dir, c->init);
    input_path(data, sizeof data, r.dir, c->data);
    snprintf(out, sizeof out, "%s/out.safetensors", r.dir);
    const char *argv[32];
    int n = 0;
    argv[n++] = "--init";
    argv[n++] = init;
    argv[n++] = "--data";
    argv[n++] = data;
    for (int k = 0; k < 12 && c->flags[k]; k++) argv[n++] = c->flags[k];
    if (strcmp(c->what, "flag without value")) { /* there --out would be taken as the value */
        argv[n++] = "--out";
        argv[n++] = out;
    }
    argv[n] = NULL;
    run_tool(&r, argv);
    ck_assert_msg(r.status == 2, "%s: exit %d, want 2 (stderr: %s)", c->what, r.status, r.err);
    ck_assert_msg(strstr(r.err, c->message) != NULL, "%s: stderr '%s' lacks '%s'", c->what,
                  r.err, c->message);
    ck_assert_msg(!strncmp(r.err, "nabla-train: ", 13), "%s: '%s'", c->what, r.err);
    ck_assert_msg(access(out, F_OK) != 0, "%s: an output file was written", c->what);
    result_done(&r, (const char *const[]){"no_out_bias.safetensors", "short_key.safetensors",
                                          "int_value.safetensors", "wide_y.safetensors",
                                          "no_y.safetensors", "extra.safetensors",
                                          "truncated.safetensors", NULL});
}
END_TEST

START_TEST(test_unwritable_out) {
    result r;
    result_init(&r);
    run_tool(&r, (const char *const[]){"--init", SI, "--data", SD, OK_FLAGS, "--out",
                                       "/nonexistent/dir/out.safetensors", NULL});
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "nabla-train: cannot write --out: save_safetensors: "
                                "/nonexistent/dir/out.safetensors") != NULL, "%s", r.err);
    result_done(&r, NULL);
}
END_TEST

Suite *suite_train_tool(void) {
    Suite *s = suite_create("train_tool");
    TCase *tc = tcase_create("pytorch");
    tcase_add_loop_test(tc, test_matches_pytorch, 0, N_REFS);
    tcase_add_test(tc, test_default_dtype_is_f32);
    tcase_add_test(tc, test_out_continues_as_init);
    tcase_add_test(tc, test_help);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_loop_test(tc, test_error_exits, 0, N_BAD);
    tcase_add_test(tc, test_unwritable_out);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
