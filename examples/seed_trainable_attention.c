/* seed_trainable_attention - scaled dot-product attention with trainable
 * weights, step by step, as seeds 000 and 004 build it on "Your journey
 * starts with one step"; then the same with the SelfAttention_v1 and
 * SelfAttention_v2 modules.
 *
 *   build/examples/seed_trainable_attention
 *
 * The weights are the ones torch.manual_seed(123) gives (generated into
 * tests/attention_refs.h by tools/ref/gen_attention_refs.py). The notebooks print
 * them rounded to 4 decimals; the products need the full float32 values:
 * with the rounded ones, query_2 would print 0.4307 instead of 0.4306. */
#include <math.h>
#include <stdio.h>

#include "nabla.h"

#include "example_args.h"

#include "../tests/attention_refs.h"
#include "seed_common.h"

/* Row i of a (T, C) matrix as a vector (C): PyTorch's m[i]. */
static nb_tensor *row(nb_ctx *ctx, nb_tensor *m, int i) {
    if (!m) return NULL;
    int64_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    nb_tensor *rows[8] = {NULL};
    if (m->shape[0] > 8 || nb_split(ctx, m, 0, (int)m->shape[0], ones, rows)) return NULL;
    return nb_reshape(ctx, rows[i], NB_SHAPE(m->shape[1]));
}

/* v (n) @ m (n, k) -> (k): nb_matmul takes matrices, so v goes in as a row. */
static nb_tensor *vecmat(nb_ctx *ctx, nb_tensor *v, nb_tensor *m) {
    if (!v || !m) return NULL;
    nb_tensor *r = nb_matmul(ctx, nb_reshape(ctx, v, NB_SHAPE(1, v->shape[0])), m);
    return nb_reshape(ctx, r, NB_SHAPE(m->shape[1]));
}

/* The notebooks' steps in their order: projections, scores, scaled
 * softmax, context vectors, then the SelfAttention_v1 and _v2 modules.
 * Long: a walkthrough read top to bottom beside the notebooks, each step
 * printed as it is built from the ones before. */
int main(int argc, char **argv) {
    int rc = example_args(argc, argv,
                          "usage: seed_trainable_attention [--help]\n"
                          "Scaled dot-product attention with trainable weights, step by step.\n"
                          "Prints to stdout; writes no files.\n");
    if (rc >= 0) return rc;
    nb_ctx *ctx = nb_ctx_new(0);    /* every tensor of the walkthrough */
    nb_ctx *params = nb_ctx_new(0); /* the modules' parameters */
    if (!ctx || !params) return 1;
    nb_tensor *inputs = nb_from_doubles(ctx, NB_F32, NB_SHAPE(6, 3), inputs_data);
    nb_tensor *x_2 = row(ctx, inputs, 1); /* journey */

    /* Three (d_in, d_out) = (3, 2) matrices project each input into a query,
     * a key and a value. torch.rand drew them; training would update them. */
    nb_tensor *W_query = nb_from_doubles(ctx, NB_F32, NB_SHAPE(3, 2), ref_sa1_p0);
    nb_tensor *W_key = nb_from_doubles(ctx, NB_F32, NB_SHAPE(3, 2), ref_sa1_p1);
    nb_tensor *W_value = nb_from_doubles(ctx, NB_F32, NB_SHAPE(3, 2), ref_sa1_p2);
    printf("W_query:\n"), nb_print(W_query);
    printf("W_key:\n"), nb_print(W_key);
    printf("W_value:\n"), nb_print(W_value);

    /* Step 1: query, key and value of x^2. */
    nb_tensor *query_2 = vecmat(ctx, x_2, W_query);
    nb_tensor *key_2 = vecmat(ctx, x_2, W_key);
    nb_tensor *value_2 = vecmat(ctx, x_2, W_value);
    printf("\nquery_2 = x_2 @ W_query, key_2, value_2:\n");
    nb_print(query_2), nb_print(key_2), nb_print(value_2);

    /* ... and of every input at once: one matrix product each. */
    nb_tensor *queries = nb_matmul(ctx, inputs, W_query);
    nb_tensor *keys = nb_matmul(ctx, inputs, W_key);
    nb_tensor *values = nb_matmul(ctx, inputs, W_value);
    printf("\n");
    print_shape("keys", keys), print_shape("values", values), print_shape("queries", queries);
    printf("queries:\n"), nb_print(queries);
    printf("keys:\n"), nb_print(keys);
    printf("values:\n"), nb_print(values);

    /* Step 2: attention scores are dot products of a query with the keys. */
    nb_tensor *attn_score_22 = nb_sum(ctx, nb_mul(ctx, query_2, row(ctx, keys, 1)));
    printf("\nattn_score_22 = query_2 . keys[1]:\n"), nb_print(attn_score_22);
    nb_tensor *keys_T = nb_transpose(ctx, keys, 0, 1);
    nb_tensor *attn_scores_2 = vecmat(ctx, query_2, keys_T);
    printf("attn_scores_2 = query_2 @ keys.T:\n"), nb_print(attn_scores_2);
    nb_tensor *attn_scores = nb_matmul(ctx, queries, keys_T);
    print_shape("attn_scores", attn_scores);
    printf("attn_scores = queries @ keys.T:\n"), nb_print(attn_scores);

    /* Step 3: scale by 1/sqrt(d_k), so the scores' variance stays near 1
     * however wide the keys are, then softmax each row. */
    double d_k = keys ? (double)keys->shape[1] : 1.0;
    nb_tensor *attn_weights_2 = nb_softmax(ctx, nb_scale(ctx, attn_scores_2, 1.0 / sqrt(d_k)));
    printf("\nd_k = %g\nattn_weights_2 = softmax(attn_scores_2 / sqrt(d_k)):\n", d_k);
    nb_print(attn_weights_2);
    nb_tensor *attn_weights = nb_softmax(ctx, nb_scale(ctx, attn_scores, 1.0 / sqrt(d_k)));
    printf("attn_weights:\n"), nb_print(attn_weights);

    /* Step 4: a context vector is the weighted sum of the values. */
    nb_tensor *context_vec_2 = vecmat(ctx, attn_weights_2, values);
    printf("\ncontext_vec_2 = attn_weights_2 @ values:\n"), nb_print(context_vec_2);
    nb_tensor *context_vec = nb_matmul(ctx, attn_weights, values);
    printf("context_vec = attn_weights @ values:\n"), nb_print(context_vec);

    /* Seed 004 takes queries[2] (x^3, "starts") as its example query. */
    nb_tensor *q3_scores = vecmat(ctx, row(ctx, queries, 2), keys_T);
    nb_tensor *q3_weights = nb_softmax(ctx, nb_scale(ctx, q3_scores, 1.0 / sqrt(d_k)));
    printf("\nseed 004's query, queries[2]:\n"), nb_print(row(ctx, queries, 2));
    printf("its scores, weights and context vector:\n");
    nb_print(q3_scores), nb_print(q3_weights), nb_print(vecmat(ctx, q3_weights, values));

    /* The module SelfAttention_v1 does all of the above in one forward. Its
     * own init draws from PCG32, not PyTorch's generator, so we load the
     * same three matrices by name (load_state_dict). */
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 123, 1);
    nb_nn_self_attention_v1 sa_v1;
    nb_nn_self_attention_v1_init(params, &sa_v1, 3, 2, NB_F32, &rng);
    nb_tensor_list v1_weights = {0};
    nb_list_add(&v1_weights, "W_query", W_query);
    nb_list_add(&v1_weights, "W_key", W_key);
    nb_list_add(&v1_weights, "W_value", W_value);
    nb_params_copy_from(&sa_v1.params, &v1_weights);
    printf("\nSelfAttention_v1(d_in=3, d_out=2) with these weights:\n");
    nb_print(nb_nn_self_attention_v1_forward(ctx, &sa_v1, inputs));

    /* SelfAttention_v2 uses three nn.Linear(3, 2, bias=False). A Linear
     * stores its weight as (out_features, in_features) = (2, 3) and computes
     * x @ weight.T, so the printed weight is the transpose of the (3, 2)
     * matrix it multiplies by. These are the weights seed 000 gets by
     * building sa_v2 right after sa_v1 under the same manual_seed(123). */
    nb_nn_self_attention_v2 sa_v2;
    nb_nn_self_attention_v2_init(params, &sa_v2, 3, 2, false, NB_F32, &rng);
    load(ctx, &sa_v2.params, 3, ref_sa2_000_names, ref_sa2_000_params);
    nb_nn_linear *linears[3] = {&sa_v2.W_query, &sa_v2.W_key, &sa_v2.W_value};
    for (int i = 0; i < 3; i++) {
        printf("\nsa_v2.%s, (out, in) = (2, 3):\n", ref_sa2_000_names[i]);
        nb_print(linears[i]->weight);
        printf("its transpose, the (d_in, d_out) matrix x is multiplied by:\n");
        nb_print(nb_transpose(ctx, linears[i]->weight, 0, 1));
    }
    printf("\nSelfAttention_v2(d_in=3, d_out=2) with these weights:\n");
    nb_print(nb_nn_self_attention_v2_forward(ctx, &sa_v2, inputs));

    /* Seed 004 calls manual_seed(123) again right before building its sa_v2,
     * so its Linears start from torch.rand's first numbers instead. */
    load(ctx, &sa_v2.params, 3, ref_sa2_names, ref_sa2_params);
    printf("\nseed 004's SelfAttention_v2 (freshly seeded weights):\n");
    nb_print(nb_nn_self_attention_v2_forward(ctx, &sa_v2, inputs));

    return finish(ctx, params, 0);
}
