/* nabla-bench-moe - what a top-k mixture-of-experts layer built from topk,
 * index_select and index_add costs, against dense expert MLPs.
 *
 *   nabla-bench-moe [--tokens T] [--dim D] [--experts E] [--hidden H] [--top K]
 *                   [--threads N] [--rounds R] [--seconds S]
 *
 * Forward + backward (of the sum of the output) in float32, x (T, D) and
 * every weight requiring gradients, each expert linear(silu(linear)) with
 * biases, on four paths:
 *   moe        router, softmax, topk, renormalised gates; each expert on
 *              its own tokens (index_select), scaled by the gate and added
 *              back (index_add): tools/support/moe_layer.c
 *   dense_k    one dense MLP of hidden K H on every token: the FLOPs of
 *              the k experts each token runs
 *   dense_all  all E experts on every token (an MLP of hidden E H): the
 *              cost without routing
 *   dispatch   the moe path with each expert the identity: routing,
 *              gathers and scatter-adds alone
 * Rounds alternate between the paths (the machine may be shared); each line
 * gives the median of its rounds:
 *
 *   path=P ms=X cpu_ms=C
 *
 * then the ratios moe/dense_k and moe/dense_all. Writes no file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe_layer.h"
#include "nabla.h"
#include "now.h"

#define MAX_EXPERTS 64
#define MAX_ROUNDS 99
enum { P_MOE, P_DENSE_K, P_DENSE_ALL, P_DISPATCH, N_PATHS };
static const char *const path_names[N_PATHS] = {"moe", "dense_k", "dense_all", "dispatch"};

typedef struct bench {
    nb_ctx *params, *step;
    int64_t T, D, E, H;
    int k;
    nb_tensor *x, *router;
    moe_expert experts[MAX_EXPERTS];
    moe_expert dense_k, dense_all;
    nb_tensor *leaves[4 * MAX_EXPERTS + 16]; /* every leaf, to clear gradients */
    int n_leaves;
} bench;

static void usage(FILE *f) {
    fprintf(f,
            "usage: nabla-bench-moe [--tokens T] [--dim D] [--experts E] [--hidden H] [--top K]\n"
            "                       [--threads N] [--rounds R] [--seconds S]\n"
            "  Times forward + backward of a top-K-of-E mixture-of-experts layer (float32)\n"
            "  against one dense MLP of hidden K*H and one of E*H. Writes no file.\n"
            "  --tokens T   rows of x (1024)      --dim D      model width (256)\n"
            "  --experts E  experts (8, <= 64)    --hidden H   each expert's hidden size (512)\n"
            "  --top K      experts a token runs (2)\n"
            "  --threads N  worker threads (1)    --rounds R   rounds per path, median (5)\n"
            "  --seconds S  time per round (0.3)  --help       this text\n");
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static nb_tensor *leaf(bench *b, nb_pcg32 *rng, int nd, const int64_t *shape, double std) {
    nb_tensor *t = nb_requires_grad(nb_normal(b->params, NB_F32, nd, shape, 0, std, rng));
    b->leaves[b->n_leaves++] = t;
    return t;
}

static moe_expert make_mlp(bench *b, nb_pcg32 *rng, int64_t H) {
    double s1 = 1 / sqrt((double)b->D), s2 = 1 / sqrt((double)H);
    return (moe_expert){leaf(b, rng, NB_SHAPE(H, b->D), s1), leaf(b, rng, NB_SHAPE(H), s1),
                        leaf(b, rng, NB_SHAPE(b->D, H), s2),
                        leaf(b, rng, NB_SHAPE(b->D), s2)};
}

/* One repetition of a path; false on an error (printed). */
static bool run_once(bench *b, int path) {
    nb_ctx *s = b->step;
    nb_ctx_reset(s);
    for (int i = 0; i < b->n_leaves; i++) nb_zero_grad(b->leaves[i]);
    nb_tensor *y = NULL;
    switch (path) {
    case P_MOE: y = moe_layer(s, b->x, b->router, (int)b->E, b->experts, b->k); break;
    case P_DENSE_K: y = moe_expert_mlp(s, &b->dense_k, b->x); break;
    case P_DENSE_ALL: y = moe_expert_mlp(s, &b->dense_all, b->x); break;
    default: y = moe_layer(s, b->x, b->router, (int)b->E, NULL, b->k); break;
    }
    if (!y || nb_backward(s, nb_sum(s, y), NULL) != NB_OK) {
        fprintf(stderr, "nabla-bench-moe: %s: %s\n", path_names[path], nb_ctx_error(s));
        return false;
    }
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct opts {
    int64_t T, D, E, H;
    int k, threads, rounds;
    double seconds;
} opts;

/* Reads the options into o; 0, or the exit status after a message. */
static int parse_args(int argc, char **argv, opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "nabla-bench-moe: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        char *end;
        double x = strtod(v, &end);
        bool ok = *v && !*end && x > 0 && x < 1e9;
        if (strcmp(a, "--tokens") == 0) o->T = (int64_t)x;
        else if (strcmp(a, "--dim") == 0) o->D = (int64_t)x;
        else if (strcmp(a, "--experts") == 0) o->E = (int64_t)x, ok = ok && x <= MAX_EXPERTS;
        else if (strcmp(a, "--hidden") == 0) o->H = (int64_t)x;
        else if (strcmp(a, "--top") == 0) o->k = (int)x;
        else if (strcmp(a, "--threads") == 0) o->threads = (int)x;
        else if (strcmp(a, "--rounds") == 0) o->rounds = (int)x, ok = ok && x <= MAX_ROUNDS;
        else if (strcmp(a, "--seconds") == 0) o->seconds = x;
        else ok = false;
        if (!ok || (strcmp(a, "--seconds") != 0 && x != (double)(int64_t)x)) {
            fprintf(stderr, "nabla-bench-moe: bad option %s '%s'\n", a, v);
            usage(stderr);
            return 2;
        }
    }
    if (o->k > o->E) {
        fprintf(stderr, "nabla-bench-moe: --top %d is more than --experts %lld\n", o->k,
                (long long)o->E);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    opts o = {1024, 256, 8, 512, 2, 1, 5, 0.3};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    int64_t T = o.T, D = o.D, E = o.E, H = o.H;
    int k = o.k, threads = o.threads, rounds = o.rounds;
    double seconds = o.seconds;
    nb_set_num_threads(threads);
    bench b = {.params = nb_ctx_new(0), .step = nb_ctx_new(0), .T = T, .D = D, .E = E, .H = H,
               .k = k};
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 34, 1);
    b.x = leaf(&b, &rng, NB_SHAPE(T, D), 1.0);
    b.router = leaf(&b, &rng, NB_SHAPE(E, D), 1 / sqrt((double)D));
    for (int e = 0; e < E; e++) b.experts[e] = make_mlp(&b, &rng, H);
    b.dense_k = make_mlp(&b, &rng, k * H);
    b.dense_all = make_mlp(&b, &rng, E * H);
    if (nb_ctx_status(b.params) != NB_OK) {
        fprintf(stderr, "nabla-bench-moe: %s\n", nb_ctx_error(b.params));
        return 1;
    }
    printf("tokens=%lld dim=%lld experts=%lld hidden=%lld top=%d threads=%d\n", (long long)T,
           (long long)D, (long long)E, (long long)H, k, threads);
    double ms[N_PATHS][MAX_ROUNDS], cpu[N_PATHS][MAX_ROUNDS];
    for (int p = 0; p < N_PATHS; p++)
        if (!run_once(&b, p)) return 1; /* warm-up */
    for (int r = 0; r < rounds; r++)
        for (int p = 0; p < N_PATHS; p++) {
            int reps = 0;
            double t0 = now_s(), c0 = cpu_s(), t;
            do {
                if (!run_once(&b, p)) return 1;
                reps++;
                t = now_s() - t0;
            } while (t < seconds);
            ms[p][r] = 1e3 * t / reps;
            cpu[p][r] = 1e3 * (cpu_s() - c0) / reps;
        }
    double med[N_PATHS];
    for (int p = 0; p < N_PATHS; p++) {
        qsort(ms[p], (size_t)rounds, sizeof(double), cmp_double);
        qsort(cpu[p], (size_t)rounds, sizeof(double), cmp_double);
        med[p] = ms[p][rounds / 2];
        printf("path=%s ms=%.3f cpu_ms=%.3f\n", path_names[p], med[p], cpu[p][rounds / 2]);
    }
    printf("moe/dense_k=%.2f moe/dense_all=%.2f dispatch/moe=%.2f\n", med[P_MOE] / med[P_DENSE_K],
           med[P_MOE] / med[P_DENSE_ALL], med[P_DISPATCH] / med[P_MOE]);
    nb_ctx_free(b.step);
    nb_ctx_free(b.params);
    nb_set_num_threads(1);
    return 0;
}
