/* tools/wasm/train_step_ref.c - the native side of test-wasm's training
 * test: a float64 model of the seed's modules (MultiHeadAttention with the
 * composed ops, tanh, Linear) trained 3 steps with Adam, then 2 with SGD
 * with momentum, printing each loss and every parameter after, %.17g.
 * tools/wasm/test_wasm.js builds the same model with nabla.js (the same
 * generator seeds, so the same weights) and compares.
 *
 *   build/wasm/train_step_ref      (no arguments; `make test-wasm` builds it) */
#include <stdio.h>
#include <string.h>

#include "nabla.h"

#define B 2
#define T 6

static int fail(nb_ctx *c) {
    fprintf(stderr, "train_step_ref: %s\n", nb_ctx_error(c));
    return 1;
}

/* One step on step ctx: loss = cross_entropy(head(tanh(mha(x))), y). */
static nb_tensor *step_loss(nb_ctx *step, nb_nn_mha *mha, nb_nn_linear *head, nb_tensor *x,
                            nb_tensor *y) {
    nb_tensor *h = nb_tanh(step, nb_nn_mha_forward(step, mha, x));
    nb_tensor *logits = nb_nn_linear_forward(step, head, h); /* (B, T, 3) */
    return nb_cross_entropy(step, nb_reshape(step, logits, NB_SHAPE(B * T, 3)), y);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        bool help = !strcmp(argv[1], "--help");
        fputs("usage: train_step_ref (prints the float64 training run test-wasm compares)\n",
              help ? stdout : stderr);
        return help ? 0 : 2;
    }
    nb_ctx *params = nb_ctx_new(0), *data = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 1);
    nb_nn_mha mha;
    nb_nn_linear head;
    if (nb_nn_mha_init(params, &mha, 3, 4, T, 0.0, 2, false, NB_F64, &rng) ||
        nb_nn_linear_init(params, &head, 4, 3, true, NB_F64, &rng))
        return fail(params);
    mha.use_fused = false;
    nb_tensor_list all = {0};
    nb_params_add_prefixed(params, &all, "mha", &mha.params);
    nb_params_add_prefixed(params, &all, "head", &head.params);
    nb_pcg32 xr;
    nb_pcg32_seed(&xr, 5, 0);
    nb_tensor *x = nb_normal(data, NB_F64, NB_SHAPE(B, T, 3), 0, 1, &xr);
    int64_t ys[B * T];
    for (int i = 0; i < B * T; i++) ys[i] = (i * 7) % 3;
    nb_tensor *y = nb_from_data(data, NB_I64, NB_SHAPE(B * T), ys);
    nb_adam_opts ao = nb_adam_defaults(1e-2);
    nb_optim *adam = nb_adam_new(params, &all, ao);
    nb_sgd_opts so = nb_sgd_defaults(0.1);
    so.momentum = 0.9;
    nb_optim *sgd = nb_sgd_new(params, &all, so);
    if (!adam || !sgd || !x || !y) return fail(params);
    for (int s = 0; s < 5; s++) {
        nb_optim *opt = s < 3 ? adam : sgd;
        nb_ctx_reset(step);
        nb_optim_zero_grad(opt);
        nb_tensor *loss = step_loss(step, &mha, &head, x, y);
        if (!loss || nb_backward(step, loss, NULL)) return fail(step);
        printf("loss %d %.17g\n", s, nb_item(loss));
        if (nb_optim_step(opt)) return fail(params);
    }
    for (int i = 0; i < all.n; i++) {
        nb_tensor *t = nb_list_tensor(&all, i);
        printf("param %s", nb_list_name(&all, i));
        for (size_t k = 0; k < t->numel; k++) printf(" %.17g", nb_get(t, k));
        printf("\n");
    }
    nb_optim_free(adam);
    nb_optim_free(sgd);
    nb_ctx_free(step);
    nb_ctx_free(data);
    nb_ctx_free(params);
    return 0;
}
