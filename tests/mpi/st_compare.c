/* st_compare.c - the comparisons test_mpi.sh makes between a single-process
 * run and an MPI run (not installed; built by `make mpi`).
 *
 *   st_compare args FIXTURE           prints the fixture's "args" metadata
 *   st_compare model A B TOL [TOL1]   safetensors A against B: the normwise
 *                                     relative error ||a - b|| / ||b|| of all
 *                                     weights together <= TOL, and of each
 *                                     tensor alone <= TOL1 (default TOL)
 *   st_compare log A B TOL            the "loss" of each iteration in two
 *                                     log.jsonl files: |a - b| / |b| <= TOL
 * Exit 0 when within TOL, 1 otherwise (the worst error is printed), 2 on
 * bad usage or unreadable files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla.h"

static int cmd_args(const char *path) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list l = {0};
    const char *k[32], *v[32];
    int n = 0;
    if (nb_load_safetensors_meta(ctx, path, &l, 32, &n, k, v)) {
        fprintf(stderr, "st_compare: %s\n", nb_ctx_error(ctx));
        return 2;
    }
    for (int i = 0; i < n && i < 32; i++)
        if (!strcmp(k[i], "args")) printf("%s\n", v[i]);
    nb_list_free(&l);
    nb_ctx_free(ctx);
    return 0;
}

static int cmd_model(const char *a, const char *b, double tol, double tol1) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list la = {0}, lb = {0};
    if (nb_load_safetensors(ctx, a, &la) || nb_load_safetensors(ctx, b, &lb)) {
        fprintf(stderr, "st_compare: %s\n", nb_ctx_error(ctx));
        return 2;
    }
    double worst = 0, d_all = 0, n_all = 0;
    const char *where = "";
    int st = la.n == lb.n && la.n > 0 ? 0 : 1;
    for (int i = 0; i < la.n && !st; i++) {
        const nb_tensor *x = nb_list_tensor(&la, i);
        const nb_tensor *y = nb_list_get(&lb, nb_list_name(&la, i));
        if (!y || y->numel != x->numel) {
            fprintf(stderr, "st_compare: %s: '%s' missing or of another size in %s\n", a,
                    nb_list_name(&la, i), b);
            st = 1;
            break;
        }
        double d = 0, nrm = 0;
        for (size_t e = 0; e < x->numel; e++) {
            double u = nb_get(x, e), w = nb_get(y, e);
            d += (u - w) * (u - w), nrm += w * w;
        }
        double rel = nrm > 0 ? sqrt(d / nrm) : sqrt(d);
        if (!(rel <= worst)) worst = rel, where = nb_list_name(&la, i);
        d_all += d, n_all += nrm;
    }
    double all = n_all > 0 ? sqrt(d_all / n_all) : sqrt(d_all);
    printf("model: %d tensors, normwise relative error %.3g in all, worst tensor %.3g (%s)\n",
           la.n, all, worst, where);
    if (!(all <= tol) || !(worst <= tol1)) st = 1;
    nb_list_free(&la), nb_list_free(&lb);
    nb_ctx_free(ctx);
    return st;
}

/* The "loss" values of a log.jsonl, in order; count in *n. */
static double *read_losses(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char line[512];
    int cap = 64;
    double *v = malloc((size_t)cap * sizeof *v);
    *n = 0;
    while (v && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"loss\": ");
        if (!p) continue;
        if (*n == cap) {
            double *w = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!w) free(v);
            v = w;
            if (!v) break;
        }
        v[(*n)++] = strtod(p + 8, NULL);
    }
    fclose(f);
    return v;
}

static int cmd_log(const char *a, const char *b, double tol) {
    int na = 0, nb = 0;
    double *x = read_losses(a, &na), *y = read_losses(b, &nb);
    if (!x || !y) {
        fprintf(stderr, "st_compare: cannot read %s\n", !x ? a : b);
        free(x), free(y);
        return 2;
    }
    double worst = 0;
    for (int i = 0; i < na && i < nb; i++) {
        double rel = fabs(x[i] - y[i]) / (fabs(y[i]) > 0 ? fabs(y[i]) : 1);
        if (!(rel <= worst)) worst = rel;
    }
    printf("log: %d and %d losses, worst relative error %.3g\n", na, nb, worst);
    free(x), free(y);
    return na == nb && na > 0 && worst <= tol ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "args")) return cmd_args(argv[2]);
    if ((argc == 5 || argc == 6) && !strcmp(argv[1], "model"))
        return cmd_model(argv[2], argv[3], atof(argv[4]), atof(argv[argc == 6 ? 5 : 4]));
    if (argc == 5 && !strcmp(argv[1], "log")) return cmd_log(argv[2], argv[3], atof(argv[4]));
    fprintf(stderr, "usage: st_compare args FIXTURE | model A B TOL [TOL1] | log A B TOL\n");
    return 2;
}
