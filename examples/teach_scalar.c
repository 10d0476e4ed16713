/* teach_scalar - micrograd's classic neuron, one number at a time:
 *
 *   o = tanh(x1·w1 + x2·w2 + b),  x1 = 2, x2 = 0, w1 = -3, w2 = 1,
 *                                 b = 6.8813735870195432 (so o = 1/√2)
 *
 * built from 0-d tensors. It prints each forward value, then each gradient
 * with the chain-rule step that produced it, then every value and gradient
 * in full precision (tests/fixtures/teach_scalar.txt holds PyTorch's, made
 * by tools/ref/gen_teach_fixtures.py). --html=PAGE writes the tape explorer, in
 * which the same steps can be clicked through; nothing is written by
 * default. */
#include <stdio.h>
#include <string.h>

#include "nabla.h"

#include "teach_common.h"

static const char *const usage =
    "usage: teach_scalar [--html=PAGE] [--dot=GRAPH] [--json=TAPE] [--force]\n"
    "Forward and backward through o = tanh(x1*w1 + x2*w2 + b), step by step.\n"
    "Writes nothing unless asked:\n"
    "  --html=PAGE   the tape explorer: one self-contained HTML page\n"
    "  --dot=GRAPH   the tape as Graphviz (dot -Tsvg GRAPH -o tape.svg)\n"
    "  --json=TAPE   the tape's tensors and gradients as JSON\n"
    "  --force       replace those files if they exist\n";

static nb_tensor *leaf(nb_ctx *ctx, const char *name, double v) {
    nb_tensor *t = nb_requires_grad(nb_scalar(ctx, NB_F64, v));
    if (t) t->name = name;
    return t;
}

static nb_tensor *named(nb_tensor *t, const char *name) {
    if (t) t->name = name;
    return t;
}

static double v(const nb_tensor *t) { return nb_item(t); }
static double g(const nb_tensor *t) { return nb_grad_get(t, 0); }

int main(int argc, char **argv) {
    teach_outputs out = {0};
    int status = parse_args(argc, argv, "teach_scalar", usage, &out, NULL, NULL);
    if (status >= 0) return status;
    nb_ctx *ctx = nb_ctx_new(0);
    if (!ctx) return 1;
    nb_tensor *x1 = leaf(ctx, "x1", 2.0), *w1 = leaf(ctx, "w1", -3.0);
    nb_tensor *x2 = leaf(ctx, "x2", 0.0), *w2 = leaf(ctx, "w2", 1.0);
    nb_tensor *b = leaf(ctx, "b", 6.8813735870195432);
    NB_HERE(ctx); nb_tensor *x1w1 = named(nb_mul(ctx, x1, w1), "x1w1");
    NB_HERE(ctx); nb_tensor *x2w2 = named(nb_mul(ctx, x2, w2), "x2w2");
    NB_HERE(ctx); nb_tensor *x1w1x2w2 = named(nb_add(ctx, x1w1, x2w2), "x1w1x2w2");
    NB_HERE(ctx); nb_tensor *n = named(nb_add(ctx, x1w1x2w2, b), "n");
    NB_HERE(ctx); nb_tensor *o = named(nb_tanh(ctx, n), "o");
    if (!o || nb_backward(ctx, o, NULL)) {
        fprintf(stderr, "teach_scalar: %s\n", nb_ctx_error(ctx));
        nb_ctx_free(ctx);
        return 1;
    }

    printf("forward: each op computes its value from its inputs\n");
    printf("  x1w1     = x1 · w1        = %g · %g = %g\n", v(x1), v(w1), v(x1w1));
    printf("  x2w2     = x2 · w2        = %g · %g = %g\n", v(x2), v(w2), v(x2w2));
    printf("  x1w1x2w2 = x1w1 + x2w2    = %g + %g = %g\n", v(x1w1), v(x2w2), v(x1w1x2w2));
    printf("  n        = x1w1x2w2 + b   = %g + %.4f = %.4f\n", v(x1w1x2w2), v(b), v(n));
    printf("  o        = tanh(n)        = tanh(%.4f) = %.4f\n", v(n), v(o));

    printf("\nbackward: the chain rule, from o back to the leaves\n");
    printf("  o.grad        = do/do = %g\n", g(o));
    printf("  n.grad        = o.grad · (1 - o²)   = %g · (1 - %.4f²) = %.4f   (tanh)\n", g(o),
           v(o), g(n));
    printf("  x1w1x2w2.grad = n.grad              = %.4f   (add passes it on)\n", g(x1w1x2w2));
    printf("  b.grad        = n.grad              = %.4f\n", g(b));
    printf("  x1w1.grad     = x1w1x2w2.grad       = %.4f\n", g(x1w1));
    printf("  x2w2.grad     = x1w1x2w2.grad       = %.4f\n", g(x2w2));
    printf("  x1.grad       = w1 · x1w1.grad      = %g · %.4f = %.4f   (mul: the other factor)\n",
           v(w1), g(x1w1), g(x1));
    printf("  w1.grad       = x1 · x1w1.grad      = %g · %.4f = %.4f\n", v(x1), g(x1w1), g(w1));
    printf("  x2.grad       = w2 · x2w2.grad      = %g · %.4f = %.4f\n", v(w2), g(x2w2), g(x2));
    printf("  w2.grad       = x2 · x2w2.grad      = %g · %.4f = %.4f\n", v(x2), g(x2w2), g(w2));

    printf("\nevery value and gradient (PyTorch gives the same):\n");
    const nb_tensor *all[] = {x1, w1, x2, w2, b, x1w1, x2w2, x1w1x2w2, n, o};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        printf("  %-9s value %.17g  grad %.17g\n", all[i]->name, v(all[i]), g(all[i]));
    bool ok = write_outputs("teach_scalar", &out, ctx, o);
    nb_ctx_free(ctx);
    return ok ? 0 : 1;
}
