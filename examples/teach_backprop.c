/* teach_backprop - every step of reverse-mode autodiff on one small
 * expression, the way a lecture goes through it:
 *
 *   a = x @ W        (2, 3) @ (3, 2)
 *   h = tanh(a)
 *   p = softmax(h)   over each row
 *   L = mse_loss(p, target)
 *
 * It prints the tape (the forward pass, one op a line), then walks backward
 * by hand-readable steps: for each op, newest first, the gradient that
 * arrived at its output and the gradients it sent to its inputs. With
 * --dot FILE it also writes the graph as Graphviz (`dot -Tsvg` draws it;
 * docs/tape.svg is its picture); it writes no file it is not told to.
 *
 *   build/examples/teach_backprop [--dot FILE] */
#include <stdio.h>
#include <string.h>

#include "nabla.h"

static const char usage[] =
    "usage: teach_backprop [--dot FILE]\n"
    "Walks one backward pass of mse_loss(softmax(tanh(x @ W)), target) op by op.\n"
    "  --dot FILE  also write the tape as a Graphviz graph to FILE\n"
    "  --help      this text\n";

int main(int argc, char **argv) {
    const char *dot_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--dot") && i + 1 < argc) {
            dot_path = argv[++i];
        } else if (!strncmp(argv[i], "--dot=", 6)) {
            dot_path = argv[i] + 6;
        } else {
            fprintf(stderr, "teach_backprop: unexpected argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    nb_ctx *ctx = nb_ctx_new(0);
    if (!ctx) return 1;
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 3), (double[]){0.5, -1.0, 2.0, 1.5, 0.2, -0.3});
    nb_tensor *W = nb_requires_grad(
        nb_from_doubles(ctx, NB_F64, NB_SHAPE(3, 2), (double[]){0.1, -0.2, 0.4, 0.3, -0.5, 0.6}));
    nb_tensor *target = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2), (double[]){1, 0, 0, 1});
    x->name = "x", W->name = "W", target->name = "target";

    /* NB_HERE stamps the next ops with this file and line, for the tape. */
    NB_HERE(ctx); nb_tensor *a = nb_matmul(ctx, x, W);
    NB_HERE(ctx); nb_tensor *h = nb_tanh(ctx, a);
    NB_HERE(ctx); nb_tensor *p = nb_softmax(ctx, h);
    NB_HERE(ctx); nb_tensor *L = nb_mse_loss(ctx, p, target);
    if (!L) {
        fprintf(stderr, "error: %s\n", nb_ctx_error(ctx));
        nb_ctx_free(ctx);
        return 1;
    }
    a->name = "a", h->name = "h", p->name = "p", L->name = "L";

    printf("forward: the tape records each op as it runs\n");
    nb_tape_print(ctx, stdout);
    printf("\nL = ");
    nb_print(L);

    printf("\nbackward: dL/dL = 1, then each op's local rule, newest first\n");
    nb_backward(ctx, L, NULL);
    nb_tensor *steps[4] = {L, p, h, a};
    const char *rule[4] = {
        "mse_loss:  dL/dp = 2 (p - target) / numel",
        "softmax:   dL/dh = p * (dL/dp - sum(dL/dp * p))   (row by row)",
        "tanh:      dL/da = dL/dh * (1 - h^2)",
        "matmul:    dL/dW = x^T @ dL/da   (x needs no gradient)",
    };
    for (int k = 0; k < 4; k++) {
        nb_tensor *out = steps[k], *in = k < 3 ? steps[k + 1] : W;
        printf("\n#%d %s\ngrad arriving at %s:\n", 3 - k, rule[k], out->name);
        nb_print_grad(out);
        printf("grad sent to %s:\n", in->name);
        nb_print_grad(in);
    }

    FILE *f = dot_path ? fopen(dot_path, "w") : NULL;
    if (!dot_path)
        printf("\n(--dot FILE writes this tape as a Graphviz graph)\n");
    else if (f && nb_tape_dot(ctx, L, f) == NB_OK && fclose(f) == 0)
        printf("\nwrote %s (render: dot -Tsvg %s -o tape.svg)\n", dot_path, dot_path);
    else
        fprintf(stderr, "could not write %s\n", dot_path);
    nb_ctx_free(ctx);
    return 0;
}
