/* reverse_model.h - the reverse-digits model: token + position embeddings ->
 * causal MultiHeadAttention (dropout on the attention weights, out_proj)
 * with a residual connection -> LayerNorm -> Linear head over the digits
 * and the separator. Trained by examples/demo_reverse.c (`make
 * demo-reverse`) and timed by tools/bench/nabla-bench.c's "demo step": one
 * copy of the model for both.
 *
 * A sequence is n source digits, the separator, then the reversed digits
 * so far: T = 2n positions; the targets are the n reversed digits.
 *
 *   input   7 3 9 0 4 4 1 8 | 8 1 4 4 0 9 3
 *   target                    8 1 4 4 0 9 3 7 */
#ifndef REVERSE_MODEL_H
#define REVERSE_MODEL_H

#include "nabla.h"

#define REVERSE_DIGITS 10
#define REVERSE_SEP REVERSE_DIGITS
#define REVERSE_VOCAB (REVERSE_DIGITS + 1)

typedef struct reverse_model {
    nb_nn_embedding tok, pos;
    nb_nn_mha attn;
    nb_nn_layer_norm norm;
    nb_nn_linear head;
    nb_tensor_list params; /* "tok.weight", "pos.weight", "attn.W_query.weight", ... */
} reverse_model;

/* Builds the model for sequences of n digits (T = 2n), width d, `heads`
 * heads and attention dropout p, in pctx, drawing the weights from rng
 * (which attention dropout keeps using). */
static inline nb_status reverse_model_init(nb_ctx *pctx, reverse_model *m, int n, int64_t d,
                                           int heads, double p, nb_pcg32 *rng) {
    int64_t T = 2 * n;
    nb_status st = nb_nn_embedding_init(pctx, &m->tok, REVERSE_VOCAB, d, NB_F32, rng);
    if (!st) st = nb_nn_embedding_init(pctx, &m->pos, T, d, NB_F32, rng);
    if (!st) st = nb_nn_mha_init(pctx, &m->attn, d, d, T, p, heads, false, NB_F32, rng);
    if (!st) st = nb_nn_layer_norm_init(pctx, &m->norm, d, 1e-5, true, NB_F32);
    if (!st) st = nb_nn_linear_init(pctx, &m->head, d, REVERSE_VOCAB, true, NB_F32, rng);
    m->params = (nb_tensor_list){0};
    if (!st) st = nb_params_add_prefixed(pctx, &m->params, "tok", &m->tok.params);
    if (!st) st = nb_params_add_prefixed(pctx, &m->params, "pos", &m->pos.params);
    if (!st) st = nb_params_add_prefixed(pctx, &m->params, "attn", &m->attn.params);
    if (!st) st = nb_params_add_prefixed(pctx, &m->params, "norm", &m->norm.params);
    if (!st) st = nb_params_add_prefixed(pctx, &m->params, "head", &m->head.params);
    return st;
}

/* ids (B, T), positions (T) -> logits (B, T, VOCAB) */
static inline nb_tensor *reverse_model_forward(nb_ctx *ctx, reverse_model *m,
                                               const nb_tensor *ids, const nb_tensor *positions) {
    nb_tensor *x = nb_add(ctx, nb_nn_embedding_forward(ctx, &m->tok, ids),
                          nb_nn_embedding_forward(ctx, &m->pos, positions)); /* (B,T,D) */
    nb_tensor *h = nb_add(ctx, x, nb_nn_mha_forward(ctx, &m->attn, x));       /* residual */
    return nb_nn_linear_forward(ctx, &m->head, nb_nn_layer_norm_forward(ctx, &m->norm, h));
}

/* Fills B sequences from rng: source digits, the separator, then the
 * reversed source as the answer. ids (B, 2n) is the input, targets (B, n). */
static inline void reverse_make_batch(nb_pcg32 *rng, int B, int n, int64_t *ids,
                                      int64_t *targets) {
    for (int b = 0; b < B; b++) {
        int64_t *row = ids + (size_t)b * 2 * n, *t = targets + (size_t)b * n;
        for (int i = 0; i < n; i++) row[i] = nb_pcg32_bounded(rng, REVERSE_DIGITS);
        row[n] = REVERSE_SEP;
        for (int j = 0; j < n; j++) t[j] = row[n - 1 - j];
        for (int j = 0; j + 1 < n; j++) row[n + 1 + j] = t[j];
    }
}

/* Answer positions n..2n-1 of logits (B, 2n, V) -> (B*n, V) */
static inline nb_tensor *reverse_answer_logits(nb_ctx *ctx, nb_tensor *logits, int B, int n) {
    nb_tensor *parts[2];
    if (nb_split(ctx, logits, 1, 2, (const int64_t[]){n, n}, parts) != NB_OK) return NULL;
    return nb_reshape(ctx, parts[1], NB_SHAPE((int64_t)B * n, REVERSE_VOCAB));
}

#endif
