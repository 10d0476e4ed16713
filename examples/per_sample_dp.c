/* per_sample_dp - differentially private SGD (DP-SGD, Abadi et al., 2016)
 * on a small attention classifier in float64, with nb_per_sample_grads:
 *
 *   for each step, on a batch of B samples:
 *     g_b   = d loss(sample b) / d params          (nb_per_sample_grads)
 *     g_b  *= min(1, C / (|g_b| + 1e-6))           (|g_b| over all parameters)
 *     g     = (sum_b g_b + sigma * C * N(0, I)) / B
 *     params -= lr * g
 *
 * The model reads a sequence x (T, D): one causal self-attention head
 * (q, k, v = x Wq^T, x Wk^T, x Wv^T; softmax(q k^T / sqrt(D), causal) v),
 * the mean over positions, and a linear head to C classes; the loss is the
 * cross-entropy of the sample's label. Weights, data and noise come from
 * PCG32; the PyTorch twin (tools/ref/per_sample_dp_ref.py) replays the
 * generator, takes its per-sample gradients with functorch's
 * vmap(grad(loss), in_dims=(None, 0, 0)), and prints the same lines;
 * `make test` compares them (tests/fixtures/examples/per_sample_dp.txt).
 *
 *   build/examples/per_sample_dp */
#include <math.h>
#include <stdio.h>

#include "nabla.h"

#include "example_args.h"

#define N 16 /* samples */
#define B 8  /* a batch: samples 0..7, then 8..15, in turn */
#define T 4  /* positions */
#define D 4  /* features */
#define K 2  /* classes */
#define STEPS 40
#define PRINT_EVERY 5
#define LR 0.5
#define CLIP 1.0  /* C: each sample's gradient norm is clipped to it */
#define SIGMA 0.5 /* noise multiplier */
#define NP 5      /* Wq, Wk, Wv (D, D), Wo (K, D), bo (K) */

/* One sample's loss: in = {Wq, Wk, Wv, Wo, bo, x (T, D), label ()}. */
static nb_tensor *sample_loss(nb_ctx *c, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *x = in[5];
    nb_tensor *q = nb_linear(c, x, in[0], NULL), *k = nb_linear(c, x, in[1], NULL);
    nb_tensor *v = nb_linear(c, x, in[2], NULL);
    nb_tensor *s = nb_scale(c, nb_matmul(c, q, nb_transpose(c, k, 0, 1)), 1.0 / sqrt(D));
    nb_tensor *a = nb_matmul(c, nb_softmax(c, nb_causal_fill(c, s, -INFINITY)), v); /* (T, D) */
    nb_tensor *pooled = nb_reshape(c, nb_mean_dim(c, a, 0, false), NB_SHAPE(1, D));
    nb_tensor *label = nb_from_data(c, NB_I64, NB_SHAPE(1), in[6]->data);
    return nb_cross_entropy(c, nb_linear(c, pooled, in[3], in[4]), label);
}

/* The mean loss over all N samples, recording nothing. */
static double mean_loss(nb_ctx *c, nb_tensor *const *params, const double *xs,
                        const int64_t *labels) {
    nb_ctx_reset(c);
    nb_set_grad_enabled(c, false);
    double sum = 0;
    for (int n = 0; n < N; n++) {
        nb_tensor *in[NP + 2];
        for (int j = 0; j < NP; j++) in[j] = params[j];
        in[NP] = nb_from_doubles(c, NB_F64, NB_SHAPE(T, D), xs + n * T * D);
        in[NP + 1] = nb_from_data(c, NB_I64, 0, NULL, labels + n);
        sum += nb_item(sample_loss(c, in, NULL));
    }
    return sum / N;
}

int main(int argc, char **argv) {
    int rc = example_args(argc, argv,
                          "usage: per_sample_dp [--help]\n"
                          "Trains a small attention classifier in float64 with DP-SGD: per-sample\n"
                          "gradients (nb_per_sample_grads), each clipped to norm 1, summed, Gaussian\n"
                          "noise added, averaged. Prints the mean loss every few steps.\n"
                          "Prints to stdout; writes no files.\n");
    if (rc >= 0) return rc;
    nb_ctx *pctx = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng, noise;
    nb_pcg32_seed(&rng, 2016, 3);
    nb_pcg32_seed(&noise, 1234, 5);
    static const int64_t shapes[NP][2] = {{D, D}, {D, D}, {D, D}, {K, D}, {K}};
    static const int ndims[NP] = {2, 2, 2, 2, 1};
    nb_tensor *params[NP];
    for (int j = 0; j < NP; j++) {
        double bound = 1.0 / sqrt((double)D); /* every layer reads D features */
        params[j] = nb_uniform(pctx, NB_F64, ndims[j], shapes[j], -bound, bound, &rng);
    }
    static double xs[N * T * D];
    static int64_t labels[N];
    for (int i = 0; i < N * T * D; i++) xs[i] = nb_pcg32_normal(&rng);
    for (int n = 0; n < N; n++) { /* the label: is the first feature's sum positive */
        double s = 0;
        for (int t = 0; t < T; t++) s += xs[(n * T + t) * D];
        labels[n] = s > 0;
    }
    printf("attention classifier (T %d, D %d, %d classes), %d samples, batches of %d; "
           "clip %g, noise %g, lr %g\n", T, D, K, N, B, CLIP, SIGMA, LR);
    nb_ctx *lctx = nb_ctx_new(0);
    for (int step = 0; step <= STEPS && !nb_ctx_error(pctx); step++) {
        if (step % PRINT_EVERY == 0)
            printf("step %2d  loss %.12g\n", step, mean_loss(lctx, params, xs, labels));
        if (step == STEPS) break;
        nb_ctx_reset(ctx);
        int first = (step % (N / B)) * B;
        nb_tensor *data[2] = {
            nb_from_doubles(ctx, NB_F64, NB_SHAPE(B, T, D), xs + first * T * D),
            nb_from_data(ctx, NB_I64, NB_SHAPE(B), labels + first)};
        nb_tensor *g[NP];
        if (nb_per_sample_grads(ctx, sample_loss, NULL, NP, params, 2, data, g)) break;
        double factor[B], clipped_norm = 0;
        for (int b = 0; b < B; b++) {
            double sq = 0;
            for (int j = 0; j < NP; j++) {
                size_t n = params[j]->numel;
                for (size_t e = 0; e < n; e++) sq += pow(nb_get(g[j], b * n + e), 2);
            }
            factor[b] = fmin(1.0, CLIP / (sqrt(sq) + 1e-6));
            clipped_norm += sqrt(sq) * factor[b];
        }
        for (int j = 0; j < NP; j++) {
            size_t n = params[j]->numel;
            for (size_t e = 0; e < n; e++) {
                double sum = 0;
                for (int b = 0; b < B; b++) sum += nb_get(g[j], b * n + e) * factor[b];
                sum += SIGMA * CLIP * nb_pcg32_normal(&noise);
                nb_set(params[j], e, nb_get(params[j], e) - LR * sum / B);
            }
        }
        if (step % PRINT_EVERY == 0)
            printf("         mean clipped norm %.12g\n", clipped_norm / B);
    }
    const char *e = nb_ctx_error(ctx) ? nb_ctx_error(ctx)
                    : nb_ctx_error(pctx) ? nb_ctx_error(pctx) : nb_ctx_error(lctx);
    if (e) fprintf(stderr, "per_sample_dp: %s\n", e);
    nb_ctx_free(lctx);
    nb_ctx_free(ctx);
    nb_ctx_free(pctx);
    return e ? 1 : 0;
}
