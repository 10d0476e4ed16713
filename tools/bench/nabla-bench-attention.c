/* nabla-bench-attention - the fused attention op (nb_sdpa) against the
 * composed ops it replaces, and its grouped-query form against multi-head,
 * timed interleaved.
 *
 *   nabla-bench-attention [--config NAME] [--part P] [--threads N] [--rounds R]
 *                         [--seconds S]
 *
 * Three parts per config, each on two paths:
 *   core      forward + backward of causal attention with dropout 0.1 on q,
 *             k, v (B, T, H, hd) leaves, upstream gradient random:
 *             fused     nb_sdpa
 *             composed  permute, matmul, causal_fill, scale, softmax,
 *                       dropout, matmul, permute (the seed's chain)
 *   mha_step  one training step of MultiHeadAttention(D, D, T, 0.1, H, no
 *             qkv bias): forward, MSE against zeros, backward, Adam; the
 *             module's use_fused switched between rounds.
 *   gqa       forward + backward of fused causal attention without dropout:
 *             gqa       k, v of H / 4 heads (B, T, H / 4, hd)
 *             mha       k, v of H heads (the core's leaves)
 *             with gflops= on both lines: 7 B H T^2 hd / time, the
 *             products' flops (forward Q K^T and P V, backward their
 *             recomputed Q K^T and four more, each 2 T^2 hd a head) halved
 *             for the causal mask; both paths do the same products.
 * Rounds alternate between the paths (the machine may be shared) and each
 * line gives the median of its rounds:
 *
 *   config=NAME threads=N part=P path=fused ms=X cpu_ms=C arena_mb=Y
 *
 * ms is wall time, cpu_ms the process's CPU time (all threads; on a busy
 * machine the fairer figure for one thread).
 * arena_mb is the step context's bytes in use after backward: everything the
 * step allocated (the arena frees nothing until the reset). Writes no file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla.h"
#include "now.h"

typedef struct config {
    const char *name;
    int64_t B, T, D, H;
} config;

static const config configs[] = {
    {"small", 8, 32, 64, 4},
    {"medium", 16, 128, 256, 8},
    {"large", 8, 256, 512, 8},
};
#define N_CONFIGS (sizeof configs / sizeof configs[0])
#define MAX_ROUNDS 99

static void usage(FILE *f) {
    fprintf(f,
            "usage: nabla-bench-attention [--config NAME] [--part P] [--threads N] "
            "[--rounds R] [--seconds S]\n"
            "  Times causal attention with dropout 0.1, forward + backward, as one fused\n"
            "  nb_sdpa op and as the composed ops, MultiHeadAttention training steps on\n"
            "  both paths, and fused attention with H / 4 key/value heads against H\n"
            "  (no dropout, with GFLOP/s); rounds alternate between the paths. Writes no\n"
            "  file.\n"
            "  --config NAME  small (B8 T32 D64 H4), medium (16 128 256 8), large (8 256 512 8);\n"
            "                 default: medium and large\n"
            "  --part P       core, mha_step or gqa (default: all three)\n"
            "  --threads N    worker threads (1)\n"
            "  --rounds R     rounds per path, median reported (5)\n"
            "  --seconds S    time per round (0.3)\n"
            "  --help         this text\n");
}

/* The process's CPU time, all threads together. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- the two paths ------------------------------------------------------------ */

typedef struct bench {
    const config *c;
    nb_ctx *params, *step;
    nb_tensor *q, *k, *v, *g; /* core: (B, T, H, hd) leaves, g (B, T, D) */
    nb_tensor *k4, *v4;       /* gqa: (B, T, H / 4, hd) leaves */
    nb_nn_mha mha;
    nb_optim *opt;
    nb_tensor *x, *zeros;
    nb_pcg32 rng;
    uint64_t seed;
} bench;

/* The seed's chain on (B, T, H, hd) inputs -> (B, T, D). */
static nb_tensor *composed(nb_ctx *s, bench *b) {
    static const int perm[4] = {0, 2, 1, 3};
    const config *c = b->c;
    nb_tensor *qh = nb_permute(s, b->q, perm), *kh = nb_permute(s, b->k, perm);
    nb_tensor *vh = nb_permute(s, b->v, perm);
    nb_tensor *scores = nb_causal_fill(s, nb_matmul(s, qh, nb_transpose(s, kh, 2, 3)), -INFINITY);
    nb_tensor *w = nb_softmax(s, nb_scale(s, scores, 1.0 / sqrt((double)(c->D / c->H))));
    w = nb_dropout(s, w, 0.1, true, &b->rng);
    nb_tensor *o = nb_permute(s, nb_matmul(s, w, vh), perm);
    return nb_reshape(s, o, NB_SHAPE(c->B, c->T, c->D));
}

enum { CORE, MHA_STEP, GQA, N_PARTS };
static const char *const part_names[N_PARTS] = {"core", "mha_step", "gqa"};
static const char *const path_names[N_PARTS][2] = {
    {"fused", "composed"}, {"fused", "composed"}, {"gqa", "mha"}};

/* One repetition of part's path 0 (first) or 1; returns false on an error
 * (printed). */
static bool run_once(bench *b, int part, bool first) {
    nb_ctx *s = b->step;
    const bool mha_step = part == MHA_STEP, fused = first;
    nb_ctx_reset(s);
    nb_tensor *y;
    if (part == GQA) {
        nb_zero_grad(b->q), nb_zero_grad(b->k), nb_zero_grad(b->v);
        nb_zero_grad(b->k4), nb_zero_grad(b->v4);
        y = nb_sdpa(s, b->q, first ? b->k4 : b->k, first ? b->v4 : b->v, NULL, true,
                    1.0 / sqrt((double)(b->c->D / b->c->H)), 0.0, 0);
    } else if (mha_step) {
        b->mha.use_fused = fused;
        nb_params_zero_grad(&b->mha.params);
        y = nb_mse_loss(s, nb_nn_mha_forward(s, &b->mha, b->x), b->zeros);
    } else {
        nb_zero_grad(b->q), nb_zero_grad(b->k), nb_zero_grad(b->v);
        y = fused ? nb_sdpa(s, b->q, b->k, b->v, NULL, true,
                            1.0 / sqrt((double)(b->c->D / b->c->H)), 0.1, b->seed++)
                  : composed(s, b);
    }
    if (!y || nb_backward(s, y, mha_step ? NULL : b->g) != NB_OK ||
        (mha_step && nb_optim_step(b->opt) != NB_OK)) {
        fprintf(stderr, "nabla-bench-attention: %s\n",
                nb_ctx_error(s) ? nb_ctx_error(s) : "optimizer step failed");
        return false;
    }
    return true;
}

/* Seconds per repetition over one round of about `seconds`; *cpu gets the
 * process's CPU seconds per repetition (all threads). */
static double round_time(bench *b, int part, bool first, double seconds, double *cpu,
                         bool *ok) {
    int n = 0;
    double t0 = now_s(), c0 = cpu_now(), t;
    do {
        if (!(*ok = run_once(b, part, first))) return 0;
        n++;
        t = now_s() - t0;
    } while (t < seconds);
    *cpu = (cpu_now() - c0) / n;
    return t / n;
}

static bool bench_init(bench *b, const config *c) {
    memset(b, 0, sizeof *b);
    b->c = c;
    b->params = nb_ctx_new(0);
    b->step = nb_ctx_new(0);
    nb_pcg32_seed(&b->rng, 1, 1);
    int64_t hd = c->D / c->H;
    nb_tensor **qkv[3] = {&b->q, &b->k, &b->v};
    for (int i = 0; i < 3; i++)
        *qkv[i] = nb_requires_grad(
            nb_normal(b->params, NB_F32, NB_SHAPE(c->B, c->T, c->H, hd), 0, 1, &b->rng));
    b->k4 = nb_requires_grad(
        nb_normal(b->params, NB_F32, NB_SHAPE(c->B, c->T, c->H / 4, hd), 0, 1, &b->rng));
    b->v4 = nb_requires_grad(
        nb_normal(b->params, NB_F32, NB_SHAPE(c->B, c->T, c->H / 4, hd), 0, 1, &b->rng));
    b->g = nb_normal(b->params, NB_F32, NB_SHAPE(c->B, c->T, c->D), 0, 1, &b->rng);
    b->x = nb_normal(b->params, NB_F32, NB_SHAPE(c->B, c->T, c->D), 0, 1, &b->rng);
    b->zeros = nb_zeros(b->params, NB_F32, NB_SHAPE(c->B, c->T, c->D));
    if (nb_nn_mha_init(b->params, &b->mha, c->D, c->D, c->T, 0.1, (int)c->H, false, NB_F32,
                       &b->rng) != NB_OK) {
        fprintf(stderr, "nabla-bench-attention: %s\n", nb_ctx_error(b->params));
        return false;
    }
    b->opt = nb_adam_new(b->params, &b->mha.params, nb_adam_defaults(1e-3));
    if (!b->opt || nb_ctx_error(b->params)) {
        fprintf(stderr, "nabla-bench-attention: %s\n",
                nb_ctx_error(b->params) ? nb_ctx_error(b->params) : "Adam failed");
        return false;
    }
    return true;
}

static void bench_free(bench *b) {
    nb_optim_free(b->opt);
    nb_ctx_free(b->step);
    nb_ctx_free(b->params);
}

/* Both paths of one part, interleaved; prints two lines and the ratio. */
static bool bench_part(bench *b, int part, int rounds, double seconds, int threads) {
    double t[2][MAX_ROUNDS], cpu[2][MAX_ROUNDS], mb[2];
    const config *c = b->c;
    const double flops = 7.0 * (double)(c->B * c->T * c->T * c->D); /* H hd = D */
    bool ok = true;
    for (int path = 0; path < 2; path++) /* warm-up: the arena reaches its peak */
        for (int i = 0; i < 2 && ok; i++) ok = run_once(b, part, path == 0);
    for (int r = 0; r < rounds && ok; r++)
        for (int path = 0; path < 2 && ok; path++) {
            t[path][r] = round_time(b, part, path == 0, seconds, &cpu[path][r], &ok);
            mb[path] = (double)nb_ctx_mem_used(b->step) / (1024.0 * 1024.0);
        }
    if (!ok) return false;
    double med[2];
    for (int path = 0; path < 2; path++) {
        qsort(t[path], (size_t)rounds, sizeof(double), cmp_double);
        qsort(cpu[path], (size_t)rounds, sizeof(double), cmp_double);
        med[path] = 1e3 * t[path][rounds / 2];
        printf("config=%s threads=%d part=%s path=%s ms=%.3f cpu_ms=%.3f arena_mb=%.1f",
               c->name, threads, part_names[part], path_names[part][path], med[path],
               1e3 * cpu[path][rounds / 2], mb[path]);
        if (part == GQA) printf(" gflops=%.2f", flops / (med[path] * 1e6));
        printf("\n");
    }
    printf("config=%s threads=%d part=%s %s/%s time=%.2f arena=%.3f\n", c->name, threads,
           part_names[part], path_names[part][0], path_names[part][1], med[0] / med[1],
           mb[0] / mb[1]);
    fflush(stdout);
    return true;
}

int main(int argc, char **argv) {
    const char *only = NULL;
    int threads = 1, rounds = 5, part = -1; /* -1: all */
    double seconds = 0.3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        bool takes = !strcmp(a, "--config") || !strcmp(a, "--part") || !strcmp(a, "--threads") ||
                     !strcmp(a, "--rounds") || !strcmp(a, "--seconds");
        if (!takes) {
            fprintf(stderr, "nabla-bench-attention: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!val) {
            fprintf(stderr, "nabla-bench-attention: %s needs a value\n", a);
            return 2;
        }
        i++;
        char *end;
        if (!strcmp(a, "--config")) {
            only = val;
            continue;
        }
        if (!strcmp(a, "--part")) {
            for (part = 0; part < N_PARTS && strcmp(val, part_names[part]); part++) continue;
            if (part == N_PARTS) {
                fprintf(stderr, "nabla-bench-attention: unknown part '%s' (core, mha_step, gqa)\n",
                        val);
                return 2;
            }
            continue;
        }
        double d = strtod(val, &end);
        bool bad = *end != '\0' || !(d > 0);
        if (!strcmp(a, "--threads")) bad |= d != (int)d || d > 64, threads = (int)d;
        if (!strcmp(a, "--rounds")) bad |= d != (int)d || d > MAX_ROUNDS, rounds = (int)d;
        if (!strcmp(a, "--seconds")) bad |= d > 60, seconds = d;
        if (bad) {
            fprintf(stderr, "nabla-bench-attention: bad value '%s' for %s\n", val, a);
            return 2;
        }
    }
    bool found = false;
    for (size_t i = 0; i < N_CONFIGS; i++)
        found |= only ? !strcmp(only, configs[i].name) : true;
    if (!found) {
        fprintf(stderr, "nabla-bench-attention: unknown config '%s' (small, medium, large)\n",
                only);
        return 2;
    }
    nb_set_num_threads(threads);
    int status = 0;
    for (size_t i = 0; i < N_CONFIGS && !status; i++) {
        const config *c = &configs[i];
        if (only ? strcmp(only, c->name) != 0 : !strcmp(c->name, "small")) continue;
        bench b;
        bool ok = bench_init(&b, c);
        for (int p = 0; p < N_PARTS && ok; p++)
            if (part < 0 || part == p) ok = bench_part(&b, p, rounds, seconds, threads);
        status = !ok;
        bench_free(&b);
    }
    nb_set_num_threads(1);
    return status;
}
