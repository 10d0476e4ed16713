/* check_examples_grad.c - the second-order examples and per_sample_dp (examples/<name>.c,
 * built to <build>/examples/) print the numbers their PyTorch twins print,
 * one test each. The twins (tools/ref/<name>_ref.py) start from
 * the same PCG32 data and weights and print the same lines; their output is
 * in tests/fixtures/examples/<name>.txt (tools/ref/gen_example_fixtures.py).
 * Every line must match: the text exactly, and every number within 1e-8
 * relative (1e-14 absolute near zero), all in float64. */
#include <unistd.h>

#include "check_nabla.h"

#ifndef NB_SOURCE_DIR
#define NB_SOURCE_DIR "."
#endif

#define EX_RTOL 1e-8
#define EX_ATOL 1e-14

/* Where a number starts: a digit, or a sign or point followed by one. */
static bool number_at(const char *s) {
    if (*s >= '0' && *s <= '9') return true;
    if (*s == '-' || *s == '+') s++;
    if (*s == '.') s++;
    return *s >= '0' && *s <= '9';
}

/* Compares one line of output with one of the fixture: the same text, and
 * the same numbers within the tolerances. false and a reason in why (which
 * names the line) when they differ; *worst grows to the largest relative
 * difference seen. */
static bool same_line(const char *got, const char *want, int line, double *worst, char *why,
                      size_t n) {
    const char *g = got, *w = want;
    while (*g && *g != '\n' && *w && *w != '\n') {
        if (number_at(g) && number_at(w)) {
            char *ge, *we;
            double a = strtod(g, &ge), b = strtod(w, &we);
            double diff = fabs(a - b), scale = fmax(fabs(a), fabs(b));
            if (!(diff <= EX_RTOL * scale + EX_ATOL)) {
                snprintf(why, n, "line %d: %.17g where PyTorch prints %.17g (relative %.3g)", line,
                         a, b, diff / scale);
                return false;
            }
            if (scale > 0 && diff / scale > *worst) *worst = diff / scale;
            g = ge, w = we;
        } else if (*g++ != *w++) {
            snprintf(why, n, "line %d: the text differs at column %d", line, (int)(g - got));
            return false;
        }
    }
    if ((*g && *g != '\n') || (*w && *w != '\n')) {
        snprintf(why, n, "line %d: one line is longer than the other", line);
        return false;
    }
    return true;
}

/* Compares a program's whole output with a fixture whose lines starting
 * with '#' are comments. true when they match. */
static bool same_output(const char *got, const char *fixture, double *worst, char *why, size_t n) {
    const char *w = fixture, *g = got;
    int line = 0;
    *worst = 0;
    for (;;) {
        while (*w == '#') w = strchr(w, '\n') ? strchr(w, '\n') + 1 : w + strlen(w);
        if (!*w || !*g) break;
        line++;
        if (!same_line(g, w, line, worst, why, n)) return false;
        g = strchr(g, '\n') ? strchr(g, '\n') + 1 : g + strlen(g);
        w = strchr(w, '\n') ? strchr(w, '\n') + 1 : w + strlen(w);
    }
    if (*g || *w) {
        snprintf(why, n, "after line %d, %s", line, *g ? "the program prints more lines"
                                                       : "the program stops, PyTorch goes on");
        return false;
    }
    if (line == 0) snprintf(why, n, "nothing to compare");
    return line > 0;
}

static char *read_fixture(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, NB_SOURCE_DIR "/tests/fixtures/examples/%s.txt", name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s (tools/ref/gen_example_fixtures.py writes it)", path);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(m);
    int ch;
    while ((ch = fgetc(f)) != EOF) fputc(ch, m);
    fclose(m);
    fclose(f);
    return text;
}

/* Runs <build>/examples/<name> (stdout only) and checks it exits 0. */
static char *run_example(const char *name) {
    char path[4096], cmd[4200], *out = NULL;
    snprintf(path, sizeof path, "%s/examples/%s", nb_test_build_dir(), name);
    ck_assert_msg(access(path, X_OK) == 0,
                  "example binary %s is missing: build it with `make all` first (or set "
                  "NB_BUILD_DIR to the build dir that has it)", path);
    snprintf(cmd, sizeof cmd, "'%s'", path);
    int st = nb_test_run(cmd, &out);
    ck_assert_msg(st == 0, "%s exited with status %d; its output:\n%s", name, st, out);
    return out;
}

static void check_against_twin(const char *name) {
    char *out = run_example(name), *want = read_fixture(name), why[256];
    double worst;
    bool same = same_output(out, want, &worst, why, sizeof why);
    ck_assert_msg(same, "%s does not print what tools/ref/%s_ref.py prints: %s\n"
                  "---- its output:\n%s", name, name, why, out);
    free(out), free(want);
}

START_TEST(test_gradient_penalty_matches_pytorch) { check_against_twin("gradient_penalty"); }
END_TEST

START_TEST(test_maml_sine_matches_pytorch) { check_against_twin("maml_sine"); }
END_TEST

START_TEST(test_pinn_poisson_matches_pytorch) { check_against_twin("pinn_poisson"); }
END_TEST

START_TEST(test_per_sample_dp_matches_pytorch) { check_against_twin("per_sample_dp"); }
END_TEST

/* The comparison can fail: the fixture against itself passes, and fails
 * once one number moves by 1e-7 relative, a word changes, or a line is
 * missing. */
START_TEST(test_comparison_catches_changes) {
    char *want = read_fixture("gradient_penalty"), why[256];
    const char *body = want; /* the fixture without its comment: what the program prints */
    while (*body == '#') body = strchr(body, '\n') + 1;
    double worst;
    ck_assert_msg(same_output(body, want, &worst, why, sizeof why), "%s", why);
    ck_assert(worst == 0);
    /* the loss at step 0, moved by 1e-7 of itself */
    const char *key = "step   0  loss ";
    char *at = strstr(body, key), *end;
    ck_assert_ptr_nonnull(at);
    at += strlen(key);
    double v = strtod(at, &end);
    size_t cap = strlen(body) + 64;
    char *moved = malloc(cap);
    snprintf(moved, cap, "%.*s%.12g%s", (int)(at - body), body, v * (1 + 1e-7), end);
    ck_assert(!same_output(moved, want, &worst, why, sizeof why));
    ck_assert_msg(strstr(why, "line 2:") != NULL, "%s", why);
    /* a word */
    strcpy(moved, body);
    memcpy(strstr(moved, "penalty"), "pena1ty", 7);
    ck_assert(!same_output(moved, want, &worst, why, sizeof why));
    ck_assert_msg(strstr(why, "the text differs") != NULL, "%s", why);
    /* the last line missing */
    strcpy(moved, body);
    moved[strlen(moved) - 1] = '\0';
    *strrchr(moved, '\n') = '\0';
    ck_assert(!same_output(moved, want, &worst, why, sizeof why));
    ck_assert_msg(strstr(why, "PyTorch goes on") != NULL, "%s", why);
    /* one line too many */
    snprintf(moved, cap, "%sstep 1001\n", body);
    ck_assert(!same_output(moved, want, &worst, why, sizeof why));
    ck_assert_msg(strstr(why, "prints more lines") != NULL, "%s", why);
    free(moved), free(want);
}
END_TEST

Suite *suite_examples_grad(void) {
    Suite *s = suite_create("examples_grad");
    TCase *tc = tcase_create("second-order examples against their PyTorch twins");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_comparison_catches_changes);
    tcase_add_test(tc, test_gradient_penalty_matches_pytorch);
    tcase_add_test(tc, test_maml_sine_matches_pytorch);
    tcase_add_test(tc, test_pinn_poisson_matches_pytorch);
    tcase_add_test(tc, test_per_sample_dp_matches_pytorch);
    suite_add_tcase(s, tc);
    return s;
}
