/* gradcheck_module - PyTorch's gradcheck(layer, params + inputs) in nabla: a
 * float32 layer of your own (Linear, then a custom op written for f32 and
 * f64), checked with respect to its parameters and its input in float64,
 * without touching the module. Then the same layer with a planted wrong
 * backward, which the check names.
 *
 *   build/examples/gradcheck_module
 *
 * Exits with status 1 if the right layer fails or the wrong one passes. */
#include <math.h>
#include <stdio.h>

#include "nabla.h"

#include "example_args.h"

/* A custom op, softsign(x) = x / (1 + |x|), d/dx = 1 / (1 + |x|)^2. It must
 * implement f64 as well as f32: gradcheck runs everything in f64. */
static bool planted_bug; /* a wrong rule, 1 / (1 + |x|), for the demonstration */

static void softsign_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = nb_node_input(n, 0), *y = nb_node_output(n);
    void *gx = nb_grad_buffer(ctx, x);
    for (size_t i = 0; gx && i < x->numel; i++) {
        double a = 1.0 + fabs(nb_get(x, i)), dy = nb_grad_get(y, i);
        double d = dy / (planted_bug ? a : a * a);
        if (x->dtype == NB_F64) ((double *)gx)[i] += d;
        else ((float *)gx)[i] += (float)d;
    }
}

static nb_tensor *softsign(nb_ctx *ctx, nb_tensor *x) {
    nb_tensor *y = x ? nb_empty(ctx, x->dtype, x->ndim, x->shape) : NULL; /* x's dtype */
    for (size_t i = 0; y && i < y->numel; i++) nb_set(y, i, nb_get(x, i) / (1 + fabs(nb_get(x, i))));
    if (y) nb_record(ctx, "softsign", y, 1, &x, softsign_backward, NULL);
    return y;
}

/* The layer: softsign(Linear(x)), (B, 4) -> (B, 3). */
typedef struct layer {
    nb_nn_linear fc;
    nb_tensor_list params; /* fc's parameters, under state_dict names */
} layer;

static nb_tensor *layer_forward(nb_ctx *ctx, layer *m, nb_tensor *x) {
    NB_HERE(ctx);
    return softsign(ctx, nb_nn_linear_forward(ctx, &m->fc, x));
}

/* What gradcheck differentiates: in[0] is x; the layer reads its own
 * parameters, which the check has made float64 for its duration. */
static nb_tensor *f(nb_ctx *ctx, nb_tensor *const *in, void *m) {
    return layer_forward(ctx, m, in[0]);
}

int main(int argc, char **argv) {
    int rc = example_args(argc, argv,
                          "usage: gradcheck_module [--help]\n"
                          "Gradient-checks a float32 layer (Linear + a custom op) with respect to\n"
                          "its parameters and input, then names a planted wrong backward.\n"
                          "Prints to stdout; writes no files.\n");
    if (rc >= 0) return rc;
    nb_ctx *pctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, 54);
    layer m = {0};
    nb_nn_linear_init(pctx, &m.fc, 4, 3, true, NB_F32, &rng);
    for (int k = 0; k < m.fc.params.n; k++)
        nb_list_add(&m.params, m.fc.params.names[k], m.fc.params.t[k]);
    nb_tensor *x = nb_requires_grad(nb_normal(pctx, NB_F32, NB_SHAPE(5, 4), 0, 1, &rng));
    if (nb_ctx_error(pctx)) return puts(nb_ctx_error(pctx)), 1;

    nb_gradcheck_result r;
    nb_status ok = nb_gradcheck_params(pctx, f, &m, &m.params, 1, &x, NULL, &r);
    printf("right backward: %s\n", ok == NB_OK ? "passed" : r.message);

    planted_bug = true;
    nb_status bad = nb_gradcheck_params(pctx, f, &m, &m.params, 1, &x, NULL, &r);
    printf("wrong backward: blamed '%s', created at line %d, its input %d\n", r.blame_op,
           r.blame_line, r.blame_input);
    printf("the module is still f32: weight %s, bias %s\n", nb_dtype_name(m.fc.weight->dtype),
           nb_dtype_name(m.fc.bias->dtype));
    nb_ctx_free(pctx);
    return ok == NB_OK && bad == NB_ERR_VALUE ? 0 : 1;
}
