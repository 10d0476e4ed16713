/* maml_sine - MAML (Finn et al., 2017) on sine-wave regression, in float64:
 * the meta-gradient goes through an inner gradient step, so it holds
 * second derivatives of the network.
 *
 * A task is y = A sin(x - phase), A in [0.1, 5], phase in [0, pi], x in
 * [-5, 5]; the learner sees K = 10 points of it (the support set). MAML
 * learns initial weights theta from which one SGD step on the support set,
 *
 *   theta' = theta - alpha * grad_theta L_support(theta),
 *
 * fits the task well, judged on 10 other points (the query set). The inner
 * gradient is taken with nb_grad and create_graph, so theta' is a recorded
 * function of theta, and nb_backward of the query loss at theta' reaches
 * theta through the inner step (second order). In PyTorch:
 *
 *   g = torch.autograd.grad(loss_support, params, create_graph=True)
 *   fast = [p - alpha * gi for p, gi in zip(params, g)]
 *   loss_query = F.mse_loss(forward(fast, xq), yq);  meta_loss.backward()
 *
 * The network is a 1 -> 40 -> 40 -> 1 tanh MLP kept as a list of tensors,
 * so the forward pass runs on theta' as well as theta (mlp_by_hand.h, with
 * Adam written out for the meta-update). Tasks and weights come from PCG32,
 * which the PyTorch twin (tools/ref/maml_sine_ref.py) replays, and
 * `make test` checks that both print the same numbers
 * (tests/fixtures/examples/maml_sine.txt). After meta-training it adapts to
 * held-out tasks with one step and prints the MSE before and after, beside
 * the same for the untrained network.
 *
 *   build/examples/maml_sine */
#include <math.h>
#include <stdio.h>

#include "nabla.h"

#include "example_args.h"
#include "mlp_by_hand.h"

#define PI 3.14159265358979323846
#define K 10           /* support points per task */
#define Q 10           /* query points per task */
#define TASKS 5        /* tasks per meta-batch */
#define ITERS 3000     /* meta-iterations */
#define PRINT_EVERY 250
#define ALPHA 0.01     /* the inner SGD step */
#define META_LR 1e-3   /* Adam's, for the meta-update */
#define HELD_OUT 5
#define GRID 50        /* held-out tasks are judged on 50 points across [-5, 5] */

static const int sizes[] = {1, 40, 40, 1};
#define LAYERS 3
#define NP (2 * LAYERS)

typedef struct task {
    double amp, phase, xs[K], ys[K], xq[GRID], yq[GRID];
} task;

static double uniform(nb_pcg32 *rng, double lo, double hi) {
    return lo + (hi - lo) * nb_pcg32_double(rng);
}

/* Amplitude, phase, then the support xs and n_query query xs, all from rng
 * (n_query 0: the query set is the grid). */
static void sample_task(nb_pcg32 *rng, int n_query, task *t) {
    t->amp = uniform(rng, 0.1, 5.0);
    t->phase = uniform(rng, 0.0, PI);
    for (int i = 0; i < K; i++) t->xs[i] = uniform(rng, -5.0, 5.0);
    int nq = n_query ? n_query : GRID;
    for (int i = 0; i < nq; i++)
        t->xq[i] = n_query ? uniform(rng, -5.0, 5.0) : -5.0 + 10.0 * i / (GRID - 1);
    for (int i = 0; i < K; i++) t->ys[i] = t->amp * sin(t->xs[i] - t->phase);
    for (int i = 0; i < nq; i++) t->yq[i] = t->amp * sin(t->xq[i] - t->phase);
}

static nb_tensor *column(nb_ctx *ctx, int n, const double *v) {
    return nb_from_doubles(ctx, NB_F64, NB_SHAPE(n, 1), v);
}

/* One inner SGD step on the support set: fast = params - alpha * grad.
 * With create_graph the gradient is itself recorded, so a backward from the
 * query loss reaches params through it (meta-training); without, it is a
 * plain tensor (evaluation). */
static void adapt(nb_ctx *ctx, nb_tensor *const *params, const task *t, bool create_graph,
                  nb_tensor **fast) {
    nb_tensor *pred = mlp_forward(ctx, LAYERS, params, column(ctx, K, t->xs));
    nb_tensor *loss = nb_mse_loss(ctx, pred, column(ctx, K, t->ys)), *g[NP];
    for (int i = 0; i < NP; i++) fast[i] = NULL;
    if (nb_grad(ctx, 1, &loss, NULL, NP, params, &(nb_grad_opts){.create_graph = create_graph}, g))
        return;
    for (int i = 0; i < NP; i++) fast[i] = nb_sub(ctx, params[i], nb_scale(ctx, g[i], ALPHA));
}

static nb_tensor *query_loss(nb_ctx *ctx, nb_tensor *const *params, int n, const task *t) {
    nb_tensor *pred = mlp_forward(ctx, LAYERS, params, column(ctx, n, t->xq));
    return nb_mse_loss(ctx, pred, column(ctx, n, t->yq));
}

/* One meta-iteration: the mean query loss after adaptation over TASKS new
 * tasks, backward into params' .grad, an Adam step. Returns the loss. */
static double meta_step(nb_ctx *ctx, nb_tensor *const *params, nb_pcg32 *rng, adam *opt) {
    nb_ctx_reset(ctx);
    nb_tensor *total = NULL, *fast[NP];
    for (int k = 0; k < TASKS; k++) {
        task t;
        sample_task(rng, Q, &t);
        adapt(ctx, params, &t, true, fast);
        nb_tensor *l = query_loss(ctx, fast, Q, &t);
        total = total ? nb_add(ctx, total, l) : l;
    }
    nb_tensor *meta_loss = nb_scale(ctx, total, 1.0 / TASKS);
    if (nb_backward(ctx, meta_loss, NULL)) return NAN;
    adam_step(opt, NP, params);
    return nb_item(meta_loss);
}

/* The grid MSE of a task before and after one (plain) inner step. */
static void evaluate(nb_ctx *ctx, nb_tensor *const *params, const task *t, double *before,
                     double *after) {
    nb_ctx_reset(ctx);
    nb_tensor *fast[NP];
    adapt(ctx, params, t, false, fast);
    *before = nb_item(query_loss(ctx, params, GRID, t));
    *after = nb_item(query_loss(ctx, fast, GRID, t));
}

static int report(nb_ctx *ctx, nb_tensor *const *params, nb_tensor *const *untrained) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 3); /* held-out tasks: a stream of their own */
    double sum[4] = {0};
    for (int k = 0; k < HELD_OUT; k++) {
        task t;
        sample_task(&rng, 0, &t);
        double b, a, ub, ua;
        evaluate(ctx, params, &t, &b, &a);
        evaluate(ctx, untrained, &t, &ub, &ua);
        printf("task %d  A %.4f  phase %.4f  mse before %.12g  after one step %.12g\n", k, t.amp,
               t.phase, b, a);
        sum[0] += b, sum[1] += a, sum[2] += ub, sum[3] += ua;
    }
    printf("mean mse: MAML before %.12g  after one step %.12g\n", sum[0] / HELD_OUT,
           sum[1] / HELD_OUT);
    printf("          untrained before %.12g  after one step %.12g\n", sum[2] / HELD_OUT,
           sum[3] / HELD_OUT);
    return nb_ctx_error(ctx) ? 1 : 0;
}

int main(int argc, char **argv) {
    int rc = example_args(argc, argv,
                          "usage: maml_sine [--help]\n"
                          "Meta-trains a 1-40-40-1 tanh MLP with MAML on sine waves in float64:\n"
                          "the meta-gradient goes through an inner step taken with nb_grad\n"
                          "(create_graph). Prints the meta-loss every few iterations, then the\n"
                          "held-out MSE before and after one adaptation step.\n"
                          "Prints to stdout; writes no files.\n");
    if (rc >= 0) return rc;
    nb_ctx *pctx = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_tensor *params[NP], *untrained[NP];
    nb_pcg32_seed(&rng, 2017, 3);
    mlp_init(pctx, LAYERS, sizes, &rng, untrained);
    nb_pcg32_seed(&rng, 2017, 3); /* the same weights again, to meta-train */
    mlp_init(pctx, LAYERS, sizes, &rng, params);
    adam opt = adam_new(NP, params, META_LR, 0.9, 0.999);
    if (nb_ctx_error(pctx) || !opt.m || !opt.v) {
        const char *e = nb_ctx_error(pctx);
        fprintf(stderr, "maml_sine: %s\n", e ? e : "out of memory");
        return 1;
    }
    printf("MAML, sine tasks: K %d, alpha %g, %d tasks a meta-batch, Adam lr %g\n", K, ALPHA,
           TASKS, META_LR);
    for (int it = 1; it <= ITERS; it++) {
        double l = meta_step(ctx, params, &rng, &opt);
        if (it % PRINT_EVERY == 0 || it == 1) printf("iter %4d  meta-loss %.12g\n", it, l);
        if (nb_ctx_error(ctx)) break;
    }
    rc = nb_ctx_error(ctx) ? 1 : report(ctx, params, untrained);
    if (rc) fprintf(stderr, "maml_sine: %s\n", nb_ctx_error(ctx));
    adam_free(&opt);
    nb_ctx_free(ctx);
    nb_ctx_free(pctx);
    return rc;
}
