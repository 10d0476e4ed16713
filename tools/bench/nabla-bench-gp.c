/* nabla-bench-gp - what the second-order path costs: one WGAN-GP critic
 * step, timed. The critic is a tanh MLP 2 -> H -> H -> 1 on a batch of B
 * real and B fake 2-D points; the step is
 *
 *   loss = mean(D(fake)) - mean(D(real)) + 10 mean((|grad_x D(x_hat)| - 1)^2)
 *
 * with x_hat = eps real + (1 - eps) fake, the gradient taken with nb_grad's
 * create_graph, then backward into the weights and an SGD update. The same
 * step without the penalty (first order only) is timed beside it, so the
 * second-order share shows. tools/bench/bench_torch_gp.py times PyTorch's;
 * `make bench-gp` runs both.
 *
 *   nabla-bench-gp [--hidden H] [--batch B] [--threads N] [--seconds S]
 *
 * Prints: nabla hidden=H batch=B threads=N gp_ms_per_step=X plain_ms_per_step=Y */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla.h"
#include "now.h"

typedef struct critic {
    nb_tensor *w[3], *b[3];
} critic;

static nb_tensor *forward(nb_ctx *c, const critic *m, nb_tensor *x) {
    nb_tensor *h = nb_tanh(c, nb_linear(c, x, m->w[0], m->b[0]));
    h = nb_tanh(c, nb_linear(c, h, m->w[1], m->b[1]));
    return nb_linear(c, h, m->w[2], m->b[2]); /* (B, 1) */
}

/* One step; with_gp false leaves the penalty out. */
static int step(nb_ctx *c, const critic *m, nb_tensor *real, nb_tensor *fake, nb_tensor *eps,
                bool with_gp) {
    nb_tensor *loss = nb_sub(c, nb_mean(c, forward(c, m, fake)), nb_mean(c, forward(c, m, real)));
    if (with_gp) {
        nb_tensor *one_minus = nb_add_scalar(c, nb_neg(c, eps), 1.0);
        nb_tensor *xh = nb_add(c, nb_mul(c, real, eps), nb_mul(c, fake, one_minus));
        xh = nb_requires_grad(nb_copy(c, xh, xh->dtype));
        nb_tensor *d = nb_sum(c, forward(c, m, xh)), *g;
        if (nb_grad(c, 1, &d, NULL, 1, &xh, &(nb_grad_opts){.create_graph = true}, &g)) return 1;
        nb_tensor *norm = nb_sqrt(c, nb_add_scalar(c, nb_sum_dim(c, nb_mul(c, g, g), 1, false), 1e-12));
        nb_tensor *pen = nb_mean(c, nb_pow(c, nb_add_scalar(c, norm, -1.0), 2));
        loss = nb_add(c, loss, nb_scale(c, pen, 10.0));
    }
    for (int k = 0; k < 3; k++) nb_zero_grad(m->w[k]), nb_zero_grad(m->b[k]);
    if (nb_backward(c, loss, NULL)) return 1;
    for (int k = 0; k < 3; k++) {
        nb_tensor *ps[2] = {m->w[k], m->b[k]};
        for (int j = 0; j < 2; j++) {
            float *p = ps[j]->data;
            const float *g = ps[j]->grad;
            for (size_t i = 0; i < ps[j]->numel; i++) p[i] -= 1e-4f * g[i];
        }
    }
    return nb_ctx_error(c) != NULL;
}

static double time_steps(nb_ctx *c, const critic *m, nb_tensor *const *data, bool gp,
                         double seconds) {
    double best = INFINITY;
    for (int round = 0; round < 5; round++) {
        int n = 0;
        double t0 = now_s(), t;
        do {
            nb_ctx_reset(c);
            if (step(c, m, data[0], data[1], data[2], gp)) return NAN;
            n++;
        } while ((t = now_s()) - t0 < seconds || n < 2);
        double ms = (t - t0) / n * 1e3;
        if (ms < best) best = ms;
    }
    return best;
}

int main(int argc, char **argv) {
    int64_t H = 256, B = 256;
    int threads = 1;
    double seconds = 0.25;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            puts("usage: nabla-bench-gp [--hidden H] [--batch B] [--threads N] [--seconds S]\n"
                 "Times a WGAN-GP critic step (tanh MLP 2 -> H -> H -> 1, penalty through\n"
                 "nb_grad's create_graph) and the same step without the penalty.");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "nabla-bench-gp: %s needs a value\n", argv[i]);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(argv[i - 1], "--hidden")) H = atol(v);
        else if (!strcmp(argv[i - 1], "--batch")) B = atol(v);
        else if (!strcmp(argv[i - 1], "--threads")) threads = atoi(v);
        else if (!strcmp(argv[i - 1], "--seconds")) seconds = atof(v);
        else {
            fprintf(stderr, "nabla-bench-gp: unknown option '%s'\n", argv[i - 1]);
            return 2;
        }
        if (H < 1 || B < 1 || threads < 1 || !(seconds > 0)) {
            fprintf(stderr, "nabla-bench-gp: bad value '%s' for %s\n", v, argv[i - 1]);
            return 2;
        }
    }
    nb_set_num_threads(threads);
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, 1);
    critic m;
    int64_t dims[4] = {2, H, H, 1};
    for (int k = 0; k < 3; k++) {
        double s = 1.0 / sqrt((double)dims[k]);
        m.w[k] = nb_requires_grad(nb_uniform(p, NB_F32, NB_SHAPE(dims[k + 1], dims[k]), -s, s, &rng));
        m.b[k] = nb_requires_grad(nb_uniform(p, NB_F32, NB_SHAPE(dims[k + 1]), -s, s, &rng));
    }
    nb_tensor *data[3] = {nb_normal(p, NB_F32, NB_SHAPE(B, 2), 1, 0.2, &rng),
                          nb_normal(p, NB_F32, NB_SHAPE(B, 2), 0, 1, &rng),
                          nb_uniform(p, NB_F32, NB_SHAPE(B, 1), 0, 1, &rng)};
    if (nb_ctx_error(p)) {
        fprintf(stderr, "nabla-bench-gp: %s\n", nb_ctx_error(p));
        return 1;
    }
    double gp = time_steps(c, &m, data, true, seconds);
    double plain = time_steps(c, &m, data, false, seconds);
    if (isnan(gp) || isnan(plain)) {
        fprintf(stderr, "nabla-bench-gp: %s\n", nb_ctx_error(c) ? nb_ctx_error(c) : "failed");
        return 1;
    }
    printf("nabla hidden=%lld batch=%lld threads=%d gp_ms_per_step=%.4g plain_ms_per_step=%.4g\n",
           (long long)H, (long long)B, threads, gp, plain);
    nb_ctx_free(c), nb_ctx_free(p);
    nb_set_num_threads(1);
    return 0;
}
