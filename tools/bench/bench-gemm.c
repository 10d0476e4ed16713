/* bench-gemm - nabla's float32 gemm against OpenBLAS's single-thread sgemm.
 *
 *   make bench-gemm       (builds build/bench/bench-gemm, links -lopenblas)
 *
 * OpenBLAS (Debian's libopenblas-dev) is only the yardstick here; the
 * library never links it. Each case runs nabla's internal nb_gemm_float and
 * cblas_sgemm on the same operands (one thread each) and prints the best
 * GFLOP/s of several rounds, alternating between the two and timed in thread
 * CPU time (the figures least hurt by other work on the machine), their ratio, and the largest difference of
 * the results relative to the largest |C|. The cases: squares 256..1024 and
 * the products of the large MultiHeadAttention config (B 8, T 256, D 512,
 * 8 heads) and of GPT-2 124M's MLP (256 tokens, 768 wide) in the
 * transpositions forward and backward use. A last line gives the 2-thread
 * peak of both on a 1536-square product, in wall time. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/ops_internal.h"
#include "now.h"

void openblas_set_num_threads(int n);

typedef struct gemm_case {
    const char *name;
    int64_t m, n, k; /* C (m, n) = op(A) (m, k) @ op(B) (k, n) */
    bool ta, tb;     /* A stored (k, m) / B stored (n, k) */
    int batch;       /* independent products per call */
} gemm_case;

static const gemm_case cases[] = {
    {"square 256", 256, 256, 256, false, false, 1},
    {"square 384", 384, 384, 384, false, false, 1},
    {"square 512", 512, 512, 512, false, false, 1},
    {"square 768", 768, 768, 768, false, false, 1},
    {"square 1024", 1024, 1024, 1024, false, false, 1},
    {"square 512 A^T", 512, 512, 512, true, false, 1},
    {"square 512 B^T", 512, 512, 512, false, true, 1},
    /* large config: x (2048, 512), weights (512, 512) */
    {"linear fwd x@W^T", 2048, 512, 512, false, true, 1},
    {"linear dx dy@W", 2048, 512, 512, false, false, 1},
    {"linear dW dy^T@x", 512, 512, 2048, true, false, 1},
    /* GPT-2 124M's MLP at llm.c's batch: x (256, 768), c_fc (3072, 768) */
    {"gpt2 c_fc x@W^T", 256, 3072, 768, false, true, 1},
    {"gpt2 c_fc dx dy@W", 256, 768, 3072, false, false, 1},
    {"gpt2 c_fc dW dy^T@x", 3072, 768, 256, true, false, 1},
    /* per head: q, k, v (256, 64), scores (256, 256); 64 heads */
    {"scores q@k^T", 256, 256, 64, false, true, 64},
    {"attn w@v", 256, 64, 256, false, false, 64},
    {"dw dC@v^T", 256, 256, 64, false, true, 64},
    {"dv w^T@dC", 256, 64, 256, true, false, 64},
    {"dq dS@k", 256, 64, 256, false, false, 64},
    {"dk dS^T@q", 256, 64, 256, true, false, 64},
};

/* The calling thread's CPU time: both gemms run on it alone, and time the
 * thread spends descheduled (other programs on a shared machine) does not
 * count against either. */
static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct operands {
    const gemm_case *c;
    float *a, *b, *c_nb, *c_ref;
} operands;

static void run_nabla(const operands *o) {
    const gemm_case *c = o->c;
    int64_t m = c->m, n = c->n, k = c->k;
    for (int i = 0; i < c->batch; i++) {
        const float *a = o->a + (size_t)i * m * k, *b = o->b + (size_t)i * k * n;
        nb_gemm_float(o->c_nb + (size_t)i * m * n, a, c->ta ? 1 : k, c->ta ? m : 1, b,
                      c->tb ? 1 : n, c->tb ? k : 1, m, k, n, false);
    }
}

static void run_openblas(const operands *o) {
    const gemm_case *c = o->c;
    int m = (int)c->m, n = (int)c->n, k = (int)c->k;
    for (int i = 0; i < c->batch; i++) {
        const float *a = o->a + (size_t)i * m * k, *b = o->b + (size_t)i * k * n;
        cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans,
                    c->tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, c->ta ? m : k, b,
                    c->tb ? k : n, 0.0f, o->c_ref + (size_t)i * m * n, n);
    }
}

/* GFLOP/s of one round of about 0.05 s. */
static double round_gflops(void (*fn)(const operands *), const operands *o, double flops) {
    long reps = 0;
    double t0 = thread_cpu_s(), t;
    do {
        fn(o);
        reps++;
        t = thread_cpu_s();
    } while (t - t0 < 0.05);
    return flops * (double)reps / (t - t0) * 1e-9;
}

/* The best GFLOP/s of each over `rounds` rounds, alternating between them so
 * that both see the same load on the machine. */
static void best_gflops(const operands *o, double flops, int rounds, double *g_nb,
                        double *g_ob) {
    run_nabla(o); /* warm-up */
    run_openblas(o);
    *g_nb = *g_ob = 0;
    for (int r = 0; r < rounds; r++) {
        double g = round_gflops(run_nabla, o, flops);
        if (g > *g_nb) *g_nb = g;
        g = round_gflops(run_openblas, o, flops);
        if (g > *g_ob) *g_ob = g;
    }
}

/* The 2-thread peak: a 1536-square product on both threads (nabla's
 * nb_gemm_float_par, OpenBLAS with 2 threads), best of `rounds`, in wall
 * time. nabla-gpt bench --config=gpt2-124m sets its step beside this figure
 * (nabla's, measured there again in the same way). */
static void peak_line(int rounds) {
    const int64_t n = 1536;
    float *a = malloc(sizeof(float) * (size_t)(n * n)), *b = malloc(sizeof(float) * (size_t)(n * n)),
          *c = malloc(sizeof(float) * (size_t)(n * n));
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return;
    }
    for (int64_t i = 0; i < n * n; i++) a[i] = (float)(i % 13) * 0.01f, b[i] = (float)(i % 7) * 0.02f;
    nb_set_num_threads(2);
    openblas_set_num_threads(2);
    double best_nb = 0, best_ob = 0, flops = 2.0 * (double)(n * n * n);
    for (int r = 0; r <= rounds; r++) { /* round 0 warms up */
        double t0 = now_s();
        nb_gemm_float_par(c, NULL, a, n, 1, b, n, 1, n, n, n, false);
        double g = flops / (now_s() - t0) / 1e9;
        if (r && g > best_nb) best_nb = g;
        t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a,
                    (int)n, b, (int)n, 0.0f, c, (int)n);
        g = flops / (now_s() - t0) / 1e9;
        if (r && g > best_ob) best_ob = g;
    }
    printf("2-thread peak, square 1536: nabla %.1f GF/s, OpenBLAS %.1f GF/s, ratio %.2f\n", best_nb,
           best_ob, best_nb / best_ob);
    free(a), free(b), free(c);
}

static void usage(FILE *f) {
    fprintf(f, "usage: bench-gemm [--rounds N] [FILTER]\n"
               "  nabla's float32 gemm vs OpenBLAS sgemm, one thread each, best of N rounds\n"
               "  (default 7); FILTER keeps the cases whose name contains it.\n");
}

int main(int argc, char **argv) {
    int rounds = 7;
    const char *filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
            if (rounds < 1 || rounds > 1000) {
                fprintf(stderr, "bench-gemm: bad --rounds\n");
                return 2;
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "bench-gemm: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            filter = argv[i];
        }
    }
    openblas_set_num_threads(1);
    nb_set_num_threads(1);
    printf("%-20s %5s %5s %5s %5s %10s %10s %7s %9s\n", "case", "m", "n", "k", "batch",
           "nabla GF/s", "oblas GF/s", "ratio", "max diff");
    int status = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const gemm_case *c = &cases[ci];
        if (filter && !strstr(c->name, filter)) continue;
        size_t na = (size_t)c->batch * c->m * c->k, nbn = (size_t)c->batch * c->k * c->n,
               nc = (size_t)c->batch * c->m * c->n;
        operands o = {c, malloc(na * 4), malloc(nbn * 4), malloc(nc * 4), malloc(nc * 4)};
        if (!o.a || !o.b || !o.c_nb || !o.c_ref) {
            fprintf(stderr, "bench-gemm: out of memory\n");
            return 1;
        }
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 7, (uint64_t)ci);
        for (size_t i = 0; i < na; i++) o.a[i] = nb_pcg32_float(&rng) * 2 - 1;
        for (size_t i = 0; i < nbn; i++) o.b[i] = nb_pcg32_float(&rng) * 2 - 1;
        double flops = 2.0 * (double)c->m * (double)c->n * (double)c->k * c->batch;
        double g_nb, g_ob;
        best_gflops(&o, flops, rounds, &g_nb, &g_ob);
        double diff = 0, big = 0;
        for (size_t i = 0; i < nc; i++) {
            double d = fabs((double)o.c_nb[i] - o.c_ref[i]);
            if (d > diff) diff = d;
            if (fabs(o.c_ref[i]) > big) big = fabs(o.c_ref[i]);
        }
        diff /= big > 0 ? big : 1;
        if (!(diff < 1e-5)) status = 1;
        printf("%-20s %5lld %5lld %5lld %5d %10.1f %10.1f %7.2f %9.1e\n", c->name,
               (long long)c->m, (long long)c->n, (long long)c->k, c->batch, g_nb, g_ob,
               g_nb / g_ob, diff);
        free(o.a), free(o.b), free(o.c_nb), free(o.c_ref);
    }
    if (!filter) peak_line(rounds);
    return status;
}
