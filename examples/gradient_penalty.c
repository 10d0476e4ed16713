/* gradient_penalty - a WGAN-GP critic (Gulrajani et al., 2017) trained in
 * float64: the loss holds the gradient of the critic with respect to its
 * input, and training differentiates that gradient again.
 *
 *   loss = mean D(fake) - mean D(real) + lambda * mean((|grad_x D(x_hat)| - 1)^2)
 *
 * at the interpolates x_hat = eps * real + (1 - eps) * fake. The gradient
 * grad_x D(x_hat) comes from nb_grad with create_graph, so it is a recorded
 * tensor, and nb_backward of the loss reaches the critic's weights through
 * it (second order). In PyTorch:
 *
 *   g, = torch.autograd.grad(d_hat, x_hat, torch.ones_like(d_hat), create_graph=True)
 *   penalty = ((g.norm(2, dim=1) - 1) ** 2).mean()
 *
 * The critic is a 2 -> 16 -> 16 -> 1 tanh MLP; the data are fixed: 32 real
 * points on the unit circle, 32 fake ones from a Gaussian blob, fixed eps.
 * Adam (lr 1e-3, betas (0.5, 0.999)) is written out in mlp_by_hand.h. The
 * weights, the blob and eps come from PCG32, which the PyTorch twin
 * (tools/ref/gradient_penalty_ref.py) replays, and `make test` checks that
 * both print the same numbers (tests/fixtures/examples/gradient_penalty.txt).
 *
 *   build/examples/gradient_penalty */
#include <math.h>
#include <stdio.h>

#include "nabla.h"

#include "example_args.h"
#include "mlp_by_hand.h"

#define PI 3.14159265358979323846
#define N 32         /* real points, fake points, interpolates */
#define STEPS 1000
#define PRINT_EVERY 100
#define LAMBDA 10.0

static const int sizes[] = {2, 16, 16, 1};
#define LAYERS 3

typedef struct batch {
    double real[N * 2], fake[N * 2], x_hat[N * 2];
} batch;

/* The real points: the unit circle at angles 2 pi k / N. The fake ones:
 * (0.5, 0.25) + 0.3 N(0, 1) per coordinate. eps ~ U(0, 1) per pair. */
static void make_batch(batch *b, nb_pcg32 *rng) {
    for (int k = 0; k < N; k++) {
        b->real[2 * k] = cos(2 * PI * k / N);
        b->real[2 * k + 1] = sin(2 * PI * k / N);
    }
    for (int k = 0; k < N; k++) {
        b->fake[2 * k] = 0.5 + 0.3 * nb_pcg32_normal(rng);
        b->fake[2 * k + 1] = 0.25 + 0.3 * nb_pcg32_normal(rng);
    }
    for (int k = 0; k < N; k++) {
        double eps = nb_pcg32_double(rng);
        for (int j = 0; j < 2; j++)
            b->x_hat[2 * k + j] = eps * b->real[2 * k + j] + (1 - eps) * b->fake[2 * k + j];
    }
}

typedef struct step_out {
    nb_tensor *loss, *penalty, *w_dist, *grad_norm; /* grad_norm: mean |grad D(x_hat)| */
} step_out;

/* The critic loss on the step context, recorded for nb_backward. */
static step_out critic_loss(nb_ctx *ctx, nb_tensor *const *params, nb_tensor *real,
                            nb_tensor *fake, const double *x_hat_values) {
    step_out o = {0};
    nb_tensor *d_real = nb_mean(ctx, mlp_forward(ctx, LAYERS, params, real));
    nb_tensor *d_fake = nb_mean(ctx, mlp_forward(ctx, LAYERS, params, fake));
    nb_tensor *x_hat = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(N, 2), x_hat_values));
    nb_tensor *d_hat = mlp_forward(ctx, LAYERS, params, x_hat), *g;
    nb_tensor *ones = nb_ones(ctx, NB_F64, NB_SHAPE(N, 1));
    if (nb_grad(ctx, 1, &d_hat, &ones, 1, &x_hat, &(nb_grad_opts){.create_graph = true}, &g))
        return o;
    nb_tensor *norm = nb_sqrt(ctx, nb_sum_dim(ctx, nb_mul(ctx, g, g), 1, false)); /* (N) */
    o.penalty = nb_mean(ctx, nb_pow(ctx, nb_add_scalar(ctx, norm, -1), 2));
    o.loss = nb_add(ctx, nb_sub(ctx, d_fake, d_real), nb_scale(ctx, o.penalty, LAMBDA));
    o.w_dist = nb_sub(ctx, d_real, d_fake);
    o.grad_norm = nb_mean(ctx, norm);
    return o;
}

int main(int argc, char **argv) {
    int rc = example_args(argc, argv,
                          "usage: gradient_penalty [--help]\n"
                          "Trains a small WGAN-GP critic in float64 for a fixed number of steps:\n"
                          "the gradient penalty is a gradient (nb_grad, create_graph) that\n"
                          "nb_backward differentiates again. Prints the loss every few steps.\n"
                          "Prints to stdout; writes no files.\n");
    if (rc >= 0) return rc;
    nb_ctx *pctx = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 2017, 7);
    nb_tensor *params[2 * LAYERS];
    int n_params = mlp_init(pctx, LAYERS, sizes, &rng, params);
    static batch b;
    make_batch(&b, &rng);
    nb_tensor *real = nb_from_doubles(pctx, NB_F64, NB_SHAPE(N, 2), b.real);
    nb_tensor *fake = nb_from_doubles(pctx, NB_F64, NB_SHAPE(N, 2), b.fake);
    adam opt = adam_new(n_params, params, 1e-3, 0.5, 0.999);
    if (nb_ctx_error(pctx) || !opt.m || !opt.v) {
        const char *e = nb_ctx_error(pctx);
        fprintf(stderr, "gradient_penalty: %s\n", e ? e : "out of memory");
        return 1;
    }
    printf("critic 2-16-16-1 tanh, %d real points on the unit circle, %d fake, lambda %g\n", N, N,
           LAMBDA);
    step_out o = {0};
    for (int step = 0; step <= STEPS; step++) {
        nb_ctx_reset(ctx);
        o = critic_loss(ctx, params, real, fake, b.x_hat);
        if (!o.loss) break;
        if (step % PRINT_EVERY == 0)
            printf("step %3d  loss %.12g  penalty %.12g  wasserstein %.12g\n", step,
                   nb_item(o.loss), nb_item(o.penalty), nb_item(o.w_dist));
        if (step == STEPS || nb_backward(ctx, o.loss, NULL)) break;
        adam_step(&opt, n_params, params);
    }
    const char *e = nb_ctx_error(ctx) ? nb_ctx_error(ctx) : nb_ctx_error(pctx);
    if (!e) printf("mean |grad D(x_hat)| after %d steps: %.12g\n", STEPS, nb_item(o.grad_norm));
    else fprintf(stderr, "gradient_penalty: %s\n", e);
    adam_free(&opt);
    nb_ctx_free(ctx);
    nb_ctx_free(pctx);
    return e ? 1 : 0;
}
