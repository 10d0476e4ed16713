/* nabla-parity - how closely nabla matches PyTorch, as Markdown tables.
 *
 *     nabla-parity [--by-op] [fixture-dir]   (default tests/fixtures/parity)
 *
 * Replays every *.safetensors fixture written by tools/ref/gen_fixtures.py (the
 * same replay as the Check suite `parity`, in tools/test/parity.c) and prints one
 * row per op/module case and dtype with the largest relative error of its
 * outputs and of its gradients, then the training trajectories (per-step
 * losses, final weights). An error is max |nabla - torch| over the largest
 * |torch| among the case's outputs, or among its gradients: the normwise
 * relative error (see tools/test/parity.h). Failures are listed
 * after the tables, with the tensor and element. With --by-op, one row per
 * op or module (the worst of its cases in each dtype) instead of one per
 * case: the README's table. An op of the list (nabla/ops.def) with no
 * fixture in either dtype is a failure too, listed with the others. Exit
 * status 1 if any fixture fails, an op has none, or none is found. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity.h"

#define MAX_FILES 512

static char files[MAX_FILES][NB_PARITY_NAME];
static nb_parity_result results[MAX_FILES];

static const char *num(double e, char *buf, size_t n) {
    if (e == 0)
        snprintf(buf, n, "0");
    else
        snprintf(buf, n, "%.1e", e);
    return buf;
}

static void row(const nb_parity_result *r, bool show_what) {
    char a[32], b[32], label[160];
    if (show_what && strcmp(r->label, r->what) != 0)
        snprintf(label, sizeof label, "%s (%s)", r->label, r->what);
    else
        snprintf(label, sizeof label, "%s", r->label);
    printf("| %s | %s | %s | %s |%s\n", label, nb_dtype_name(r->dtype),
           num(r->err_out, a, sizeof a), num(r->err_grad, b, sizeof b),
           r->passed ? "" : " **FAIL**");
}

/* One row per op or module: how many cases, and the worst errors of its
 * cases per dtype. Rows follow the first appearance of each op. */
static void by_op(int n) {
    printf("| op or module | cases | f64 out | f64 grads | f32 out | f32 grads |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const nb_parity_result *r = &results[i];
        if (!strcmp(r->kind, "trajectory")) continue;
        bool first = true;
        for (int j = 0; j < i && first; j++)
            first = strcmp(results[j].what, r->what) != 0 || !strcmp(results[j].kind, "trajectory");
        if (!first) continue;
        double e[2][2] = {{0}};
        int cases = 0;
        bool ok = true;
        for (int j = i; j < n; j++) {
            const nb_parity_result *q = &results[j];
            if (strcmp(q->what, r->what) != 0 || !strcmp(q->kind, "trajectory")) continue;
            int d = q->dtype == NB_F64 ? 0 : 1;
            cases += d == 0;
            if (q->err_out > e[d][0]) e[d][0] = q->err_out;
            if (q->err_grad > e[d][1]) e[d][1] = q->err_grad;
            ok &= q->passed;
        }
        char a[32], b[32], c[32], d[32];
        printf("| %s | %d | %s | %s | %s | %s |%s\n", r->what, cases, num(e[0][0], a, sizeof a),
               num(e[0][1], b, sizeof b), num(e[1][0], c, sizeof c), num(e[1][1], d, sizeof d),
               ok ? "" : " **FAIL**");
    }
}

/* Names every op of the list that lacks a fixture in f64 or in f32 (on
 * stderr, as failures); returns how many do. */
static int ops_without_fixture(int n) {
    int bare = 0;
    for (int op = 0; op < NB_OP_CUSTOM; op++)
        for (int d = 0; d < 2; d++) {
            nb_dtype dt = d ? NB_F32 : NB_F64;
            bool found = false;
            for (int i = 0; i < n && !found; i++)
                found = !strcmp(results[i].kind, "op") && results[i].dtype == dt &&
                        !strcmp(results[i].what, nb_op_name((nb_op)op));
            if (!found) {
                fprintf(stderr, "FAIL op %s has no %s fixture (tools/ref/gen_fixtures.py)\n",
                        nb_op_name((nb_op)op), nb_dtype_name(dt));
                bare++;
            }
        }
    return bare;
}

static const char usage[] =
    "usage: nabla-parity [--by-op] [FIXTURE_DIR]\n"
    "Compares every op, module and training trajectory with PyTorch's fixtures\n"
    "(default tests/fixtures/parity) and prints the errors; writes no files.\n"
    "  --by-op  one table row per op\n"
    "  --help   this text\n";

int main(int argc, char **argv) {
    bool grouped = false;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--by-op")) {
            grouped = true;
        } else if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "nabla-parity: unexpected argument '%s' (see --help)\n", argv[i]);
            return 2;
        } else {
            dir = argv[i];
        }
    }
    if (!dir) dir = "tests/fixtures/parity";
    int n = nb_parity_list(dir, files, MAX_FILES);
    if (n < 0) {
        fprintf(stderr, "nabla-parity: cannot read directory %s\n", dir);
        return 1;
    }
    if (n == 0) {
        fprintf(stderr, "nabla-parity: no *.safetensors fixtures in %s\n", dir);
        return 1;
    }
    if (n > MAX_FILES) {
        fprintf(stderr, "nabla-parity: %d fixtures, reading the first %d\n", n, MAX_FILES);
        n = MAX_FILES;
    }
    char path[4096];
    int failed = 0;
    double worst[2][2] = {{0}}; /* [f64?][grads?] over ops and modules */
    for (int i = 0; i < n; i++) {
        nb_parity_result *r = &results[i];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, files[i]) >= sizeof path) {
            fprintf(stderr, "nabla-parity: path too long: %s/%s\n", dir, files[i]);
            return 1;
        }
        failed += !nb_parity_run(path, r);
        if (strcmp(r->kind, "trajectory") != 0) {
            int d = r->dtype == NB_F64;
            if (r->err_out > worst[d][0]) worst[d][0] = r->err_out;
            if (r->err_grad > worst[d][1]) worst[d][1] = r->err_grad;
        }
    }

    /* Files sort as <case>.f32, <case>.f64, so each case's two rows are
     * adjacent. */
    if (grouped) {
        by_op(n);
    } else {
        printf("| op/module | dtype | max rel error out | max rel error grads |\n");
        printf("|---|---|---|---|\n");
        for (int i = 0; i < n; i++)
            if (strcmp(results[i].kind, "trajectory") != 0) row(&results[i], true);
    }
    printf("\n| trajectory (20 steps) | dtype | max rel error losses | max rel error final "
           "weights |\n");
    printf("|---|---|---|---|\n");
    for (int i = 0; i < n; i++)
        if (strcmp(results[i].kind, "trajectory") == 0) row(&results[i], false);

    char a[32], b[32], c[32], d[32];
    printf("\nError = max |nabla - torch| / max |torch|, over all outputs or all gradients of "
           "a case. Largest over ops and modules: f64 %s (out), %s (grads); f32 %s (out), "
           "%s (grads).\n",
           num(worst[1][0], a, sizeof a), num(worst[1][1], b, sizeof b),
           num(worst[0][0], c, sizeof c), num(worst[0][1], d, sizeof d));
    printf("Tolerances: ops and modules f64 1e-10, f32 1e-5; trajectories f64 1e-9, "
           "f32 1e-3. %d of %d fixtures within them.\n", n - failed, n);
    int bare = ops_without_fixture(n);
    if (bare) printf("%d op fixture%s missing (see the FAIL lines).\n", bare, bare == 1 ? "" : "s");
    for (int i = 0; i < n; i++)
        if (!results[i].passed) fprintf(stderr, "FAIL %s\n", results[i].message);
    return failed || bare ? 1 : 0;
}
