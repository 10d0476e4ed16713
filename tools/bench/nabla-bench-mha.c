/* nabla-bench-mha - training-step time of the seeds' MultiHeadAttention.
 *
 *   nabla-bench-mha --config NAME [--threads 1,2] [--seconds S]
 *
 * One step is forward, MSE loss against a fixed target, backward and Adam,
 * of MultiHeadAttention(d_in = d_out = D, context T, dropout 0.1, heads,
 * qkv_bias false; out_proj with bias), built from the public API alone on
 * one batch x (B, T, D). tools/bench/bench_torch_mha.py times the same model in
 * PyTorch; `make bench-compare` runs both.
 *
 * The thread counts are measured interleaved (rounds alternate between
 * them) after warm-up steps, and each prints the median of its rounds:
 *
 *   config=NAME threads=N ms_per_step=X peak_rss_mb=Y minflt_per_step=Z
 *
 * peak_rss_mb is the process's peak resident set (VmHWM), so one config
 * per process; minflt_per_step counts minor page faults per timed step,
 * near 0 once the arenas hold their peak; cpu_ms_per_step is the CPU time
 * of all threads per step (with one thread, a figure less disturbed than
 * the wall time when other programs share the machine). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "nabla.h"
#include "now.h"

typedef struct mha_config {
    const char *name;
    int64_t B, T, D;
    int heads;
} mha_config;

static const mha_config configs[] = {
    {"seed", 2, 6, 2, 2},
    {"small", 8, 32, 64, 4},
    {"medium", 16, 128, 256, 8},
    {"large", 8, 256, 512, 8},
};

#define MAX_THREAD_COUNTS 8
#define ROUNDS 5

static void usage(FILE *f) {
    fprintf(f,
            "usage: nabla-bench-mha --config NAME [--threads LIST] [--seconds S]\n"
            "  Times training steps (forward, MSE, backward, Adam) of MultiHeadAttention.\n"
            "  --config NAME   seed (B2 T6 D2 H2), small (8 32 64 4), medium (16 128 256 8),\n"
            "                  large (8 256 512 8)\n"
            "  --threads LIST  comma-separated thread counts, measured interleaved (1,2)\n"
            "  --seconds S     time per measured round (0.25; %d rounds per count)\n"
            "  --help          this text\n",
            ROUNDS);
}

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* User + system CPU seconds of the whole process (every thread). */
static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* The peak resident set in MB: VmHWM of /proc/self/status, which starts
 * afresh at exec (getrusage's ru_maxrss would include the parent's before
 * exec); ru_maxrss where /proc is missing. */
static double peak_rss_mb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss; /* KiB on Linux */
    }
    return (double)kb / 1024.0;
}

typedef struct bench {
    nb_ctx *params, *step;
    nb_nn_mha mha;
    nb_optim *opt;
    nb_tensor *x, *target;
} bench;

static nb_status bench_init(bench *b, const mha_config *c, nb_pcg32 *init, nb_pcg32 *drop) {
    b->params = nb_ctx_new(0);
    b->step = nb_ctx_new(0);
    b->opt = NULL;
    if (!b->params || !b->step) return NB_ERR_MEMORY;
    nb_status st = nb_nn_mha_init(b->params, &b->mha, c->D, c->D, c->T, 0.1, c->heads, false,
                                  NB_F32, init);
    if (st) return st;
    b->mha.dropout.rng = drop;
    b->x = nb_uniform(b->params, NB_F32, NB_SHAPE(c->B, c->T, c->D), -1.0, 1.0, init);
    b->target = nb_uniform(b->params, NB_F32, NB_SHAPE(c->B, c->T, c->D), -1.0, 1.0, init);
    if (!b->x || !b->target) return nb_ctx_status(b->params);
    b->opt = nb_adam_new(b->params, &b->mha.params, nb_adam_defaults(1e-3));
    return b->opt ? NB_OK : nb_ctx_status(b->params);
}

static nb_status bench_step(bench *b) {
    nb_ctx_reset(b->step);
    nb_tensor *y = nb_nn_mha_forward(b->step, &b->mha, b->x);
    nb_tensor *loss = nb_mse_loss(b->step, y, b->target);
    nb_params_zero_grad(&b->mha.params);
    nb_status st = nb_backward(b->step, loss, NULL);
    return st ? st : nb_optim_step(b->opt);
}

static const char *bench_error(const bench *b) {
    const char *e = b->step ? nb_ctx_error(b->step) : NULL;
    if (!e && b->params) e = nb_ctx_error(b->params); /* the optimizer's errors too */
    return e ? e : "failed";
}

/* Steps until `seconds` have passed (at least 2); seconds per step, or -1. */
static double round_time(bench *b, double seconds, long *steps_out) {
    long steps = 0;
    double t0 = now_s(), t = t0;
    while (steps < 2 || t - t0 < seconds) {
        if (bench_step(b)) return -1;
        steps++;
        t = now_s();
    }
    *steps_out = steps;
    return (t - t0) / (double)steps;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(const mha_config *c, const int *threads, int n_counts, double seconds) {
    nb_pcg32 init, drop;
    nb_pcg32_seed(&init, 42, 1);
    nb_pcg32_seed(&drop, 42, 3);
    bench b;
    int status = 1;
    double per_step[MAX_THREAD_COUNTS][ROUNDS];
    long faults[MAX_THREAD_COUNTS] = {0}, steps_all[MAX_THREAD_COUNTS] = {0};
    double cpu[MAX_THREAD_COUNTS] = {0};
    if (bench_init(&b, c, &init, &drop) == NB_OK) {
        status = 0;
        /* warm-up on every count: arenas and optimizer state reach their peak */
        for (int k = 0; k < n_counts && !status; k++) {
            nb_set_num_threads(threads[k]);
            long s;
            status = round_time(&b, seconds / 2, &s) < 0;
        }
        for (int r = 0; r < ROUNDS && !status; r++)
            for (int k = 0; k < n_counts && !status; k++) {
                nb_set_num_threads(threads[k]);
                long f0 = minor_faults(), s = 0;
                double c0 = cpu_seconds();
                per_step[k][r] = round_time(&b, seconds, &s);
                cpu[k] += cpu_seconds() - c0;
                faults[k] += minor_faults() - f0;
                steps_all[k] += s;
                status = per_step[k][r] < 0;
            }
    }
    nb_set_num_threads(1);
    if (status) {
        fprintf(stderr, "nabla-bench-mha: %s: %s\n", c->name, bench_error(&b));
    } else {
        for (int k = 0; k < n_counts; k++) {
            qsort(per_step[k], ROUNDS, sizeof(double), cmp_double);
            printf("config=%s threads=%d ms_per_step=%.5g peak_rss_mb=%.1f minflt_per_step=%.2f "
                   "cpu_ms_per_step=%.5g\n",
                   c->name, threads[k], per_step[k][ROUNDS / 2] * 1e3, peak_rss_mb(),
                   (double)faults[k] / (double)steps_all[k],
                   cpu[k] / (double)steps_all[k] * 1e3);
        }
    }
    nb_optim_free(b.opt);
    nb_ctx_free(b.step);
    nb_ctx_free(b.params);
    return status;
}

/* "1,2" -> {1, 2}; the count, or -1 when malformed. */
static int parse_threads(const char *s, int *out) {
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 64 || n == MAX_THREAD_COUNTS) return -1;
        out[n++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return n ? n : -1;
}

int main(int argc, char **argv) {
    const mha_config *c = NULL;
    int threads[MAX_THREAD_COUNTS] = {1, 2}, n_counts = 2;
    double seconds = 0.25;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--config") && v) {
            for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++)
                if (!strcmp(v, configs[k].name)) c = &configs[k];
            if (!c) {
                fprintf(stderr, "nabla-bench-mha: unknown config '%s'\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            n_counts = parse_threads(v, threads);
            if (n_counts < 0) {
                fprintf(stderr, "nabla-bench-mha: bad --threads '%s' (e.g. 1,2)\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--seconds") && v) {
            char *end;
            seconds = strtod(v, &end);
            if (*end || !(seconds > 0 && seconds <= 60)) {
                fprintf(stderr, "nabla-bench-mha: bad --seconds '%s'\n", v);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "nabla-bench-mha: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!c) {
        fprintf(stderr, "nabla-bench-mha: --config NAME is required\n");
        usage(stderr);
        return 2;
    }
    return run(c, threads, n_counts, seconds);
}
