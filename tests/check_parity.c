/* check_parity.c - nabla computes what PyTorch computes. Every fixture in
 * tests/fixtures/parity (written by tools/ref/gen_fixtures.py with torch) is
 * replayed through tools/test/parity.c, the same code `nabla-parity` prints its
 * table with: outputs and gradients of every op and module, and 20-step
 * training trajectories of the seeds' MultiHeadAttention with SGD, Adam and
 * AdamW, in float64 and float32. The error measure and tolerances are
 * documented in tools/test/parity.h: max |got - want| over the largest |want| among
 * the case's outputs or among its gradients; ops and modules f64 1e-10,
 * f32 1e-5; trajectories f64 1e-9, f32 1e-3.
 *
 * Also checked: that the fixtures cover every op of nabla/ops.h, every
 * module of nabla/nn.h and the three optimizers in both dtypes, and that the
 * harness itself fails (naming file, tensor and element) when a reference
 * is perturbed just beyond the tolerance, and passes just within it. */
#include "check_nabla.h"

#include <unistd.h>

#include "parity.h"

#define PARITY_DIR NB_SOURCE_DIR "/tests/fixtures/parity"
#define MAX_FILES 512

/* The fixture names, listed when the suite is built (the loop test's index
 * picks one). */
static char g_files[MAX_FILES][NB_PARITY_NAME];
static int g_n_files;

static void fixture_path(char *buf, size_t n, const char *name) {
    ck_assert((size_t)snprintf(buf, n, "%s/%s", PARITY_DIR, name) < n);
}

/* ---- every fixture --------------------------------------------------------------- */

START_TEST(test_fixture_matches_pytorch) {
    char path[1024];
    fixture_path(path, sizeof path, g_files[_i]);
    nb_parity_result r;
    bool ok = nb_parity_run(path, &r);
    ck_assert_msg(ok, "%s", r.message);
    ck_assert_int_ge(r.n_out, 1);
    if (strcmp(r.kind, "trajectory") == 0)
        ck_assert_int_ge(r.n_grad, 1); /* final parameters */
    ck_assert(r.err_out <= r.tol && r.err_grad <= r.tol);
}
END_TEST

START_TEST(test_fixture_directory_is_readable) {
    ck_assert_msg(g_n_files > 0, "no *.safetensors fixtures in %s", PARITY_DIR);
    ck_assert_msg(g_n_files <= MAX_FILES, "%d fixtures, the suite reads %d", g_n_files,
                  MAX_FILES);
}
END_TEST

/* ---- coverage ------------------------------------------------------------------------ */

/* Metadata of every fixture: kind, what, label, dtype. */
typedef struct seen {
    int n;
    nb_parity_result r[MAX_FILES];
} seen;

static seen *run_all(void) {
    seen *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    char path[1024];
    for (int i = 0; i < g_n_files && i < MAX_FILES; i++) {
        fixture_path(path, sizeof path, g_files[i]);
        nb_parity_run(path, &s->r[s->n++]);
    }
    return s;
}

/* How many fixtures of `kind` name `what` in dtype dt. */
static int count(const seen *s, const char *kind, const char *what, nb_dtype dt) {
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += strcmp(s->r[i].kind, kind) == 0 && strcmp(s->r[i].what, what) == 0 &&
             s->r[i].dtype == dt;
    return n;
}

START_TEST(test_every_op_module_and_optimizer_is_covered) {
    seen *s = run_all();
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F64 : NB_F32;
        for (int op = 0; op < NB_OP_CUSTOM; op++)
            ck_assert_msg(count(s, "op", nb_op_name((nb_op)op), dt) > 0,
                          "no %s fixture for op '%s'", nb_dtype_name(dt), nb_op_name((nb_op)op));
        static const char *const modules[] = {
            "Linear", "Dropout", "Embedding", "LayerNorm", "GELU", "SelfAttention_v1",
            "SelfAttention_v2", "CausalAttention", "MultiHeadAttentionWrapper",
            "MultiHeadAttention"};
        for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++)
            ck_assert_msg(count(s, "module", modules[i], dt) > 0, "no %s fixture for module %s",
                          nb_dtype_name(dt), modules[i]);
        static const char *const optims[] = {"sgd", "adam", "adamw"};
        for (size_t i = 0; i < 3; i++)
            ck_assert_msg(count(s, "trajectory", optims[i], dt) == 1,
                          "want one %s trajectory with %s", nb_dtype_name(dt), optims[i]);
    }
    /* every case comes in both dtypes */
    for (int i = 0; i < s->n; i++) {
        int twins = 0;
        for (int j = 0; j < s->n; j++)
            twins += strcmp(s->r[i].label, s->r[j].label) == 0 && s->r[i].dtype != s->r[j].dtype;
        ck_assert_msg(twins == 1, "case %s (%s) lacks its other dtype", s->r[i].label,
                      nb_dtype_name(s->r[i].dtype));
    }
    free(s);
}
END_TEST

/* ---- the harness catches differences ------------------------------------------------- */

static char g_tmp[64];

static void setup(void) {
    strcpy(g_tmp, "/tmp/nb-parity-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_tmp));
}

static void teardown(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/case.safetensors", g_tmp);
    unlink(path);
    rmdir(g_tmp);
}

/* Copies fixture `name` to g_tmp/case.safetensors with element `i` of
 * tensor `tensor` (if not NULL) multiplied by (1 + rel) and, if `key` is
 * not NULL, metadata `key` set to `value`. Returns the new path. */
static const char *perturbed(const char *name, const char *tensor, size_t i, double rel,
                             const char *key, const char *value) {
    static char out[128];
    char path[1024];
    fixture_path(path, sizeof path, name);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list l = {0};
    const char *keys[32], *values[32];
    int n_meta = 0;
    ck_assert_int_eq(nb_load_safetensors_meta(ctx, path, &l, 32, &n_meta, keys, values), NB_OK);
    ck_assert_int_le(n_meta, 32);
    if (tensor) {
        nb_tensor *t = nb_list_get(&l, tensor);
        ck_assert_ptr_nonnull(t);
        nb_set(t, i, nb_get(t, i) * (1 + rel));
    }
    for (int k = 0; key && k < n_meta; k++)
        if (strcmp(keys[k], key) == 0) values[k] = value;
    snprintf(out, sizeof out, "%s/case.safetensors", g_tmp);
    ck_assert_int_eq(nb_save_safetensors(ctx, out, &l, n_meta, keys, values), NB_OK);
    nb_ctx_free(ctx);
    return out;
}

/* The element of largest magnitude among a fixture's gradients ("grad.",
 * "final.param.") or outputs ("out", "losses"), as (tensor name, index):
 * perturbing it by a relative amount changes the error measure by that
 * amount, as it is the measure's denominator. */
static void column_argmax(const char *file, bool grads, char *tensor, size_t n, size_t *index) {
    char path[1024];
    fixture_path(path, sizeof path, file);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list l = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, path, &l), NB_OK);
    double best = -1;
    for (int k = 0; k < l.n; k++) {
        const char *name = l.names[k];
        bool in_col = grads ? strncmp(name, "grad.", 5) == 0 ||
                                  strncmp(name, "final.param.", 12) == 0
                            : strncmp(name, "out", 3) == 0 || strcmp(name, "losses") == 0;
        if (!in_col || l.t[k]->dtype == NB_I64) continue;
        for (size_t i = 0; i < l.t[k]->numel; i++)
            if (fabs(nb_get(l.t[k], i)) > best) {
                best = fabs(nb_get(l.t[k], i));
                snprintf(tensor, n, "%s", name);
                *index = i;
            }
    }
    ck_assert_double_gt(best, 0);
    nb_ctx_free(ctx);
}

START_TEST(test_perturbed_reference_fails_naming_file_tensor_element) {
    static const struct {
        const char *file;
        bool grads;
        double within, beyond; /* relative perturbations: 0.3 and 3 tolerances */
    } cases[] = {
        {"matmul_batched.f64.safetensors", false, 3e-11, 3e-10},
        {"matmul_batched.f32.safetensors", false, 3e-6, 3e-5},
        {"matmul_batched.f64.safetensors", true, 3e-11, 3e-10},
        {"split_dim1.f64.safetensors", false, 3e-11, 3e-10},
        {"mha_kpm.f32.safetensors", true, 3e-6, 3e-5},
        {"train_mha_adam.f64.safetensors", false, 3e-10, 3e-9},
        {"train_mha_sgd.f32.safetensors", true, 3e-4, 3e-3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char tensor[64];
        size_t i = 0;
        column_argmax(cases[c].file, cases[c].grads, tensor, sizeof tensor, &i);
        nb_parity_result r;
        /* within the tolerance: still passes */
        ck_assert_msg(nb_parity_run(perturbed(cases[c].file, tensor, i, cases[c].within, NULL,
                                              NULL), &r),
                      "%s", r.message);
        /* beyond it: fails, and says where */
        ck_assert(!nb_parity_run(perturbed(cases[c].file, tensor, i, cases[c].beyond, NULL, NULL),
                                 &r));
        ck_assert_msg(strstr(r.message, "case.safetensors: ") == r.message, "%s", r.message);
        char want[128];
        snprintf(want, sizeof want, "%s element (", tensor);
        ck_assert_msg(strstr(r.message, want), "'%s' lacks '%s'", r.message, want);
        ck_assert_msg(strstr(r.message, "exceeds"), "%s", r.message);
        ck_assert_double_gt(cases[c].grads ? r.err_grad : r.err_out, r.tol);
        ck_assert_str_eq(cases[c].grads ? r.worst_grad : r.worst_out, tensor);
    }
}
END_TEST

START_TEST(test_bad_fixtures_fail_with_a_reason) {
    nb_parity_result r;
    ck_assert(!nb_parity_run("/nonexistent/x.safetensors", &r));
    ck_assert_msg(strstr(r.message, "x.safetensors: "), "%s", r.message);

    ck_assert(!nb_parity_run(perturbed("neg.f64.safetensors", NULL, 0, 0, "op", "frobnicate"),
                             &r));
    ck_assert_msg(strstr(r.message, "unknown op 'frobnicate'"), "%s", r.message);

    ck_assert(!nb_parity_run(perturbed("sum_dim1.f32.safetensors", NULL, 0, 0, "dim", "x"), &r));
    ck_assert_msg(strstr(r.message, "metadata 'dim' = 'x' is malformed"), "%s", r.message);

    /* an argument nabla refuses: the op's own error comes through */
    ck_assert(!nb_parity_run(perturbed("sum_dim1.f32.safetensors", NULL, 0, 0, "dim", "7"), &r));
    ck_assert_msg(strstr(r.message, "nabla: "), "%s", r.message);

    /* a different argument gives different numbers: the dispatch reads it */
    ck_assert(!nb_parity_run(perturbed("pow_2.5.f64.safetensors", NULL, 0, 0, "p", "2.4"), &r));
    ck_assert_msg(strstr(r.message, "out element ("), "%s", r.message);

    ck_assert(!nb_parity_run(perturbed("train_mha_adamw.f64.safetensors", NULL, 0, 0,
                                       "weight_decay", "0.02"), &r));
    ck_assert_msg(strstr(r.message, "element ("), "%s", r.message);
}
END_TEST

Suite *suite_parity(void) {
    Suite *s = suite_create("parity");
    g_n_files = nb_parity_list(PARITY_DIR, g_files, MAX_FILES);

    TCase *tc = tcase_create("fixtures");
    tcase_add_test(tc, test_fixture_directory_is_readable);
    if (g_n_files > 0)
        tcase_add_loop_test(tc, test_fixture_matches_pytorch, 0,
                            g_n_files < MAX_FILES ? g_n_files : MAX_FILES);
    tcase_add_test(tc, test_every_op_module_and_optimizer_is_covered);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    TCase *th = tcase_create("harness");
    tcase_add_checked_fixture(th, setup, teardown);
    tcase_add_test(th, test_perturbed_reference_fails_naming_file_tensor_element);
    tcase_add_test(th, test_bad_fixtures_fail_with_a_reason);
    tcase_set_timeout(th, 60);
    suite_add_tcase(s, th);
    return s;
}
