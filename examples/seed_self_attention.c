/* seed_self_attention - attention with no trainable weights, step by step,
 * as the seed notebooks build it on "Your journey starts with one step".
 *
 *   build/examples/seed_self_attention
 *
 * Every tensor printed here is printed by the notebook too, digit for digit
 * (the row sums are extra). */
#include <math.h>
#include <stdio.h>

#include "nabla.h"

#include "example_args.h"

#include "seed_common.h"

int main(int argc, char **argv) {
    int rc = example_args(argc, argv,
                          "usage: seed_self_attention [--help]\n"
                          "Attention with no trainable weights, step by step.\n"
                          "Prints to stdout; writes no files.\n");
    if (rc >= 0) return rc;
    nb_ctx *ctx = nb_ctx_new(0);
    if (!ctx) return 1;
    nb_tensor *inputs = nb_from_doubles(ctx, NB_F32, NB_SHAPE(6, 3), inputs_data);

    /* Step 1: the scores of query x^2 against every input are dot products. */
    nb_tensor *query = nb_from_doubles(ctx, NB_F32, NB_SHAPE(1, 3), inputs_data + 3); /* x^2 */
    nb_tensor *scores_2 = nb_reshape(ctx, nb_matmul(ctx, query, nb_transpose(ctx, inputs, 0, 1)),
                                     NB_SHAPE(6));
    printf("attention scores for x^2 (query @ inputs.T):\n");
    nb_print(scores_2);

    /* Step 2: normalise; first by the sum, then (better) by softmax. */
    nb_tensor *by_sum = nb_div(ctx, scores_2, nb_sum(ctx, scores_2));
    printf("\nweights normalised by their sum:\n");
    nb_print(by_sum);
    nb_tensor *weights_2 = nb_softmax(ctx, scores_2);
    printf("\nsoftmax weights:\n");
    nb_print(weights_2);
    printf("sum: ");
    nb_print(nb_sum(ctx, weights_2));

    /* Step 3: the context vector is the weighted sum of the inputs. */
    nb_tensor *context_2 = nb_reshape(
        ctx, nb_matmul(ctx, nb_reshape(ctx, weights_2, NB_SHAPE(1, 6)), inputs), NB_SHAPE(3));
    printf("\ncontext vector z^2:\n");
    nb_print(context_2);

    /* All queries at once: scores = inputs @ inputs.T, row-wise softmax. */
    nb_tensor *scores = nb_matmul(ctx, inputs, nb_transpose(ctx, inputs, 0, 1));
    printf("\nall attention scores (inputs @ inputs.T):\n");
    nb_print(scores);
    nb_tensor *weights = nb_softmax(ctx, scores);
    printf("\nall attention weights (softmax over the last dim):\n");
    nb_print(weights);
    printf("row sums: ");
    nb_print(nb_sum_dim(ctx, weights, -1, false));
    nb_tensor *context = nb_matmul(ctx, weights, inputs);
    printf("\nall context vectors (weights @ inputs):\n");
    nb_print(context);

    int status = 0;
    if (nb_ctx_error(ctx)) {
        fprintf(stderr, "error: %s\n", nb_ctx_error(ctx));
        status = 1;
    }
    nb_ctx_free(ctx);
    return status;
}
