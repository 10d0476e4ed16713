/* mlp_by_hand.h - what the second-order examples (gradient_penalty.c and
 * the others that include this) share: a float64 tanh MLP kept as a plain
 * array of parameter tensors (w0, b0, w1, b1, ...), so that a forward pass
 * can run on other tensors in their place (MAML's adapted weights), and
 * Adam written out in a few lines (llm.c style). Their PyTorch twins do the
 * same with F.linear and torch.optim.Adam (tools/ref/example_common.py).
 * Everything is static; nothing here is part of the library. */
#ifndef NB_MLP_BY_HAND_H
#define NB_MLP_BY_HAND_H

#include <math.h>
#include <stdlib.h>

#include "nabla.h"

#define MLP_MAX_LAYERS 4
#define MLP_MAX_PARAMS (2 * MLP_MAX_LAYERS)

/* Layer l maps sizes[l] -> sizes[l + 1]; its weight is params[2l], shape
 * (out, in), and its bias params[2l + 1]. Both are drawn, weight then bias,
 * from U(-1/sqrt(in), 1/sqrt(in)) with nb_uniform (PyTorch's nn.Linear
 * bounds; the values come from PCG32, which the twins replay bit for bit).
 * Returns the number of parameter tensors, 2 * n_layers. */
static inline int mlp_init(nb_ctx *pctx, int n_layers, const int *sizes, nb_pcg32 *rng,
                           nb_tensor **params) {
    for (int l = 0; l < n_layers; l++) {
        double bound = 1.0 / sqrt((double)sizes[l]);
        params[2 * l] = nb_requires_grad(
            nb_uniform(pctx, NB_F64, NB_SHAPE(sizes[l + 1], sizes[l]), -bound, bound, rng));
        params[2 * l + 1] = nb_requires_grad(
            nb_uniform(pctx, NB_F64, NB_SHAPE(sizes[l + 1]), -bound, bound, rng));
    }
    return 2 * n_layers;
}

/* x (N, sizes[0]) -> (N, sizes[n_layers]): tanh after every layer but the
 * last. `params` may be any tensors of the parameters' shapes. */
static inline nb_tensor *mlp_forward(nb_ctx *ctx, int n_layers, nb_tensor *const *params,
                                     nb_tensor *x) {
    nb_tensor *h = x;
    for (int l = 0; l < n_layers; l++) {
        h = nb_linear(ctx, h, params[2 * l], params[2 * l + 1]);
        if (l + 1 < n_layers) h = nb_tanh(ctx, h);
    }
    return h;
}

/* Adam as torch.optim.Adam computes it (no weight decay, no amsgrad). */
typedef struct adam {
    double lr, beta1, beta2, eps;
    int t;                  /* steps taken */
    double *m, *v;          /* first and second moments, all parameters end to end */
} adam;

static inline adam adam_new(int n, nb_tensor *const *params, double lr, double beta1,
                            double beta2) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += params[i]->numel;
    adam a = {lr, beta1, beta2, 1e-8, 0, calloc(total, sizeof(double)),
              calloc(total, sizeof(double))};
    return a;
}

/* One step on every parameter from its .grad, which it then zeroes. */
static inline void adam_step(adam *a, int n, nb_tensor *const *params) {
    a->t++;
    double bc1 = 1 - pow(a->beta1, a->t), bc2 = 1 - pow(a->beta2, a->t);
    double step_size = a->lr / bc1, bc2_sqrt = sqrt(bc2);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        double *p = params[i]->data, *g = params[i]->grad;
        for (size_t j = 0; j < params[i]->numel; j++, k++) {
            a->m[k] = a->beta1 * a->m[k] + (1 - a->beta1) * g[j];
            a->v[k] = a->beta2 * a->v[k] + (1 - a->beta2) * g[j] * g[j];
            p[j] -= step_size * (a->m[k] / (sqrt(a->v[k]) / bc2_sqrt + a->eps));
        }
        nb_zero_grad(params[i]);
    }
}

static inline void adam_free(adam *a) {
    free(a->m);
    free(a->v);
}

#endif
