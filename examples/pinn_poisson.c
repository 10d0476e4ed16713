/* pinn_poisson - a physics-informed neural network (Raissi et al., 2019) for
 * the 1-D Poisson problem, in float64: the loss holds the network's second
 * derivative with respect to its input, and training differentiates it once
 * more with respect to the weights (third order through tanh).
 *
 *   u''(x) = f(x) on [0, 1],  u(0) = u(1) = 0,  f(x) = -pi^2 sin(pi x)
 *
 * whose solution is sin(pi x). A tanh MLP u(x) (1 -> 16 -> 16 -> 1) is fitted
 * at 32 collocation points x_i = (i + 1) / 33 by
 *
 *   loss = mean((u''(x_i) - f(x_i))^2) + mean(u(0)^2, u(1)^2)
 *
 * with u' and u'' from two nb_grad calls with create_graph (grad_outputs of
 * ones: each u(x_i) depends on its own x_i only), then nb_backward of the
 * loss into the weights, and Adam (lr 3e-3) written out (mlp_by_hand.h). In PyTorch:
 *
 *   du,  = torch.autograd.grad(u, x, torch.ones_like(u), create_graph=True)
 *   d2u, = torch.autograd.grad(du, x, torch.ones_like(du), create_graph=True)
 *
 * It prints the loss every few hundred steps, then the largest error against
 * sin(pi x) on 101 points. The weights come from PCG32, which the PyTorch twin
 * (tools/ref/pinn_poisson_ref.py) replays, and `make test` checks that both
 * print the same numbers (tests/fixtures/examples/pinn_poisson.txt).
 *
 *   build/examples/pinn_poisson */
#include <math.h>
#include <stdio.h>

#include "nabla.h"

#include "example_args.h"
#include "mlp_by_hand.h"

#define PI 3.14159265358979323846
#define N 32        /* collocation points */
#define STEPS 3000
#define PRINT_EVERY 250
#define LR 3e-3
#define GRID 101    /* the error is measured at x = i / 100 */

static const int sizes[] = {1, 16, 16, 1};
#define LAYERS 3
#define NP (2 * LAYERS)

typedef struct pinn_terms {
    nb_tensor *loss, *pde, *bc;
} pinn_terms;

/* The loss on the step context, recorded for nb_backward. xc and f: the
 * collocation points and f there. */
static pinn_terms pinn_loss(nb_ctx *ctx, nb_tensor *const *params, const double *xc,
                            const double *f) {
    pinn_terms o = {0};
    nb_grad_opts graph = {.create_graph = true};
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(N, 1), xc));
    nb_tensor *u = mlp_forward(ctx, LAYERS, params, x), *du, *d2u;
    nb_tensor *ones = nb_ones(ctx, NB_F64, NB_SHAPE(N, 1));
    if (nb_grad(ctx, 1, &u, &ones, 1, &x, &graph, &du)) return o;    /* u'(x_i) */
    if (nb_grad(ctx, 1, &du, &ones, 1, &x, &graph, &d2u)) return o;  /* u''(x_i) */
    o.pde = nb_mse_loss(ctx, d2u, nb_from_doubles(ctx, NB_F64, NB_SHAPE(N, 1), f));
    nb_tensor *ends = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 1), (double[]){0.0, 1.0});
    o.bc = nb_mean(ctx, nb_pow(ctx, mlp_forward(ctx, LAYERS, params, ends), 2));
    o.loss = nb_add(ctx, o.pde, o.bc);
    return o;
}

/* max |u(x) - sin(pi x)| over the grid, without recording. */
static double max_error(nb_ctx *ctx, nb_tensor *const *params) {
    double xs[GRID], worst = 0;
    for (int i = 0; i < GRID; i++) xs[i] = i / 100.0;
    nb_ctx_reset(ctx);
    bool was = nb_set_grad_enabled(ctx, false);
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(GRID, 1), xs);
    nb_tensor *u = mlp_forward(ctx, LAYERS, params, x);
    nb_set_grad_enabled(ctx, was);
    for (int i = 0; u && i < GRID; i++) worst = fmax(worst, fabs(nb_get(u, i) - sin(PI * xs[i])));
    return u ? worst : NAN;
}

int main(int argc, char **argv) {
    int rc = example_args(argc, argv,
                          "usage: pinn_poisson [--help]\n"
                          "Fits a tanh MLP u(x) to u'' = -pi^2 sin(pi x), u(0) = u(1) = 0, in\n"
                          "float64: u'' comes from two nb_grad calls (create_graph) and the\n"
                          "loss's backward differentiates it again. Prints the loss every few\n"
                          "hundred steps and the final error against sin(pi x).\n"
                          "Prints to stdout; writes no files.\n");
    if (rc >= 0) return rc;
    nb_ctx *pctx = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 2019, 5);
    nb_tensor *params[NP];
    mlp_init(pctx, LAYERS, sizes, &rng, params);
    double xc[N], f[N];
    for (int i = 0; i < N; i++) {
        xc[i] = (i + 1) / (N + 1.0);
        f[i] = -(PI * PI) * sin(PI * xc[i]);
    }
    adam opt = adam_new(NP, params, LR, 0.9, 0.999);
    if (nb_ctx_error(pctx) || !opt.m || !opt.v) {
        const char *e = nb_ctx_error(pctx);
        fprintf(stderr, "pinn_poisson: %s\n", e ? e : "out of memory");
        return 1;
    }
    printf("PINN for u'' = -pi^2 sin(pi x), u(0) = u(1) = 0: tanh MLP 1-16-16-1, %d points\n", N);
    for (int step = 0; step <= STEPS; step++) {
        nb_ctx_reset(ctx);
        pinn_terms o = pinn_loss(ctx, params, xc, f);
        if (!o.loss) break;
        if (step % PRINT_EVERY == 0)
            printf("step %4d  loss %.12g  pde %.12g  boundary %.12g\n", step, nb_item(o.loss),
                   nb_item(o.pde), nb_item(o.bc));
        if (step == STEPS || nb_backward(ctx, o.loss, NULL)) break;
        adam_step(&opt, NP, params);
    }
    rc = nb_ctx_error(ctx) ? 1 : 0;
    if (rc) fprintf(stderr, "pinn_poisson: %s\n", nb_ctx_error(ctx));
    else
        printf("max |u(x) - sin(pi x)| on %d points in [0, 1]: %.12g\n", GRID,
               max_error(ctx, params));
    adam_free(&opt);
    nb_ctx_free(ctx);
    nb_ctx_free(pctx);
    return rc;
}
